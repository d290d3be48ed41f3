//! The sync handler: decide what happened to one pod and log it.
//!
//! The queue only says "something about `namespace/name` may have changed".
//! The worker is *level-driven*: it compares the pod in the cache now with the
//! pod it last logged for that key, and logs the difference. It never trusts
//! an event's kind (add, update, delete), because dedup merges events and a
//! relist or resync replays them; a comparison of states is always right.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tracing::{debug, info};

use crate::informer::Cache;
use crate::key::Key;
use crate::pod::PodState;

/// One line of output, before it is logged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    Add(PodState),
    Update { old: PodState, new: PodState },
    Delete(PodState),
}

/// The decision, as a pure function: given what we last logged for a key, the
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

/// The syncHandler's state: the cache to read and what was last logged.
pub struct Worker {
    cache: Arc<Cache>,
    /// What we last logged per key. Workers share it, yet two never touch one
    /// key at once (the queue guarantees that), so a plain std mutex held for
    /// a lookup is all the coordination needed.
    last: Mutex<HashMap<Key, PodState>>,
    skip_existing: bool,
}

impl Worker {
    pub fn new(cache: Arc<Cache>, skip_existing: bool) -> Worker {
        Worker { cache, last: Mutex::new(HashMap::new()), skip_existing }
    }

    /// client-go's syncHandler: bring the log up to date for `key`. Returns
    /// what it logged (tests read it).
    pub fn sync(&self, key: &Key) -> Vec<Change> {
        let snapshot = self.cache.read(key);
        let mut last = self.last.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        // The common case of a resync: the same pod at the same resourceVersion
        // and nothing deleted meanwhile. Say so before allocating anything.
        if snapshot.tombstones.is_empty()
            && let (Some(pod), Some(seen)) = (&snapshot.current, last.get(key))
            && pod.metadata.uid.as_deref() == Some(seen.uid.as_str())
            && pod.metadata.resource_version.as_deref() == Some(seen.resource_version.as_str())
        {
            debug!(%key, "no change (resync or a merged add+delete already logged)");
            return Vec::new();
        }
        let current = snapshot.current.as_deref().map(PodState::of);
        let tombstones: Vec<PodState> = snapshot.tombstones.iter().map(|p| PodState::of(p)).collect();
        // Only the pod in the cache now can be one from the initial list.
        let initial_uid = current.as_ref().filter(|_| snapshot.initial).map(|p| p.uid.clone());
        let changes = decide(last.get(key), &tombstones, current.as_ref());
        match current {
            Some(now) => last.insert(key.clone(), now),
            None => last.remove(key),
        };
        drop(last);
        if changes.is_empty() {
            debug!(%key, "no change (resync or a merged add+delete already logged)");
        }
        for change in &changes {
            let initial = matches!(change, Change::Add(p) if Some(&p.uid) == initial_uid.as_ref());
            if !(initial && self.skip_existing) {
                log(key, change, initial);
            }
        }
        changes
    }
}

/// The classic line, `onAdd: default/kuard`, with structured fields.
fn log(key: &Key, change: &Change, initial: bool) {
    let (ns, name) = (key.namespace.as_str(), key.name.as_str());
    crate::metrics::event_logged(match change {
        Change::Add(_) => "onAdd",
        Change::Update { .. } => "onUpdate",
        Change::Delete(_) => "onDelete",
    });
    match change {
        Change::Add(p) if initial => {
            info!(namespace = ns, name, uid = p.uid, phase = p.phase, initial_list = true, "onAdd: {key}")
        }
        Change::Add(p) => info!(namespace = ns, name, uid = p.uid, phase = p.phase, "onAdd: {key}"),
        Change::Update { old, new } => {
            info!(namespace = ns, name, uid = new.uid, phase = new.phase, changes = old.diff(new), "onUpdate: {key}")
        }
        Change::Delete(p) => info!(namespace = ns, name, uid = p.uid, phase = p.phase, "onDelete: {key}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::informer::tests::pod;
    use crate::pod::Pod;
    use kube::runtime::watcher::Event;

    fn state(uid: &str, rv: &str) -> PodState {
        PodState { uid: uid.into(), resource_version: rv.into(), phase: "Pending".into(), ..Default::default() }
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
        cache.apply(Event::Init);
        for p in pods {
            cache.apply(Event::InitApply(p));
        }
        cache.apply(Event::InitDone);
    }

    fn kinds(changes: &[Change]) -> Vec<(&'static str, String)> {
        changes
            .iter()
            .map(|c| match c {
                Change::Add(p) => ("onAdd", p.uid.clone()),
                Change::Update { new, .. } => ("onUpdate", new.uid.clone()),
                Change::Delete(p) => ("onDelete", p.uid.clone()),
            })
            .collect()
    }

    #[test]
    fn worker_add_update_resync_delete() {
        let cache = Cache::new();
        let worker = Worker::new(cache.clone(), false);
        synced(&cache, vec![pod("ns", "p", "u1", "1")]);
        assert_eq!(kinds(&worker.sync(&key("p"))), vec![("onAdd", "u1".into())]);
        let mut labelled = pod("ns", "p", "u1", "2");
        labelled.metadata.labels = Some([("tier".to_string(), "web".to_string())].into());
        cache.apply(Event::Apply(labelled));
        let changes = worker.sync(&key("p"));
        assert_eq!(kinds(&changes), vec![("onUpdate", "u1".into())]);
        assert!(matches!(&changes[0], Change::Update { old, new } if old.diff(new) == "label +tier=web"));
        // A resync re-enqueues the key with nothing new: no line.
        assert!(worker.sync(&key("p")).is_empty());
        cache.apply(Event::Delete(pod("ns", "p", "u1", "3")));
        assert_eq!(kinds(&worker.sync(&key("p"))), vec![("onDelete", "u1".into())]);
        assert!(worker.sync(&key("p")).is_empty(), "a delete is logged once");
    }

    #[test]
    fn worker_logs_a_pod_created_and_deleted_before_its_sync() {
        let cache = Cache::new();
        let worker = Worker::new(cache.clone(), false);
        synced(&cache, vec![]);
        cache.apply(Event::Apply(pod("ns", "short", "u9", "5")));
        cache.apply(Event::Delete(pod("ns", "short", "u9", "6")));
        assert_eq!(kinds(&worker.sync(&key("short"))), vec![("onAdd", "u9".into()), ("onDelete", "u9".into())]);
    }

    #[test]
    fn worker_logs_deletes_found_by_a_relist_once() {
        let cache = Cache::new();
        let worker = Worker::new(cache.clone(), false);
        synced(&cache, vec![pod("ns", "a", "u1", "1"), pod("ns", "b", "u2", "1")]);
        worker.sync(&key("a"));
        worker.sync(&key("b"));
        // Relist: `a` vanished, `b` was replaced under the same name.
        synced(&cache, vec![pod("ns", "b", "u3", "9")]);
        assert_eq!(kinds(&worker.sync(&key("a"))), vec![("onDelete", "u1".into())]);
        assert_eq!(kinds(&worker.sync(&key("b"))), vec![("onDelete", "u2".into()), ("onAdd", "u3".into())]);
        assert!(worker.sync(&key("a")).is_empty() && worker.sync(&key("b")).is_empty());
    }

    #[test]
    fn skip_existing_still_remembers_initial_pods() {
        let cache = Cache::new();
        let worker = Worker::new(cache.clone(), true);
        synced(&cache, vec![pod("ns", "p", "u1", "1")]);
        // The change is computed (and remembered) even though it is not logged...
        assert_eq!(kinds(&worker.sync(&key("p"))), vec![("onAdd", "u1".into())]);
        // ... so a later update is an update, not an add.
        cache.apply(Event::Apply(pod("ns", "p", "u1", "2")));
        assert_eq!(kinds(&worker.sync(&key("p"))), vec![("onUpdate", "u1".into())]);
    }
}
