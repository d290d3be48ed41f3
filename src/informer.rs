//! The informer: watch pods, keep a cache of them, and turn every change into
//! a `namespace/name` key for the work queue.
//!
//! This is what client-go's SharedIndexInformer + event handlers do, built from
//! kube-runtime's `watcher` (list, then watch, relist when needed) and a
//! reflector `Store` (the cache). We drive the store's `Writer` ourselves
//! instead of using `.reflect()`, because the moments the store changes are
//! exactly the moments we must react to: a relist swaps the whole store at
//! `InitDone`, and that is where we find the pods deleted while we were not
//! watching.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::pod::Pod;
use futures::StreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use kube::{Api, ResourceExt};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::key::Key;
use crate::queue::Queue;
use crate::{metrics, probes};

/// The cache: kube's reflector `Store` plus the two things a store forgets.
pub struct Cache {
    /// Read handle of the store. Workers read it through [`Cache::read`] only.
    store: Store<Pod>,
    inner: Mutex<Inner>,
}

/// Everything the informer writes, behind one lock. A worker reads the store
/// and the notes under this same lock, so it never sees a pod gone from the
/// store without also seeing its tombstone (which would log a delete twice).
struct Inner {
    writer: reflector::store::Writer<Pod>,
    /// Final states of pods that left the store and are not yet logged: from a
    /// Delete event, or found missing after a relist (client-go hands the
    /// latter to OnDelete as `DeletedFinalStateUnknown`). They let the worker
    /// log a pod that was created and deleted before it got to the key.
    tombstones: HashMap<Key, Vec<Arc<Pod>>>,
    /// UIDs of the pods in the first full list, so their onAdd can say so
    /// (and `--skip-existing` can leave them out). Drained as they are logged.
    initial: HashSet<String>,
    synced: bool,
}

/// What a worker sees for one key, taken in one consistent moment.
pub struct Snapshot {
    pub current: Option<Arc<Pod>>,
    pub tombstones: Vec<Arc<Pod>>,
    pub initial: bool,
}

impl Cache {
    pub fn new() -> Arc<Cache> {
        let (store, writer) = reflector::store();
        let inner = Inner { writer, tombstones: HashMap::new(), initial: HashSet::new(), synced: false };
        Arc::new(Cache { store, inner: Mutex::new(inner) })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The event handlers: apply one watcher event to the store and return the
    /// keys that need a sync.
    pub fn apply(&self, event: Event<Pod>) -> Vec<Key> {
        let mut inner = self.lock();
        match &event {
            // client-go's OnAdd *and* OnUpdate: the worker tells them apart.
            Event::Apply(pod) => {
                inner.writer.apply_watcher_event(&event);
                vec![Key::of(pod)]
            }
            Event::Delete(pod) => {
                inner.writer.apply_watcher_event(&event);
                inner.tombstones.entry(Key::of(pod)).or_default().push(Arc::new(pod.clone()));
                vec![Key::of(pod)]
            }
            // A (re)list is starting, or a page of it arrived. The store only
            // swaps to the new list at InitDone, so a worker syncing one of
            // these keys now would read the *old* state: enqueue nothing yet.
            Event::Init | Event::InitApply(_) => {
                inner.writer.apply_watcher_event(&event);
                Vec::new()
            }
            Event::InitDone => {
                let before = self.store.state();
                inner.writer.apply_watcher_event(&event);
                let now: HashMap<Key, Option<String>> =
                    self.store.state().iter().map(|pod| (Key::of(pod), pod.uid())).collect();
                // Pods we knew that the new list lacks (or holds under a new
                // UID) were deleted while we were not watching: tombstones.
                for old in before {
                    let key = Key::of(&old);
                    if now.get(&key) != Some(&old.uid()) {
                        inner.tombstones.entry(key).or_default().push(old);
                    }
                }
                metrics::relisted();
                if !inner.synced {
                    inner.synced = true;
                    inner.initial = now.values().flatten().cloned().collect();
                }
                let mut keys: Vec<Key> = now.into_keys().collect();
                keys.extend(inner.tombstones.keys().cloned());
                keys
            }
        }
    }

    /// Everything the worker needs for `key`; takes (consumes) the key's
    /// tombstones and initial-list mark.
    pub fn read(&self, key: &Key) -> Snapshot {
        let mut inner = self.lock();
        let current = self.store.get(&ObjectRef::new(&key.name).within(&key.namespace));
        let tombstones = inner.tombstones.remove(key).unwrap_or_default();
        let initial = match current.as_ref().and_then(|pod| pod.uid()) {
            Some(uid) => inner.initial.remove(&uid),
            None => false,
        };
        Snapshot { current, tombstones, initial }
    }

    /// The store's read handle: for WaitForCacheSync, resync and counting.
    pub fn store(&self) -> &Store<Pod> {
        &self.store
    }
}

/// Runs the watch until `shutdown`: list, watch, relist on expiry, and hand
/// every changed key to the queue.
///
/// A watch error never ends the program: it is logged with the server's
/// reason and retried. We back off ourselves, because kube's
/// `default_backoff()` resets on every `Ok` and the watcher yields `Ok(Init)`
/// before each list attempt, so a LIST that keeps failing (a 403, say) would
/// be retried about once a second forever.
pub async fn run(
    api: Api<Pod>,
    config: watcher::Config,
    cache: Arc<Cache>,
    queue: Arc<Queue<Key>>,
    shutdown: CancellationToken,
) {
    let _running = probes::watch_running(); // for /healthz, until we return
    let mut events = std::pin::pin!(watcher::watcher(api, config));
    let mut backoff = Backoff::default();
    loop {
        let next = tokio::select! {
            _ = shutdown.cancelled() => return,
            next = events.next() => next,
        };
        match next {
            Some(Ok(event)) => {
                // Only real progress proves the server works again.
                if matches!(event, Event::Apply(_) | Event::Delete(_) | Event::InitDone) {
                    backoff.reset();
                    probes::watch_error(None);
                }
                queue.add_all(cache.apply(event));
                metrics::cache_pods(cache.store().len());
            }
            Some(Err(error)) => {
                let (delay, reason) = (backoff.next_delay(), crate::client::describe(&error));
                warn!(retry_in = ?delay, "watch failed: {reason}; retrying in {delay:?}");
                metrics::watch_error();
                probes::watch_error(Some(reason));
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(delay) => {}
                }
            }
            None => {
                debug!("watch stream ended");
                return;
            }
        }
    }
}

/// client-go's reflector backoff: 800 ms doubling up to 30 s.
struct Backoff(Duration);

impl Default for Backoff {
    fn default() -> Self {
        Backoff(Duration::from_millis(800))
    }
}

impl Backoff {
    fn next_delay(&mut self) -> Duration {
        let delay = self.0;
        self.0 = (self.0 * 2).min(Duration::from_secs(30));
        delay
    }
    fn reset(&mut self) {
        *self = Backoff::default();
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use kube::api::ObjectMeta;

    pub(crate) fn pod(ns: &str, name: &str, uid: &str, rv: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                uid: Some(uid.into()),
                resource_version: Some(rv.into()),
                ..Default::default()
            },
            ..Default::default()
        }
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
        assert!(cache.apply(Event::Init).is_empty());
        assert!(cache.apply(Event::InitApply(pod("a", "p", "u1", "1"))).is_empty());
        // Before InitDone the store does not hold the list yet.
        assert!(cache.read(&key("a", "p")).current.is_none());
        assert_eq!(cache.apply(Event::InitDone), vec![key("a", "p")]);
        let snap = cache.read(&key("a", "p"));
        assert!(snap.current.is_some());
        assert!(snap.initial, "pods of the first list are marked initial");
        assert!(!cache.read(&key("a", "p")).initial, "the mark is taken once");
    }

    #[test]
    fn a_relist_finds_the_pods_deleted_while_not_watching() {
        let cache = Cache::new();
        cache.apply(Event::Init);
        cache.apply(Event::InitApply(pod("a", "gone", "u1", "1")));
        cache.apply(Event::InitApply(pod("a", "kept", "u2", "1")));
        cache.apply(Event::InitApply(pod("a", "recreated", "u3", "1")));
        cache.apply(Event::InitDone);
        // The connection drops; the relist lacks `gone` and holds `recreated` with a new UID.
        cache.apply(Event::Init);
        cache.apply(Event::InitApply(pod("a", "kept", "u2", "1")));
        cache.apply(Event::InitApply(pod("a", "recreated", "u4", "5")));
        let mut keys = cache.apply(Event::InitDone);
        keys.sort();
        keys.dedup();
        assert_eq!(keys, vec![key("a", "gone"), key("a", "kept"), key("a", "recreated")]);
        let gone = cache.read(&key("a", "gone"));
        assert!(gone.current.is_none());
        assert_eq!(gone.tombstones.len(), 1);
        assert_eq!(gone.tombstones[0].uid().as_deref(), Some("u1"));
        let recreated = cache.read(&key("a", "recreated"));
        assert_eq!(recreated.current.and_then(|p| p.uid()).as_deref(), Some("u4"));
        assert_eq!(recreated.tombstones[0].uid().as_deref(), Some("u3"));
        assert!(cache.read(&key("a", "kept")).tombstones.is_empty());
        assert!(!recreated.initial, "a pod from a later relist is not from the initial list");
    }

    #[test]
    fn a_delete_event_leaves_its_final_state_as_a_tombstone() {
        let cache = Cache::new();
        cache.apply(Event::Init);
        cache.apply(Event::InitDone);
        assert_eq!(cache.apply(Event::Apply(pod("a", "p", "u1", "2"))), vec![key("a", "p")]);
        assert_eq!(cache.apply(Event::Delete(pod("a", "p", "u1", "3"))), vec![key("a", "p")]);
        let snap = cache.read(&key("a", "p"));
        assert!(snap.current.is_none());
        assert_eq!(snap.tombstones[0].resource_version().as_deref(), Some("3"));
        assert!(cache.read(&key("a", "p")).tombstones.is_empty(), "tombstones are taken once");
    }

    #[test]
    fn backoff_grows_to_30s_and_resets() {
        let mut b = Backoff::default();
        let delays: Vec<u64> = (0..8).map(|_| b.next_delay().as_millis() as u64).collect();
        assert_eq!(delays, vec![800, 1600, 3200, 6400, 12800, 25600, 30000, 30000]);
        b.reset();
        assert_eq!(b.next_delay(), Duration::from_millis(800));
    }
}
