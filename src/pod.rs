//! What of a pod we keep, and what we show.
//!
//! Two small decisions every pod logger makes: which fields are worth their
//! memory in the cache (`Pod`), and which ones a line about the pod should
//! carry and compare (`PodState`).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::ResourceExt;
use serde::{Deserialize, Deserializer};

/// A pod as the cache keeps it: only the fields the log lines use.
///
/// Why not k8s-openapi's `Pod`? It takes 2.4 KiB before a single string is
/// stored (its spec and status are inline, even when empty), and parsing it
/// allocates every field the API server sends, `managedFields` included, only
/// for us to drop them. serde skips the fields a type does not declare without
/// allocating them, so declaring just what we log is "prune before the store"
/// done once, at parse time: nothing unused ever reaches the cache.
///
/// It is still a Kubernetes resource to kube (see the two trait impls below),
/// so `Api<Pod>`, the watcher and the reflector `Store` work as usual.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Pod {
    #[serde(deserialize_with = "kept_metadata")]
    pub metadata: ObjectMeta,
    pub spec: Option<Spec>,
    pub status: Option<Status>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Spec {
    pub node_name: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    pub phase: Option<String>,
    pub container_statuses: Option<Vec<ContainerStatus>>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStatus {
    pub ready: bool,
    pub restart_count: i32,
}

/// The metadata we keep: what identifies the pod (name, namespace, uid,
/// resourceVersion) and what the log shows (labels, deletionTimestamp).
/// `managedFields`, annotations, owners and the rest are skipped unparsed.
fn kept_metadata<'de, D: Deserializer<'de>>(deserializer: D) -> Result<ObjectMeta, D::Error> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Kept {
        name: Option<String>,
        namespace: Option<String>,
        uid: Option<String>,
        resource_version: Option<String>,
        labels: Option<BTreeMap<String, String>>,
        deletion_timestamp: Option<Time>,
    }
    let m = Kept::deserialize(deserializer)?;
    Ok(ObjectMeta {
        name: m.name,
        namespace: m.namespace,
        uid: m.uid,
        resource_version: m.resource_version,
        labels: m.labels,
        deletion_timestamp: m.deletion_timestamp,
        ..ObjectMeta::default()
    })
}

impl k8s_openapi::Resource for Pod {
    const API_VERSION: &'static str = "v1";
    const GROUP: &'static str = "";
    const KIND: &'static str = "Pod";
    const VERSION: &'static str = "v1";
    const URL_PATH_SEGMENT: &'static str = "pods";
    type Scope = k8s_openapi::NamespaceResourceScope;
}

impl k8s_openapi::Metadata for Pod {
    type Ty = ObjectMeta;
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
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

    #[test]
    fn parsing_keeps_what_the_log_shows_and_nothing_else() {
        // A pod as the API server sends it, trimmed but with the heavy parts.
        let json = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "p", "namespace": "a", "uid": "u1", "resourceVersion": "7",
                "labels": {"app": "web"},
                "annotations": {"big": "x".repeat(4096)},
                "deletionTimestamp": "2026-11-21T15:00:00Z",
                "managedFields": [{"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:metadata": {}}}],
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r", "uid": "o"}]
            },
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "registry/image:tag"}]},
            "status": {
                "phase": "Running", "hostIP": "10.0.0.1",
                "containerStatuses": [{"name": "c", "image": "registry/image:tag", "imageID": "sha256:1",
                                       "ready": true, "restartCount": 2, "state": {"running": {}}}]
            }
        });
        let p: Pod = serde_json::from_value(json).unwrap();
        assert_eq!((p.name_any(), p.namespace().as_deref(), p.uid().as_deref()), ("p".into(), Some("a"), Some("u1")));
        assert_eq!(p.resource_version().as_deref(), Some("7"));
        assert_eq!(p.labels().get("app").map(String::as_str), Some("web"));
        assert!(p.metadata.deletion_timestamp.is_some());
        assert!(p.metadata.annotations.is_none() && p.metadata.managed_fields.is_none());
        assert!(p.metadata.owner_references.is_none());
        assert_eq!(p.spec.as_ref().unwrap().node_name.as_deref(), Some("n1"));
        let status = p.status.as_ref().unwrap();
        assert_eq!(status.phase.as_deref(), Some("Running"));
        let c = &status.container_statuses.as_ref().unwrap()[0];
        assert_eq!((c.ready, c.restart_count), (true, 2));
        let state = PodState::of(&p);
        assert_eq!((state.ready, state.containers, state.restarts, state.terminating), (1, 1, 2, true));
    }

    #[test]
    fn a_pod_with_neither_spec_nor_status_parses() {
        let p: Pod = serde_json::from_str(r#"{"metadata": {"name": "p", "namespace": "a"}}"#).unwrap();
        assert_eq!(PodState::of(&p).phase, "Unknown");
    }

    #[test]
    fn the_slim_pod_is_a_fraction_of_k8s_openapis() {
        let slim = std::mem::size_of::<Pod>();
        let full = std::mem::size_of::<k8s_openapi::api::core::v1::Pod>();
        assert!(slim * 4 < full, "slim {slim} B vs full {full} B");
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
