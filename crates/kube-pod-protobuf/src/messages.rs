//! The pod, as protobuf messages that declare only the fields a pod logger
//! keeps, with the field numbers of k8s.io/api's generated.proto (k8s-pb,
//! kube-rs's generated crate, is the reference; a test decodes the same bytes
//! with both).
//!
//! Why so few fields: prost skips every field a message does not declare
//! without decoding it, so `managedFields`, the spec's containers and the rest
//! are never decoded: their bytes are in memory, as part of the response body
//! buffered before decoding, but no struct, string or list is ever made of
//! them. Declaring just what is kept is "prune before the store" done once,
//! at decode time.
//!
//! What is kept: of the metadata, the identity (name, namespace, uid,
//! resourceVersion), `generation`, the labels, the deletion timestamp and its
//! grace period, and the raw entries of annotations, owner references and
//! finalizers (to fingerprint, not to read); of the spec, the node name; of
//! the status, its raw bytes ([`PodMsg::status`], decoded by
//! [`PodStatusMsg::from_bytes`]): phase, reason, message, the conditions'
//! type and status, the containers' and init containers' name, readiness,
//! restart count and states, and `observedGeneration`.
//!
//! Every field is an `Option`, as protobuf has it: Go writes every field that
//! is not a pointer, empty or not, so `Some("")` and `Some(0)` are on the
//! wire where JSON's `omitempty` leaves the field out. [`non_empty`] and
//! [`non_zero`] read them as JSON does.

use std::collections::BTreeMap;

use bytes::Bytes;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use prost::Message;

use crate::{WireError, check_cost, decode_error};

// ANCHOR: pod
/// core/v1 Pod: its three parts, and only the kept fields in each.
#[derive(Clone, PartialEq, Message)]
pub struct PodMsg {
    /// metav1.ObjectMeta, field 1.
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<MetaMsg>,
    /// PodSpec, field 2: the node name alone.
    #[prost(message, optional, tag = "2")]
    pub spec: Option<SpecMsg>,
    /// PodStatus, field 3, kept as bytes first: a program can hash them whole
    /// (a fingerprint of the status, kept fields or not), then decode them
    /// with [`PodStatusMsg::from_bytes`]. And a status that does not decode
    /// need not lose the pod: its identity is in the metadata.
    #[prost(bytes = "bytes", optional, tag = "3")]
    pub status: Option<Bytes>,
}
// ANCHOR_END: pod

/// metav1.ObjectMeta: the identity, what a program shows of a pod, and the
/// raw entries of what a client can change after the create.
#[derive(Clone, PartialEq, Message)]
pub struct MetaMsg {
    /// The pod's name.
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    /// Its namespace.
    #[prost(string, optional, tag = "3")]
    pub namespace: Option<String>,
    /// Its uid: a pod deleted and created again under the same name has
    /// another one.
    #[prost(string, optional, tag = "5")]
    pub uid: Option<String>,
    /// The resourceVersion of this state of the pod.
    #[prost(string, optional, tag = "6")]
    pub resource_version: Option<String>,
    /// Raised by one for every change to the spec (for pods since Kubernetes
    /// 1.33) and when a delete starts: the spec's fingerprint, free.
    #[prost(int64, optional, tag = "7")]
    pub generation: Option<i64>,
    /// When the delete was asked for, plus the grace period.
    #[prost(message, optional, tag = "9")]
    pub deletion_timestamp: Option<TimeMsg>,
    /// The grace period of a delete under way.
    #[prost(int64, optional, tag = "10")]
    pub deletion_grace_period_seconds: Option<i64>,
    /// The labels, decoded: a selector or a program's output uses them.
    #[prost(btree_map = "string, string", tag = "11")]
    pub labels: BTreeMap<String, String>,
    /// Annotations, each a raw map entry `{1: key, 2: value}`: read as bytes,
    /// so they cost a handle each and no strings, for a program that only
    /// wants to know whether they changed (hash them).
    #[prost(bytes = "bytes", repeated, tag = "12")]
    pub annotations: Vec<Bytes>,
    /// Owner references, raw, as the annotations.
    #[prost(bytes = "bytes", repeated, tag = "13")]
    pub owner_references: Vec<Bytes>,
    /// Finalizers, raw, as the annotations.
    #[prost(bytes = "bytes", repeated, tag = "14")]
    pub finalizers: Vec<Bytes>,
}

impl MetaMsg {
    /// The decoded fields as k8s-openapi's `ObjectMeta`, empty read as absent
    /// as JSON has it ([`non_empty`], [`non_zero`]). The raw entries are left
    /// out: take them first if they are wanted (`std::mem::take`).
    pub fn into_object_meta(self) -> ObjectMeta {
        ObjectMeta {
            name: non_empty(self.name),
            namespace: non_empty(self.namespace),
            uid: non_empty(self.uid),
            resource_version: non_empty(self.resource_version),
            generation: non_zero(self.generation),
            labels: (!self.labels.is_empty()).then_some(self.labels),
            deletion_timestamp: self.deletion_timestamp.and_then(TimeMsg::into_time),
            // A pointer in Go: 0 is sent only when it is 0, and means it.
            deletion_grace_period_seconds: self.deletion_grace_period_seconds,
            ..ObjectMeta::default()
        }
    }
}

/// metav1.Time: seconds and nanoseconds since the Unix epoch.
#[derive(Clone, PartialEq, Message)]
pub struct TimeMsg {
    /// Seconds since the Unix epoch.
    #[prost(int64, optional, tag = "1")]
    pub seconds: Option<i64>,
    /// And nanoseconds (0 on the wire today: the API's times are in seconds).
    #[prost(int32, optional, tag = "2")]
    pub nanos: Option<i32>,
}

impl TimeMsg {
    /// As k8s-openapi's `Time`; None for a time out of its range.
    pub fn into_time(self) -> Option<Time> {
        let at = k8s_openapi::jiff::Timestamp::new(self.seconds.unwrap_or_default(), self.nanos.unwrap_or_default());
        at.ok().map(Time)
    }
}

/// PodSpec: where the pod runs, and nothing else.
#[derive(Clone, PartialEq, Message)]
pub struct SpecMsg {
    /// The node the pod is bound to (empty before scheduling).
    #[prost(string, optional, tag = "10")]
    pub node_name: Option<String>,
}

/// PodStatus: what `kubectl describe pod` shows of it.
#[derive(Clone, PartialEq, Message)]
pub struct PodStatusMsg {
    /// `Pending`, `Running`, `Succeeded`, `Failed`, `Unknown`.
    #[prost(string, optional, tag = "1")]
    pub phase: Option<String>,
    /// The pod's conditions (PodScheduled, Ready...), type and status alone.
    #[prost(message, repeated, tag = "2")]
    pub conditions: Vec<ConditionMsg>,
    /// Why the whole pod stopped, in words.
    #[prost(string, optional, tag = "3")]
    pub message: Option<String>,
    /// And as a word: `Evicted`, `DeadlineExceeded`...
    #[prost(string, optional, tag = "4")]
    pub reason: Option<String>,
    /// The app containers.
    #[prost(message, repeated, tag = "8")]
    pub container_statuses: Vec<ContainerStatusMsg>,
    /// The init containers.
    #[prost(message, repeated, tag = "10")]
    pub init_container_statuses: Vec<ContainerStatusMsg>,
    /// The pod generation the kubelet has acted on.
    #[prost(int64, optional, tag = "17")]
    pub observed_generation: Option<i64>,
}

impl PodStatusMsg {
    /// Decodes [`PodMsg::status`]'s bytes, refusing those whose structs would
    /// cost more than [`MAX_DECODED`](crate::MAX_DECODED) (the pod's cost was counted with its
    /// status, before the pod was decoded; this counts again, for a status
    /// decoded on its own). Offsets in errors count from the status's start.
    pub fn from_bytes(raw: Bytes) -> Result<PodStatusMsg, WireError> {
        check_cost("PodStatus", &raw, 0, cost_of_status)?;
        PodStatusMsg::decode(raw).map_err(|e| decode_error("PodStatus", 0, e))
    }
}

/// PodCondition: its type and status; the rest (times, reason, message) is
/// skipped.
#[derive(Clone, PartialEq, Message)]
pub struct ConditionMsg {
    /// `PodScheduled`, `Ready`, or a readiness gate's own type.
    #[prost(string, optional, tag = "1")]
    pub r#type: Option<String>,
    /// `True`, `False` or `Unknown`.
    #[prost(string, optional, tag = "2")]
    pub status: Option<String>,
}

/// ContainerStatus: one container, as kubectl describe's "State" and "Last
/// State" show it. Images, ids and resources are skipped.
#[derive(Clone, PartialEq, Message)]
pub struct ContainerStatusMsg {
    /// The container's name.
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    /// Its state now.
    #[prost(message, optional, tag = "2")]
    pub state: Option<StateMsg>,
    /// Its state before the last restart: what a crash loop's exit code is in.
    #[prost(message, optional, tag = "3")]
    pub last_state: Option<StateMsg>,
    /// Whether it passes its readiness probe.
    #[prost(bool, optional, tag = "4")]
    pub ready: Option<bool>,
    /// How many times it restarted.
    #[prost(int32, optional, tag = "5")]
    pub restart_count: Option<i32>,
}

/// ContainerState: one of three. `running` holds only a start time, which
/// is not kept, so it is read as bytes just to see it is there.
#[derive(Clone, PartialEq, Message)]
pub struct StateMsg {
    /// Not running yet, or between restarts.
    #[prost(message, optional, tag = "1")]
    pub waiting: Option<WaitingMsg>,
    /// Running: the raw bytes of its start time, present or not.
    #[prost(bytes = "bytes", optional, tag = "2")]
    pub running: Option<Bytes>,
    /// Ended.
    #[prost(message, optional, tag = "3")]
    pub terminated: Option<TerminatedMsg>,
}

/// ContainerStateWaiting.
#[derive(Clone, PartialEq, Message)]
pub struct WaitingMsg {
    /// `ContainerCreating`, `CrashLoopBackOff`, `ErrImagePull`...
    #[prost(string, optional, tag = "1")]
    pub reason: Option<String>,
    /// "back-off 20s restarting failed container=...".
    #[prost(string, optional, tag = "2")]
    pub message: Option<String>,
}

/// ContainerStateTerminated: how it ended (the times are skipped).
#[derive(Clone, PartialEq, Message)]
pub struct TerminatedMsg {
    /// The exit code.
    #[prost(int32, optional, tag = "1")]
    pub exit_code: Option<i32>,
    /// The signal that killed it, when the runtime says (most do not).
    #[prost(int32, optional, tag = "2")]
    pub signal: Option<i32>,
    /// `Completed`, `Error`, `OOMKilled`...
    #[prost(string, optional, tag = "3")]
    pub reason: Option<String>,
    /// The container's termination message: whatever the program wrote.
    #[prost(string, optional, tag = "4")]
    pub message: Option<String>,
}

/// A string as JSON would give it: Go writes `""` for an empty field that is
/// not a pointer, where JSON's `omitempty` leaves it out. So empty means
/// absent, and both wires give the same pod.
pub fn non_empty(s: Option<String>) -> Option<String> {
    s.filter(|s| !s.is_empty())
}

/// A number as JSON would give it: zero means absent (see [`non_empty`]).
/// Not for fields that are pointers in Go (a grace period of 0 is sent as 0
/// and is one).
pub fn non_zero<T: Default + PartialEq>(n: Option<T>) -> Option<T> {
    n.filter(|n| *n != T::default())
}

/// The annotation that marks the end of a streaming list's initial events.
/// A map entry is a message {1: key, 2: value}; only the key matters here.
pub(crate) fn is_initial_events_end(entry: &Bytes) -> bool {
    #[derive(Clone, PartialEq, Message)]
    struct Entry {
        #[prost(string, optional, tag = "1")]
        key: Option<String>,
    }
    Entry::decode(entry.clone()).is_ok_and(|e| e.key.as_deref() == Some("k8s.io/initial-events-end"))
}

// --- What decoding would cost (see crate::check_cost) ---------------------------------

/// A group (wire types 3 and 4, proto2's nested messages without a length):
/// Kubernetes never sends one, and prost steps over a group at a field
/// number it does not know and decodes on, so the walk below cannot stop
/// there and trust prost to fail. Bytes that hold one are refused.
#[derive(Debug)]
pub(crate) struct Group;

/// The length-delimited fields of a protobuf message, as (field number,
/// contents); fields of other wire types are stepped over, and a group is an
/// error ([`Group`]). Stops at the first byte that does not parse otherwise:
/// prost fails there too, so nothing after it is ever decoded (and so needs
/// no counting).
fn fields(mut bytes: &[u8]) -> impl Iterator<Item = Result<(u32, &[u8]), Group>> {
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
                    return Some(Ok((number, value)));
                }
                3 | 4 => {
                    // Nothing after it is walked: the caller refuses the bytes.
                    bytes = &[];
                    return Some(Err(Group));
                }
                _ => return None,
            }
        }
    })
}

/// The sum of `cost` over the fields of `bytes`, or [`Group`] if they hold one.
fn sum_over(bytes: &[u8], cost: impl Fn(u32, &[u8]) -> Result<usize, Group>) -> Result<usize, Group> {
    fields(bytes).try_fold(0usize, |sum, field| {
        let (number, value) = field?;
        Ok(sum.saturating_add(cost(number, value)?))
    })
}

/// Twice a struct's size: a `Vec` grows by doubling, so it may hold room for
/// as many again as it has entries.
fn entry<T>() -> usize {
    2 * std::mem::size_of::<T>()
}

/// A PodList's items, each a [`PodMsg`] and what is inside it.
pub(crate) fn cost_of_list(bytes: &[u8]) -> Result<usize, Group> {
    sum_over(bytes, |n, pod| if n == 2 { Ok(entry::<PodMsg>().saturating_add(cost_of_pod(pod)?)) } else { Ok(0) })
}

/// A pod: its metadata's repeated fields, and its status (decoded from its
/// bytes later, one pod at a time, and counted here all the same).
pub(crate) fn cost_of_pod(bytes: &[u8]) -> Result<usize, Group> {
    let meta = |bytes: &[u8]| {
        sum_over(bytes, |n, value| {
            Ok(match n {
                // A label: a map entry of two strings (and the map's node).
                11 => entry::<(String, String)>() + value.len(),
                // Annotations, owner references, finalizers: `Bytes` handles.
                12..=14 => entry::<Bytes>(),
                _ => 0,
            })
        })
    };
    sum_over(bytes, |n, value| match n {
        1 => meta(value),
        3 => cost_of_status(value),
        _ => Ok(0),
    })
}

pub(crate) fn cost_of_status(bytes: &[u8]) -> Result<usize, Group> {
    sum_over(bytes, |n, _| {
        Ok(match n {
            2 => entry::<ConditionMsg>(),
            8 | 10 => entry::<ContainerStatusMsg>(),
            _ => 0,
        })
    })
}
