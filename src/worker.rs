//! The sync handler: decide what happened to one pod and log it.
//!
//! The queue only says "something about `namespace/name` may have changed".
//! The worker is *level-driven*: it compares the pod in the cache now with the
//! pod it last synced for that key, and logs the difference. It never trusts
//! an event's kind (add, update, delete), because dedup merges events and a
//! relist or resync replays them; a comparison of states is always right.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kube::api::{ListParams, VersionMatch};
use kube::{Api, ResourceExt};
use tracing::{debug, warn};

use crate::informer::{Cache, Relist, Snapshot, Tombstone};
use crate::key::Key;
use crate::leader::{Seen, Verdict};
pub use crate::line::Change;
use crate::line::log;
use crate::pod::{ApiPod, Pod, PodState};
use crate::text::cleaned;

// ANCHOR: decide
/// The decision, as a pure function: given what we last synced for a key, the
/// final states of pods that have left the cache since (tombstones), and what
/// the cache holds now, say what happened, oldest first.
pub fn decide(last: Option<&PodState>, tombstones: &[PodState], current: Option<&PodState>) -> Vec<Change> {
    let mut changes = Vec::new();
    let mut last = last.cloned();
    for gone in tombstones {
        if current.is_some_and(|c| c.uid == gone.uid) {
            continue; // an old tombstone of a pod that is back in the cache
        }
        match last.take() {
            // The pod we logged is gone: log it with its final state.
            Some(l) if l.uid == gone.uid => changes.push(Change::Delete(gone.clone())),
            // A pod we never saw lived and died between two syncs of this key:
            // dedup must not swallow its life.
            other => {
                changes.extend(other.map(Change::Delete));
                changes.push(Change::Add(gone.clone()));
                changes.push(Change::Delete(gone.clone()));
            }
        }
    }
    match (last, current) {
        (None, Some(now)) => changes.push(Change::Add(now.clone())),
        (Some(old), None) => changes.push(Change::Delete(old)),
        // Same name, new UID: a different pod replaced the one we knew.
        (Some(old), Some(now)) if old.uid != now.uid => {
            changes.push(Change::Delete(old));
            changes.push(Change::Add(now.clone()));
        }
        (Some(old), Some(now)) if old.resource_version != now.resource_version => {
            changes.push(Change::Update { old, new: now.clone() });
        }
        // Same resourceVersion (a resync) or nothing at all: nothing to say.
        _ => {}
    }
    changes
}
// ANCHOR_END: decide

/// When `change` happened, for the leader election's gate: at its pod's
/// resourceVersion, but for a delete no DELETED event told. One a relist
/// found lies within that relist's bounds; one with no tombstone at all
/// (`decide` deletes a pod it remembers when the cache no longer has it,
/// after a key was given up on) is known only to come after the pod's last
/// change. An add or an update spans the events the sync took, from the
/// oldest (when the worker lags: a pod's creation, and its changes since).
/// (Here, not on the cache: it is the sync's question, asked of what it
/// took.)
fn seen(snapshot: &Snapshot, change: &Change) -> Seen {
    if let (Change::Add(_) | Change::Update { .. }, Some(first)) = (change, snapshot.first) {
        return Seen::Merged { first };
    }
    let Change::Delete(p) = change else { return Seen::AsItHappened };
    let of_it = |t: &&Tombstone| {
        t.pod.metadata.uid.as_deref() == Some(p.uid.as_str())
            && t.pod.metadata.resource_version.as_deref() == Some(p.resource_version.as_str())
    };
    let mut stones = snapshot.tombstones.iter().filter(of_it);
    match stones.clone().find(|t| t.from_event).or_else(|| stones.next()) {
        Some(t) if t.from_event => Seen::AsItHappened,
        Some(t) => Seen::Inferred(t.relist),
        None => Seen::Inferred(Relist::default()),
    }
}

/// One change as the sync logged it.
#[derive(Clone, Debug, PartialEq)]
pub struct Line {
    pub change: Change,
    /// The pod came in the first list (`initial_list=true`).
    pub initial: bool,
    /// Why, when the event's kind alone would mislead (see [`log`]).
    pub reason: Option<&'static str>,
    /// False when `--skip-existing` left it out, or the leader election
    /// (a standby, or a change the previous leader logged).
    pub shown: bool,
}

/// The syncHandler's state: the cache to read and what was last synced.
pub struct Worker {
    cache: Arc<Cache>,
    /// What we last synced per key (logged, or with `--skip-existing` only
    /// remembered for the pods of the first list). Workers share it, yet two never touch one
    /// key at once (the queue guarantees that), so a plain std mutex held for
    /// a lookup is all the coordination needed. It holds the cache's own
    /// `Arc`, not a copy: while a pod does not change, remembering it is free.
    last: Mutex<HashMap<Key, Arc<Pod>>>,
    /// With `--selector`: the API (not filtered by it) to ask whether a pod
    /// reported DELETED still exists, that is, left the selector.
    ///
    /// Everything about a pod leaving the selector lives here, in the worker:
    /// this question, its answer and [`LeftSelector`]. The cache records what
    /// the server said (a DELETED event, a pod a relist lacks) and cannot know
    /// why; only the sync knows which deletes it is about to log, so it asks
    /// for those, and it is the sync that must remember the answer until the
    /// pod's return, to say "now matches the selector" then.
    selector: Option<Api<ApiPod>>,
    /// Pods we logged as having left the selector, so that their return says
    /// "now matches the selector" rather than looking like a new pod.
    left: Mutex<LeftSelector>,
    skip_existing: bool,
    /// Whose lines these are, with `--leader-elect` (see leader.rs).
    pub gate: Arc<crate::leader::Gate>,
}

impl Worker {
    pub fn new(cache: Arc<Cache>, skip_existing: bool, selector: Option<Api<ApiPod>>) -> Worker {
        Worker {
            cache,
            last: Mutex::new(HashMap::new()),
            selector,
            left: Mutex::new(LeftSelector::default()),
            skip_existing,
            gate: crate::leader::Gate::leading(),
        }
    }

    /// client-go's syncHandler: bring the log up to date for `key`. Returns
    /// every change it found, and how each was logged (tests read it).
    ///
    /// It reads as a straight line: take what the cache holds for the key
    /// ([`Cache::take`]), compare it with what was last synced ([`decide`]),
    /// and write a line for each change. Nothing in it can fail: reading the
    /// cache and writing a line do not, and a question to the server that
    /// goes unanswered only makes a plain onDelete (see below). So it takes
    /// what it reads at once; [`Cache::take`] says when a sync must not.
    pub async fn sync(&self, key: &Key) -> Vec<Line> {
        // 1. Take what the cache holds for the key, and what we last synced.
        let snapshot = self.cache.take(key);
        let last = self.lock_last().get(key).cloned();
        // The common case of a resync: the same pod at the same resourceVersion
        // and nothing deleted meanwhile. Say so before allocating anything.
        if snapshot.tombstones.is_empty()
            && let (Some(pod), Some(seen)) = (&snapshot.current, &last)
            && pod.metadata.uid == seen.metadata.uid
            && pod.metadata.resource_version == seen.metadata.resource_version
        {
            // A relist may have put a copy of the same version in the cache:
            // remember the cache's, so that the two do not both stay.
            if !Arc::ptr_eq(pod, seen) {
                self.lock_last().insert(key.clone(), pod.clone());
            }
            debug!(%key, "no change (resync or a merged add+delete already logged)");
            return Vec::new();
        }
        // 2. Decide.
        let last = last.as_ref().map(PodState::of);
        let current = snapshot.current.as_ref().map(PodState::of);
        let tombstones: Vec<PodState> = snapshot.tombstones.iter().map(|t| PodState::of(&t.pod)).collect();
        let changes = decide(last.as_ref(), &tombstones, current.as_ref());
        // With a selector, a DELETED event may mean the pod was relabelled
        // out of it: ask the server, for the deletes we are about to log.
        let mut left = Vec::new();
        for t in snapshot.tombstones.iter().filter(|t| t.from_event && self.selector.is_some()) {
            let uid = t.pod.metadata.uid.as_deref().unwrap_or_default();
            let logged = changes.iter().any(|c| matches!(c, Change::Delete(p) if p.uid == uid));
            if !logged {
                continue;
            }
            // Not worth failing the sync for: without an answer the line is a
            // plain onDelete, which is what a relist would give too.
            match self.left_selector(&t.pod).await {
                Ok(true) => left.push((uid, t.pod.metadata.resource_version.as_deref().unwrap_or_default())),
                Ok(false) => {}
                Err(e) => {
                    // The server's (or a proxy's) words, cleaned for the line.
                    let e = e.to_string();
                    let e = cleaned(&e, 2 * crate::text::MESSAGE_CHARS);
                    warn!(%key, "cannot tell whether {key} was deleted or left the selector ({e}): a plain onDelete follows")
                }
            }
        }
        if changes.is_empty() {
            debug!(%key, "no change (resync or a merged add+delete already logged)");
        }
        // 3. Log each change, then remember what was synced.
        let mut lines = Vec::with_capacity(changes.len());
        for change in changes {
            let reason = match &change {
                Change::Delete(p) if left.contains(&(p.uid.as_str(), p.resource_version.as_str())) => {
                    self.lock_left().insert(key, &p.uid);
                    Some(LEFT_SELECTOR)
                }
                Change::Add(p) if self.lock_left().returned(key, &p.uid) => Some(BACK_IN_SELECTOR),
                _ => None,
            };
            let initial = matches!(&change, Change::Add(p) if snapshot.initial.contains(&p.uid));
            // With --leader-elect, the gate says whose line it is (leader.rs),
            // by when the change happened: a delete a relist inferred is not
            // at its pod's resourceVersion, but somewhere after it.
            let seen = seen(&snapshot, &change);
            let verdict = match initial && self.skip_existing {
                true => Verdict::Silent,
                false => self.gate.admit(key, &change, seen, initial, reason),
            };
            let shown = verdict != Verdict::Silent;
            if shown {
                log(key, &change, initial, reason, (verdict == Verdict::Replayed).then_some(true));
            }
            lines.push(Line { change, initial, reason, shown });
        }
        let mut last = self.lock_last();
        match snapshot.current {
            Some(now) => last.insert(key.clone(), now),
            None => last.remove(key),
        };
        lines
    }

    /// Whether the pod of a DELETED event still exists: then it left the
    /// selector rather than being deleted. One LIST of that name, made before
    /// the onDelete is logged (without an answer it is a plain one).
    ///
    /// It asks for a list *not older than the DELETED event's
    /// resourceVersion*. The API server's watch cache can answer that (it
    /// waits, briefly, until it has caught up to that version), so a mass
    /// relabel costs the server cache reads, not one etcd read per pod; and
    /// the answer is never older than the event, so a pod deleted since is
    /// never reported as still there.
    async fn left_selector(&self, pod: &Pod) -> Result<bool, kube::Error> {
        let Some(api) = self.selector.clone() else { return Ok(false) };
        let namespace = pod.namespace().unwrap_or_default();
        let api = Api::<ApiPod>::namespaced(api.into_client(), namespace);
        // A LIST narrowed to the one name, not a GET: the same answer, and it
        // needs only the `list` verb the informer already has, so the
        // manifest's RBAC stays list + watch.
        let mut by_name = ListParams::default().fields(&format!("metadata.name={}", pod.name()));
        if let Some(rv) = pod.resource_version() {
            by_name = by_name.at(rv).matching(VersionMatch::NotOlderThan);
        }
        let now = api.list_metadata(&by_name).await?;
        Ok(now.items.iter().any(|now| now.uid().as_deref() == pod.uid()))
    }

    fn lock_last(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Arc<Pod>>> {
        self.last.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn lock_left(&self) -> std::sync::MutexGuard<'_, LeftSelector> {
        self.left.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

const LEFT_SELECTOR: &str = "no longer matches the selector";
const BACK_IN_SELECTOR: &str = "now matches the selector";

/// The pods that left the selector, by key (with their UID). A pod that left
/// and was then deleted is never heard of again (it is outside what we
/// watch), so this is capped: past [`LeftSelector::CAP`] the oldest entry is
/// forgotten, and that pod's return would be logged as a plain onAdd.
#[derive(Default)]
struct LeftSelector {
    uids: HashMap<Key, String>,
    order: std::collections::VecDeque<Key>,
}

impl LeftSelector {
    const CAP: usize = 10_000;

    fn insert(&mut self, key: &Key, uid: &str) {
        if self.uids.insert(key.clone(), uid.to_string()).is_none() {
            self.order.push_back(key.clone());
        }
        while self.order.len() > LeftSelector::CAP {
            if let Some(old) = self.order.pop_front() {
                self.uids.remove(&old);
            }
        }
    }

    /// Whether the pod `uid` under `key` had left the selector (and forget it).
    fn returned(&mut self, key: &Key, uid: &str) -> bool {
        if self.uids.get(key).is_some_and(|u| u == uid) {
            self.uids.remove(key);
            self.order.retain(|k| k != key);
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::informer::Relist;
    use crate::informer::tests::pod;
    use kube::runtime::watcher::Event;

    fn state(uid: &str, rv: &str) -> PodState {
        PodState { uid: uid.into(), resource_version: rv.into(), phase: "Pending".into(), ..Default::default() }
    }

    /// The gate's question, when did a change happen, answered from the
    /// tombstones: a DELETED event's delete is at its own resourceVersion; a
    /// relist's, within that relist's bounds; a delete with no tombstone
    /// (the worker remembers a pod the cache no longer has) is known only
    /// to come after the pod's last change.
    #[test]
    fn a_delete_is_at_its_version_only_when_an_event_told_it() {
        use crate::pod::PodState;
        let cache = Cache::new();
        let key = |ns: &str, name: &str| Key { namespace: ns.into(), name: name.into() };
        cache.apply(Event::Init, Relist::default());
        cache.apply(Event::InitApply(pod("a", "listed", "u1", "1")), Relist::default());
        cache.apply(Event::InitDone, Relist::default());
        cache.apply(Event::Apply(pod("a", "watched", "u2", "2")), Relist::default());
        cache.apply(Event::Delete(pod("a", "watched", "u2", "3")), Relist::default());
        cache.apply(Event::Init, Relist::default());
        let relist = Relist { after: Some(3), by: Some(7) };
        cache.apply(Event::InitDone, relist);
        let delete = |name: &str, uid: &str, rv: &str| {
            let snapshot = cache.take(&key("a", name));
            let p = PodState::of(&Arc::new(pod("a", name, uid, rv)));
            seen(&snapshot, &Change::Delete(p))
        };
        assert_eq!(delete("watched", "u2", "3"), Seen::AsItHappened);
        assert_eq!(delete("listed", "u1", "1"), Seen::Inferred(relist));
        assert_eq!(delete("forgotten", "u9", "5"), Seen::Inferred(Relist::default()));
        let snapshot = cache.take(&key("a", "new"));
        assert_eq!(
            seen(&snapshot, &Change::Add(PodState::of(&Arc::new(pod("a", "new", "u3", "8"))))),
            Seen::AsItHappened
        );
    }

    /// A worker that lags adds a pod at the version its sync finds: the add
    /// spans the pod's events from the oldest the sync took (its creation).
    #[test]
    fn a_lagging_add_spans_the_events_from_the_pods_creation() {
        use crate::pod::PodState;
        let cache = Cache::new();
        let key = Key { namespace: "a".into(), name: "p".into() };
        cache.apply(Event::Init, Relist::default());
        cache.apply(Event::InitDone, Relist::default());
        cache.apply(Event::Apply(pod("a", "p", "u1", "4")), Relist::default());
        cache.apply(Event::Apply(pod("a", "p", "u1", "6")), Relist::default());
        cache.apply(Event::Delete(pod("a", "p", "u1", "9")), Relist::default());
        let snapshot = cache.take(&key);
        let gone = PodState::of(&Arc::new(pod("a", "p", "u1", "9")));
        assert_eq!(seen(&snapshot, &Change::Add(gone.clone())), Seen::Merged { first: 4 });
        assert_eq!(seen(&snapshot, &Change::Delete(gone)), Seen::AsItHappened, "a delete is at its event");
        // The next sync's events begin after what this one took: an update
        // spans them only.
        cache.apply(Event::Apply(pod("a", "p", "u2", "12")), Relist::default());
        cache.take(&key);
        cache.apply(Event::Apply(pod("a", "p", "u2", "14")), Relist::default());
        let snapshot = cache.take(&key);
        let (old, new) =
            (PodState::of(&Arc::new(pod("a", "p", "u2", "12"))), PodState::of(&Arc::new(pod("a", "p", "u2", "14"))));
        assert_eq!(seen(&snapshot, &Change::Update { old, new }), Seen::Merged { first: 14 });
        assert_eq!(cache.take(&key).first, None, "taken once");
    }

    #[test]
    fn absent_then_present_is_an_add() {
        assert_eq!(decide(None, &[], Some(&state("u1", "1"))), vec![Change::Add(state("u1", "1"))]);
    }

    #[test]
    fn a_new_resource_version_is_an_update() {
        let (old, new) = (state("u1", "1"), state("u1", "2"));
        assert_eq!(decide(Some(&old), &[], Some(&new)), vec![Change::Update { old, new }]);
    }

    #[test]
    fn the_same_resource_version_is_nothing() {
        assert_eq!(decide(Some(&state("u1", "1")), &[], Some(&state("u1", "1"))), vec![]);
        assert_eq!(decide(None, &[], None), vec![]);
    }

    #[test]
    fn present_then_absent_is_a_delete() {
        assert_eq!(decide(Some(&state("u1", "1")), &[], None), vec![Change::Delete(state("u1", "1"))]);
    }

    #[test]
    fn a_delete_logs_the_final_state_once() {
        let last = state("u1", "1");
        let fin = state("u1", "3");
        assert_eq!(decide(Some(&last), std::slice::from_ref(&fin), None), vec![Change::Delete(fin)]);
    }

    #[test]
    fn a_new_uid_under_the_same_name_is_delete_then_add() {
        let (old, new) = (state("u1", "1"), state("u2", "5"));
        assert_eq!(decide(Some(&old), &[], Some(&new)), vec![Change::Delete(old), Change::Add(new)]);
    }

    #[test]
    fn a_pod_that_lived_and_died_between_syncs_is_still_logged() {
        let ghost = state("u1", "2");
        assert_eq!(
            decide(None, std::slice::from_ref(&ghost), None),
            vec![Change::Add(ghost.clone()), Change::Delete(ghost)]
        );
    }

    #[test]
    fn delete_recreate_delete_recreate_is_logged_in_order() {
        let (a, b, c) = (state("u1", "1"), state("u2", "4"), state("u3", "7"));
        let got = decide(Some(&a), &[a.clone(), b.clone()], Some(&c));
        assert_eq!(got, vec![Change::Delete(a), Change::Add(b.clone()), Change::Delete(b), Change::Add(c)]);
    }

    #[test]
    fn a_tombstone_of_a_pod_still_present_is_ignored() {
        let p = state("u1", "3");
        assert_eq!(decide(Some(&state("u1", "1")), &[state("u1", "2")], Some(&p)).len(), 1);
    }

    // The worker fed with synthetic watcher events through a real Store.

    fn key(name: &str) -> Key {
        Key { namespace: "ns".into(), name: name.into() }
    }

    fn synced(cache: &Cache, pods: Vec<Pod>) {
        cache.apply(Event::Init, Relist::default());
        for p in pods {
            cache.apply(Event::InitApply(p), Relist::default());
        }
        cache.apply(Event::InitDone, Relist::default());
    }

    fn kinds(lines: &[Line]) -> Vec<(&'static str, String)> {
        lines
            .iter()
            .map(|l| match &l.change {
                Change::Add(p) => ("onAdd", p.uid.clone()),
                Change::Update { new, .. } => ("onUpdate", new.uid.clone()),
                Change::Delete(p) => ("onDelete", p.uid.clone()),
            })
            .collect()
    }

    #[tokio::test]
    async fn worker_add_update_resync_delete() {
        let cache = Cache::new();
        let worker = Worker::new(cache.clone(), false, None);
        synced(&cache, vec![pod("ns", "p", "u1", "1")]);
        assert_eq!(kinds(&worker.sync(&key("p")).await), vec![("onAdd", "u1".into())]);
        let mut labelled = pod("ns", "p", "u1", "2");
        labelled.metadata.labels = crate::pod::Labels::new([("tier", "web")]);
        cache.apply(Event::Apply(labelled), Relist::default());
        let changes = worker.sync(&key("p")).await;
        assert_eq!(kinds(&changes), vec![("onUpdate", "u1".into())]);
        assert!(matches!(&changes[0].change, Change::Update { old, new } if old.diff(new).text() == "label +tier=web"));
        // A resync re-enqueues the key with nothing new: no line.
        assert!(worker.sync(&key("p")).await.is_empty());
        cache.apply(Event::Delete(pod("ns", "p", "u1", "3")), Relist::default());
        assert_eq!(kinds(&worker.sync(&key("p")).await), vec![("onDelete", "u1".into())]);
        assert!(worker.sync(&key("p")).await.is_empty(), "a delete is logged once");
    }

    #[tokio::test]
    async fn worker_logs_a_pod_created_and_deleted_before_its_sync() {
        let cache = Cache::new();
        let worker = Worker::new(cache.clone(), false, None);
        synced(&cache, vec![]);
        cache.apply(Event::Apply(pod("ns", "short", "u9", "5")), Relist::default());
        cache.apply(Event::Delete(pod("ns", "short", "u9", "6")), Relist::default());
        assert_eq!(kinds(&worker.sync(&key("short")).await), vec![("onAdd", "u9".into()), ("onDelete", "u9".into())]);
    }

    #[tokio::test]
    async fn worker_logs_deletes_found_by_a_relist_once() {
        let cache = Cache::new();
        let worker = Worker::new(cache.clone(), false, None);
        synced(&cache, vec![pod("ns", "a", "u1", "1"), pod("ns", "b", "u2", "1")]);
        worker.sync(&key("a")).await;
        worker.sync(&key("b")).await;
        // Relist: `a` vanished, `b` was replaced under the same name.
        synced(&cache, vec![pod("ns", "b", "u3", "9")]);
        assert_eq!(kinds(&worker.sync(&key("a")).await), vec![("onDelete", "u1".into())]);
        assert_eq!(kinds(&worker.sync(&key("b")).await), vec![("onDelete", "u2".into()), ("onAdd", "u3".into())]);
        assert!(worker.sync(&key("a")).await.is_empty() && worker.sync(&key("b")).await.is_empty());
    }

    #[tokio::test]
    async fn skip_existing_still_remembers_initial_pods() {
        let cache = Cache::new();
        let worker = Worker::new(cache.clone(), true, None);
        synced(&cache, vec![pod("ns", "p", "u1", "1")]);
        // The change is computed (and remembered) even though it is not logged...
        assert_eq!(kinds(&worker.sync(&key("p")).await), vec![("onAdd", "u1".into())]);
        // ... so a later update is an update, not an add.
        cache.apply(Event::Apply(pod("ns", "p", "u1", "2")), Relist::default());
        assert_eq!(kinds(&worker.sync(&key("p")).await), vec![("onUpdate", "u1".into())]);
    }
    #[tokio::test]
    async fn an_initial_pod_deleted_or_replaced_before_its_sync_stays_initial() {
        let cache = Cache::new();
        let worker = Worker::new(cache.clone(), true, None);
        synced(&cache, vec![pod("ns", "gone", "u1", "1"), pod("ns", "swapped", "u2", "1")]);
        cache.apply(Event::Delete(pod("ns", "gone", "u1", "2")), Relist::default());
        cache.apply(Event::Delete(pod("ns", "swapped", "u2", "2")), Relist::default());
        cache.apply(Event::Apply(pod("ns", "swapped", "u3", "3")), Relist::default());
        let gone = worker.sync(&key("gone")).await;
        assert_eq!(kinds(&gone), vec![("onAdd", "u1".into()), ("onDelete", "u1".into())]);
        assert!(gone[0].initial && !gone[0].shown, "--skip-existing leaves out the initial onAdd");
        let swapped = worker.sync(&key("swapped")).await;
        assert_eq!(kinds(&swapped), vec![("onAdd", "u2".into()), ("onDelete", "u2".into()), ("onAdd", "u3".into())]);
        let flags: Vec<(bool, bool)> = swapped.iter().map(|l| (l.initial, l.shown)).collect();
        assert_eq!(flags, vec![(true, false), (false, true), (false, true)]);
        assert_eq!(cache.held(), (0, 0), "nothing of them stays in memory");
    }

    #[test]
    fn a_pod_that_left_the_selector_is_remembered_until_it_returns() {
        let mut left = LeftSelector::default();
        left.insert(&key("p"), "u1");
        assert!(!left.returned(&key("p"), "u2"), "another pod under the same name did not return");
        assert!(left.returned(&key("p"), "u1"));
        assert!(!left.returned(&key("p"), "u1"), "said once");
        for i in 0..LeftSelector::CAP + 5 {
            left.insert(&key(&format!("p{i}")), "u");
        }
        assert_eq!((left.uids.len(), left.order.len()), (LeftSelector::CAP, LeftSelector::CAP));
        assert!(!left.returned(&key("p0"), "u"), "the oldest is forgotten past the cap");
    }
}
