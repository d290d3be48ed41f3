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
//! 4. A failed key comes back after a per-key exponential backoff
//!    ([`Queue::add_rate_limited`]); [`Queue::forget`] clears its history.
//!
//! The queue holds keys, not objects: an object in the queue would be stale by
//! the time a worker got to it, while a key makes the worker look up the newest
//! state in the cache.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::metrics::QueueMetrics;

/// First retry delay of a failed key; it doubles on every further failure.
/// The same numbers as client-go's `DefaultItemBasedRateLimiter`.
pub const BASE_DELAY: Duration = Duration::from_millis(5);
/// The longest a failed key waits before its next try.
pub const MAX_DELAY: Duration = Duration::from_secs(1000);

pub struct Queue<T> {
    /// All bookkeeping sits behind one *std* mutex, not a tokio one: every
    /// critical section is a few map operations and never awaits, and a std
    /// mutex is cheaper and cannot be held across an `.await` by accident
    /// (its guard is not `Send`, so the compiler refuses such a future).
    state: Mutex<State<T>>,
    /// Wakes workers parked in `get`. `Notify` remembers a wake-up that comes
    /// before anyone waits, so an `add` racing a `get` is never lost.
    notify: Notify,
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
    /// Keys a worker holds right now (between `get` and `done`), and since when.
    processing: HashMap<T, Instant>,
    /// Failures per key since its last `forget`: drives the backoff.
    failures: HashMap<T, u32>,
    shutting_down: bool,
}

impl<T: Eq + Hash + Clone> State<T> {
    /// The dedup rule, shared by `add` and `add_all`: whether `key` was queued.
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
                failures: HashMap::new(),
                shutting_down: false,
            }),
            notify: Notify::new(),
            metrics: QueueMetrics::new(name),
        })
    }

    /// Locks the state. A poisoned lock (a thread panicked while holding it)
    /// still holds consistent data here, since no method panics half-way
    /// through an update, so we take it rather than spread the panic.
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Marks `key` as needing processing. Returns whether it was newly queued
    /// (false: already waiting, held by a worker, or shutting down).
    pub fn add(&self, key: T) -> bool {
        let added = self.lock().enqueue(key, &self.metrics);
        if added {
            self.notify.notify_one();
        }
        added
    }

    /// Adds many keys under one lock and with one wake-up. A resync or a
    /// relist queues every pod at once; waking a worker per key would cost
    /// more than handling the keys. Returns how many were newly queued.
    pub fn add_all(&self, keys: impl IntoIterator<Item = T>) -> usize {
        let mut state = self.lock();
        let added = keys.into_iter().filter(|key| state.enqueue(key.clone(), &self.metrics)).count();
        drop(state);
        if added > 0 {
            self.notify.notify_waiters(); // every parked worker...
            self.notify.notify_one(); // ...and one about to park
        }
        added
    }

    /// Waits for a key and hands it to the caller, who must call [`Queue::done`]
    /// with it afterwards. Returns `None` once the queue is shut down and empty.
    pub async fn get(&self) -> Option<T> {
        loop {
            // Register interest *before* looking at the state: an `add` that
            // lands between our look and our wait still wakes us.
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
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
            } // the guard drops here, before we await
            notified.await;
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
            drop(state);
            self.notify.notify_one();
        }
    }

    /// Adds `key` back after its backoff: 5 ms, 10 ms, 20 ms ... up to 1000 s.
    pub fn add_rate_limited(self: &Arc<Self>, key: T) {
        let delay = {
            let mut state = self.lock();
            let failures = state.failures.entry(key.clone()).or_insert(0);
            *failures += 1;
            backoff(*failures)
        };
        self.metrics.retried();
        // One sleeping task per retry keeps the queue simple; after shutdown
        // its `add` is a no-op, so a pending retry never blocks exit.
        let queue = Arc::clone(self);
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            queue.add(key);
        });
    }

    /// Clears the failure history of `key` (call it after a successful sync),
    /// so its next failure starts again at the base delay.
    pub fn forget(&self, key: &T) {
        self.lock().failures.remove(key);
    }

    /// How many times `key` has failed since its last `forget`.
    pub fn num_requeues(&self, key: &T) -> u32 {
        self.lock().failures.get(key).copied().unwrap_or(0)
    }

    /// Stops intake and wakes every waiting worker. Workers still receive the
    /// keys already queued, so nothing accepted before shutdown is dropped.
    pub fn shut_down(&self) {
        self.lock().shutting_down = true;
        self.notify.notify_waiters();
    }

    /// Keys waiting for a worker (not counting the ones being processed).
    pub fn len(&self) -> usize {
        self.lock().queue.len()
    }

    /// No key is waiting for a worker.
    pub fn is_empty(&self) -> bool {
        self.lock().queue.is_empty()
    }

    /// The keys workers hold right now, and for how long: for the liveness
    /// probe (a stuck worker) and the unfinished-work metrics.
    pub fn in_flight(&self) -> Vec<(T, Duration)> {
        let in_flight: Vec<(T, Duration)> =
            self.lock().processing.iter().map(|(key, since)| (key.clone(), since.elapsed())).collect();
        let running: Vec<Duration> = in_flight.iter().map(|(_, d)| *d).collect();
        self.metrics.in_flight(&running);
        in_flight
    }
}

/// The delay before retry number `failures` (1-based): 5 ms * 2^(failures-1),
/// capped at [`MAX_DELAY`].
pub fn backoff(failures: u32) -> Duration {
    let exponent = failures.saturating_sub(1).min(31);
    BASE_DELAY.saturating_mul(1 << exponent).min(MAX_DELAY)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::time::Duration;
    use tokio::time::timeout;

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
        let overlaps = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let processed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut workers = Vec::new();
        for _ in 0..2 {
            let (q, held, overlaps, processed) = (q.clone(), held.clone(), overlaps.clone(), processed.clone());
            workers.push(tokio::spawn(async move {
                while let Some(key) = q.get().await {
                    if !held.lock().unwrap().insert(key) {
                        overlaps.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                    tokio::task::yield_now().await;
                    held.lock().unwrap().remove(&key);
                    processed.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
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
        assert_eq!(overlaps.load(std::sync::atomic::Ordering::SeqCst), 0);
        assert!(processed.load(std::sync::atomic::Ordering::SeqCst) >= 1);
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
    async fn add_all_dedups_and_wakes_every_parked_worker() {
        let q = Queue::new("test");
        let workers: Vec<_> = (0..2)
            .map(|_| {
                let q = q.clone();
                tokio::spawn(async move { q.get().await })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(50)).await; // both parked
        assert_eq!(q.add_all(["a", "b", "a"]), 2, "the repeated key is queued once");
        let mut got: Vec<&str> = Vec::new();
        for w in workers {
            got.push(
                timeout(Duration::from_secs(5), w).await.expect("a parked worker was not woken").unwrap().unwrap(),
            );
        }
        got.sort();
        assert_eq!(got, ["a", "b"]);
        // Held keys are parked, not queued, exactly as with `add`.
        assert_eq!(q.add_all(["a", "c"]), 1);
        assert_eq!(q.len(), 1);
        q.done(&"a");
        assert_eq!(q.len(), 2);
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
    async fn shutdown_wakes_a_parked_worker() {
        let q: Arc<Queue<&str>> = Queue::new("test");
        let worker = {
            let q = q.clone();
            tokio::spawn(async move { q.get().await })
        };
        tokio::task::yield_now().await;
        q.shut_down();
        assert_eq!(timeout(Duration::from_secs(5), worker).await.unwrap().unwrap(), None);
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
        // Both retries are pending; nothing is queued before 5 ms.
        tokio::time::sleep(Duration::from_millis(4)).await;
        assert_eq!(q.len(), 0);
        tokio::time::sleep(Duration::from_millis(2)).await;
        assert_eq!(q.len(), 1, "first retry after 5 ms");
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(q.len(), 1, "second retry deduplicated with the first");
        q.forget(&"a");
        assert_eq!(q.num_requeues(&"a"), 0);
        q.add_rate_limited("a");
        assert_eq!(q.num_requeues(&"a"), 1);
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
    async fn a_retry_after_shutdown_is_dropped() {
        let q = Queue::new("test");
        q.add_rate_limited("a");
        q.shut_down();
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(q.len(), 0);
        assert_eq!(q.get().await, None);
    }
}
