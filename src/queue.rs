//! The work queue: a de-duplicating, rate-limited queue of keys.
//!
//! This is a small Rust version of client-go's `workqueue.RateLimitingInterface`,
//! written by hand because its rules are the lesson:
//!
//! 1. A key that is already waiting is not added twice (dedup). Ten changes to
//!    one pod before a worker gets to it become one sync, which is fine because
//!    the worker reads the *current* state from the cache (level-driven).
//! 2. A key is never handed to two workers at once. A key added while a worker
//!    holds it is parked in `dirty` and handed out again after [`Queue::done`].
//! 3. [`Queue::shut_down`] stops intake; workers keep getting what is already
//!    queued until it is empty (a drain), then [`Queue::get`] returns `None`.
//! 4. A key can be added after a delay ([`Queue::add_after`], client-go's
//!    delaying queue): a key has at most one pending delayed add, and the
//!    earlier deadline wins.
//! 5. A failed key comes back after a per-key exponential backoff
//!    ([`Queue::add_rate_limited`]); [`Queue::forget`] clears its history.
//!
//! The queue holds keys, not objects: an object in the queue would be stale by
//! the time a worker got to it, while a key makes the worker look up the newest
//! state in the cache.
//!
//! The unit tests at the end include client-go's own workqueue tests
//! (queue_test.go, delaying_queue_test.go, rate_limiting_queue_test.go,
//! default_rate_limiters_test.go), translated to this queue.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::metrics::QueueMetrics;

/// First retry delay of a failed key; it doubles on every further failure.
///
/// 5 ms .. 1000 s is the per-item half of client-go's
/// `DefaultControllerRateLimiter` (an `ItemExponentialFailureRateLimiter`);
/// client-go's `DefaultItemBasedRateLimiter` starts lower, at 1 ms.
///
/// `DefaultControllerRateLimiter` also takes the max with an overall token
/// bucket (10 retries a second, bursts of 100) shared by all keys. That bucket
/// protects whatever a sync *calls* when many keys fail at once (an API
/// server, a cloud API). This queue leaves it out on purpose: a sync here
/// reads the local cache and writes a log line, it calls nothing that a flood
/// of retries could hurt, and in this logger a sync only fails through the
/// test seam (faults.rs). A controller whose sync calls an API should add it.
pub const BASE_DELAY: Duration = Duration::from_millis(5);
/// The longest a failed key waits before its next try.
pub const MAX_DELAY: Duration = Duration::from_secs(1000);

/// How many keys [`Queue::add_all`] queues per hold of the lock. A relist can
/// bring 10,000 keys; taking them in slices keeps every hold of the lock
/// short, so a worker calling `get` or `done` meanwhile waits for one slice,
/// never for the whole list.
const ADD_ALL_SLICE: usize = 64;

pub struct Queue<T> {
    /// All bookkeeping sits behind one *std* mutex, not a tokio one: every
    /// critical section is a few map operations and never awaits, and a std
    /// mutex is cheaper and cannot be held across an `.await` by accident
    /// (its guard is not `Send`, so the compiler refuses such a future).
    state: Mutex<State<T>>,
    /// Wakes workers parked in `get`, one `notify_one` per key. `Notify`
    /// remembers a wake-up that comes before anyone waits, so an `add` racing
    /// a `get` is never lost.
    notify: Notify,
    /// How many workers are parked in `get` right now. A batch of keys wakes
    /// `min(keys, parked)` workers: one per key, and never more than exist.
    /// Raised under the lock (so an adder holding the lock sees every worker
    /// that found the queue empty), lowered when the worker wakes. A count a
    /// little high for a moment only costs one spare wake-up.
    parked: AtomicUsize,
    /// Wake-ups delivered to parked workers: the unit tests count them.
    #[cfg(test)]
    wakeups: AtomicUsize,
    /// client-go's workqueue metrics (see metrics.rs); recording is a few
    /// atomic operations, so it happens right where things change.
    metrics: QueueMetrics,
}

struct State<T> {
    /// Keys waiting for a worker, in order. Every key here is also in `dirty`.
    queue: VecDeque<T>,
    /// Keys that need processing: the waiting ones, plus keys added again while
    /// a worker held them. A key in `dirty` is never queued twice. The value
    /// is when it became dirty (for the queue-duration metric).
    dirty: HashMap<T, Instant>,
    /// Keys a worker holds right now (between `get` and `done`), and since
    /// when. At most one key per worker, so it stays small.
    processing: HashMap<T, Instant>,
    /// Keys with a delayed add pending, and when it is due: at most one per
    /// key (client-go's delaying queue keeps the same rule in its
    /// `waitingEntryByData`).
    waiting: HashMap<T, Instant>,
    /// Failures per key since its last `forget`: drives the backoff.
    failures: HashMap<T, u32>,
    shutting_down: bool,
}

impl<T: Eq + Hash + Clone> State<T> {
    /// The dedup rule, shared by `add`, `add_all` and a due delayed add:
    /// whether `key` was queued (and so needs a worker).
    fn enqueue(&mut self, key: T, metrics: &QueueMetrics) -> bool {
        if self.shutting_down || self.dirty.contains_key(&key) {
            return false;
        }
        self.dirty.insert(key.clone(), Instant::now());
        // A key a worker holds stays only in `dirty`; `done` queues it again.
        if self.processing.contains_key(&key) {
            return false;
        }
        self.queue.push_back(key);
        metrics.added(self.queue.len());
        true
    }
}

impl<T: Eq + Hash + Clone + Send + 'static> Queue<T> {
    /// `name` labels the queue's metrics, like client-go's named queues.
    pub fn new(name: &str) -> Arc<Self> {
        Arc::new(Queue {
            state: Mutex::new(State {
                queue: VecDeque::new(),
                dirty: HashMap::new(),
                processing: HashMap::new(),
                waiting: HashMap::new(),
                failures: HashMap::new(),
                shutting_down: false,
            }),
            notify: Notify::new(),
            parked: AtomicUsize::new(0),
            #[cfg(test)]
            wakeups: AtomicUsize::new(0),
            metrics: QueueMetrics::new(name),
        })
    }

    /// Locks the state. A poisoned lock (a thread panicked while holding it)
    /// still holds consistent data here, since no method panics half-way
    /// through an update, so we take it rather than spread the panic.
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Wakes one parked worker per newly queued key, at most all of them.
    /// `parked` is read while the caller held the lock (see the field).
    fn wake(&self, keys: usize, parked: usize) {
        for _ in 0..keys.min(parked) {
            self.notify.notify_one();
        }
    }

    /// Marks `key` as needing processing. Returns whether it was newly queued
    /// (false: already waiting, held by a worker, or shutting down).
    pub fn add(&self, key: T) -> bool {
        let (added, parked) = {
            let mut state = self.lock();
            (state.enqueue(key, &self.metrics), self.parked.load(Ordering::SeqCst))
        };
        self.wake(usize::from(added), parked);
        added
    }

    /// Adds many keys (a resync or a relist queues every pod at once) and
    /// wakes as many parked workers as there are new keys, at most all of
    /// them. The keys are taken [`ADD_ALL_SLICE`] at a time, each slice under
    /// one short hold of the lock, and the workers are woken after each slice
    /// so they start while the rest is still being queued. Returns how many
    /// keys were newly queued.
    pub fn add_all(&self, keys: impl IntoIterator<Item = T>) -> usize {
        let mut keys = keys.into_iter().peekable();
        let mut total = 0;
        while keys.peek().is_some() {
            let (added, parked) = {
                let mut state = self.lock();
                let added =
                    keys.by_ref().take(ADD_ALL_SLICE).filter(|key| state.enqueue(key.clone(), &self.metrics)).count();
                (added, self.parked.load(Ordering::SeqCst))
            };
            self.wake(added, parked);
            total += added;
        }
        total
    }

    // ANCHOR: get_done
    /// Waits for a key and hands it to the caller, who must call [`Queue::done`]
    /// with it afterwards. Returns `None` once the queue is shut down and empty.
    pub async fn get(&self) -> Option<T> {
        loop {
            // Register interest *before* looking at the state: an `add` that
            // lands between our look and our wait still wakes us.
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let _parked = {
                let mut state = self.lock();
                if let Some(key) = state.queue.pop_front() {
                    let now = Instant::now();
                    let since = state.dirty.remove(&key).unwrap_or(now);
                    state.processing.insert(key.clone(), now);
                    self.metrics.started(now - since, state.queue.len());
                    return Some(key);
                }
                if state.shutting_down {
                    return None;
                }
                // Counted while we hold the lock, so an adder sees us.
                Parked::new(&self.parked)
            }; // the guard of the lock drops here, before we await
            notified.await;
            #[cfg(test)]
            self.wakeups.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Tells the queue a worker has finished with `key`. Forgetting this call
    /// (a classic Go pitfall) would leave the key "processing" forever, and
    /// every later change to that pod would be silently parked.
    pub fn done(&self, key: &T) {
        let mut state = self.lock();
        if let Some(since) = state.processing.remove(key) {
            self.metrics.finished(since.elapsed());
        }
        if state.dirty.contains_key(key) {
            state.queue.push_back(key.clone());
            self.metrics.added(state.queue.len());
            let parked = self.parked.load(Ordering::SeqCst);
            drop(state);
            self.wake(1, parked);
        }
    }
    // ANCHOR_END: get_done

    /// Adds `key` once `delay` has passed: client-go's `AddAfter`.
    ///
    /// A key has at most one pending delayed add. A request due *earlier*
    /// than the pending one replaces it; a request due later folds into the
    /// pending one (the key comes back at the earlier time, once). Without
    /// this rule a key that fails, is re-added by an event and fails again
    /// would come back twice, and the spare sync would count as an attempt.
    ///
    /// The design: one small timer task per accepted request, which sleeps
    /// until its deadline *without* the lock and then, under the lock, adds
    /// the key only if the key's pending deadline is due. A timer whose
    /// request was replaced by an earlier one finds no due deadline and does
    /// nothing. That is simpler than client-go's single goroutine with a
    /// heap, and as correct: the map, not the timers, is the truth.
    pub fn add_after(self: &Arc<Self>, key: T, delay: Duration) {
        if delay.is_zero() {
            self.add(key);
            return;
        }
        let due = Instant::now() + delay;
        {
            let mut state = self.lock();
            if state.shutting_down {
                return;
            }
            match state.waiting.get(&key) {
                Some(&pending) if pending <= due => return, // folds into the earlier one
                _ => state.waiting.insert(key.clone(), due),
            };
        }
        // After shutdown the timer finds nothing pending (shut_down clears
        // it), so a pending retry never delays exit nor adds late.
        let queue = Arc::clone(self);
        tokio::spawn(async move {
            tokio::time::sleep_until(due).await;
            queue.add_if_due(key);
        });
    }

    /// A timer fired: add `key` if its pending delayed add is due now.
    fn add_if_due(&self, key: T) {
        let (added, parked) = {
            let mut state = self.lock();
            match state.waiting.get(&key) {
                Some(&due) if due <= Instant::now() => {
                    state.waiting.remove(&key);
                }
                _ => return, // replaced by an earlier request, already added
            }
            (state.enqueue(key, &self.metrics), self.parked.load(Ordering::SeqCst))
        };
        self.wake(usize::from(added), parked);
    }

    /// Adds `key` back after its backoff: 5 ms, 10 ms, 20 ms ... up to 1000 s
    /// (client-go's `AddRateLimited`: `AddAfter(key, limiter.When(key))`).
    pub fn add_rate_limited(self: &Arc<Self>, key: T) {
        let delay = {
            let mut state = self.lock();
            let failures = state.failures.entry(key.clone()).or_insert(0);
            *failures += 1;
            backoff(*failures)
        };
        self.metrics.retried();
        self.add_after(key, delay);
    }

    /// Clears the failure history of `key` (call it after a successful sync),
    /// so its next failure starts again at the base delay. Like client-go's
    /// `Forget`, it does not cancel a delayed add already pending.
    pub fn forget(&self, key: &T) {
        self.lock().failures.remove(key);
    }

    /// How many times `key` has failed since its last `forget`.
    pub fn num_requeues(&self, key: &T) -> u32 {
        self.lock().failures.get(key).copied().unwrap_or(0)
    }

    /// Stops intake and wakes every waiting worker. Workers still receive the
    /// keys already queued, so nothing accepted before shutdown is dropped.
    ///
    /// Keys waiting for a delayed add (a retry after a failed sync) are
    /// queued now, for one last try: there is no later. (client-go's
    /// `ShutDownWithDrain` drops them; then a key that failed once just
    /// before the signal would be left unsynced and nobody told.)
    pub fn shut_down(&self) {
        {
            let mut state = self.lock();
            let waiting: Vec<T> = state.waiting.drain().map(|(key, _)| key).collect();
            for key in waiting {
                state.enqueue(key, &self.metrics);
            }
            state.shutting_down = true;
        }
        self.notify.notify_waiters();
    }

    /// Whether [`Queue::shut_down`] was called.
    pub fn is_shutting_down(&self) -> bool {
        self.lock().shutting_down
    }

    /// Keys waiting for a worker (not counting the ones being processed, nor
    /// delayed adds not yet due).
    pub fn len(&self) -> usize {
        self.lock().queue.len()
    }

    /// No key is waiting for a worker.
    pub fn is_empty(&self) -> bool {
        self.lock().queue.is_empty()
    }

    /// Every key added so far has been synced: none needs a worker (`dirty`,
    /// which holds every queued key and every key added again while a
    /// worker held it), none is held by one, none waits out a retry's
    /// backoff. Read under one lock: two reads (the queue, then the keys in
    /// flight) could see a key between them in neither, as `done` moves it
    /// from one to the other.
    pub fn is_idle(&self) -> bool {
        let state = self.lock();
        state.dirty.is_empty() && state.processing.is_empty() && state.waiting.is_empty()
    }

    /// Every key that is not synced yet: queued, added again while a
    /// worker held it, held by one, or waiting out a retry's backoff (the
    /// keys that make [`Queue::is_idle`] false), read under one lock.
    pub fn pending(&self) -> std::collections::HashSet<T> {
        let state = self.lock();
        state.dirty.keys().chain(state.processing.keys()).chain(state.waiting.keys()).cloned().collect()
    }

    /// The keys workers hold right now, and for how long: for the liveness
    /// probe (a stuck worker) and the unfinished-work metrics. The lock is
    /// held only to copy at most one entry per worker (64 at most); the
    /// durations and the metrics are worked out after it is released.
    pub fn in_flight(&self) -> Vec<(T, Duration)> {
        let held: Vec<(T, Instant)> = self.lock().processing.iter().map(|(key, since)| (key.clone(), *since)).collect();
        let now = Instant::now();
        let in_flight: Vec<(T, Duration)> = held.into_iter().map(|(key, since)| (key, now - since)).collect();
        let running: Vec<Duration> = in_flight.iter().map(|(_, d)| *d).collect();
        self.metrics.in_flight(&running);
        in_flight
    }

    /// Workers parked in `get` right now (for tests that must wait for them).
    #[cfg(test)]
    fn parked(&self) -> usize {
        self.parked.load(Ordering::SeqCst)
    }
}

/// Counts a worker as parked until it wakes (or its `get` is dropped).
struct Parked<'a>(&'a AtomicUsize);

impl<'a> Parked<'a> {
    fn new(count: &'a AtomicUsize) -> Parked<'a> {
        count.fetch_add(1, Ordering::SeqCst);
        Parked(count)
    }
}

impl Drop for Parked<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The delay before retry number `failures` (1-based): 5 ms * 2^(failures-1),
/// capped at [`MAX_DELAY`].
pub fn backoff(failures: u32) -> Duration {
    exponential(BASE_DELAY, MAX_DELAY, failures)
}

/// client-go's `ItemExponentialFailureRateLimiter.When`: `base * 2^(failures-1)`,
/// capped at `max`, without overflowing however many failures there were.
pub fn exponential(base: Duration, max: Duration, failures: u32) -> Duration {
    let exponent = failures.saturating_sub(1).min(31);
    base.saturating_mul(1 << exponent).min(max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::time::Duration;
    use tokio::time::timeout;

    /// Lets every task that is ready run (single-threaded test runtime).
    async fn settle() {
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
    }

    /// Waits until `n` workers are parked in `get`, with a generous limit.
    async fn until_parked<T: Eq + Hash + Clone + Send + 'static>(q: &Queue<T>, n: usize) {
        timeout(Duration::from_secs(10), async {
            while q.parked() != n {
                tokio::task::yield_now().await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{} workers parked, expected {n}", q.parked()));
    }

    fn spawn_getters(q: &Arc<Queue<&'static str>>, n: usize) -> Vec<tokio::task::JoinHandle<Option<&'static str>>> {
        (0..n)
            .map(|_| {
                let q = q.clone();
                tokio::spawn(async move { q.get().await })
            })
            .collect()
    }

    /// A key added again while a worker holds it (its newer change not
    /// synced) or waiting out a retry's backoff is work still to do: the
    /// queue is idle only once every change added was synced.
    #[tokio::test(start_paused = true)]
    async fn the_queue_is_idle_only_once_every_key_added_was_synced() {
        let q = Queue::new("test");
        assert!(q.is_idle());
        q.add("k");
        assert!(!q.is_idle(), "queued");
        let k = q.get().await.unwrap();
        assert!(!q.is_idle(), "held by a worker");
        q.add("k"); // a newer change while the worker holds k
        assert!(!q.is_idle(), "held, and dirty again");
        q.done(&k); // queued again for the newer change
        assert!(!q.is_idle(), "the newer change is not synced");
        let k = q.get().await.unwrap();
        q.add_rate_limited(k); // its sync failed: back after a backoff
        q.done(&k);
        assert!(!q.is_idle(), "waiting out its backoff");
        let k = timeout(Duration::from_secs(10), q.get()).await.unwrap().unwrap();
        q.forget(&k);
        q.done(&k);
        assert!(q.is_idle(), "synced");
    }

    #[tokio::test]
    async fn a_waiting_key_is_not_added_twice() {
        let q = Queue::new("test");
        assert!(q.add("a"));
        assert!(!q.add("a"));
        assert!(q.add("b"));
        assert_eq!(q.len(), 2);
        assert_eq!(q.get().await, Some("a"));
        assert_eq!(q.get().await, Some("b"));
        assert_eq!(q.len(), 0);
    }

    #[tokio::test]
    async fn a_key_added_while_processing_comes_back_after_done() {
        let q = Queue::new("test");
        q.add("a");
        let key = q.get().await.unwrap();
        // Added again while held: parked, not handed out.
        assert!(!q.add("a"));
        assert_eq!(q.len(), 0);
        // ... and parked only once.
        assert!(!q.add("a"));
        q.done(&key);
        assert_eq!(q.len(), 1);
        assert_eq!(q.get().await, Some("a"));
        q.done(&"a");
        assert_eq!(q.len(), 0);
    }

    #[tokio::test]
    async fn done_without_a_new_add_does_not_requeue() {
        let q = Queue::new("test");
        q.add("a");
        let key = q.get().await.unwrap();
        q.done(&key);
        assert_eq!(q.len(), 0);
        q.shut_down();
        assert_eq!(q.get().await, None);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_workers_never_hold_one_key_at_once() {
        let q = Queue::new("test");
        let held = Arc::new(Mutex::new(HashSet::new()));
        let overlaps = Arc::new(AtomicUsize::new(0));
        let processed = Arc::new(AtomicUsize::new(0));
        let mut workers = Vec::new();
        for _ in 0..2 {
            let (q, held, overlaps, processed) = (q.clone(), held.clone(), overlaps.clone(), processed.clone());
            workers.push(tokio::spawn(async move {
                while let Some(key) = q.get().await {
                    if !held.lock().unwrap().insert(key) {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    tokio::task::yield_now().await;
                    held.lock().unwrap().remove(&key);
                    processed.fetch_add(1, Ordering::SeqCst);
                    q.done(&key);
                }
            }));
        }
        // Hammer one key while both workers run.
        for _ in 0..2_000 {
            q.add(7u32);
            tokio::task::yield_now().await;
        }
        q.shut_down();
        for w in workers {
            timeout(Duration::from_secs(10), w).await.unwrap().unwrap();
        }
        assert_eq!(overlaps.load(Ordering::SeqCst), 0);
        assert!(processed.load(Ordering::SeqCst) >= 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_lost_wakeup_when_add_races_get() {
        // A worker parks in `get`, then keys arrive one at a time from another
        // thread: every key must be delivered without a further nudge.
        let q = Queue::new("test");
        let consumer = {
            let q = q.clone();
            tokio::spawn(async move {
                let mut got = Vec::new();
                while got.len() < 1_000 {
                    let key = q.get().await.unwrap();
                    q.done(&key);
                    got.push(key);
                }
                got
            })
        };
        let producer = {
            let q = q.clone();
            std::thread::spawn(move || {
                for i in 0..1_000u32 {
                    q.add(i);
                    if i % 7 == 0 {
                        std::thread::yield_now();
                    }
                }
            })
        };
        producer.join().unwrap();
        let got = timeout(Duration::from_secs(10), consumer).await.expect("a wake-up was lost").unwrap();
        assert_eq!(got, (0..1_000).collect::<Vec<_>>());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_lost_wakeup_when_add_all_races_many_workers() {
        // Eight workers, batches from another thread: every key is delivered.
        let q = Queue::new("test");
        let got = Arc::new(AtomicUsize::new(0));
        let workers: Vec<_> = (0..8)
            .map(|_| {
                let (q, got) = (q.clone(), got.clone());
                tokio::spawn(async move {
                    while let Some(key) = q.get().await {
                        got.fetch_add(1, Ordering::SeqCst);
                        q.done(&key);
                    }
                })
            })
            .collect();
        let producer = {
            let q = q.clone();
            std::thread::spawn(move || {
                for batch in 0..100u32 {
                    q.add_all((0..37).map(|i| batch * 1_000 + i));
                }
            })
        };
        producer.join().unwrap();
        timeout(Duration::from_secs(10), async {
            while got.load(Ordering::SeqCst) < 3_700 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await
        .expect("a wake-up was lost");
        q.shut_down();
        for w in workers {
            timeout(Duration::from_secs(10), w).await.unwrap().unwrap();
        }
    }

    // One wake-up per key: count how many parked workers wake.

    #[tokio::test]
    async fn a_single_key_wakes_one_worker() {
        let q = Queue::new("test");
        let workers = spawn_getters(&q, 4);
        until_parked(&q, 4).await;
        assert!(q.add("a"));
        settle().await;
        assert_eq!(q.wakeups.load(Ordering::SeqCst), 1, "one key, one wake-up");
        assert_eq!(q.parked(), 3, "the other three stay parked");
        let done: Vec<_> = workers.iter().filter(|w| w.is_finished()).collect();
        assert_eq!(done.len(), 1);
        // A key parked while processing wakes one worker when it is done.
        let key = workers.into_iter().find(|w| w.is_finished()).unwrap().await.unwrap().unwrap();
        q.done(&key);
        settle().await;
        assert_eq!(q.wakeups.load(Ordering::SeqCst), 1, "done without a new add wakes nobody");
    }

    #[tokio::test]
    async fn a_batch_wakes_one_worker_per_key() {
        let q = Queue::new("test");
        let _workers = spawn_getters(&q, 4);
        until_parked(&q, 4).await;
        assert_eq!(q.add_all(["a", "b", "a"]), 2, "the repeated key is queued once");
        settle().await;
        assert_eq!(q.wakeups.load(Ordering::SeqCst), 2, "two keys, two wake-ups");
        assert_eq!(q.parked(), 2);
        assert_eq!(q.len(), 0);
    }

    #[tokio::test]
    async fn a_batch_larger_than_the_workers_wakes_them_all_and_no_more() {
        let q = Queue::new("test");
        let workers = spawn_getters(&q, 4);
        until_parked(&q, 4).await;
        assert_eq!(q.add_all((0..10_000).map(|i| if i % 2 == 0 { "even" } else { "odd" })), 2);
        let keys: Vec<&str> = (0..10).map(|i| ["x", "y", "z", "w", "v", "u", "t", "s", "r", "q"][i]).collect();
        assert_eq!(q.add_all(keys), 10);
        settle().await;
        assert_eq!(q.wakeups.load(Ordering::SeqCst), 4, "every parked worker, once");
        assert_eq!(q.parked(), 0);
        assert!(workers.iter().all(|w| w.is_finished()));
        assert_eq!(q.len(), 12 - 4);
    }

    #[tokio::test]
    async fn a_batch_with_nothing_new_wakes_nobody() {
        let q = Queue::new("test");
        q.add("a");
        let _workers = spawn_getters(&q, 3);
        settle().await;
        until_parked(&q, 2).await;
        // "a" is held by a worker: parked in dirty, not queued, no wake-up.
        assert_eq!(q.add_all(["a"]), 0);
        settle().await;
        assert_eq!(q.wakeups.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn add_all_parks_keys_held_by_a_worker_exactly_as_add_does() {
        let q = Queue::new("test");
        q.add_all(["a", "b"]);
        let a = q.get().await.unwrap();
        assert_eq!(q.add_all(["a", "c"]), 1);
        assert_eq!(q.len(), 2);
        q.done(&a);
        assert_eq!(q.len(), 3);
    }

    #[tokio::test]
    async fn shutdown_stops_intake_and_drains_what_was_queued() {
        let q = Queue::new("test");
        q.add("a");
        q.add("b");
        q.shut_down();
        assert!(!q.add("c"), "intake is closed after shutdown");
        assert_eq!(q.get().await, Some("a"));
        assert_eq!(q.get().await, Some("b"));
        assert_eq!(q.get().await, None);
    }

    #[tokio::test]
    async fn shutdown_wakes_every_parked_worker() {
        let q: Arc<Queue<&str>> = Queue::new("test");
        let workers = spawn_getters(&q, 3);
        until_parked(&q, 3).await;
        q.shut_down();
        for w in workers {
            assert_eq!(timeout(Duration::from_secs(5), w).await.unwrap().unwrap(), None);
        }
    }

    #[test]
    fn backoff_doubles_from_5ms_and_caps_at_1000s() {
        assert_eq!(backoff(1), Duration::from_millis(5));
        assert_eq!(backoff(2), Duration::from_millis(10));
        assert_eq!(backoff(3), Duration::from_millis(20));
        assert_eq!(backoff(5), Duration::from_millis(80));
        assert_eq!(backoff(18), Duration::from_millis(655_360));
        assert_eq!(backoff(19), MAX_DELAY);
        assert_eq!(backoff(u32::MAX), MAX_DELAY);
    }

    #[tokio::test(start_paused = true)]
    async fn add_rate_limited_waits_the_backoff_and_forget_resets_it() {
        let q = Queue::new("test");
        q.add_rate_limited("a");
        q.add_rate_limited("a");
        assert_eq!(q.num_requeues(&"a"), 2);
        // The second request (10 ms) folds into the pending first (5 ms).
        tokio::time::sleep(Duration::from_millis(4)).await;
        assert_eq!(q.len(), 0);
        tokio::time::sleep(Duration::from_millis(2)).await;
        assert_eq!(q.len(), 1, "first retry after 5 ms");
        assert_eq!(q.get().await, Some("a"));
        q.done(&"a");
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(q.len(), 0, "the later request folded into the earlier: no second add");
        q.forget(&"a");
        assert_eq!(q.num_requeues(&"a"), 0);
        q.add_rate_limited("a");
        assert_eq!(q.num_requeues(&"a"), 1);
    }

    /// The bug this rule fixes: a key fails, an event re-adds it, it fails
    /// again. It must come back once (at the earlier deadline), not twice.
    #[tokio::test(start_paused = true)]
    async fn fail_event_fail_brings_the_key_back_once() {
        let q = Queue::new("test");
        q.add("k");
        let k = q.get().await.unwrap();
        q.add_rate_limited(k); // failure 1: back in 5 ms
        q.done(&k);
        q.add(k); // an event
        let k = q.get().await.unwrap();
        q.add_rate_limited(k); // failure 2: 10 ms, folds into the pending 5 ms
        q.done(&k);
        let mut syncs = 0;
        for _ in 0..100 {
            tokio::time::sleep(Duration::from_millis(1)).await;
            while !q.is_empty() {
                let k = q.get().await.unwrap();
                syncs += 1;
                q.done(&k);
            }
        }
        assert_eq!(syncs, 1, "one retry for two failures with a retry pending");
    }

    #[tokio::test]
    async fn metrics_follow_the_bookkeeping() {
        use crate::metrics::tests::sample;
        let q = Queue::new("metrics-test");
        let series = |m: &str| sample(&format!("{m}{{name=\"metrics-test\"}}")).unwrap_or(-1.0);
        q.add("a");
        q.add("a"); // deduplicated: not an add
        q.add("b");
        assert_eq!(series("workqueue_adds_total"), 2.0);
        assert_eq!(series("workqueue_depth"), 2.0);
        let a = q.get().await.unwrap();
        assert_eq!(series("workqueue_depth"), 1.0);
        assert_eq!(series("workqueue_queue_duration_seconds_count"), 1.0);
        assert_eq!(q.in_flight().iter().map(|(k, _)| *k).collect::<Vec<_>>(), vec!["a"]);
        assert!(series("workqueue_longest_running_processor_seconds") >= 0.0);
        q.add("a"); // parked while processing: counted when it is queued again
        assert_eq!(series("workqueue_adds_total"), 2.0);
        q.done(&a);
        assert_eq!(series("workqueue_work_duration_seconds_count"), 1.0);
        assert_eq!(series("workqueue_adds_total"), 3.0);
        assert_eq!(series("workqueue_depth"), 2.0);
        q.add_rate_limited("c");
        assert_eq!(series("workqueue_retries_total"), 1.0);
        assert!(q.in_flight().is_empty());
        assert_eq!(series("workqueue_unfinished_work_seconds"), 0.0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_pending_retry_gets_its_last_try_at_shutdown_and_no_later_one() {
        let q = Queue::new("test");
        q.add_rate_limited("a");
        q.add_rate_limited("a"); // folds into the pending one
        assert_eq!(q.len(), 0, "waiting for its backoff");
        q.shut_down();
        assert!(q.is_shutting_down());
        assert_eq!(q.len(), 1, "queued at once, once: there is no later");
        let a = q.get().await.unwrap();
        // Its last try failed: a retry asked for now is refused.
        q.add_rate_limited(a);
        q.done(&a);
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(q.len(), 0);
        assert_eq!(q.get().await, None);
    }

    // client-go's workqueue tests, translated. Each names its Go original in
    // k8s.io/client-go/util/workqueue. Go's fake clock becomes tokio's paused
    // clock (`sleep` advances it at once); Go's `waitForWaitingQueueToFill`
    // has no counterpart because `add_after` records a request before it
    // returns.

    /// queue_test.go TestBasic (both variants: our shut_down is client-go's
    /// ShutDownWithDrain as far as `get` goes: queued keys are still handed out).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn client_go_test_basic() {
        let q: Arc<Queue<String>> = Queue::new("test");
        let producers: Vec<_> = (0..50)
            .map(|i| {
                let q = q.clone();
                tokio::spawn(async move {
                    for _ in 0..50 {
                        q.add(i.to_string());
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                })
            })
            .collect();
        let consumers: Vec<_> = (0..10)
            .map(|_| {
                let q = q.clone();
                tokio::spawn(async move {
                    while let Some(item) = q.get().await {
                        assert_ne!(item, "added after shutdown!", "got an item added after shutdown");
                        tokio::time::sleep(Duration::from_millis(3)).await;
                        q.done(&item);
                    }
                })
            })
            .collect();
        for p in producers {
            p.await.unwrap();
        }
        q.shut_down();
        q.add("added after shutdown!".into());
        for c in consumers {
            timeout(Duration::from_secs(30), c).await.unwrap().unwrap();
        }
        assert_eq!(q.len(), 0);
    }

    /// queue_test.go TestAddWhileProcessing.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn client_go_test_add_while_processing() {
        let q: Arc<Queue<u32>> = Queue::new("test");
        for i in 0..50 {
            q.add(i);
        }
        let consumers: Vec<_> = (0..10)
            .map(|_| {
                let q = q.clone();
                tokio::spawn(async move {
                    // Every worker re-adds every item up to two times: the
                    // dirty-while-processing case.
                    let mut counters: HashMap<u32, u32> = HashMap::new();
                    while let Some(item) = q.get().await {
                        let n = counters.entry(item).or_default();
                        *n += 1;
                        if *n < 2 {
                            q.add(item);
                        }
                        q.done(&item);
                    }
                })
            })
            .collect();
        q.shut_down();
        for c in consumers {
            timeout(Duration::from_secs(30), c).await.unwrap().unwrap();
        }
        assert_eq!(q.len(), 0);
    }

    /// queue_test.go TestLen.
    #[test]
    fn client_go_test_len() {
        let q = Queue::new("test");
        q.add("foo");
        assert_eq!(q.len(), 1);
        q.add("bar");
        assert_eq!(q.len(), 2);
        q.add("foo"); // should not increase the queue length
        assert_eq!(q.len(), 2);
    }

    /// queue_test.go TestReinsert.
    #[tokio::test]
    async fn client_go_test_reinsert() {
        let q = Queue::new("test");
        q.add("foo");
        let i = q.get().await.unwrap();
        assert_eq!(i, "foo");
        q.add(i); // add it back while processing
        q.done(&i);
        let i = q.get().await.unwrap(); // it is back on the queue
        assert_eq!(i, "foo");
        q.done(&i);
        assert_eq!(q.len(), 0);
    }

    /// queue_test.go TestQueueDrainageUsingShutDownWithDrain and
    /// TestNoQueueDrainageUsingShutDown: shutting down with keys in
    /// progress returns at once and `get` then reports the end, while the
    /// workers still finish what they hold.
    #[tokio::test]
    async fn client_go_test_queue_drainage() {
        let q = Queue::new("test");
        q.add("foo");
        q.add("bar");
        let first = q.get().await.unwrap();
        let second = q.get().await.unwrap();
        q.shut_down();
        assert_eq!(q.get().await, None);
        q.done(&first);
        q.done(&second);
        assert_eq!(q.get().await, None);
        assert!(q.in_flight().is_empty());
    }

    /// queue_test.go TestQueueDrainageUsingShutDownWithDrainWithDirtyItem.
    #[tokio::test]
    async fn client_go_test_queue_drainage_with_dirty_item() {
        let q = Queue::new("test");
        q.add("foo");
        let gotten = q.get().await.unwrap();
        q.add("foo");
        q.shut_down();
        assert_eq!(q.get().await, None, "nothing queued yet: foo is held");
        q.done(&gotten);
        // Done put the dirty item back: it is handed out, shutdown or not.
        let again = q.get().await.expect("should not have been done");
        q.done(&again);
        assert_eq!(q.get().await, None, "should have been done");
    }

    /// delaying_queue_test.go TestSimpleQueue.
    #[tokio::test(start_paused = true)]
    async fn client_go_test_simple_queue() {
        let q = Queue::new("test");
        q.add_after("foo", Duration::from_millis(50));
        assert_eq!(q.len(), 0, "should not have added");
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert_eq!(q.len(), 1, "should have added");
        let item = q.get().await.unwrap();
        q.done(&item);
        // step past the next heartbeat
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(q.len(), 0, "should not have added");
    }

    /// delaying_queue_test.go TestDeduping, both halves: a later request
    /// folds into the pending earlier one; an earlier one replaces it.
    #[tokio::test(start_paused = true)]
    async fn client_go_test_deduping() {
        let q = Queue::new("test");
        q.add_after("foo", Duration::from_millis(50));
        q.add_after("foo", Duration::from_millis(70));
        assert_eq!(q.len(), 0, "should not have added");
        // step past the first block, we should receive now
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert_eq!(q.len(), 1, "should have added");
        let item = q.get().await.unwrap();
        q.done(&item);
        // step past the second add
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(q.len(), 0, "should not have added");

        // test again, but this time the earlier should override
        q.add_after("foo", Duration::from_millis(50));
        q.add_after("foo", Duration::from_millis(30));
        assert_eq!(q.len(), 0, "should not have added");
        tokio::time::sleep(Duration::from_millis(40)).await;
        assert_eq!(q.len(), 1, "should have added");
        let item = q.get().await.unwrap();
        q.done(&item);
        // step past the second add
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(q.len(), 0, "should not have added");

        // test again, but this time the item is being processed: a due
        // delayed add marks it dirty, and it comes back after done.
        q.add("foo");
        let i = q.get().await.unwrap();
        assert_eq!(i, "foo");
        q.add_after("foo", Duration::from_millis(5));
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(q.len(), 0, "held by a worker: parked, not queued");
        q.done(&i);
        assert_eq!(q.len(), 1);
    }

    /// delaying_queue_test.go TestAddTwoFireEarly.
    #[tokio::test(start_paused = true)]
    async fn client_go_test_add_two_fire_early() {
        let q = Queue::new("test");
        q.add_after("foo", Duration::from_secs(1));
        q.add_after("bar", Duration::from_millis(50));
        assert_eq!(q.len(), 0, "should not have added");
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert_eq!(q.len(), 1);
        assert_eq!(q.get().await, Some("bar"));
        q.add_after("baz", Duration::from_secs(2));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(q.len(), 1);
        assert_eq!(q.get().await, Some("foo"));
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(q.len(), 1);
        assert_eq!(q.get().await, Some("baz"));
    }

    /// delaying_queue_test.go TestCopyShifting.
    #[tokio::test(start_paused = true)]
    async fn client_go_test_copy_shifting() {
        let q = Queue::new("test");
        q.add_after("foo", Duration::from_secs(1));
        q.add_after("bar", Duration::from_millis(500));
        q.add_after("baz", Duration::from_millis(250));
        assert_eq!(q.len(), 0, "should not have added");
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(q.len(), 3);
        assert_eq!(q.get().await, Some("baz"));
        assert_eq!(q.get().await, Some("bar"));
        assert_eq!(q.get().await, Some("foo"));
    }

    /// rate_limiting_queue_test.go TestRateLimitingQueue, with this queue's
    /// limiter (5 ms base, not the test's 1 ms): each request's delay is
    /// seen as the time the key arrives.
    #[tokio::test(start_paused = true)]
    async fn client_go_test_rate_limiting_queue() {
        let q = Queue::new("test");
        // The key is not there 1 ms before its delay, and is 1 ms after.
        let arrives_after = async |q: &Arc<Queue<&'static str>>, key, delay_ms: u64| {
            q.add_rate_limited(key);
            tokio::time::sleep(Duration::from_millis(delay_ms - 1)).await;
            assert_eq!(q.len(), 0, "{key} came before {delay_ms} ms");
            tokio::time::sleep(Duration::from_millis(2)).await;
            assert_eq!(q.len(), 1, "{key} did not come after {delay_ms} ms");
            let got = q.get().await.unwrap();
            q.done(&got);
        };
        arrives_after(&q, "one", 5).await;
        arrives_after(&q, "one", 10).await;
        assert_eq!(q.num_requeues(&"one"), 2);
        arrives_after(&q, "two", 5).await;
        arrives_after(&q, "two", 10).await;
        q.forget(&"one");
        assert_eq!(q.num_requeues(&"one"), 0);
        arrives_after(&q, "one", 5).await;
    }

    /// default_rate_limiters_test.go TestItemExponentialFailureRateLimiter.
    #[test]
    fn client_go_test_item_exponential_failure_rate_limiter() {
        let ms = Duration::from_millis;
        let when = |failures| exponential(ms(1), Duration::from_secs(1), failures);
        let one: Vec<Duration> = (1..=5).map(when).collect();
        assert_eq!(one, [ms(1), ms(2), ms(4), ms(8), ms(16)]);
        // Per-item counts and Forget, through the queue's own bookkeeping.
        let q: Arc<Queue<&str>> = Queue::new("test");
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
        rt.block_on(async {
            for _ in 0..5 {
                q.add_rate_limited("one");
            }
            assert_eq!(q.num_requeues(&"one"), 5);
            q.add_rate_limited("two");
            q.add_rate_limited("two");
            assert_eq!(q.num_requeues(&"two"), 2);
            q.forget(&"one");
            assert_eq!(q.num_requeues(&"one"), 0);
        });
        assert_eq!(when(1), ms(1), "after Forget the first delay again");
    }

    /// default_rate_limiters_test.go TestItemExponentialFailureRateLimiterOverFlow.
    #[test]
    fn client_go_test_item_exponential_failure_rate_limiter_overflow() {
        let (ms, s) = (Duration::from_millis, Duration::from_secs);
        assert_eq!(exponential(ms(1), s(1000), 6), ms(32));
        assert_eq!(exponential(ms(1), s(1000), 1001), s(1000));
        assert_eq!(exponential(s(60), s(1000 * 3600), 3), s(4 * 60));
        assert_eq!(exponential(s(60), s(1000 * 3600), 1001), s(1000 * 3600));
    }
}
