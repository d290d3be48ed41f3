//! What of a pod we keep, and what we show.
//!
//! Two small decisions every pod logger makes: which fields are worth their
//! memory in the cache (`prune`), and which ones a line about the pod should
//! carry and compare (`PodState`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodSpec, PodStatus};
use kube::ResourceExt;

/// Drops what we never log before it reaches the store: the cache then holds a
/// few hundred bytes per pod instead of several KiB (`managedFields` alone is
/// often half of a pod). Kept: name, namespace, uid and resourceVersion (the
/// cache and the worker need them) and every field the log lines show.
pub fn prune(pod: &mut Pod) {
    let meta = &mut pod.metadata;
    meta.managed_fields = None;
    meta.annotations = None;
    meta.owner_references = None;
    meta.finalizers = None;
    let node_name = pod.spec.as_mut().and_then(|spec| spec.node_name.take());
    pod.spec = Some(PodSpec { node_name, ..PodSpec::default() });
    if let Some(status) = pod.status.take() {
        let mut containers = status.container_statuses.unwrap_or_default();
        for c in &mut containers {
            // Keep name, ready and restartCount; drop image, state and the rest.
            *c = ContainerStatus {
                name: std::mem::take(&mut c.name),
                ready: c.ready,
                restart_count: c.restart_count,
                ..Default::default()
            };
        }
        pod.status = Some(PodStatus {
            phase: status.phase,
            container_statuses: Some(containers).filter(|c| !c.is_empty()),
            ..PodStatus::default()
        });
    }
}

/// The small summary of a pod that the worker remembers and compares. It is
/// copied out of the cache: the cache's `Arc<Pod>` is shared with the
/// informer and must never be changed (Rust enforces it, client-go only asks).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodState {
    pub uid: String,
    pub resource_version: String,
    pub phase: String,
    pub node: String,
    pub ready: usize,
    pub containers: usize,
    pub restarts: i64,
    pub labels: BTreeMap<String, String>,
    /// `deletionTimestamp` is set: the pod is being deleted (kubectl's
    /// "Terminating"); the API server removes it once its containers stopped.
    pub terminating: bool,
}

impl PodState {
    pub fn of(pod: &Pod) -> PodState {
        let status = pod.status.as_ref();
        let containers = status.and_then(|s| s.container_statuses.as_deref()).unwrap_or_default();
        PodState {
            uid: pod.uid().unwrap_or_default(),
            resource_version: pod.resource_version().unwrap_or_default(),
            phase: status.and_then(|s| s.phase.clone()).unwrap_or_else(|| "Unknown".into()),
            node: pod.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default(),
            ready: containers.iter().filter(|c| c.ready).count(),
            containers: containers.len(),
            restarts: containers.iter().map(|c| i64::from(c.restart_count)).sum(),
            labels: pod.labels().clone(),
            terminating: pod.metadata.deletion_timestamp.is_some(),
        }
    }

    /// What changed from `self` to `new`, for the onUpdate line.
    pub fn diff(&self, new: &PodState) -> String {
        let mut changes = Vec::new();
        if new.terminating && !self.terminating {
            changes.push("terminating".to_string());
        }
        if self.phase != new.phase {
            changes.push(format!("phase {} -> {}", self.phase, new.phase));
        }
        if self.node != new.node {
            changes.push(format!("node {} -> {}", or_none(&self.node), or_none(&new.node)));
        }
        if (self.ready, self.containers) != (new.ready, new.containers) {
            changes.push(format!("ready {}/{} -> {}/{}", self.ready, self.containers, new.ready, new.containers));
        }
        if self.restarts != new.restarts {
            changes.push(format!("restarts {} -> {}", self.restarts, new.restarts));
        }
        for (k, v) in &new.labels {
            match self.labels.get(k) {
                None => changes.push(format!("label +{k}={v}")),
                Some(old) if old != v => changes.push(format!("label {k}={old} -> {k}={v}")),
                Some(_) => {}
            }
        }
        for k in self.labels.keys().filter(|k| !new.labels.contains_key(*k)) {
            changes.push(format!("label -{k}"));
        }
        if changes.is_empty() {
            // Something we do not summarise (an annotation, a condition...).
            changes.push("other fields".into());
        }
        changes.join(", ")
    }
}

fn or_none(s: &str) -> &str {
    if s.is_empty() { "<none>" } else { s }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::informer::tests::pod;

    #[test]
    fn prune_keeps_what_the_log_shows_and_drops_the_rest() {
        let mut p = pod("a", "p", "u1", "7");
        p.metadata.labels = Some([("app".to_string(), "web".to_string())].into());
        p.metadata.annotations = Some([("big".to_string(), "x".repeat(4096))].into());
        p.metadata.managed_fields = Some(vec![Default::default()]);
        p.spec =
            Some(PodSpec { node_name: Some("n1".into()), containers: vec![Default::default()], ..Default::default() });
        p.status = Some(PodStatus {
            phase: Some("Running".into()),
            container_statuses: Some(vec![ContainerStatus {
                name: "c".into(),
                image: "registry/image:tag".into(),
                ready: true,
                restart_count: 2,
                ..Default::default()
            }]),
            host_ip: Some("10.0.0.1".into()),
            ..Default::default()
        });
        prune(&mut p);
        assert_eq!(p.uid().as_deref(), Some("u1"));
        assert_eq!(p.resource_version().as_deref(), Some("7"));
        assert_eq!(p.labels().get("app").map(String::as_str), Some("web"));
        assert!(p.metadata.annotations.is_none() && p.metadata.managed_fields.is_none());
        let spec = p.spec.as_ref().unwrap();
        assert_eq!(spec.node_name.as_deref(), Some("n1"));
        assert!(spec.containers.is_empty());
        let status = p.status.as_ref().unwrap();
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert!(status.host_ip.is_none());
        let c = &status.container_statuses.as_ref().unwrap()[0];
        assert_eq!((c.name.as_str(), c.ready, c.restart_count, c.image.as_str()), ("c", true, 2, ""));
    }

    #[test]
    fn diff_names_every_summarised_change() {
        let old = PodState {
            phase: "Pending".into(),
            containers: 1,
            labels: [("app".into(), "a".into()), ("gone".into(), "x".into())].into(),
            ..Default::default()
        };
        let new = PodState {
            phase: "Running".into(),
            node: "n1".into(),
            ready: 1,
            containers: 1,
            restarts: 2,
            labels: [("app".into(), "b".into()), ("tier".into(), "web".into())].into(),
            terminating: true,
            ..Default::default()
        };
        assert_eq!(
            old.diff(&new),
            "terminating, phase Pending -> Running, node <none> -> n1, ready 0/1 -> 1/1, restarts 0 -> 2, label app=a -> app=b, label +tier=web, label -gone"
        );
        assert_eq!(old.diff(&old), "other fields");
    }
}
