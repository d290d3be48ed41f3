//! What of a pod we keep, and what we show.
//!
//! Two small decisions every pod logger makes: which fields are worth their
//! memory in the cache (`Pod`), and which ones a line about the pod should
//! carry and compare (`PodState`). The words for a change are in describe.rs.

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde::de::{Error as _, IgnoredAny};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use crate::text::{NAME_CHARS, Text, Word, cleaned, shared_name};

/// A pod as the cache keeps it: only the fields the log lines use.
///
/// Why not k8s-openapi's `Pod`? It takes 2.4 KiB before a single string is
/// stored (its spec and status are inline, even when empty), and parsing it
/// allocates every field the API server sends, `managedFields` included, only
/// for us to drop them. serde skips the fields a type does not declare without
/// allocating them, so declaring just what we log is "prune before the store"
/// done once, at parse time: nothing unused ever reaches the cache.
///
/// Nor k8s-openapi's `ObjectMeta` (360 bytes inline, a `BTreeMap` node of
/// about 540 bytes for even one label): the cache holds one of these per pod,
/// so each field is kept in the fewest bytes it fits ([`Meta`]). kube's own
/// parts need an `ObjectMeta`; they read the pod as an [`ApiPod`].
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(from = "PodJson")]
pub struct Pod {
    pub metadata: Meta,
    pub spec: Option<Spec>,
    pub status: Option<Status>,
    /// A fingerprint of the metadata no line shows (see [`KeptMetadata`]):
    /// the one way to tell that an update changed, say, an annotation,
    /// without keeping the annotations.
    pub unshown_metadata: u64,
    /// Why the status in the bytes could not be read, when it could not (a
    /// protobuf status that does not decode: wire.rs). `status` is
    /// then None, and the informer puts back the status it had, saying so
    /// once (informer.rs, `Cache::apply`). Always None from JSON, where such a
    /// status fails the whole pod.
    pub unreadable_status: Option<Text>,
}

/// The metadata the cache keeps (see [`KeptMetadata`] for why these fields).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Meta {
    /// Shared by every pod of the namespace ([`shared_name`]).
    pub namespace: Option<Arc<str>>,
    /// Shared with the pod's [`Key`](crate::key::Key), once in the store.
    pub name: Option<Arc<str>>,
    pub uid: Option<Box<str>>,
    pub resource_version: Option<Box<str>>,
    pub generation: Option<i64>,
    pub labels: Labels,
    pub deletion_timestamp: Option<Time>,
    pub deletion_grace_period_seconds: Option<i64>,
}

impl Meta {
    /// How many bytes of text it holds.
    pub fn text_len(&self) -> usize {
        let texts = [self.namespace.as_deref(), self.name.as_deref(), self.uid.as_deref()];
        let texts = texts.into_iter().chain([self.resource_version.as_deref(), Some(&self.labels.0)]);
        texts.flatten().map(str::len).sum()
    }

    /// From the fields as parsed (JSON or protobuf), empty read as absent.
    pub fn new(
        namespace: Option<&str>,
        name: Option<&str>,
        uid: Option<&str>,
        resource_version: Option<&str>,
        labels: Labels,
    ) -> Meta {
        Meta {
            namespace: namespace.filter(|n| !n.is_empty()).map(shared_name),
            name: name.filter(|n| !n.is_empty()).map(Arc::from),
            uid: uid.filter(|u| !u.is_empty()).map(Box::from),
            resource_version: resource_version.filter(|v| !v.is_empty()).map(Box::from),
            labels,
            ..Meta::default()
        }
    }
}

/// A pod's labels in one allocation, in key order: `key NUL value NUL` for
/// each, where a `BTreeMap<String, String>` costs a node of about 540 bytes
/// and two strings per label. The API server allows no NUL in a label; one
/// from elsewhere is kept as U+FFFD, so the pairs never shift.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Labels(Box<str>);

impl Labels {
    pub fn new<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Labels {
        let mut sorted: Vec<(&str, &str)> = pairs.into_iter().collect();
        sorted.sort_unstable();
        let mut text = String::new();
        for (key, value) in sorted {
            for part in [key, value] {
                text.extend(part.chars().map(|c| if c == '\0' { '\u{FFFD}' } else { c }));
                text.push('\0');
            }
        }
        Labels(text.into_boxed_str())
    }

    /// Each label as (key, value), in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        let mut parts = self.0.split_terminator('\0');
        std::iter::from_fn(move || Some((parts.next()?, parts.next()?)))
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The pod as kube's JSON watcher and `Api` read it (`--wire json`, and the
/// one-name LIST of `--selector`): kube follows a watch by the objects'
/// `ObjectMeta`, so this one carries the few fields kube reads beside the
/// cache's [`Pod`], which the informer keeps ([`ApiPod::into_pod`]).
#[derive(Clone, Debug, Deserialize)]
#[serde(from = "PodJson")]
pub struct ApiPod {
    metadata: ObjectMeta,
    pod: Pod,
}

impl ApiPod {
    pub fn into_pod(self) -> Pod {
        self.pod
    }
}

impl From<PodJson> for ApiPod {
    fn from(p: PodJson) -> ApiPod {
        let metadata = ObjectMeta {
            name: p.metadata.name.clone(),
            namespace: p.metadata.namespace.clone(),
            uid: p.metadata.uid.clone(),
            resource_version: p.metadata.resource_version.clone(),
            ..ObjectMeta::default()
        };
        ApiPod { metadata, pod: Pod::from(p) }
    }
}

impl k8s_openapi::Resource for ApiPod {
    const API_VERSION: &'static str = "v1";
    const GROUP: &'static str = "";
    const KIND: &'static str = "Pod";
    const VERSION: &'static str = "v1";
    const URL_PATH_SEGMENT: &'static str = "pods";
    type Scope = k8s_openapi::NamespaceResourceScope;
}

impl k8s_openapi::Metadata for ApiPod {
    type Ty = ObjectMeta;
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl Pod {
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    pub fn namespace(&self) -> Option<&str> {
        self.metadata.namespace.as_deref()
    }

    pub fn uid(&self) -> Option<&str> {
        self.metadata.uid.as_deref()
    }

    pub fn resource_version(&self) -> Option<&str> {
        self.metadata.resource_version.as_deref()
    }

    pub fn labels(&self) -> &Labels {
        &self.metadata.labels
    }
}

/// The pod as it is parsed, before the metadata is split into the part we
/// keep and the fingerprint of the rest.
#[derive(Deserialize)]
struct PodJson {
    metadata: KeptMetadata,
    spec: Option<Spec>,
    #[serde(default, deserialize_with = "fingerprinted_status")]
    status: Option<Status>,
}

impl From<PodJson> for Pod {
    fn from(p: PodJson) -> Pod {
        let m = p.metadata;
        let unshown = (m.annotations, m.owner_references, m.finalizers);
        let labels = Labels::new(m.labels.iter().flatten().map(|(k, v)| (k.as_str(), v.as_str())));
        Pod {
            metadata: Meta {
                generation: m.generation,
                deletion_timestamp: m.deletion_timestamp,
                deletion_grace_period_seconds: m.deletion_grace_period_seconds,
                ..Meta::new(
                    m.namespace.as_deref(),
                    m.name.as_deref(),
                    m.uid.as_deref(),
                    m.resource_version.as_deref(),
                    labels,
                )
            },
            spec: p.spec,
            status: p.status,
            unshown_metadata: hash_of(&unshown),
            unreadable_status: None,
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct KeptMetadata {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    generation: Option<i64>,
    labels: Option<BTreeMap<String, String>>,
    deletion_timestamp: Option<Time>,
    annotations: Option<Fingerprint>,
    owner_references: Option<Fingerprint>,
    finalizers: Option<Fingerprint>,
    deletion_grace_period_seconds: Option<i64>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Spec {
    /// Shared by every pod on the node ([`shared_name`]).
    #[serde(default, deserialize_with = "shared")]
    pub node_name: Option<Arc<str>>,
}

fn shared<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Arc<str>>, D::Error> {
    let name = Option::<std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
    Ok(name.filter(|n| !n.is_empty()).map(|n| shared_name(&n)))
}

/// What `kubectl describe pod` shows of the status, and a fingerprint of the
/// whole of it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    /// Cleaned and cut as a [`Word`] (and shared: there are five phases), like
    /// every text from the server: one the server never sends cannot break a
    /// line or hold a megabyte in the cache.
    pub phase: Option<Word>,
    /// Why the whole pod stopped, when it did: `Evicted`, `DeadlineExceeded`...
    pub reason: Option<Word>,
    /// And in words: "The node was low on resource: memory. ..."
    pub message: Option<Text>,
    #[serde(default)]
    pub conditions: Conditions,
    /// The pod generation the kubelet has acted on: it follows `generation`
    /// after a spec change or the start of a delete.
    pub observed_generation: Option<i64>,
    /// `Box<[_]>` rather than `Vec`: a `Vec` parsed from JSON keeps the room
    /// it grew to (4 entries for 2 containers); a boxed slice is exact.
    #[serde(default, deserialize_with = "null_as_empty")]
    pub init_container_statuses: Box<[ContainerStatus]>,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub container_statuses: Box<[ContainerStatus]>,
    /// A hash of the status's whole JSON (see [`fingerprinted_status`]).
    #[serde(skip)]
    pub fingerprint: u64,
}

/// One container, as kubectl describe's "State" and "Last State" show it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStatus {
    /// Interned: `app` is one string for all the pods that have an `app`.
    pub name: Word,
    pub ready: bool,
    pub restart_count: i32,
    #[serde(default)]
    pub state: State,
    /// The state before the last restart: what a crash loop's exit code is in.
    #[serde(default)]
    pub last_state: State,
}

/// A container's state. Small on purpose: a running container (most of them)
/// costs the tag alone; waiting and terminated box their details, which only
/// the few containers in trouble pay for.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(from = "StateJson")]
pub enum State {
    /// No state reported (yet), or one this version does not know.
    #[default]
    Unknown,
    Waiting(Box<Waiting>),
    /// When it started is left out: a restart shows in the restart count.
    Running,
    Terminated(Box<Terminated>),
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Waiting {
    /// `ContainerCreating`, `CrashLoopBackOff`, `ErrImagePull`...
    pub reason: Option<Word>,
    /// "back-off 20s restarting failed container=...", cut and escaped.
    pub message: Option<Text>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Terminated {
    pub exit_code: i32,
    /// The signal that killed it, when the runtime says (most do not).
    pub signal: Option<i32>,
    /// `Completed`, `Error`, `OOMKilled`...
    pub reason: Option<Word>,
    /// The container's termination message, cut and escaped.
    pub message: Option<Text>,
}

/// The API's `ContainerState`: one of three optional fields.
#[derive(Deserialize)]
struct StateJson {
    waiting: Option<Waiting>,
    running: Option<IgnoredAny>,
    terminated: Option<Terminated>,
}

impl From<StateJson> for State {
    fn from(s: StateJson) -> State {
        match s {
            StateJson { terminated: Some(t), .. } => State::Terminated(Box::new(t)),
            StateJson { waiting: Some(w), .. } => State::Waiting(Box::new(w)),
            StateJson { running: Some(_), .. } => State::Running,
            _ => State::Unknown,
        }
    }
}

/// The pod conditions kubectl describe lists, each True, False, Unknown or
/// absent: six bytes, where the API's list costs hundreds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Conditions(pub [Option<Truth>; Condition::ALL.len()]);

/// The conditions we keep, in the order a line names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
pub enum Condition {
    PodScheduled,
    PodReadyToStartContainers,
    Initialized,
    ContainersReady,
    Ready,
    /// Set before the pod is evicted or preempted.
    DisruptionTarget,
    /// Any other type (a readiness gate's, a newer one): not kept.
    #[serde(other)]
    Other,
}

impl Condition {
    pub const ALL: [Condition; 6] = [
        Condition::PodScheduled,
        Condition::PodReadyToStartContainers,
        Condition::Initialized,
        Condition::ContainersReady,
        Condition::Ready,
        Condition::DisruptionTarget,
    ];
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
pub enum Truth {
    True,
    False,
    #[serde(other)]
    Unknown,
}

impl Condition {
    /// The condition a type name is, as serde reads it from JSON (for the
    /// protobuf path, which reads the name as a string).
    pub fn from_api(name: &str) -> Condition {
        match name {
            "PodScheduled" => Condition::PodScheduled,
            "PodReadyToStartContainers" => Condition::PodReadyToStartContainers,
            "Initialized" => Condition::Initialized,
            "ContainersReady" => Condition::ContainersReady,
            "Ready" => Condition::Ready,
            "DisruptionTarget" => Condition::DisruptionTarget,
            _ => Condition::Other,
        }
    }
}

impl Truth {
    /// A condition's status, as serde reads it from JSON.
    pub fn from_api(status: &str) -> Truth {
        match status {
            "True" => Truth::True,
            "False" => Truth::False,
            _ => Truth::Unknown,
        }
    }
}

/// Both print as the API spells them, which is their variants' names.
impl std::fmt::Display for Condition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

impl std::fmt::Display for Truth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

impl<'de> Deserialize<'de> for Conditions {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Conditions, D::Error> {
        /// One entry of the list; its times, reason and message are skipped.
        #[derive(Deserialize)]
        struct Entry {
            #[serde(rename = "type")]
            kind: Condition,
            status: Truth,
        }
        let mut kept = Conditions::default();
        for entry in Option::<Vec<Entry>>::deserialize(deserializer)?.unwrap_or_default() {
            if let Some(i) = Condition::ALL.iter().position(|c| *c == entry.kind) {
                kept.0[i] = Some(entry.status);
            }
        }
        Ok(kept)
    }
}

/// A hash of a value's JSON text, for the parts we do not keep. The text is
/// copied for the moment of the hash, then dropped; eight bytes stay.
struct Fingerprint(u64);

impl<'de> Deserialize<'de> for Fingerprint {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Fingerprint, D::Error> {
        let raw = Box::<RawValue>::deserialize(deserializer)?;
        Ok(Fingerprint(hash_of(raw.get())))
    }
}

impl Hash for Fingerprint {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

/// The status is parsed twice: once as raw JSON text to hash the whole of it
/// (so "something in the status changed" is known without keeping it), then
/// from that text into [`Status`], which keeps what the log shows. The API
/// server writes a status the same way each time (Go sorts map keys), so an
/// unchanged status hashes the same. The raw text is a copy that lives for
/// the moment of the parse: a 1 MB message passes through it, and only its
/// first [`MESSAGE_CHARS`](crate::text::MESSAGE_CHARS) characters stay.
fn fingerprinted_status<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Status>, D::Error> {
    let Some(raw) = Option::<Box<RawValue>>::deserialize(deserializer)? else {
        return Ok(None);
    };
    let mut status: Status = serde_json::from_str(raw.get()).map_err(D::Error::custom)?;
    status.fingerprint = hash_of(raw.get());
    Ok(Some(status))
}

fn null_as_empty<'de, D: Deserializer<'de>, T: Deserialize<'de> + Default>(deserializer: D) -> Result<T, D::Error> {
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// std's SipHash with its fixed keys: the same value gives the same hash for
/// the life of the process, which is all a comparison of two versions needs.
pub(crate) fn hash_of<T: Hash + ?Sized>(value: &T) -> u64 {
    let mut hasher = DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}

/// The small summary of a pod that the worker compares. Its fields are
/// copied out of the cache for the moment of a sync; the rest of the pod is
/// shared with it: `pod` is the cache's own `Arc`, which Rust lets us read and
/// never change (client-go only asks its users not to change what the
/// informer holds). Between syncs the worker keeps only that `Arc`.
#[derive(Clone, Debug, Default, PartialEq)]
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
    /// The version of the pod this state was taken from, for what describe.rs
    /// compares beyond the summary: container states, conditions, the
    /// fingerprints. A pointer, not a copy.
    pub pod: Arc<Pod>,
}

impl PodState {
    pub fn of(pod: &Arc<Pod>) -> PodState {
        let status = pod.status.as_ref();
        let containers = status.map(|s| &s.container_statuses[..]).unwrap_or_default();
        // What the line shows, cleaned (text.rs): a real uid, node name or
        // label is shown as it is, one a proxy made up cannot break the line.
        let shown = |s: &str| cleaned(s, NAME_CHARS).into_owned();
        PodState {
            uid: shown(pod.uid().unwrap_or_default()),
            resource_version: pod.resource_version().unwrap_or_default().to_string(),
            phase: status.and_then(|s| s.phase.as_deref()).unwrap_or("Unknown").to_string(),
            node: pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).map(shown).unwrap_or_default(),
            ready: containers.iter().filter(|c| c.ready).count(),
            containers: containers.len(),
            restarts: containers.iter().map(|c| i64::from(c.restart_count)).sum(),
            labels: pod.labels().iter().map(|(k, v)| (shown(k), shown(v))).collect(),
            terminating: pod.metadata.deletion_timestamp.is_some(),
            pod: pod.clone(),
        }
    }
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
                "name": "p", "namespace": "a", "uid": "u1", "resourceVersion": "7", "generation": 2,
                "labels": {"app": "web"},
                "annotations": {"big": "x".repeat(4096)},
                "deletionTimestamp": "2026-11-21T15:00:00Z",
                "managedFields": [{"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:metadata": {}}}],
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r", "uid": "o"}]
            },
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "registry/image:tag"}]},
            "status": {
                "phase": "Running", "hostIP": "10.0.0.1",
                "conditions": [
                    {"type": "Ready", "status": "False", "reason": "ContainersNotReady", "lastTransitionTime": null},
                    {"type": "PodScheduled", "status": "True"},
                    {"type": "example.com/gate", "status": "True"}
                ],
                "containerStatuses": [{"name": "c", "image": "registry/image:tag", "imageID": "sha256:1",
                                       "ready": true, "restartCount": 2, "state": {"running": {}},
                                       "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled",
                                                                    "finishedAt": "2026-11-21T14:00:00Z"}}}],
                "initContainerStatuses": [{"name": "init", "ready": false, "restartCount": 0,
                                           "state": {"waiting": {"reason": "PodInitializing"}}}]
            }
        });
        let p: Arc<Pod> = Arc::new(serde_json::from_value(json).unwrap());
        assert_eq!((p.name(), p.namespace(), p.uid()), ("p", Some("a"), Some("u1")));
        assert_eq!(p.resource_version(), Some("7"));
        assert_eq!(p.metadata.generation, Some(2));
        assert_eq!(p.labels().get("app"), Some("web"));
        assert!(p.metadata.deletion_timestamp.is_some());
        // Annotations, managedFields and ownerReferences have no field to land in.
        assert_eq!(p.spec.as_ref().unwrap().node_name.as_deref(), Some("n1"));
        let status = p.status.as_ref().unwrap();
        assert_eq!(status.phase.as_deref(), Some("Running"));
        let c = &status.container_statuses[0];
        assert_eq!((&*c.name, c.ready, c.restart_count, &c.state), ("c", true, 2, &State::Running));
        let State::Terminated(last) = &c.last_state else { panic!("{:?}", c.last_state) };
        assert_eq!((last.exit_code, last.reason.as_deref(), last.signal), (137, Some("OOMKilled"), None));
        let State::Waiting(init) = &status.init_container_statuses[0].state else { panic!("{status:?}") };
        assert_eq!(init.reason.as_deref(), Some("PodInitializing"));
        let mut conditions = Conditions::default();
        conditions.0[0] = Some(Truth::True); // PodScheduled
        conditions.0[4] = Some(Truth::False); // Ready
        assert_eq!(status.conditions, conditions, "the gate's condition is not kept");
        let state = PodState::of(&p);
        assert_eq!((state.ready, state.containers, state.restarts, state.terminating), (1, 1, 2, true));
        assert!(Arc::ptr_eq(&state.pod, &p), "the worker shares the cache's pod");
    }

    #[test]
    fn a_pod_with_neither_spec_nor_status_parses() {
        let p: Pod = serde_json::from_str(r#"{"metadata": {"name": "p", "namespace": "a"}}"#).unwrap();
        assert_eq!(PodState::of(&Arc::new(p)).phase, "Unknown");
        let p: Pod = serde_json::from_str(r#"{"metadata": {"name": "p"}, "spec": null, "status": null}"#).unwrap();
        assert!(p.status.is_none());
        let empty = r#"{"metadata": {}, "status": {"containerStatuses": null, "conditions": null}}"#;
        assert!(serde_json::from_str::<Pod>(empty).unwrap().status.unwrap().container_statuses.is_empty());
    }

    #[test]
    fn labels_are_one_text_in_key_order_and_read_back_as_pairs() {
        let labels = Labels::new([("tier", "web"), ("app", "shop"), ("empty", "")]);
        let pairs: Vec<_> = labels.iter().collect();
        assert_eq!(pairs, [("app", "shop"), ("empty", ""), ("tier", "web")]);
        assert_eq!((labels.get("tier"), labels.get("empty"), labels.get("none")), (Some("web"), Some(""), None));
        // A NUL (which the API server never sends) cannot shift the pairs.
        let odd = Labels::new([("a\0b", "c"), ("d", "e\0")]);
        assert_eq!(odd.iter().collect::<Vec<_>>(), [("a\u{FFFD}b", "c"), ("d", "e\u{FFFD}")]);
        assert!(Labels::default().is_empty() && Labels::default().iter().next().is_none());
    }

    #[test]
    fn the_slim_pod_is_a_fraction_of_k8s_openapis() {
        let slim = std::mem::size_of::<Pod>();
        let full = std::mem::size_of::<k8s_openapi::api::core::v1::Pod>();
        assert!(slim * 4 < full, "slim {slim} B vs full {full} B");
        let (meta, object_meta) = (std::mem::size_of::<Meta>(), std::mem::size_of::<ObjectMeta>());
        assert!(meta * 2 < object_meta, "Meta {meta} B vs ObjectMeta {object_meta} B");
        // Most containers run: their state is a tag, its details are boxed.
        assert_eq!(std::mem::size_of::<State>(), 16);
    }

    /// What a fingerprint tells apart, through the watch's own parser.
    #[test]
    fn fingerprints_move_only_with_their_part() {
        let pod = |metadata: &str, status: &str| -> Pod {
            let json =
                format!(r#"{{"metadata": {{"name": "p", {metadata}}}, "status": {{"phase": "Running", {status}}}}}"#);
            serde_json::from_str(&json).unwrap()
        };
        let old = pod(
            r#""resourceVersion": "1", "annotations": {"a": "1"}, "managedFields": [{"time": "t1"}]"#,
            r#""podIP": "10.0.0.1""#,
        );
        // resourceVersion and managedFields change on every write: not a metadata change.
        let rewritten = pod(
            r#""resourceVersion": "2", "annotations": {"a": "1"}, "managedFields": [{"time": "t2"}]"#,
            r#""podIP": "10.0.0.1""#,
        );
        assert_eq!(rewritten.unshown_metadata, old.unshown_metadata);
        let annotated = pod(r#""annotations": {"a": "2"}"#, r#""podIP": "10.0.0.1""#);
        assert_ne!(annotated.unshown_metadata, old.unshown_metadata);
        let finalized = pod(r#""annotations": {"a": "1"}, "finalizers": ["x"]"#, r#""podIP": "10.0.0.1""#);
        assert_ne!(finalized.unshown_metadata, old.unshown_metadata);
        let status = |p: &Pod| p.status.clone().unwrap();
        assert_eq!(status(&rewritten).fingerprint, status(&old).fingerprint, "the same status, the same hash");
        let moved = pod(r#""annotations": {"a": "1"}"#, r#""podIP": "10.0.0.2""#);
        assert_ne!(status(&moved).fingerprint, status(&old).fingerprint, "a field we do not keep moved");
        assert_eq!(moved.unshown_metadata, old.unshown_metadata);
    }
}
