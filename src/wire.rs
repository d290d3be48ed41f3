//! Which format pods are read in, and how the logger wires the protobuf
//! reader in.
//!
//! The reader itself is a crate of its own, crates/kube-pod-protobuf: the
//! envelope, the watch frames, the messages of the fields we keep and kube's
//! watcher state machine over protobuf. It knows nothing of this program.
//! What is the logger's own stays here, at the seam:
//!
//! - the choice of wire (`--wire`) and the one stream the informer reads
//!   either way ([`events`]);
//! - the fallback: a server that will not give us pods in protobuf is read
//!   as JSON from then on ([`refuses_protobuf`] says why, in one line);
//! - our [`Pod`] made from the crate's messages: the crate hands over the
//!   text as the server sent it, and it is cleaned here, once, by the same
//!   `Word` and `Text` the JSON path uses (text.rs), so both wires give the
//!   same cached pod (what text is fit for a line is the logger's rule, not
//!   the reader's);
//! - a watch whose connection broke: one line, a metric and /readyz's
//!   reason ([`watch_interrupted`]), whichever watcher saw it.

use std::mem::take;

use futures::StreamExt;
use futures::stream::BoxStream;
use kube::runtime::watcher::{self, Event};
use kube_pod_protobuf::WireError;
use kube_pod_protobuf::messages::{ContainerStatusMsg, PodMsg, PodStatusMsg, StateMsg, TimeMsg, non_empty, non_zero};
use kube_pod_protobuf::watch::{self as protobuf, Refusal};

use crate::pod::{self, ApiPod, Condition, Conditions, ContainerStatus, Pod, State, Terminated, Truth, Waiting};
use crate::text::{Text, WORD_CHARS, Word, cleaned, shared_name};

/// How far the protobuf watch came (see [`events`]): the informer keeps one,
/// the leader reads it.
pub use kube_pod_protobuf::watch::Position;

/// Which format to read pods in (`--wire`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Wire {
    /// The API server's own format: smaller, and cheaper for it to encode
    #[default]
    Protobuf,
    /// JSON, through kube's own watcher
    Json,
}

impl std::fmt::Display for Wire {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Wire::Protobuf => "protobuf",
            Wire::Json => "json",
        })
    }
}

/// The events of a watch of `api`'s pods over `wire`: kube's watcher for
/// JSON, the crate's for protobuf, asked for as `accept` (None: the real
/// media type; only the test seam sets another). The crate's watcher writes
/// how far it came in `position` (kube's keeps that to itself).
pub fn events(
    wire: Wire,
    accept: Option<&str>,
    api: kube::Api<ApiPod>,
    config: watcher::Config,
    position: &Position,
) -> BoxStream<'static, watcher::Result<Event<Pod>>> {
    match wire {
        Wire::Json => watcher::watcher(api, config).map(|event| event.map(cached)).boxed(),
        Wire::Protobuf => {
            let namespace = api.namespace().map(str::to_string);
            let mut options = protobuf::Options::default().on_interrupted(on_interrupted).position(position.clone());
            if let Some(accept) = accept.and_then(|a| http::HeaderValue::from_str(a).ok()) {
                options = options.accept(accept);
            }
            protobuf::watcher(api.into_client(), namespace.as_deref(), config, options).boxed()
        }
    }
}

/// kube's JSON watcher hands out [`ApiPod`]s; the cache keeps their [`Pod`].
fn cached(event: Event<ApiPod>) -> Event<Pod> {
    match event {
        Event::Apply(pod) => Event::Apply(pod.into_pod()),
        Event::Delete(pod) => Event::Delete(pod.into_pod()),
        Event::Init => Event::Init,
        Event::InitApply(pod) => Event::InitApply(pod.into_pod()),
        Event::InitDone => Event::InitDone,
    }
}

/// Whether an error says we will not get pods in protobuf from this server,
/// and so how, as the start of a line: it refuses protobuf (406 Not
/// Acceptable, 415 Unsupported Media Type), or something between us and it
/// answered in another format (a proxy that rewrites Accept, re-encodes or
/// compresses). JSON it is, then: the crate reports, the logger decides.
pub fn refuses_protobuf(error: &watcher::Error) -> Option<String> {
    match protobuf::refusal(error)? {
        Refusal::Status(code) => {
            let reason = http::StatusCode::from_u16(code).ok().and_then(|c| c.canonical_reason()).unwrap_or_default();
            Some(format!("the API server refuses pods in protobuf ({code} {reason})"))
        }
        // What came back is whatever answered: cleaned before it is named.
        Refusal::Answer { content_type, content_encoding } => {
            let shown = |t: &str| cleaned(t, WORD_CHARS * 2).into_owned();
            let not = WireError::NotProtobuf {
                content_type: shown(content_type),
                content_encoding: content_encoding.map(shown),
            };
            Some(format!("pods were asked for in protobuf, but {not}", not = lowercase_first(&not.to_string())))
        }
        // A kind of refusal the reader learns later: said in general words.
        _ => Some("the API server will not give us pods in protobuf".to_string()),
    }
}

/// Whether the protobuf reader refused bytes it would not decode (a frame
/// too long or too costly, a LIST page too big): its watcher went back to
/// its start, and its next step lists again.
pub fn refused(error: &watcher::Error) -> bool {
    protobuf::refused(error)
}

fn lowercase_first(text: &str) -> String {
    let mut chars = text.chars();
    chars.next().map(|c| c.to_lowercase().chain(chars).collect()).unwrap_or_default()
}

// --- A broken watch connection ---------------------------------------------------------

/// Why a watch stream ended quietly (see logging.rs for kube's, [`events`]
/// for the crate's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Interruption {
    /// The connection closed in the middle of the response (a restarted API
    /// server, a proxy that dropped the connection).
    ClosedMidStream,
    /// Nothing arrived for the read timeout (a path that went silent).
    Silent,
}

/// The crate's hook: the error the body gave (or the crate's idle timer),
/// told apart by what it says, and what the watcher does next.
fn on_interrupted(error: &kube::Error, then: protobuf::Then) {
    let why = if crate::client::timed_out(error) { Interruption::Silent } else { Interruption::ClosedMidStream };
    watch_interrupted(why, Some(then));
}

/// A watch whose connection broke: the watcher (kube's for JSON, the crate's
/// for protobuf) goes on by itself, resuming it from the last resourceVersion,
/// or listing again if it was still sending a streaming list's initial
/// events. kube's tells nobody but a warning of kube-client's (logging.rs
/// turns it into this call, `then` None: kube does not say which it does);
/// the crate's calls its hook, with `then`. Logged here, once per break, so
/// that every outage that breaks the watch shows in the log, and counted as a
/// watch error.
pub fn watch_interrupted(why: Interruption, then: Option<protobuf::Then>) {
    let (reason, line) = interrupted(why, then);
    tracing::warn!("{line}");
    crate::metrics::watch_error();
    crate::probes::watch_error(Some(reason));
}

/// The reason (for /readyz) and the line of [`watch_interrupted`].
fn interrupted(why: Interruption, then: Option<protobuf::Then>) -> (String, String) {
    let reason = match why {
        Interruption::ClosedMidStream => {
            "the connection to the API server closed in the middle of the watch (was the server restarted?)".to_string()
        }
        Interruption::Silent => format!(
            "the API server sent nothing for {} s, the read timeout: the connection is abandoned",
            crate::client::READ_TIMEOUT.as_secs()
        ),
    };
    let next = match then {
        Some(protobuf::Then::Relist) => "the streaming list was not complete: listing again",
        Some(protobuf::Then::Resume) => "resuming from the last resourceVersion",
        // kube's watcher (or a future case of the crate's): either of the two.
        _ => "resuming from the last resourceVersion, or listing again if the list was not complete",
    };
    let line = format!("watch interrupted: {reason}; {next}");
    (reason, line)
}

// --- Our Pod, from the crate's messages ---------------------------------------------------

/// Into the cache's [`Pod`], as pod.rs builds it from JSON: the same fields,
/// the same cleaning, empty read as absent. A status that does not decode
/// leaves `status` None and says why in `unreadable_status`: the pod's
/// identity is still worth keeping, and the informer keeps the status it had
/// before (informer.rs, `Cache::apply`), where a made-up empty one would read
/// "phase Running -> Unknown".
impl From<PodMsg> for Pod {
    fn from(pod: PodMsg) -> Pod {
        let mut m = pod.metadata.unwrap_or_default();
        let unshown = (take(&mut m.annotations), take(&mut m.owner_references), take(&mut m.finalizers));
        let mut unreadable_status = None;
        let status = pod.status.and_then(|raw| {
            // The raw bytes, hashed whole: the status's fingerprint, as
            // pod.rs hashes its JSON text.
            let fingerprint = pod::hash_of(&raw[..]);
            match PodStatusMsg::from_bytes(raw) {
                Ok(status) => Some(pod::Status { fingerprint, ..status_of(status) }),
                Err(e) => {
                    unreadable_status = Some(Text::new(&e.to_string()));
                    None
                }
            }
        });
        Pod {
            metadata: pod::Meta {
                generation: non_zero(m.generation),
                deletion_timestamp: m.deletion_timestamp.and_then(TimeMsg::into_time),
                // A pointer in Go: 0 is sent only when it is 0, and means it.
                deletion_grace_period_seconds: m.deletion_grace_period_seconds,
                ..pod::Meta::new(
                    m.namespace.as_deref(),
                    m.name.as_deref(),
                    m.uid.as_deref(),
                    m.resource_version.as_deref(),
                    pod::Labels::new(m.labels.iter().map(|(k, v)| (k.as_str(), v.as_str()))),
                )
            },
            spec: pod
                .spec
                .map(|s| pod::Spec { node_name: s.node_name.as_deref().filter(|n| !n.is_empty()).map(shared_name) }),
            status,
            unshown_metadata: pod::hash_of(&unshown),
            unreadable_status,
        }
    }
}

fn status_of(s: PodStatusMsg) -> pod::Status {
    let mut conditions = Conditions::default();
    for c in &s.conditions {
        let kind = Condition::from_api(c.r#type.as_deref().unwrap_or_default());
        if let Some(i) = Condition::ALL.iter().position(|k| *k == kind) {
            conditions.0[i] = Some(Truth::from_api(c.status.as_deref().unwrap_or_default()));
        }
    }
    pod::Status {
        phase: non_empty(s.phase).as_deref().map(Word::new),
        reason: non_empty(s.reason).as_deref().map(Word::new),
        message: non_empty(s.message).as_deref().map(Text::new),
        conditions,
        observed_generation: non_zero(s.observed_generation),
        init_container_statuses: s.init_container_statuses.into_iter().map(container_of).collect(),
        container_statuses: s.container_statuses.into_iter().map(container_of).collect(),
        fingerprint: 0,
    }
}

fn container_of(c: ContainerStatusMsg) -> ContainerStatus {
    ContainerStatus {
        name: Word::new(c.name.as_deref().unwrap_or_default()),
        ready: c.ready.unwrap_or_default(),
        restart_count: c.restart_count.unwrap_or_default(),
        state: c.state.map(state_of).unwrap_or_default(),
        last_state: c.last_state.map(state_of).unwrap_or_default(),
    }
}

fn state_of(s: StateMsg) -> State {
    match s {
        StateMsg { terminated: Some(t), .. } => State::Terminated(Box::new(Terminated {
            exit_code: t.exit_code.unwrap_or_default(),
            signal: non_zero(t.signal),
            reason: non_empty(t.reason).as_deref().map(Word::new),
            message: non_empty(t.message).as_deref().map(Text::new),
        })),
        StateMsg { waiting: Some(w), .. } => State::Waiting(Box::new(Waiting {
            reason: non_empty(w.reason).as_deref().map(Word::new),
            message: non_empty(w.message).as_deref().map(Text::new),
        })),
        StateMsg { running: Some(_), .. } => State::Running,
        _ => State::Unknown,
    }
}

#[cfg(test)]
pub(crate) mod tests;
