//! Pods in the API server's own format, protobuf: the bytes on the wire, and
//! messages that read from them only what the cache keeps.
//!
//! Why: kube-apiserver keeps objects in etcd as protobuf and encodes JSON for
//! clients that ask for it. A list of pods is smaller in protobuf than in
//! JSON, and the server spends more CPU to make the JSON (bench/profile.md
//! has the measured sizes and CPU). client-go asks for protobuf; kube-rs can
//! ask only for JSON, so this module reads protobuf itself, for pods alone.
//!
//! The wire format, as the API concepts document it
//! (<https://kubernetes.io/docs/reference/using-api/api-concepts/#protobuf-encoding>):
//!
//! ```text
//! an object (a LIST response, an error Status, the object of a watch event):
//!     6b 38 73 00                  "k8s\0", the magic
//!     runtime.Unknown {            a protobuf message
//!       1: typeMeta {1: apiVersion, 2: kind}     e.g. "v1", "PodList"
//!       2: raw                     the object's own message (a PodList, a Pod, a Status)
//!       3: contentEncoding, 4: contentType       empty
//!     }
//! a watch response (Content-Type: application/vnd.kubernetes.protobuf;stream=watch):
//!     a sequence of frames, each a 4-byte big-endian length, then that many
//!     bytes of a metav1.WatchEvent {1: type, 2: object {1: raw}}, without the
//!     magic; `raw` is an object as above.
//! ```
//!
//! The messages below declare only the fields src/pod.rs keeps, with the
//! field numbers of k8s.io/api's generated.proto (k8s-pb, kube-rs's protobuf
//! crate, is the reference; a test decodes the same bytes with both). prost
//! skips every field a message does not declare without decoding it, so
//! `managedFields`, the spec's containers and the rest are never decoded:
//! their bytes are in memory, as part of the response body buffered before
//! decoding, but no struct, string or list is ever made of them. The
//! protobuf counterpart of what pod.rs's serde types do for JSON.
//!
//! What bad bytes can cost is bounded before anything is decoded: a frame is
//! at most [`MAX_FRAME`], a LIST page [`MAX_LIST_BODY`], an error body
//! [`MAX_ERROR_BODY`]; and since prost turns every 2-byte empty entry of a
//! repeated message field (`42 00`: an empty ContainerStatus) into a whole
//! struct, a hundred times its size on the wire, [`check_cost`] counts what
//! prost would allocate for the structs of a list or a pod, and refuses
//! bytes that would take more than [`MAX_DECODED`].
//!
//! Nothing here panics on bad input: a decode failure is a [`WireError`] that
//! says which message and where in the bytes (see the fuzz test below).

pub mod watch;

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use bytes::{Buf, Bytes};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use prost::Message;

use crate::pod::{self, Condition, Conditions, ContainerStatus, Pod, State, Terminated, Truth, Waiting};
use crate::text::{Text, Word};

/// The four bytes every protobuf object starts with.
pub const MAGIC: &[u8; 4] = b"k8s\0";

/// A frame larger than this is refused rather than read: a pod is at most
/// about 1.5 MB (etcd's request limit), and a frame is one pod with a few
/// bytes of watch event and envelope around it, so 4 MiB is plenty and a
/// larger "length" is a broken stream or a hostile one, not a pod.
pub const MAX_FRAME: usize = 4 << 20;

/// A LIST response larger than this is refused rather than read on. A page
/// holds at most the 500 pods the watcher asks for (kube's default page
/// size), so this is 256 KiB a pod: real pods weigh a small part of that
/// (see bench/), and only a cluster of pods near etcd's limit, 500 to a page,
/// would need more.
pub const MAX_LIST_BODY: usize = 128 << 20;

/// How much of an error response is read: a Status is a few hundred bytes,
/// and a proxy's error page is cut here (and to one line before it is
/// logged: text.rs).
pub const MAX_ERROR_BODY: usize = 64 << 10;

/// The most memory the message structs of one LIST page or one watch frame
/// may take once decoded, as [`check_cost`] counts it beforehand: a page of
/// 500 busy pods stays under an eighth of it (a unit test checks); bytes that
/// would take more are refused.
pub const MAX_DECODED: usize = 64 << 20;

/// What went wrong reading protobuf, and where: `offset` counts bytes from the
/// start of the response body (of the watch stream, for a frame).
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum WireError {
    #[error("not a Kubernetes protobuf object at byte {offset}: it starts {start:02x?}, not with \"k8s\\0\"")]
    Magic { offset: usize, start: Vec<u8> },
    #[error("bad protobuf in the {message} at byte {offset}: {reason}")]
    Decode { message: &'static str, offset: usize, reason: String },
    #[error("expected a {want} at byte {offset}, got a {got:?}")]
    Kind { want: &'static str, got: String, offset: usize },
    #[error("a watch frame at byte {offset} says it is {len} bytes long, more than the {MAX_FRAME} a pod can need")]
    FrameTooLarge { offset: usize, len: usize },
    #[error("the watch stream ended inside the frame that starts at byte {offset}")]
    Truncated { offset: usize },
    #[error("a LIST response of more than {MAX_LIST_BODY} bytes: refused (a page of pods is far smaller)")]
    BodyTooLarge,
    #[error(
        "the {message} at byte {offset} would take {cost} bytes of structs to decode, more than the {MAX_DECODED} \
         allowed (its repeated fields hold more entries than real pods have): refused"
    )]
    TooCostly { message: &'static str, offset: usize, cost: usize },
    /// A 2xx answer that is not protobuf: a proxy that rewrote our Accept
    /// header, re-encoded or compressed the body. Both texts are cleaned
    /// (text.rs), as they come from whatever answered.
    #[error(
        "the answer to a request for protobuf came with Content-Type {content_type:?}{}",
        encoding_of(content_encoding)
    )]
    NotProtobuf { content_type: String, content_encoding: Option<String> },
}

fn encoding_of(encoding: &Option<String>) -> String {
    encoding.as_ref().map(|e| format!(" and Content-Encoding {e:?}")).unwrap_or_default()
}

// --- The envelope ---------------------------------------------------------------

/// runtime.Unknown: an object of any kind, its bytes in `raw`.
#[derive(Clone, PartialEq, Message)]
struct Unknown {
    #[prost(message, optional, tag = "1")]
    type_meta: Option<TypeMeta>,
    #[prost(bytes = "bytes", optional, tag = "2")]
    raw: Option<Bytes>,
}

/// runtime.TypeMeta (note: apiVersion is 1 and kind 2 here, the other way
/// round from metav1.TypeMeta).
#[derive(Clone, PartialEq, Message)]
struct TypeMeta {
    #[prost(string, optional, tag = "1")]
    api_version: Option<String>,
    #[prost(string, optional, tag = "2")]
    kind: Option<String>,
}

/// An object's kind and message bytes, from `k8s\0` + runtime.Unknown.
/// `offset` is where `bytes` starts in the body, for errors.
pub fn unwrap_object(bytes: Bytes, offset: usize) -> Result<(String, Bytes), WireError> {
    if bytes.len() < MAGIC.len() || &bytes[..MAGIC.len()] != MAGIC {
        return Err(WireError::Magic { offset, start: bytes.iter().take(4).copied().collect() });
    }
    let body = bytes.slice(MAGIC.len()..);
    let unknown = Unknown::decode(body).map_err(|e| decode_error("runtime.Unknown", offset + MAGIC.len(), e))?;
    let kind = unknown.type_meta.and_then(|t| t.kind).unwrap_or_default();
    Ok((kind, unknown.raw.unwrap_or_default()))
}

fn decode_error(message: &'static str, offset: usize, e: prost::DecodeError) -> WireError {
    WireError::Decode { message, offset, reason: e.to_string() }
}

// --- Lists, watch events, errors -------------------------------------------------

#[derive(Clone, PartialEq, Message)]
struct PodListMsg {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ListMetaMsg>,
    #[prost(message, repeated, tag = "2")]
    items: Vec<PodMsg>,
}

#[derive(Clone, PartialEq, Message)]
struct ListMetaMsg {
    #[prost(string, optional, tag = "2")]
    resource_version: Option<String>,
    #[prost(string, optional, tag = "3")]
    r#continue: Option<String>,
}

/// One page of a LIST: its pods, the list's resourceVersion and the token
/// for the next page (both empty when absent, as in JSON).
#[derive(Debug, Default)]
pub struct PodPage {
    pub items: Vec<Pod>,
    pub resource_version: String,
    pub continue_token: String,
}

/// A LIST response body: `k8s\0` + Unknown{kind: PodList}.
pub fn pod_list(body: Bytes) -> Result<PodPage, WireError> {
    let (kind, raw) = unwrap_object(body, 0)?;
    if kind != "PodList" {
        return Err(WireError::Kind { want: "PodList", got: kind, offset: 0 });
    }
    check_cost("PodList", &raw, 0, cost_of_list)?;
    let list = PodListMsg::decode(raw).map_err(|e| decode_error("PodList", 0, e))?;
    let meta = list.metadata.unwrap_or_default();
    Ok(PodPage {
        items: list.items.into_iter().map(PodMsg::into_pod).collect(),
        resource_version: meta.resource_version.unwrap_or_default(),
        continue_token: meta.r#continue.unwrap_or_default(),
    })
}

/// metav1.WatchEvent.
#[derive(Clone, PartialEq, Message)]
struct WatchEventMsg {
    #[prost(string, optional, tag = "1")]
    r#type: Option<String>,
    #[prost(message, optional, tag = "2")]
    object: Option<RawExtension>,
}

#[derive(Clone, PartialEq, Message)]
struct RawExtension {
    #[prost(bytes = "bytes", optional, tag = "1")]
    raw: Option<Bytes>,
}

/// One event of a watch, as the API server sends it.
#[derive(Debug, PartialEq)]
pub enum WatchEvent {
    Added(Pod),
    Modified(Pod),
    Deleted(Pod),
    /// A bookmark: only the resourceVersion, and whether it marks the end of
    /// a streaming list's initial events (the `k8s.io/initial-events-end`
    /// annotation).
    Bookmark {
        resource_version: String,
        initial_events_end: bool,
    },
    /// An error the server reports inside the stream (410 Gone, mostly).
    Error(kube::core::Status),
}

/// One watch frame's bytes (after its length prefix), found at `offset` of
/// the stream.
pub fn watch_event(frame: Bytes, offset: usize) -> Result<WatchEvent, WireError> {
    let event = WatchEventMsg::decode(frame).map_err(|e| decode_error("WatchEvent", offset, e))?;
    let raw = event.object.and_then(|o| o.raw).unwrap_or_default();
    let kind_of_event = event.r#type.unwrap_or_default();
    let (kind, raw) = unwrap_object(raw, offset)?;
    match (kind_of_event.as_str(), kind.as_str()) {
        ("ERROR", "Status") => Ok(WatchEvent::Error(status_of(raw, offset)?)),
        ("BOOKMARK", "Pod") => {
            check_cost("Pod (bookmark)", &raw, offset, cost_of_pod)?;
            let pod = PodMsg::decode(raw).map_err(|e| decode_error("Pod (bookmark)", offset, e))?;
            let meta = pod.metadata.unwrap_or_default();
            Ok(WatchEvent::Bookmark {
                resource_version: meta.resource_version.unwrap_or_default(),
                initial_events_end: meta.annotations.iter().any(is_initial_events_end),
            })
        }
        (event @ ("ADDED" | "MODIFIED" | "DELETED"), "Pod") => {
            check_cost("Pod", &raw, offset, cost_of_pod)?;
            let pod = PodMsg::decode(raw).map_err(|e| decode_error("Pod", offset, e))?.into_pod();
            Ok(match event {
                "ADDED" => WatchEvent::Added(pod),
                "MODIFIED" => WatchEvent::Modified(pod),
                _ => WatchEvent::Deleted(pod),
            })
        }
        _ => Err(WireError::Kind { want: "Pod watch event", got: format!("{kind_of_event} {kind}"), offset }),
    }
}

/// metav1.Status, the body of every error response and of an ERROR event.
#[derive(Clone, PartialEq, Message)]
struct StatusMsg {
    #[prost(string, optional, tag = "2")]
    status: Option<String>,
    #[prost(string, optional, tag = "3")]
    message: Option<String>,
    #[prost(string, optional, tag = "4")]
    reason: Option<String>,
    #[prost(int32, optional, tag = "6")]
    code: Option<i32>,
}

fn status_of(raw: Bytes, offset: usize) -> Result<kube::core::Status, WireError> {
    let s = StatusMsg::decode(raw).map_err(|e| decode_error("Status", offset, e))?;
    let status = kube::core::Status::failure(&s.message.unwrap_or_default(), &s.reason.unwrap_or_default());
    Ok(status.with_code(u16::try_from(s.code.unwrap_or_default()).unwrap_or_default()))
}

/// An error response body (`k8s\0` + Unknown{kind: Status}) as kube's Status,
/// or None when the body is not one (a proxy's text, say).
pub fn error_status(body: Bytes) -> Option<kube::core::Status> {
    let (kind, raw) = unwrap_object(body, 0).ok()?;
    (kind == "Status").then(|| status_of(raw, 0).ok()).flatten()
}

// --- The pod: only what the cache keeps ---------------------------------------------

// ANCHOR: pod
#[derive(Clone, PartialEq, Message)]
struct PodMsg {
    #[prost(message, optional, tag = "1")]
    metadata: Option<MetaMsg>,
    #[prost(message, optional, tag = "2")]
    spec: Option<SpecMsg>,
    /// Kept as bytes first: hashed whole (the status's fingerprint, as
    /// pod.rs hashes its JSON), then decoded into [`StatusMsg`]'s fields.
    #[prost(bytes = "bytes", optional, tag = "3")]
    status: Option<Bytes>,
}

// ANCHOR_END: pod

/// metav1.ObjectMeta: what pod.rs's KeptMetadata keeps. Annotations, owner
/// references and finalizers are read as their raw entries, to be hashed
/// (the "unshown metadata" fingerprint) and dropped.
#[derive(Clone, PartialEq, Message)]
struct MetaMsg {
    #[prost(string, optional, tag = "1")]
    name: Option<String>,
    #[prost(string, optional, tag = "3")]
    namespace: Option<String>,
    #[prost(string, optional, tag = "5")]
    uid: Option<String>,
    #[prost(string, optional, tag = "6")]
    resource_version: Option<String>,
    #[prost(int64, optional, tag = "7")]
    generation: Option<i64>,
    #[prost(message, optional, tag = "9")]
    deletion_timestamp: Option<TimeMsg>,
    #[prost(int64, optional, tag = "10")]
    deletion_grace_period_seconds: Option<i64>,
    #[prost(btree_map = "string, string", tag = "11")]
    labels: BTreeMap<String, String>,
    #[prost(bytes = "bytes", repeated, tag = "12")]
    annotations: Vec<Bytes>,
    #[prost(bytes = "bytes", repeated, tag = "13")]
    owner_references: Vec<Bytes>,
    #[prost(bytes = "bytes", repeated, tag = "14")]
    finalizers: Vec<Bytes>,
}

/// metav1.Time: seconds and nanoseconds since the Unix epoch.
#[derive(Clone, PartialEq, Message)]
struct TimeMsg {
    #[prost(int64, optional, tag = "1")]
    seconds: Option<i64>,
    #[prost(int32, optional, tag = "2")]
    nanos: Option<i32>,
}

#[derive(Clone, PartialEq, Message)]
struct SpecMsg {
    #[prost(string, optional, tag = "10")]
    node_name: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
struct PodStatusMsg {
    #[prost(string, optional, tag = "1")]
    phase: Option<String>,
    #[prost(message, repeated, tag = "2")]
    conditions: Vec<ConditionMsg>,
    #[prost(string, optional, tag = "3")]
    message: Option<String>,
    #[prost(string, optional, tag = "4")]
    reason: Option<String>,
    #[prost(message, repeated, tag = "8")]
    container_statuses: Vec<ContainerStatusMsg>,
    #[prost(message, repeated, tag = "10")]
    init_container_statuses: Vec<ContainerStatusMsg>,
    #[prost(int64, optional, tag = "17")]
    observed_generation: Option<i64>,
}

#[derive(Clone, PartialEq, Message)]
struct ConditionMsg {
    #[prost(string, optional, tag = "1")]
    r#type: Option<String>,
    #[prost(string, optional, tag = "2")]
    status: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
struct ContainerStatusMsg {
    #[prost(string, optional, tag = "1")]
    name: Option<String>,
    #[prost(message, optional, tag = "2")]
    state: Option<StateMsg>,
    #[prost(message, optional, tag = "3")]
    last_state: Option<StateMsg>,
    #[prost(bool, optional, tag = "4")]
    ready: Option<bool>,
    #[prost(int32, optional, tag = "5")]
    restart_count: Option<i32>,
}

/// ContainerState: one of three. `running` holds only a start time, which
/// pod.rs leaves out, so it is read as bytes just to see it is there.
#[derive(Clone, PartialEq, Message)]
struct StateMsg {
    #[prost(message, optional, tag = "1")]
    waiting: Option<WaitingMsg>,
    #[prost(bytes = "bytes", optional, tag = "2")]
    running: Option<Bytes>,
    #[prost(message, optional, tag = "3")]
    terminated: Option<TerminatedMsg>,
}

#[derive(Clone, PartialEq, Message)]
struct WaitingMsg {
    #[prost(string, optional, tag = "1")]
    reason: Option<String>,
    #[prost(string, optional, tag = "2")]
    message: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
struct TerminatedMsg {
    #[prost(int32, optional, tag = "1")]
    exit_code: Option<i32>,
    #[prost(int32, optional, tag = "2")]
    signal: Option<i32>,
    #[prost(string, optional, tag = "3")]
    reason: Option<String>,
    #[prost(string, optional, tag = "4")]
    message: Option<String>,
}

/// The annotation that marks the end of a streaming list's initial events.
/// A map entry is a message {1: key, 2: value}; only the key matters here.
fn is_initial_events_end(entry: &Bytes) -> bool {
    #[derive(Clone, PartialEq, Message)]
    struct Entry {
        #[prost(string, optional, tag = "1")]
        key: Option<String>,
    }
    Entry::decode(entry.clone()).is_ok_and(|e| e.key.as_deref() == Some("k8s.io/initial-events-end"))
}

/// Go writes every non-pointer field, empty or not: "" and 0 are on the
/// wire where JSON's `omitempty` leaves the field out. So empty here means
/// absent, as it does in JSON.
fn given(s: Option<String>) -> Option<String> {
    s.filter(|s| !s.is_empty())
}

fn given_number<T: Default + PartialEq>(n: Option<T>) -> Option<T> {
    n.filter(|n| *n != T::default())
}

impl PodMsg {
    /// Into the cache's [`Pod`], as pod.rs builds it from JSON. A status that
    /// does not decode leaves `status` None and says why in
    /// `unreadable_status`: the pod's identity is still worth keeping, and the
    /// informer keeps the status it had before (informer.rs, `Cache::apply`),
    /// where a made-up empty one would read "phase Running -> Unknown".
    fn into_pod(self) -> Pod {
        let m = self.metadata.unwrap_or_default();
        let unshown = (m.annotations, m.owner_references, m.finalizers);
        let mut unreadable_status = None;
        let status = self.status.and_then(|raw| {
            let fingerprint = hash_of(raw.chunk());
            let decoded = check_cost("PodStatus", &raw, 0, cost_of_status)
                .and_then(|()| PodStatusMsg::decode(raw).map_err(|e| decode_error("PodStatus", 0, e)));
            match decoded {
                Ok(status) => Some(pod::Status { fingerprint, ..status.into_status() }),
                Err(e) => {
                    unreadable_status = Some(Text::new(&e.to_string()));
                    None
                }
            }
        });
        Pod {
            metadata: ObjectMeta {
                name: given(m.name),
                namespace: given(m.namespace),
                uid: given(m.uid),
                resource_version: given(m.resource_version),
                generation: given_number(m.generation),
                labels: (!m.labels.is_empty()).then_some(m.labels),
                deletion_timestamp: m.deletion_timestamp.and_then(TimeMsg::into_time),
                deletion_grace_period_seconds: m.deletion_grace_period_seconds,
                ..ObjectMeta::default()
            },
            spec: self.spec.map(|s| pod::Spec { node_name: given(s.node_name) }),
            status,
            unshown_metadata: hash_of(&unshown),
            unreadable_status,
        }
    }
}

impl TimeMsg {
    fn into_time(self) -> Option<Time> {
        let at = k8s_openapi::jiff::Timestamp::new(self.seconds.unwrap_or_default(), self.nanos.unwrap_or_default());
        at.ok().map(Time)
    }
}

impl PodStatusMsg {
    fn into_status(self) -> pod::Status {
        let mut conditions = Conditions::default();
        for c in &self.conditions {
            let kind = Condition::from_api(c.r#type.as_deref().unwrap_or_default());
            if let Some(i) = Condition::ALL.iter().position(|k| *k == kind) {
                conditions.0[i] = Some(Truth::from_api(c.status.as_deref().unwrap_or_default()));
            }
        }
        pod::Status {
            phase: given(self.phase).as_deref().map(Word::new),
            reason: given(self.reason).as_deref().map(Word::new),
            message: given(self.message).as_deref().map(Text::new),
            conditions,
            observed_generation: given_number(self.observed_generation),
            init_container_statuses: self.init_container_statuses.into_iter().map(Into::into).collect(),
            container_statuses: self.container_statuses.into_iter().map(Into::into).collect(),
            fingerprint: 0,
        }
    }
}

impl From<ContainerStatusMsg> for ContainerStatus {
    fn from(c: ContainerStatusMsg) -> ContainerStatus {
        ContainerStatus {
            name: Word::new(c.name.as_deref().unwrap_or_default()),
            ready: c.ready.unwrap_or_default(),
            restart_count: c.restart_count.unwrap_or_default(),
            state: c.state.map(Into::into).unwrap_or_default(),
            last_state: c.last_state.map(Into::into).unwrap_or_default(),
        }
    }
}

impl From<StateMsg> for State {
    fn from(s: StateMsg) -> State {
        match s {
            StateMsg { terminated: Some(t), .. } => State::Terminated(Box::new(Terminated {
                exit_code: t.exit_code.unwrap_or_default(),
                signal: given_number(t.signal),
                reason: given(t.reason).as_deref().map(Word::new),
                message: given(t.message).as_deref().map(Text::new),
            })),
            StateMsg { waiting: Some(w), .. } => State::Waiting(Box::new(Waiting {
                reason: given(w.reason).as_deref().map(Word::new),
                message: given(w.message).as_deref().map(Text::new),
            })),
            StateMsg { running: Some(_), .. } => State::Running,
            _ => State::Unknown,
        }
    }
}

/// The same hash pod.rs uses for its fingerprints (SipHash, fixed keys).
fn hash_of<T: Hash + ?Sized>(value: &T) -> u64 {
    let mut hasher = DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}

// --- What decoding would cost ---------------------------------------------------------

/// Refuses `bytes` (a `message` found at `offset`) when decoding them would
/// allocate more than [`MAX_DECODED`] for structs, as `cost` counts it.
///
/// Why count first: a repeated message field is a `Vec` of structs, and its
/// smallest entry on the wire is two bytes (the field's tag, a zero length),
/// while its struct takes hundreds: a 4 MiB frame of empty container
/// statuses would be more than a GiB of them. Bytes and strings cost what
/// they hold (bounded by the body's own cap); the structs are what we count.
pub fn check_cost(
    message: &'static str,
    bytes: &[u8],
    offset: usize,
    cost: fn(&[u8]) -> usize,
) -> Result<(), WireError> {
    match cost(bytes) {
        cost if cost > MAX_DECODED => Err(WireError::TooCostly { message, offset, cost }),
        _ => Ok(()),
    }
}

/// The length-delimited fields of a protobuf message, as (field number,
/// contents); fields of other wire types are stepped over. Stops at the first
/// byte that does not parse: prost fails there too, so nothing after it is
/// ever decoded (and so needs no counting).
fn fields(mut bytes: &[u8]) -> impl Iterator<Item = (u32, &[u8])> {
    std::iter::from_fn(move || {
        loop {
            let key = prost::encoding::decode_varint(&mut bytes).ok()?;
            let number = u32::try_from(key >> 3).ok()?;
            match key & 7 {
                0 => {
                    prost::encoding::decode_varint(&mut bytes).ok()?;
                }
                1 => bytes = bytes.get(8..)?,
                5 => bytes = bytes.get(4..)?,
                2 => {
                    let len = usize::try_from(prost::encoding::decode_varint(&mut bytes).ok()?).ok()?;
                    let value = bytes.get(..len)?;
                    bytes = &bytes[len..];
                    return Some((number, value));
                }
                _ => return None,
            }
        }
    })
}

/// Twice a struct's size: a `Vec` grows by doubling, so it may hold room for
/// as many again as it has entries.
fn entry<T>() -> usize {
    2 * std::mem::size_of::<T>()
}

fn cost_of_list(bytes: &[u8]) -> usize {
    fields(bytes).filter(|(n, _)| *n == 2).map(|(_, pod)| entry::<PodMsg>() + cost_of_pod(pod)).sum()
}

/// A pod: its metadata's repeated fields, and its status (decoded from its
/// bytes later, one pod at a time, and counted here all the same).
fn cost_of_pod(bytes: &[u8]) -> usize {
    let meta = |bytes: &[u8]| -> usize {
        fields(bytes)
            .map(|(n, value)| match n {
                // A label: a map entry of two strings (and the map's node).
                11 => entry::<(String, String)>() + value.len(),
                // Annotations, owner references, finalizers: `Bytes` handles.
                12..=14 => entry::<Bytes>(),
                _ => 0,
            })
            .sum()
    };
    fields(bytes)
        .map(|(n, value)| match n {
            1 => meta(value),
            3 => cost_of_status(value),
            _ => 0,
        })
        .sum()
}

fn cost_of_status(bytes: &[u8]) -> usize {
    fields(bytes)
        .map(|(n, _)| match n {
            2 => entry::<ConditionMsg>(),
            8 | 10 => entry::<ContainerStatusMsg>(),
            _ => 0,
        })
        .sum()
}

// --- Watch frames ---------------------------------------------------------------------

/// Splits a watch response into frames as its bytes arrive: feed it each
/// chunk of the body, take out every complete frame. A frame may span
/// chunks, and a chunk may hold several frames.
#[derive(Default)]
pub struct Frames {
    /// Bytes received and not yet taken out as a frame.
    buffer: bytes::BytesMut,
    /// Where `buffer` starts in the stream, for error offsets.
    offset: usize,
}

impl Frames {
    pub fn push(&mut self, chunk: &[u8]) {
        self.buffer.extend_from_slice(chunk);
    }

    /// The next complete frame and the byte it started at, None when more
    /// bytes are needed, or an error for a length no pod can have.
    pub fn next_frame(&mut self) -> Result<Option<(Bytes, usize)>, WireError> {
        let Some(prefix) = self.buffer.get(..4) else {
            return Ok(None);
        };
        let len = u32::from_be_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]) as usize;
        if len > MAX_FRAME {
            return Err(WireError::FrameTooLarge { offset: self.offset, len });
        }
        if self.buffer.len() < 4 + len {
            return Ok(None);
        }
        let start = self.offset;
        self.buffer.advance(4);
        let frame = self.buffer.split_to(len).freeze();
        self.offset += 4 + len;
        Ok(Some((frame, start)))
    }

    /// At the end of the stream: an error if it stopped inside a frame.
    pub fn finish(&self) -> Result<(), WireError> {
        if self.buffer.is_empty() { Ok(()) } else { Err(WireError::Truncated { offset: self.offset }) }
    }
}

#[cfg(test)]
mod tests;
