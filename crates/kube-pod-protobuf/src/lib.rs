//! Pods in the API server's own format, protobuf, for kube-rs: the bytes on
//! the wire, messages that read from them only what a pod logger keeps, and a
//! watcher that yields kube's `watcher::Event`s, so kube's reflector and
//! everything after it work unchanged.
//!
//! Why: kube-apiserver keeps objects in etcd as protobuf and encodes JSON for
//! clients that ask for it. A list of pods is smaller in protobuf than in
//! JSON, and the server spends more CPU to make the JSON (the README links
//! the measurements). client-go asks for protobuf; kube-rs can ask only for
//! JSON, so this crate reads protobuf itself, for pods alone.
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
//! The crate in four parts:
//!
//! - this module: a LIST page ([`pod_list`]), a watch event
//!   ([`watch_event`]), the frames of a watch stream ([`Frames`]) (each
//!   unwrapping the envelope), and the caps on what bad bytes can cost;
//! - [`messages`]: the prost structs of the pod fields that are kept, and
//!   nothing else;
//! - [`openapi`]: those messages as a k8s-openapi `Pod`, for a program that
//!   has no pod type of its own;
//! - [`watch`]: kube's watcher state machine over protobuf requests.
//!
//! Pods come out as any type `K: From<PodMsg>`: the program decides what of
//! the messages it keeps and how it cleans the text in them (the crate hands
//! over the strings as the server sent them). `PodMsg` itself, a k8s-openapi
//! `Pod` ([`openapi`]) or a program's own pod type all fit.
//!
//! What bad bytes can cost is bounded before anything is decoded: a frame is
//! at most [`MAX_FRAME`], a LIST page [`MAX_LIST_BODY`], an error body
//! [`MAX_ERROR_BODY`]; and since prost turns every 2-byte empty entry of a
//! repeated message field (`42 00`: an empty ContainerStatus) into a whole
//! struct, a hundred times its size on the wire, the crate counts what prost
//! would allocate for the structs of a list or a pod, and refuses bytes that
//! would take more than [`MAX_DECODED`]. Bytes that hold a protobuf group
//! where the count walks are refused ([`WireError::Group`]): Kubernetes never
//! sends one, and prost steps over a group at a field number it does not know
//! and decodes on, past where the count could follow.
//!
//! Nothing here panics on bad input: a decode failure is a [`WireError`] that
//! says which message and where in the bytes (a fuzz test checks).

#![warn(missing_docs)]

pub mod messages;
pub mod openapi;
pub mod watch;

use bytes::{Buf, Bytes};
use prost::Message;

pub use messages::{PodMsg, PodStatusMsg};

/// The four bytes every protobuf object starts with.
pub const MAGIC: &[u8; 4] = b"k8s\0";

/// A frame larger than this is refused rather than read: a pod is at most
/// about 1.5 MB (etcd's request limit), and a frame is one pod with a few
/// bytes of watch event and envelope around it, so 4 MiB is plenty and a
/// larger "length" is a broken stream or a hostile one, not a pod.
pub const MAX_FRAME: usize = 4 << 20;

/// A LIST response larger than this is refused rather than read on
/// ([`WireError::BodyTooLarge`]). A page of the 500 pods kube's watcher asks
/// for by default fits with 256 KiB a pod, far more than real pods weigh.
/// But the watcher's first LIST, at resourceVersion 0, is answered whole by
/// the API server's watch cache, whatever the page size: where the pods weigh
/// more than this in protobuf, that LIST is refused, and the watcher's next
/// one is consistent (no resourceVersion) and paged, which the server answers
/// a page at a time (see [`watch`]).
pub const MAX_LIST_BODY: usize = 128 << 20;

/// How much of an error response is read: a Status is a few hundred bytes,
/// and a proxy's error page is cut here.
pub const MAX_ERROR_BODY: usize = 64 << 10;

/// The most memory the message structs of one LIST page or one watch frame
/// may take once decoded, as the crate counts it beforehand: a page of 500
/// busy pods stays under an eighth of it (a unit test checks); bytes that
/// would take more, or that hold a protobuf group (which the count cannot
/// follow), are refused.
pub const MAX_DECODED: usize = 64 << 20;

/// What went wrong reading protobuf, and where: `offset` counts bytes from the
/// start of the response body (of the watch stream, for a frame).
///
/// Texts from the server (`got`, `content_type`) are kept as they came
/// (`Debug`-quoted in the message, so a control character cannot break a
/// line); a program with its own rules for server text applies them where it
/// shows the error.
#[derive(Clone, Debug, thiserror::Error, PartialEq)]
#[non_exhaustive]
pub enum WireError {
    /// The bytes do not start with [`MAGIC`]: not a Kubernetes protobuf object.
    #[error("not a Kubernetes protobuf object at byte {offset}: it starts {start:02x?}, not with \"k8s\\0\"")]
    Magic {
        /// Where the object starts.
        offset: usize,
        /// Its first (up to) four bytes.
        start: Vec<u8>,
    },
    /// prost could not decode a message.
    #[error("bad protobuf in the {message} at byte {offset}: {reason}")]
    Decode {
        /// Which message: `PodList`, `Pod`, `PodStatus`, `WatchEvent`...
        message: &'static str,
        /// Where the message starts.
        offset: usize,
        /// prost's own words.
        reason: String,
    },
    /// An object of another kind than the one asked for (a Secret in a pod
    /// watch, say, or an event type that does not exist).
    #[error("expected a {want} at byte {offset}, got a {got:?}")]
    Kind {
        /// What was expected.
        want: &'static str,
        /// What the bytes said they were.
        got: String,
        /// Where the object starts.
        offset: usize,
    },
    /// A watch frame's length prefix is more than [`MAX_FRAME`].
    #[error("a watch frame at byte {offset} says it is {len} bytes long, more than the {MAX_FRAME} a pod can need")]
    FrameTooLarge {
        /// Where the frame's length prefix starts.
        offset: usize,
        /// The length it gives.
        len: usize,
    },
    /// The watch stream ended in the middle of a frame.
    #[error("the watch stream ended inside the frame that starts at byte {offset}")]
    Truncated {
        /// Where the unfinished frame starts.
        offset: usize,
    },
    /// A LIST response of more than [`MAX_LIST_BODY`].
    #[error("a LIST response of more than {MAX_LIST_BODY} bytes: refused (a page of pods is far smaller)")]
    BodyTooLarge,
    /// Decoding would allocate more than [`MAX_DECODED`] for structs.
    #[error(
        "the {message} at byte {offset} would take {cost} bytes of structs to decode, more than the {MAX_DECODED} \
         allowed (its repeated fields hold more entries than real pods have): refused"
    )]
    TooCostly {
        /// Which message.
        message: &'static str,
        /// Where it starts.
        offset: usize,
        /// What its structs would take, counted from the bytes.
        cost: usize,
    },
    /// A protobuf group (wire type 3 or 4) in a message whose cost is
    /// counted: Kubernetes never sends one, and prost would step over it and
    /// decode on, past where the cost could be counted.
    #[error("the {message} at byte {offset} holds a protobuf group, which Kubernetes never sends: refused")]
    Group {
        /// Which message.
        message: &'static str,
        /// Where it starts.
        offset: usize,
    },
    /// A 2xx answer that is not protobuf: a proxy that rewrote the Accept
    /// header, re-encoded or compressed the body. The
    /// caller decides what to do; reading JSON instead is the usual answer.
    #[error(
        "the answer to a request for protobuf came with Content-Type {content_type:?}{}",
        encoding_of(content_encoding)
    )]
    NotProtobuf {
        /// The Content-Type that came back, as sent (invalid UTF-8 replaced).
        content_type: String,
        /// The Content-Encoding, when there was one other than `identity`.
        content_encoding: Option<String>,
    },
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
pub(crate) fn unwrap_object(bytes: Bytes, offset: usize) -> Result<(String, Bytes), WireError> {
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
pub struct PodPage<K> {
    /// The pods of the page, in the server's order.
    pub items: Vec<K>,
    /// The list's resourceVersion: where a watch that follows it starts.
    pub resource_version: String,
    /// Empty on the last page.
    pub continue_token: String,
}

/// A LIST response body: `k8s\0` + Unknown{kind: PodList}.
pub fn pod_list<K: From<PodMsg>>(body: Bytes) -> Result<PodPage<K>, WireError> {
    let (kind, raw) = unwrap_object(body, 0)?;
    if kind != "PodList" {
        return Err(WireError::Kind { want: "PodList", got: kind, offset: 0 });
    }
    check_cost("PodList", &raw, 0, messages::cost_of_list)?;
    let list = PodListMsg::decode(raw).map_err(|e| decode_error("PodList", 0, e))?;
    let meta = list.metadata.unwrap_or_default();
    Ok(PodPage {
        items: list.items.into_iter().map(K::from).collect(),
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
#[non_exhaustive]
pub enum WatchEvent<K> {
    /// A pod created (or, in a streaming list, one that was there).
    Added(K),
    /// A pod changed.
    Modified(K),
    /// A pod deleted: its last state.
    Deleted(K),
    /// A bookmark: only the resourceVersion, and whether it marks the end of
    /// a streaming list's initial events (the `k8s.io/initial-events-end`
    /// annotation).
    Bookmark {
        /// Where the watch has got to.
        resource_version: String,
        /// Whether a streaming list's initial events are all sent.
        initial_events_end: bool,
    },
    /// An error the server reports inside the stream (410 Gone, mostly);
    /// boxed, as in kube's `watcher::Error::WatchError`.
    Error(Box<kube::core::Status>),
}

/// One watch frame's bytes (after its length prefix), found at `offset` of
/// the stream.
pub fn watch_event<K: From<PodMsg>>(frame: Bytes, offset: usize) -> Result<WatchEvent<K>, WireError> {
    let event = WatchEventMsg::decode(frame).map_err(|e| decode_error("WatchEvent", offset, e))?;
    let raw = event.object.and_then(|o| o.raw).unwrap_or_default();
    let kind_of_event = event.r#type.unwrap_or_default();
    let (kind, raw) = unwrap_object(raw, offset)?;
    match (kind_of_event.as_str(), kind.as_str()) {
        ("ERROR", "Status") => Ok(WatchEvent::Error(Box::new(status_of(raw, offset)?))),
        ("BOOKMARK", "Pod") => {
            check_cost("Pod (bookmark)", &raw, offset, messages::cost_of_pod)?;
            let pod = PodMsg::decode(raw).map_err(|e| decode_error("Pod (bookmark)", offset, e))?;
            let meta = pod.metadata.unwrap_or_default();
            Ok(WatchEvent::Bookmark {
                resource_version: meta.resource_version.unwrap_or_default(),
                initial_events_end: meta.annotations.iter().any(messages::is_initial_events_end),
            })
        }
        (event @ ("ADDED" | "MODIFIED" | "DELETED"), "Pod") => {
            check_cost("Pod", &raw, offset, messages::cost_of_pod)?;
            let pod = K::from(PodMsg::decode(raw).map_err(|e| decode_error("Pod", offset, e))?);
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
pub(crate) fn error_status(body: Bytes) -> Option<kube::core::Status> {
    let (kind, raw) = unwrap_object(body, 0).ok()?;
    (kind == "Status").then(|| status_of(raw, 0).ok()).flatten()
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
///
/// Bytes that hold a protobuf group anywhere the count walks are refused
/// ([`WireError::Group`]): prost would step over the group and decode on,
/// past where the count could follow.
fn check_cost(
    message: &'static str,
    bytes: &[u8],
    offset: usize,
    cost: fn(&[u8]) -> Result<usize, messages::Group>,
) -> Result<(), WireError> {
    match cost(bytes) {
        Err(messages::Group) => Err(WireError::Group { message, offset }),
        Ok(cost) if cost > MAX_DECODED => Err(WireError::TooCostly { message, offset, cost }),
        Ok(_) => Ok(()),
    }
}

// --- Watch frames ---------------------------------------------------------------------

/// Splits a watch response into frames as its bytes arrive: feed it each
/// chunk of the body, take out every complete frame. A frame may span
/// chunks, and a chunk may hold several frames.
#[derive(Debug, Default)]
pub struct Frames {
    /// Bytes received and not yet taken out as a frame.
    buffer: bytes::BytesMut,
    /// Where `buffer` starts in the stream, for error offsets.
    offset: usize,
}

impl Frames {
    /// Adds the next chunk of the body.
    pub fn push(&mut self, chunk: &[u8]) {
        self.buffer.extend_from_slice(chunk);
    }

    /// The next complete frame and the byte it started at, None when more
    /// bytes are needed, or an error for a length no pod can have (as soon
    /// as the length prefix is in, before any of the frame is waited for).
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
