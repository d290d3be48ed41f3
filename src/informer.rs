//! The informer: watch pods, keep a cache of them, and turn every change into
//! a `namespace/name` key for the work queue.
//!
//! This is what client-go's SharedIndexInformer + event handlers do, built from
//! kube-runtime's `watcher` (list, then watch, relist when needed) and a store
//! of our own: a map from key to pod, which a list replaces whole at
//! `InitDone`, as kube's reflector `Store` does. We keep it ourselves because
//! the moments the store changes are exactly the moments we must react to
//! (the swap at `InitDone` is where we find the pods deleted while we were
//! not watching), and because a relist can then keep the pods that did not
//! change: the new list shares them with the old one, instead of holding a
//! second copy of every pod until the swap.

use crate::wire::Wire;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use crate::pod::{ApiPod, Pod};
use futures::StreamExt;
use kube::Api;
use kube::runtime::watcher::{self, Event, InitialListStrategy};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::key::Key;
use crate::queue::Queue;
use crate::{metrics, probes};

/// How long the API server keeps one watch request open (`timeoutSeconds`).
/// It sends a bookmark about 2 s before it closes the watch, and the watcher
/// then re-opens it from the last resourceVersion (no relist). So on a healthy
/// connection no more than about 50 s pass without a byte, which is what lets
/// the client's read timeout (client::READ_TIMEOUT, 54 s) tell a silent,
/// dead path from a quiet cluster.
pub const WATCH_TIMEOUT_SECS: u32 = 50;

/// The cache: the store of pods plus the two things a store forgets.
pub struct Cache {
    /// The store: every pod we know, by key. A lock of its own, so that a
    /// resync reading every key shares it with the workers reading one.
    /// Written only by [`Cache::apply`], under `inner` (taken first);
    /// workers read it through [`Cache::take`] only.
    pods: RwLock<HashMap<Key, Arc<Pod>>>,
    inner: Mutex<Inner>,
    /// Turns true at the first InitDone: the cache holds a whole list.
    ready: tokio::sync::watch::Sender<bool>,
    /// How far the watch stream has come into this cache, and its keys into
    /// the queue ([`run`] says when it moves): the protobuf watcher writes
    /// it, kube's JSON watcher does not. The leader's mark is made of it.
    position: crate::wire::Position,
    /// Woken when the API server is known to answer again (the elector's
    /// Lease requests got through after failing): a watch waiting out its
    /// backoff retries at once ([`Cache::server_answered`]).
    answered: tokio::sync::Notify,
}

/// Everything the informer writes, behind one lock. A worker reads the store
/// and the notes under this same lock, so it never sees a pod gone from the
/// store without also seeing its tombstone (which would log a delete twice).
struct Inner {
    /// The list in progress, from Init to InitDone, where it replaces the
    /// store whole: a worker reads the old list or the new one, never half.
    listing: Option<HashMap<Key, Arc<Pod>>>,
    /// Final states of pods that left the store and are not yet logged: from a
    /// Delete event, or found missing after a relist (client-go hands the
    /// latter to OnDelete as `DeletedFinalStateUnknown`). They let the worker
    /// log a pod that was created and deleted before it got to the key.
    /// Taken by the worker's sync of the key ([`Cache::take`]).
    tombstones: HashMap<Key, Vec<Tombstone>>,
    /// UIDs of the pods in the first full list, so their onAdd can say so
    /// (and `--skip-existing` can leave them out). Each is taken by the sync
    /// that logs that pod (alive, or from its tombstone).
    initial: HashSet<String>,
    /// How many pods the first list held, for the `cache synced` line. The
    /// store's own count may be higher by the time that line is written: the
    /// informer goes on applying watch events meanwhile.
    first_list: Option<usize>,
    /// Pods whose last status could not be read, so that it is said once.
    unreadable: HashSet<Key>,
    /// The last list taken in, and what it bounds (see [`Listed`]).
    last_list: Option<Listed>,
    /// Per key, the resourceVersion of the oldest event applied since a
    /// sync last took the key: where the changes its next sync merges into
    /// one line begin (see [`Snapshot::first`]).
    first: HashMap<Key, u64>,
}

/// The last list a cache took in: the range it knows only as a list, not
/// change by change. A pod created and deleted in that range left no trace.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Listed {
    /// Where the stream was when the list started (None: the first list,
    /// which has nothing before it).
    pub after: Option<u64>,
    /// The list's resourceVersion (protobuf only; kube's JSON watcher keeps
    /// it to itself).
    pub by: Option<u64>,
    /// The newest pod resourceVersion in the list, where `by` is not known:
    /// a lower bound of it.
    pub newest: Option<u64>,
}

/// The last state of a pod that left the cache.
#[derive(Clone, Debug)]
pub struct Tombstone {
    pub pod: Arc<Pod>,
    /// It came from a DELETED event (not from a relist). With a label
    /// selector such an event means the pod was deleted *or* its labels
    /// stopped matching, and the event cannot tell which (see
    /// [`Cache::apply`]); the worker asks the server (worker.rs).
    pub from_event: bool,
    /// Found missing by a relist: what is known of when the delete happened
    /// (nothing, for one from an event: it is at the pod's resourceVersion).
    pub relist: Relist,
}

/// What is known of when the deletes a relist reveals happened: past the
/// pod's last resourceVersion (the one its tombstone shows), and past
/// `after`, no later than `by`. The leader election's gate needs these
/// bounds (leader.rs, `Seen`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Relist {
    /// How far the watch stream had come when the relist started: the
    /// protobuf watcher's `Position::handled`, or the newest resourceVersion
    /// of a watch event (on JSON, where the watcher tells no position). Every
    /// change at or below it reached the store as an event, a DELETED one
    /// too, so a pod still in the store then was deleted after it.
    pub after: Option<u64>,
    /// The list's resourceVersion, when the watcher says it (protobuf;
    /// kube's JSON watcher does not): a pod the list lacks was deleted no
    /// later than it.
    pub by: Option<u64>,
}

/// What a worker sees for one key, taken in one consistent moment (see
/// [`Cache::take`]).
pub struct Snapshot {
    pub current: Option<Arc<Pod>>,
    pub tombstones: Vec<Tombstone>,
    /// Which of the pods above (current or tombstones) came in the first list.
    pub initial: HashSet<String>,
    /// The resourceVersion of the oldest event among those taken (None: a
    /// list brought them). The sync merges them: an add of a pod that
    /// changed, or died, before the sync spans its changes from here on.
    pub first: Option<u64>,
}

impl Cache {
    pub fn new() -> Arc<Cache> {
        let inner = Inner {
            listing: None,
            tombstones: HashMap::new(),
            initial: HashSet::new(),
            first_list: None,
            unreadable: HashSet::new(),
            last_list: None,
            first: HashMap::new(),
        };
        Arc::new(Cache {
            pods: RwLock::default(),
            inner: Mutex::new(inner),
            ready: tokio::sync::watch::Sender::new(false),
            position: crate::wire::Position::default(),
            answered: tokio::sync::Notify::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn pods(&self) -> RwLockReadGuard<'_, HashMap<Key, Arc<Pod>>> {
        self.pods.read().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn pods_mut(&self) -> RwLockWriteGuard<'_, HashMap<Key, Arc<Pod>>> {
        self.pods.write().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The pod the store holds under `key`.
    fn get(&self, key: &Key) -> Option<Arc<Pod>> {
        self.pods().get(key).cloned()
    }

    /// The key of `pod`, and the pod with its name shared with that key and
    /// with the key the store has for it, when there is one: the store, the
    /// queue, the worker and every version of the pod then hold one copy of
    /// its name.
    fn keyed(&self, mut pod: Pod) -> (Key, Pod) {
        let key = Key::of(&pod);
        let key = self.pods().get_key_value(&key).map(|(known, _)| known.clone()).unwrap_or(key);
        pod.metadata.namespace = Some(key.namespace.clone());
        pod.metadata.name = Some(key.name.clone());
        (key, pod)
    }

    // ANCHOR: apply
    /// The event handlers: apply one watcher event to the store and return the
    /// keys that need a sync. `relist`: for an InitDone, what is known of
    /// when the deletes it reveals happened (ignored for other events).
    pub fn apply(&self, event: Event<Pod>, relist: Relist) -> Vec<Key> {
        let mut inner = self.lock();
        let event = match event {
            Event::Apply(pod) => Event::Apply(self.mend_status(&mut inner, pod)),
            Event::InitApply(pod) => Event::InitApply(self.mend_status(&mut inner, pod)),
            Event::Delete(pod) => Event::Delete(self.mend_status(&mut inner, pod)),
            other => other,
        };
        match event {
            // client-go's OnAdd *and* OnUpdate: the worker tells them apart.
            Event::Apply(pod) => {
                let (key, pod) = self.keyed(pod);
                note_oldest_event(&mut inner, &key, &pod);
                self.pods_mut().insert(key.clone(), Arc::new(pod));
                vec![key]
            }
            // A DELETED event. With a label selector the server sends one too
            // when a pod's labels stop matching, and (measured against
            // kube-apiserver 1.35) its object is the pod as it was *before*
            // the change, old labels and all, only with the new
            // resourceVersion: nothing in it tells the two cases apart.
            Event::Delete(pod) => {
                let (key, pod) = self.keyed(pod);
                inner.unreadable.remove(&key);
                note_oldest_event(&mut inner, &key, &pod);
                self.pods_mut().remove(&key);
                let tombstone = Tombstone { pod: Arc::new(pod), from_event: true, relist: Relist::default() };
                inner.tombstones.entry(key.clone()).or_default().push(tombstone);
                vec![key]
            }
            // A (re)list is starting. The store only swaps to the new list at
            // InitDone, so a worker syncing one of its keys now would read the
            // *old* state: enqueue nothing yet. Sized for the list we had, so
            // that it does not grow (and copy itself) on the way.
            Event::Init => {
                inner.listing = Some(HashMap::with_capacity(self.pods().len()));
                Vec::new()
            }
            // A pod of the list. If the store holds it at a newer
            // resourceVersion (a list served by a cache that lags what the
            // watch already delivered), the list is older than what we know:
            // keep ours, so a relist never moves a pod back in time. At the
            // same one, it is the same pod: keep ours too, shared by both lists.
            Event::InitApply(pod) => {
                let (key, pod) = self.keyed(pod);
                let known = self.get(&key).filter(|known| newer_or_same(known, &pod));
                let pod = known.unwrap_or_else(|| Arc::new(pod));
                inner.listing.get_or_insert_default().insert(key, pod);
                Vec::new()
            }
            Event::InitDone => {
                let now = inner.listing.take().unwrap_or_default();
                let before = std::mem::replace(&mut *self.pods_mut(), now);
                let now = self.pods();
                // Pods we knew that the new list lacks (or holds under a new
                // UID) were deleted (or left the selector: a list cannot tell)
                // while we were not watching: tombstones. When, nobody saw:
                // after the pod's last resourceVersion and the stream's
                // position at the relist's start, no later than the list's.
                for (key, old) in before {
                    if now.get(&key).map(|pod| &pod.metadata.uid) != Some(&old.metadata.uid) {
                        let tombstone = Tombstone { pod: old, from_event: false, relist };
                        inner.tombstones.entry(key).or_default().push(tombstone);
                    }
                }
                metrics::relisted();
                // Where the list's own resourceVersion is not known (JSON).
                let newest = relist.by.is_none().then(|| now.values().filter_map(|pod| version(pod)).max()).flatten();
                inner.last_list = Some(Listed { after: relist.after, by: relist.by, newest });
                if inner.first_list.is_none() {
                    inner.first_list = Some(now.len());
                    inner.initial = now.values().filter_map(|pod| pod.uid()).map(str::to_string).collect();
                    self.ready.send_replace(true);
                }
                let mut keys: Vec<Key> = now.keys().cloned().collect();
                keys.extend(inner.tombstones.keys().cloned());
                keys
            }
        }
    }
    // ANCHOR_END: apply

    /// A pod whose status could not be read (see wire.rs) keeps the
    /// status the cache had for it, so the next line does not read "phase
    /// Running -> Unknown" for a status that did not change as far as we
    /// know. Said once per pod, until its status reads again.
    fn mend_status(&self, inner: &mut Inner, mut pod: Pod) -> Pod {
        let key = Key::of(&pod);
        let Some(why) = pod.unreadable_status.take() else {
            if !inner.unreadable.is_empty() {
                inner.unreadable.remove(&key);
            }
            return pod;
        };
        let known = self.get(&key).filter(|known| known.metadata.uid == pod.metadata.uid);
        pod.status = known.and_then(|known| known.status.clone());
        if inner.unreadable.insert(key.clone()) {
            let kept = if pod.status.is_some() { "keeping the one it had" } else { "it has none yet" };
            warn!(%key, "the status of {key} could not be read ({why}): {kept}");
        }
        pod
    }

    /// Everything the worker needs for `key`, taken in one step under the
    /// lock the informer writes under: the pod the store holds now, and the
    /// key's tombstones and initial-list marks, which leave the cache with it.
    /// A tombstone that arrives later waits for the next sync (its event
    /// queued the key again).
    ///
    /// Taking at the read is safe because nothing after it can fail: the sync
    /// decides and writes lines. A controller whose sync calls the outside
    /// world, and can fail there, must read, act, and only then take what it
    /// read, or a failed try would lose a delete for good. (The test seam's
    /// failures come before the sync runs, so they take nothing: faults.rs.)
    pub fn take(&self, key: &Key) -> Snapshot {
        let mut inner = self.lock();
        let current = self.get(key);
        let tombstones = inner.tombstones.remove(key).unwrap_or_default();
        // A pod of the first list stays marked until the sync that logs it,
        // whether it is still here or already a tombstone.
        let uids = current.iter().chain(tombstones.iter().map(|t| &t.pod)).filter_map(|p| p.uid());
        let initial = uids.filter(|uid| inner.initial.remove(*uid)).map(str::to_string).collect();
        let first = inner.first.remove(key);
        Snapshot { current, tombstones, initial, first }
    }

    /// A key given up on (its sync failed too often): forget what was held
    /// for its next sync, its tombstones and initial-list marks, which would
    /// otherwise stay in memory for good (a resync walks only the store).
    pub fn release(&self, key: &Key) {
        let current = self.get(key);
        let mut inner = self.lock();
        let stones = inner.tombstones.remove(key).unwrap_or_default();
        inner.first.remove(key);
        let uids = current.iter().chain(stones.iter().map(|t| &t.pod)).filter_map(|p| p.uid());
        for uid in uids {
            inner.initial.remove(uid);
        }
    }

    /// How many tombstones and initial-list marks are held (tests check that
    /// nothing is left behind).
    pub fn held(&self) -> (usize, usize) {
        let inner = self.lock();
        (inner.tombstones.values().map(Vec::len).sum(), inner.initial.len())
    }

    /// How many pods the first list held (0 until it is in).
    pub fn first_list_len(&self) -> usize {
        self.lock().first_list.unwrap_or(0)
    }

    /// How far the watch came (see the field), for the leader's mark.
    pub fn position(&self) -> crate::wire::Position {
        self.position.clone()
    }

    /// WaitForCacheSync: resolves once the cache holds the first list.
    pub async fn synced(&self) {
        // The sender lives as long as the cache, so this only ends in true.
        let _ = self.ready.subscribe().wait_for(|ready| *ready).await;
    }

    /// The keys of every pod in the store, for a resync. O(pods) under the
    /// store's read lock, which the workers' reads share.
    pub fn keys(&self) -> Vec<Key> {
        self.pods().keys().cloned().collect()
    }

    /// The newest resourceVersion among the pods in the store.
    pub fn newest_version(&self) -> Option<u64> {
        self.pods().values().filter_map(|p| version(p)).max()
    }

    /// The last list taken in (None before the first one is in).
    pub fn last_list(&self) -> Option<Listed> {
        self.lock().last_list
    }

    /// The API server answers again (the elector reached the Lease after
    /// failing to): a watch waiting out its reconnect backoff retries now,
    /// with its backoff back at the start.
    pub fn server_answered(&self) {
        self.answered.notify_waiters();
    }

    /// How many pods the store holds.
    pub fn pod_count(&self) -> usize {
        self.pods().len()
    }
}

/// An event of `key`: the oldest since a sync last took the key is where
/// the changes its next sync merges into one line begin ([`Snapshot::first`]).
fn note_oldest_event(inner: &mut Inner, key: &Key, pod: &Pod) {
    if let Some(v) = version(pod) {
        inner.first.entry(key.clone()).or_insert(v);
    }
}

/// A pod's resourceVersion, if it is a number.
fn version(pod: &Pod) -> Option<u64> {
    pod.metadata.resource_version.as_deref()?.parse().ok()
}

/// Whether `known` is the same pod as `listed` at the same or a newer
/// resourceVersion: then the store's copy stands for the listed one.
///
/// resourceVersions are opaque strings to clients in general, but
/// kube-apiserver's are etcd revisions, decimal integers that grow with every
/// write (Kubernetes 1.35 documents them as comparable for built-in types).
/// Anything that does not parse as one is never called newer.
fn newer_or_same(known: &Pod, listed: &Pod) -> bool {
    let version = |p: &Pod| p.metadata.resource_version.as_deref().and_then(|rv| rv.parse::<u64>().ok());
    known.metadata.uid == listed.metadata.uid
        && (known.metadata.resource_version == listed.metadata.resource_version
            || matches!((version(known), version(listed)), (Some(k), Some(l)) if k > l))
}

/// How often a list that takes long says how far it got.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(10);

/// Runs the watch until `shutdown`: list, watch, relist on expiry, and hand
/// every changed key to the queue.
///
/// Pods are read in `wire`'s format: protobuf by default (the
/// kube-pod-protobuf crate, kube's watcher state machine over the API
/// server's own encoding), or JSON through kube's watcher itself. The events
/// are the same either way; a server that refuses protobuf (406, 415), or an
/// answer in another format (a proxy that rewrites Accept), is read as JSON
/// from then on, with one line.
///
/// A watch error never ends the program: it is logged with the server's
/// reason and retried after the reconnect backoff ([`Backoff`]). We back off
/// ourselves, because kube's `default_backoff()` resets on every `Ok` and the
/// watcher yields `Ok(Init)` before each list attempt, so a LIST that keeps
/// failing (a 403, say) would be retried about once a second forever.
///
/// The first list is a streaming list unless `--paged-list` (one watch that
/// sends the existing pods first, then the changes): quick, and served from
/// the API server's watch cache at resourceVersion "0" ("any freshness"), so a
/// pod created just before start-up can miss it and arrive as an event a
/// moment later (a plain onAdd, not `initial_list=true`). Four things end the
/// streaming mode for good, each with one line:
/// - a server that refuses streaming lists;
/// - a server (or a proxy) that will not give us pods in protobuf: JSON is
///   read from then on, with a paged LIST (kube's JSON watcher could not fall
///   back from a refused streaming list by itself);
/// - a streaming list the server ended before its end marker: the server
///   closes every watch after [`WATCH_TIMEOUT_SECS`], also one still sending
///   the list, so a list that takes longer (a big cluster, a slow link) would
///   start over forever; a paged LIST has no such limit, each page is a request
///   of its own;
/// - a relist. A relist is needed when the watch cannot resume (410 Gone: the
///   server compacted the history it would resume from), and after any error
///   that sends the watcher back to its start once a list completed (a watch
///   event without a resourceVersion, a protobuf frame refused). It is a paged
///   LIST without a resourceVersion: a consistent read, never older than what
///   the watch already delivered. (kube's streaming relist asks at "0" again,
///   and a lagging watch cache could then hand us a list older than our
///   store: phantom deletes, updates that go backwards.)
///
/// A first list that is paged (`--paged-list`, or after one of the first
/// two) asks at resourceVersion "0", as client-go's does: served from the
/// API server's watch cache, with nothing earlier to go back from. Only that
/// first LIST request: one whose bytes were refused (the watch cache answers
/// a LIST at "0" whole, whatever the page size, so a big namespace can pass
/// the protobuf reader's cap on a LIST response) is followed, as every
/// relist, by a paged, consistent one. (On
/// protobuf, that is. kube leaves a resourceVersion of "0" out of a LIST that
/// has a limit, so on `--wire json` every paged list is a consistent read.)
///
/// A list that takes long logs its progress every [`PROGRESS_EVERY`].
pub async fn run(
    api: Api<ApiPod>,
    mut config: watcher::Config,
    mut wire: Wire,
    protobuf_accept: Option<String>,
    cache: Arc<Cache>,
    queue: Arc<Queue<Key>>,
    shutdown: CancellationToken,
) {
    let position = cache.position.clone();
    let _running = probes::watch_running(); // for /healthz, until we return
    if config.timeout.is_none() {
        config = config.timeout(WATCH_TIMEOUT_SECS);
    }
    let mut backoff = Backoff::default();
    let mut progress = tokio::time::interval_at(Instant::now() + PROGRESS_EVERY, PROGRESS_EVERY);
    progress.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut expiries = Expiries::default();
    let mut list = ListProgress::default();
    // Whether a list ever completed: from then on there is a state to go
    // back from, and every list must be consistent.
    let mut listed = false;
    // Whether the bytes of a list were refused before one completed (a page
    // too big or too costly): the next list must not ask for them again.
    let mut list_refused = false;
    // The newest resourceVersion of a watch event: how far the stream came,
    // where the watcher tells no position (JSON). Not moved during a relist,
    // which has no Apply or Delete events.
    let mut streamed: Option<u64> = None;
    loop {
        let streaming = config.initial_list_strategy == InitialListStrategy::StreamingList;
        // Whether this watcher has finished a list since its last start.
        let mut watcher_listed = false;
        let mut events = crate::wire::events(wire, protobuf_accept.as_deref(), api.clone(), config.clone(), &position);
        let delay = loop {
            let next = tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = progress.tick() => {
                    list.report();
                    continue;
                }
                next = events.next() => next,
            };
            match next {
                // The watcher went back to its start without an error: the
                // server ended the streaming list before its end marker.
                Some(Ok(Event::Init)) if streaming && list.started.is_some() => {
                    let delay = backoff.next_delay(Instant::now(), random_fraction());
                    let reason = format!(
                        "the streaming list ended after {} pods and {} s, before the server marked its end \
                         (the server closes a watch after {} s)",
                        list.pods,
                        list.elapsed().as_secs(),
                        config.timeout.unwrap_or(WATCH_TIMEOUT_SECS)
                    );
                    warn!(retry_in = ?delay, "{reason}: listing with paged LIST requests instead, in {delay:?}");
                    metrics::watch_error();
                    probes::watch_error(Some(reason));
                    break Some(delay);
                }
                Some(Ok(event)) => {
                    if matches!(event, Event::Apply(_) | Event::Delete(_) | Event::InitDone) {
                        probes::watch_error(None);
                    }
                    match event {
                        Event::Init => watcher_listed = false,
                        Event::InitDone => (listed, watcher_listed) = (true, true),
                        _ => {}
                    }
                    expiries.track(&event);
                    list.track(&event);
                    if let Event::Apply(pod) | Event::Delete(pod) = &event {
                        streamed = streamed.max(pod.metadata.resource_version.as_deref().and_then(|v| v.parse().ok()));
                        // The watch delivers: the server answers, so the
                        // next outage starts its backoff over.
                        backoff = Backoff::default();
                    }
                    // The bounds of the deletes a list reveals: how far the
                    // stream had come before it (the position does not move
                    // during a relist, and is read before the next poll), and
                    // the list's resourceVersion, which only the protobuf
                    // watcher says (kube's hides it).
                    let rv = |rv: Option<String>| rv.and_then(|rv| rv.parse::<u64>().ok());
                    let relist = match (&event, wire) {
                        (Event::InitDone, Wire::Protobuf) => {
                            Relist { after: rv(position.handled()).max(streamed), by: rv(position.listed()) }
                        }
                        (Event::InitDone, Wire::Json) => Relist { after: streamed, by: None },
                        _ => Relist::default(),
                    };
                    // The keys are queued here, and only then is the
                    // protobuf watcher's `Position` moved past this event,
                    // which the leader's mark is made of (leader.rs,
                    // `next_mark`): at once (`consumed`), not only when the
                    // next event is asked for, so it covers every key queued
                    // even if this loop stops next (a shutdown), and a
                    // graceful handoff's last mark covers all the workers
                    // drain. Nothing may be awaited in between.
                    queue.add_all(cache.apply(event, relist));
                    position.consumed();
                    metrics::cache_pods(cache.pod_count());
                }
                Some(Err(error)) if wire == Wire::Protobuf && crate::wire::refuses_protobuf(&error).is_some() => {
                    let why = crate::wire::refuses_protobuf(&error).unwrap_or_default();
                    warn!("{why}: reading them as JSON instead");
                    wire = Wire::Json;
                    break None;
                }
                Some(Err(error)) if streaming && refuses_streaming_lists(&error) => {
                    info!(
                        "the API server does not serve streaming lists ({}): using a paged LIST instead",
                        crate::client::describe(&error)
                    );
                    break None;
                }
                Some(Err(error)) if crate::wire::refused(&error) => {
                    // Bytes we will not decode (a frame too long or too
                    // costly, a LIST page too big): the watcher went back to
                    // Empty. Relist, paged and consistent; at once unless the
                    // last relist brought nothing either (as for a 410).
                    list_refused |= !listed;
                    let reason = crate::client::describe(&error);
                    warn!("watch failed: {reason}; relisting");
                    metrics::watch_error();
                    probes::watch_error(Some(reason));
                    break expiries.next_relist(&mut backoff, Instant::now(), random_fraction());
                }
                Some(Err(error)) if expired(&error) => {
                    // Routine: etcd compacts its history (every 5 minutes by
                    // default) and a watch resuming from before that point is
                    // told 410 Gone. Relist at once, unless the last relist
                    // brought nothing before this one (a proxy answering 410 to
                    // everything): then back off like from any failure.
                    info!("the watch expired (410 Gone: its resourceVersion was compacted away); relisting");
                    break expiries.next_relist(&mut backoff, Instant::now(), random_fraction());
                }
                Some(Err(error)) => {
                    let delay = backoff.next_delay(Instant::now(), random_fraction());
                    let reason = crate::client::describe(&error);
                    warn!(retry_in = ?delay, "watch failed: {reason}; retrying in {delay:?}");
                    metrics::watch_error();
                    probes::watch_error(Some(reason));
                    // The watcher is back at its start (Empty) with a list
                    // behind us: it would relist as it began (a streaming
                    // list at "0", any freshness). Rebuild it, as after a
                    // 410, in paged, consistent mode.
                    if listed && leaves_empty(&error, streaming, watcher_listed) {
                        break Some(delay);
                    }
                    if !wait_out(delay, &cache, &mut backoff, &shutdown).await {
                        return;
                    }
                }
                None => {
                    debug!("watch stream ended");
                    return;
                }
            }
        };
        // A new watcher, in paged mode; consistent once a list completed
        // (see above), or once the bytes of a list were refused (the watch
        // cache answers a LIST at "0" whole, whatever the page size: the
        // same request would be refused again). Before that, its list is
        // still the first one, which has no earlier state to go back from:
        // at "0", from the watch cache.
        config.initial_list_strategy = InitialListStrategy::ListWatch;
        config.list_semantic =
            if listed || list_refused { watcher::ListSemantic::MostRecent } else { watcher::ListSemantic::Any };
        if let Some(delay) = delay
            && !wait_out(delay, &cache, &mut backoff, &shutdown).await
        {
            return;
        }
    }
}

/// Waits out the reconnect backoff's `delay`, or less: once the API server
/// is known to answer again ([`Cache::server_answered`]), the retry comes at
/// once and the backoff starts over. A backoff grown through an outage would
/// otherwise keep the watch away for up to 45 s after the server came back,
/// while everything else already talks to it again. Returns false at the
/// shutdown.
async fn wait_out(delay: Duration, cache: &Cache, backoff: &mut Backoff, shutdown: &CancellationToken) -> bool {
    tokio::select! {
        _ = shutdown.cancelled() => false,
        _ = tokio::time::sleep(delay) => true,
        _ = cache.answered.notified() => {
            *backoff = Backoff::default();
            info!("the API server answers again: retrying the watch now");
            true
        }
    }
}

/// When to relist after a 410 Gone.
///
/// Routinely at once, as client-go does. But a 410 with no change through the
/// watch since the previous one means the relist did not help (a watch that
/// cannot even start, or a proxy that answers 410 to everything): then wait
/// the reconnect backoff, or such a server would get a full LIST in a tight
/// loop.
struct Expiries {
    /// A change (not a list) came through the watch since the last 410.
    moved: bool,
}

impl Default for Expiries {
    fn default() -> Self {
        Expiries { moved: true }
    }
}

impl Expiries {
    fn track(&mut self, event: &Event<Pod>) {
        self.moved |= matches!(event, Event::Apply(_) | Event::Delete(_));
    }

    /// A 410 came: how long to wait before the relist (`None`: at once).
    fn next_relist(&mut self, backoff: &mut Backoff, now: Instant, random: f64) -> Option<Duration> {
        let delay = (!self.moved).then(|| backoff.next_delay(now, random));
        self.moved = false;
        delay
    }
}

/// How far the list in progress got, for its progress lines.
#[derive(Default)]
struct ListProgress {
    /// When listing began (the watcher's `Init`); `None` when no list is
    /// running. A list that starts over before it finished (a streaming list
    /// cut short, a failed page) keeps the first start: the wait is the
    /// user's, however many attempts it takes.
    started: Option<Instant>,
    /// Pods received by the attempt in progress.
    pods: usize,
    /// Whether a progress line was logged for it (then its end is logged too).
    reported: bool,
}

impl ListProgress {
    fn track(&mut self, event: &Event<Pod>) {
        match event {
            Event::Init => {
                self.started.get_or_insert_with(Instant::now);
                self.pods = 0;
            }
            Event::InitApply(_) => self.pods += 1,
            Event::InitDone => {
                if self.reported {
                    info!(pods = self.pods, elapsed_s = self.elapsed().as_secs(), "the list of pods is complete");
                }
                *self = ListProgress::default();
            }
            Event::Apply(_) | Event::Delete(_) => {}
        }
    }

    fn elapsed(&self) -> Duration {
        self.started.map_or(Duration::ZERO, |t| t.elapsed())
    }

    /// One line, like a progress bar's, if a list has been running a while.
    fn report(&mut self) {
        if self.started.is_some() && self.elapsed() >= PROGRESS_EVERY / 2 {
            self.reported = true;
            info!(
                pods = self.pods,
                elapsed_s = self.elapsed().as_secs(),
                "still listing pods: {} so far, {} s since listing began",
                self.pods,
                self.elapsed().as_secs()
            );
        }
    }
}

/// Whether `error` left the watcher (kube's or ours, the same state machine)
/// back at its start, Empty, so that its next poll lists again as it first
/// did. `streaming`: the watcher was built for streaming lists;
/// `watcher_listed`: it finished a list since its last start.
fn leaves_empty(error: &watcher::Error, streaming: bool, watcher_listed: bool) -> bool {
    match error {
        watcher::Error::NoResourceVersion | watcher::Error::InitialListFailed(_) => true,
        watcher::Error::WatchError(status) => status.code == 410,
        // The watch that carries a streaming list failed to start.
        watcher::Error::WatchStartFailed(_) => streaming && !watcher_listed,
        watcher::Error::WatchFailed(_) => crate::wire::refused(error),
    }
}

/// A 410 Gone: the resourceVersion the watch resumes from is no longer held
/// (during a watch, when it starts, or a paged list's continue token expired).
fn expired(error: &watcher::Error) -> bool {
    match error {
        watcher::Error::WatchError(status) => status.code == 410,
        watcher::Error::WatchFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::InitialListFailed(kube::Error::Api(status)) => status.code == 410,
        _ => false,
    }
}

/// A server with the WatchList feature off answers a watch that asks for
/// `sendInitialEvents` with 422 Invalid ("sendInitialEvents is forbidden for
/// watch unless the WatchList feature gate is enabled"); older ones with 400.
fn refuses_streaming_lists(error: &watcher::Error) -> bool {
    matches!(error, watcher::Error::WatchStartFailed(kube::Error::Api(status))
        if status.code == 422 || status.code == 400 || status.message.contains("sendInitialEvents"))
}

/// The watch's reconnect backoff: how long to wait before re-listing or
/// re-watching after the API server failed us. (Not to be confused with the
/// queue's per-key retry backoff in queue.rs, 5 ms .. 1000 s, which spaces the
/// retries of one key whose sync failed.)
///
/// client-go's reflector rule: 800 ms, doubling up to 30 s, each delay
/// stretched by a random part (up to +50% here) so many replicas that lost the
/// same server do not come back in lockstep; and the schedule starts over
/// after [`Backoff::QUIET`] without a failure: a quiet cluster has no
/// events, so one outage would otherwise leave the next blip waiting 30 s.
/// It also starts over when the server is seen to answer again: a change
/// the watch delivers, or (with `--leader-elect`) a Lease request that gets
/// through after failing ([`Cache::server_answered`]). Without that, API
/// server restarts closer together than [`Backoff::QUIET`] would grow it to
/// its maximum, and a standby's watch would stay away long after the server
/// came back.
#[derive(Debug)]
pub struct Backoff {
    next: Duration,
    /// When the last retry was due: the quiet period counts from there.
    last_retry: Option<Instant>,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff { next: Backoff::INITIAL, last_retry: None }
    }
}

impl Backoff {
    pub const INITIAL: Duration = Duration::from_millis(800);
    pub const MAX: Duration = Duration::from_secs(30);
    /// client-go's reflector resets its backoff after 2 minutes without one.
    pub const QUIET: Duration = Duration::from_secs(120);
    /// A delay is stretched by up to this fraction of itself.
    pub const JITTER: f64 = 0.5;

    /// The delay before the next retry, for a failure at `now`; `random` is in
    /// [0, 1) and picks the jitter (passed in so tests can choose it).
    pub fn next_delay(&mut self, now: Instant, random: f64) -> Duration {
        if self.last_retry.is_some_and(|t| now.saturating_duration_since(t) >= Backoff::QUIET) {
            self.next = Backoff::INITIAL;
        }
        let base = self.next;
        self.next = (base * 2).min(Backoff::MAX);
        let delay = base.mul_f64(1.0 + Backoff::JITTER * random.clamp(0.0, 1.0));
        self.last_retry = Some(now + delay);
        delay
    }
}

/// A number in [0, 1) without a crate: std's `RandomState` is seeded from the
/// OS and gives each new instance fresh keys.
fn random_fraction() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let bits = std::collections::hash_map::RandomState::new().build_hasher().finish();
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::pod::{Labels, Meta};

    pub(crate) fn pod(ns: &str, name: &str, uid: &str, rv: &str) -> Pod {
        Pod { metadata: Meta::new(Some(ns), Some(name), Some(uid), Some(rv), Labels::default()), ..Default::default() }
    }

    fn key(ns: &str, name: &str) -> Key {
        Key { namespace: ns.into(), name: name.into() }
    }

    #[test]
    fn key_prints_namespace_slash_name() {
        assert_eq!(key("default", "kuard").to_string(), "default/kuard");
    }

    #[test]
    fn init_apply_keys_wait_for_init_done() {
        let cache = Cache::new();
        assert!(cache.apply(Event::Init, Relist::default()).is_empty());
        assert!(cache.apply(Event::InitApply(pod("a", "p", "u1", "1")), Relist::default()).is_empty());
        // Before InitDone the store does not hold the list yet.
        assert!(cache.take(&key("a", "p")).current.is_none());
        assert_eq!(cache.apply(Event::InitDone, Relist::default()), vec![key("a", "p")]);
        let snap = cache.take(&key("a", "p"));
        assert!(snap.current.is_some());
        assert_eq!(snap.initial, HashSet::from(["u1".to_string()]), "pods of the first list are marked initial");
        assert!(cache.take(&key("a", "p")).initial.is_empty(), "the mark is taken with the pod");
    }

    #[test]
    fn the_first_list_is_counted_apart_from_the_events_after_it() {
        let cache = Cache::new();
        assert_eq!(cache.first_list_len(), 0, "nothing listed yet");
        cache.apply(Event::Init, Relist::default());
        cache.apply(Event::InitApply(pod("a", "p", "u1", "1")), Relist::default());
        cache.apply(Event::InitApply(pod("a", "q", "u2", "1")), Relist::default());
        cache.apply(Event::InitDone, Relist::default());
        // An event applied before the `cache synced` line is written.
        cache.apply(Event::Apply(pod("a", "late", "u3", "2")), Relist::default());
        assert_eq!((cache.first_list_len(), cache.pod_count()), (2, 3));
        // A relist does not change what the first list held.
        cache.apply(Event::Init, Relist::default());
        cache.apply(Event::InitDone, Relist::default());
        assert_eq!(cache.first_list_len(), 2);
    }

    #[test]
    fn a_relist_finds_the_pods_deleted_while_not_watching() {
        let cache = Cache::new();
        cache.apply(Event::Init, Relist::default());
        cache.apply(Event::InitApply(pod("a", "gone", "u1", "1")), Relist::default());
        cache.apply(Event::InitApply(pod("a", "kept", "u2", "1")), Relist::default());
        cache.apply(Event::InitApply(pod("a", "recreated", "u3", "1")), Relist::default());
        cache.apply(Event::InitDone, Relist::default());
        // The connection drops; the relist lacks `gone` and holds `recreated` with a new UID.
        cache.apply(Event::Init, Relist::default());
        cache.apply(Event::InitApply(pod("a", "kept", "u2", "1")), Relist::default());
        cache.apply(Event::InitApply(pod("a", "recreated", "u4", "5")), Relist::default());
        // A list at resourceVersion 9, started with the stream at 3: every
        // delete it reveals happened after 3, by 9.
        let relist = Relist { after: Some(3), by: Some(9) };
        let mut keys = cache.apply(Event::InitDone, relist);
        keys.sort();
        keys.dedup();
        assert_eq!(keys, vec![key("a", "gone"), key("a", "kept"), key("a", "recreated")]);
        let gone = cache.take(&key("a", "gone"));
        assert!(gone.current.is_none());
        assert_eq!(gone.tombstones.len(), 1);
        assert_eq!(gone.tombstones[0].pod.uid(), Some("u1"));
        assert_eq!(gone.tombstones[0].pod.resource_version(), Some("1"), "the pod as last known");
        assert_eq!((gone.tombstones[0].from_event, gone.tombstones[0].relist), (false, relist));
        let recreated = cache.take(&key("a", "recreated"));
        assert_eq!(recreated.current.as_deref().and_then(Pod::uid), Some("u4"));
        assert_eq!(recreated.tombstones[0].pod.uid(), Some("u3"));
        assert!(cache.take(&key("a", "kept")).tombstones.is_empty());
        assert!(!recreated.initial.contains("u4"), "a pod from a later relist is not from the initial list");
    }

    #[test]
    fn a_delete_event_leaves_its_final_state_as_a_tombstone() {
        let cache = Cache::new();
        cache.apply(Event::Init, Relist::default());
        cache.apply(Event::InitDone, Relist::default());
        assert_eq!(cache.apply(Event::Apply(pod("a", "p", "u1", "2")), Relist::default()), vec![key("a", "p")]);
        assert_eq!(cache.apply(Event::Delete(pod("a", "p", "u1", "3")), Relist::default()), vec![key("a", "p")]);
        let snap = cache.take(&key("a", "p"));
        assert!(snap.current.is_none());
        assert_eq!(snap.tombstones[0].pod.resource_version(), Some("3"));
        assert_eq!(
            (snap.tombstones[0].from_event, snap.tombstones[0].relist),
            (true, Relist::default()),
            "at the event's own version"
        );
        assert!(cache.take(&key("a", "p")).tombstones.is_empty(), "a tombstone is taken once");
    }

    #[test]
    fn backoff_doubles_to_30s_with_jitter() {
        let mut b = Backoff::default();
        let t0 = Instant::now();
        // No jitter (random = 0): client-go's schedule.
        let delays: Vec<u64> =
            (0..8).map(|i| b.next_delay(t0 + Duration::from_secs(i), 0.0).as_millis() as u64).collect();
        assert_eq!(delays, vec![800, 1600, 3200, 6400, 12800, 25600, 30000, 30000]);
        // The most jitter stretches a delay by half.
        let mut b = Backoff::default();
        assert_eq!(b.next_delay(t0, 0.999_999).as_millis(), 1199);
        assert_eq!(b.next_delay(t0, 0.5), Duration::from_millis(2000));
        assert!((0..1000).map(|_| random_fraction()).all(|r| (0.0..1.0).contains(&r)));
        let spread: HashSet<u64> = (0..100).map(|_| (random_fraction() * 1000.0) as u64).collect();
        assert!(spread.len() > 50, "jitter must differ between calls");
    }

    #[tokio::test(start_paused = true)]
    async fn backoff_starts_over_after_two_quiet_minutes() {
        let mut b = Backoff::default();
        // An outage: six failures in a row, each retried after its delay.
        let mut before = Vec::new();
        for _ in 0..6 {
            let d = b.next_delay(Instant::now(), 0.0);
            before.push(d.as_millis() as u64);
            tokio::time::advance(d).await;
        }
        assert_eq!(before, vec![800, 1600, 3200, 6400, 12800, 25600]);
        // A failure 119 s after the last retry still counts as the same outage...
        tokio::time::advance(Duration::from_secs(119)).await;
        assert_eq!(b.next_delay(Instant::now(), 0.0), Duration::from_secs(30));
        // ... but after two quiet minutes the schedule starts over.
        tokio::time::advance(Duration::from_secs(30 + 120)).await;
        assert_eq!(b.next_delay(Instant::now(), 0.0), Duration::from_millis(800));
    }

    #[tokio::test(start_paused = true)]
    async fn a_grown_backoff_ends_and_starts_over_once_the_server_answers_again() {
        let (cache, shutdown, mut b) = (Cache::new(), CancellationToken::new(), Backoff::default());
        // Restarts closer together than two quiet minutes: grown to 30 s.
        for _ in 0..6 {
            b.next_delay(Instant::now(), 0.0);
        }
        let delay = b.next_delay(Instant::now(), 0.0);
        assert_eq!(delay, Backoff::MAX);
        let started = Instant::now();
        {
            let waiting = wait_out(delay, &cache, &mut b, &shutdown);
            tokio::pin!(waiting);
            assert!(futures::poll!(&mut waiting).is_pending(), "it waits");
            tokio::time::advance(Duration::from_secs(1)).await;
            // The elector's Lease request got through after failing.
            cache.server_answered();
            assert!(waiting.await, "not a shutdown");
        }
        assert_eq!(started.elapsed(), Duration::from_secs(1), "the retry comes at once, not after 30 s");
        assert_eq!(b.next_delay(Instant::now(), 0.0), Backoff::INITIAL, "and the next outage starts over");
    }

    #[test]
    fn an_initial_pod_deleted_before_its_sync_keeps_its_mark_until_taken() {
        let cache = Cache::new();
        cache.apply(Event::Init, Relist::default());
        cache.apply(Event::InitApply(pod("a", "p", "u1", "1")), Relist::default());
        cache.apply(Event::InitDone, Relist::default());
        cache.apply(Event::Delete(pod("a", "p", "u1", "2")), Relist::default());
        cache.apply(Event::Apply(pod("a", "p", "u2", "3")), Relist::default()); // replaced under the same name
        let snap = cache.take(&key("a", "p"));
        assert_eq!(snap.initial, HashSet::from(["u1".to_string()]));
        assert_eq!(cache.held(), (0, 0), "nothing of it stays in memory");
    }

    #[test]
    fn a_relist_older_than_the_store_never_moves_a_pod_back() {
        let cache = Cache::new();
        cache.apply(Event::Init, Relist::default());
        cache.apply(Event::InitApply(pod("a", "p", "u1", "5")), Relist::default());
        cache.apply(Event::InitDone, Relist::default());
        cache.apply(Event::Apply(pod("a", "p", "u1", "9")), Relist::default());
        // A relist served by a cache that lags: p at 5 again, and q, which
        // that old list cannot know about yet, is another pod.
        cache.apply(Event::Init, Relist::default());
        cache.apply(Event::InitApply(pod("a", "p", "u1", "5")), Relist::default());
        cache.apply(Event::InitApply(pod("a", "q", "u2", "3")), Relist::default());
        cache.apply(Event::InitDone, Relist::default());
        let p = cache.take(&key("a", "p")).current.unwrap();
        assert_eq!(p.resource_version(), Some("9"), "the newer state we had is kept");
        assert!(cache.take(&key("a", "p")).tombstones.is_empty());
        // A newer listed state, or another pod under the name, is taken.
        cache.apply(Event::Init, Relist::default());
        cache.apply(Event::InitApply(pod("a", "p", "u1", "12")), Relist::default());
        cache.apply(Event::InitApply(pod("a", "q", "u3", "2")), Relist::default());
        cache.apply(Event::InitDone, Relist::default());
        assert_eq!(cache.take(&key("a", "p")).current.unwrap().resource_version(), Some("12"));
        assert_eq!(cache.take(&key("a", "q")).current.unwrap().uid(), Some("u3"));
        // resourceVersions that are not numbers are never compared.
        assert!(!newer_or_same(&pod("a", "p", "u1", "b"), &pod("a", "p", "u1", "a")));
        assert!(newer_or_same(&pod("a", "p", "u1", "b"), &pod("a", "p", "u1", "b")), "the same version");
        assert!(newer_or_same(&pod("a", "p", "u1", "10"), &pod("a", "p", "u1", "9")), "numbers, not strings");
    }

    /// A relist of 100,000 pods must not hold a second copy of each until
    /// its end: a listed pod at the version the store holds is the store's.
    #[test]
    fn a_relist_keeps_one_copy_of_a_pod_that_did_not_change() {
        let cache = Cache::new();
        cache.apply(Event::Init, Relist::default());
        cache.apply(Event::InitApply(pod("a", "same", "u1", "5")), Relist::default());
        cache.apply(Event::InitApply(pod("a", "moved", "u2", "6")), Relist::default());
        cache.apply(Event::InitDone, Relist::default());
        let before = |name| cache.take(&key("a", name)).current.unwrap();
        let (same, moved) = (before("same"), before("moved"));
        cache.apply(Event::Init, Relist::default());
        cache.apply(Event::InitApply(pod("a", "same", "u1", "5")), Relist::default());
        cache.apply(Event::InitApply(pod("a", "moved", "u2", "7")), Relist::default());
        cache.apply(Event::InitDone, Relist::default());
        assert!(Arc::ptr_eq(&cache.take(&key("a", "same")).current.unwrap(), &same), "the one copy is kept");
        let now = cache.take(&key("a", "moved")).current.unwrap();
        assert!(!Arc::ptr_eq(&now, &moved) && now.resource_version() == Some("7"));
        // The keys the store, the queue and the worker hold share their text.
        let keys = cache.keys();
        let queued = cache.apply(Event::Apply(pod("a", "same", "u1", "8")), Relist::default());
        let stored = keys.iter().find(|k| *k == &queued[0]).unwrap();
        assert!(Arc::ptr_eq(&queued[0].name, &stored.name) && Arc::ptr_eq(&queued[0].namespace, &stored.namespace));
    }

    #[test]
    fn a_released_key_frees_its_tombstones_and_initial_marks() {
        let cache = Cache::new();
        cache.apply(Event::Init, Relist::default());
        cache.apply(Event::InitApply(pod("a", "p", "u1", "1")), Relist::default());
        cache.apply(Event::InitApply(pod("a", "q", "u2", "1")), Relist::default());
        cache.apply(Event::InitDone, Relist::default());
        cache.apply(Event::Delete(pod("a", "p", "u1", "2")), Relist::default());
        assert_eq!(cache.held(), (1, 2));
        cache.release(&key("a", "p"));
        assert_eq!(cache.held(), (0, 1), "q keeps its mark");
        cache.release(&key("a", "q"));
        assert_eq!(cache.held(), (0, 0));
    }

    #[test]
    fn a_410_in_every_form_is_an_expiry() {
        let gone = || kube::core::Status { code: 410, ..Default::default() };
        let api = || kube::Error::Api(gone().boxed());
        assert!(expired(&watcher::Error::WatchError(Box::new(gone()))));
        assert!(expired(&watcher::Error::WatchStartFailed(api())), "at watch start: kube would retry forever");
        assert!(expired(&watcher::Error::WatchFailed(api())));
        assert!(expired(&watcher::Error::InitialListFailed(api())), "a paged list's expired continue token");
        let forbidden = kube::Error::Api(kube::core::Status { code: 403, ..Default::default() }.boxed());
        assert!(!expired(&watcher::Error::InitialListFailed(forbidden)));
    }

    #[test]
    fn errors_that_send_the_watcher_back_to_empty_are_known() {
        let api = |code: u16| kube::Error::Api(kube::core::Status { code, ..Default::default() }.boxed());
        let refused = crate::wire::tests::refused_frame;
        // Whatever the mode: a watch event without a resourceVersion, a
        // failed page, a 410, a refused protobuf frame.
        for streaming in [false, true] {
            assert!(leaves_empty(&watcher::Error::NoResourceVersion, streaming, true));
            assert!(leaves_empty(&watcher::Error::InitialListFailed(api(500)), streaming, true));
            assert!(leaves_empty(
                &watcher::Error::WatchError(Box::new(kube::core::Status::failure("", "").with_code(410))),
                streaming,
                true
            ));
            assert!(leaves_empty(&watcher::Error::WatchFailed(refused()), streaming, true));
            // A watch that resumes stays where it was.
            assert!(!leaves_empty(&watcher::Error::WatchStartFailed(api(500)), streaming, true));
            assert!(!leaves_empty(&watcher::Error::WatchFailed(api(500)), streaming, true));
        }
        // The watch that carries a streaming list, before it finished.
        assert!(leaves_empty(&watcher::Error::WatchStartFailed(api(500)), true, false));
    }

    #[test]
    fn a_410_relists_at_once_but_a_410_after_nothing_backs_off() {
        let (mut expiries, mut backoff, now) = (Expiries::default(), Backoff::default(), Instant::now());
        assert_eq!(expiries.next_relist(&mut backoff, now, 0.0), None, "routine: relist at once");
        // The relist's own list and InitDone are not progress...
        expiries.track(&Event::Init);
        expiries.track(&Event::InitDone);
        // ... so a 410 right after it (the watch cannot even start) waits, longer each time.
        assert_eq!(expiries.next_relist(&mut backoff, now, 0.0), Some(Backoff::INITIAL));
        assert_eq!(expiries.next_relist(&mut backoff, now, 0.0), Some(Backoff::INITIAL * 2));
        // A change through the watch: the next 410 is routine again.
        expiries.track(&Event::Apply(pod("a", "p", "u1", "9")));
        assert_eq!(expiries.next_relist(&mut backoff, now, 0.0), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_long_list_counts_its_pods_and_reports_only_when_long() {
        let mut list = ListProgress::default();
        list.report();
        assert!(!list.reported, "no list running");
        list.track(&Event::Init);
        list.track(&Event::InitApply(pod("a", "p", "u1", "1")));
        list.track(&Event::InitApply(pod("a", "q", "u2", "1")));
        list.report();
        assert!(!list.reported, "a short list says nothing");
        tokio::time::advance(PROGRESS_EVERY).await;
        list.report();
        assert_eq!((list.reported, list.pods), (true, 2));
        // The list starts over (a cut stream): the count restarts, the clock does not.
        list.track(&Event::Init);
        assert_eq!((list.pods, list.elapsed()), (0, PROGRESS_EVERY));
        list.track(&Event::InitDone);
        assert!(list.started.is_none() && !list.reported);
    }

    #[test]
    fn a_status_that_could_not_be_read_keeps_the_one_before() {
        use crate::text::{Text, Word};
        let cache = Cache::new();
        let mut running = pod("a", "p", "u1", "1");
        running.status = Some(crate::pod::Status { phase: Some(Word::new("Running")), ..Default::default() });
        cache.apply(Event::Init, Relist::default());
        cache.apply(Event::InitApply(running.clone()), Relist::default());
        cache.apply(Event::InitDone, Relist::default());
        let mut unreadable = pod("a", "p", "u1", "2");
        unreadable.unreadable_status = Some(Text::new("bad protobuf in the PodStatus at byte 0"));
        cache.apply(Event::Apply(unreadable.clone()), Relist::default());
        let kept = cache.take(&key("a", "p")).current.unwrap();
        assert_eq!(kept.resource_version(), Some("2"), "the rest of the update is taken");
        assert_eq!(kept.status, running.status, "the status it had is kept");
        assert_eq!(kept.unreadable_status, None);
        assert_eq!(cache.held(), (0, 0), "no tombstone, and the initial mark went with the take");
        assert!(cache.lock().unreadable.contains(&key("a", "p")), "said once, until it reads again");
        cache.apply(Event::Apply(pod("a", "p", "u1", "3")), Relist::default());
        assert!(cache.lock().unreadable.is_empty());
    }

    #[test]
    fn an_error_page_reaches_a_line_cleaned_and_cut() {
        let page = format!("<html>\n<body>\u{1b}[31mBad Gateway\r\n{}</body>", "x".repeat(1 << 20));
        let status = kube::core::Status::failure(&page, "Bad\nGateway").with_code(502);
        let line = crate::client::describe(&watcher::Error::InitialListFailed(kube::Error::Api(status.boxed())));
        assert!(line.starts_with(r"listing pods failed: <html>\n<body>\u{1b}[31mBad Gateway\r\nxxx"), "{line}");
        assert!(line.ends_with(&format!(r"…(cut, {} bytes) (Bad\nGateway, 502)", page.trim().len())), "{line}");
        assert!(!line.chars().any(char::is_control) && line.chars().count() < 300, "{line}");
    }

    #[test]
    fn a_tombstone_that_arrives_after_a_take_waits_for_the_next() {
        let cache = Cache::new();
        cache.apply(Event::Init, Relist::default());
        cache.apply(Event::InitDone, Relist::default());
        cache.apply(Event::Delete(pod("a", "p", "u1", "2")), Relist::default());
        assert_eq!(cache.take(&key("a", "p")).tombstones.len(), 1);
        cache.apply(Event::Delete(pod("a", "p", "u2", "5")), Relist::default());
        let next = cache.take(&key("a", "p"));
        assert_eq!(next.tombstones.len(), 1);
        assert_eq!(next.tombstones[0].pod.uid(), Some("u2"));
    }
}
