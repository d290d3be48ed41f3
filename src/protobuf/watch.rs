//! List and watch pods in protobuf: kube's watcher, for this one resource,
//! speaking the API server's own format.
//!
//! kube 5's `watcher` can only ask for JSON, so this is its state machine
//! (kube-runtime 5.0 `watcher::step_trampolined`) again, step for step, over
//! requests that ask for `application/vnd.kubernetes.protobuf`. It yields the
//! same `watcher::Event`s and `watcher::Error`s, so the informer, the cache
//! and everything after them do not know which wire a pod came over:
//!
//! ```text
//! Empty --(paged)----> Init, LIST page by page: InitApply each pod --> InitDone
//!       --(streaming)-> Init, WATCH sendInitialEvents=true: InitApply each pod,
//!                       until the bookmark marked k8s.io/initial-events-end: InitDone
//! then WATCH from the list's resourceVersion: Apply, Delete; a bookmark moves the
//! resourceVersion on; the stream's end resumes from it; 410 Gone: Empty again.
//! ```
//!
//! Errors take the same shape as kube's (`InitialListFailed`, `WatchStartFailed`,
//! `WatchError` for an ERROR event), so the informer's backoff, relist and
//! messages apply unchanged. Where the two wires could differ, they do not:
//!
//! - A connection that breaks in the middle of a watch (a restarted API
//!   server, a proxy that dropped it, nothing for the read timeout) ends the
//!   stream as kube's watcher ends a JSON one: one `watch interrupted` line
//!   ([`watch_interrupted`], the same line logging.rs makes of kube's),
//!   and the watch resumes from the last resourceVersion at once. Only if
//!   that fails is it a `watch failed` with the backoff.
//! - A 2xx answer that is not protobuf (Content-Type, Content-Encoding) is
//!   [`WireError::NotProtobuf`]: [`refuses_protobuf`] tells the informer to
//!   read JSON from then on.
//! - A frame that is refused (too long, too costly to decode, or not a pod
//!   event) is a `WatchFailed` naming its byte offset, and the watcher goes
//!   back to Empty: a frame was lost and the stream's framing can no longer
//!   be trusted, so the informer relists (see [`refused`]).

use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use http::header::{ACCEPT, ACCEPT_ENCODING, CONTENT_ENCODING, CONTENT_TYPE, HeaderValue};
use http_body_util::BodyExt;
use kube::api::{ListParams, VersionMatch, WatchParams};
use kube::client::Body;
use kube::core::Request;
use kube::core::request::Error as BuildError;
use kube::runtime::watcher::{self, Event, InitialListStrategy, ListSemantic};
use kube::{Client, Resource};

use super::{Frames, PodPage, WatchEvent, WireError};
use crate::pod::Pod;

/// What we ask for. (A watch is answered with `;stream=watch` added: frames.)
pub const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// kube's watcher gives a watch its timeout plus this before calling it idle.
const IDLE_MARGIN: Duration = Duration::from_secs(5);

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
/// JSON, ours for protobuf, asked for as `accept` (None: [`PROTOBUF`]; only
/// the test seam sets another).
pub fn events(
    wire: Wire,
    accept: Option<&str>,
    api: kube::Api<Pod>,
    config: watcher::Config,
) -> BoxStream<'static, watcher::Result<Event<Pod>>> {
    match wire {
        Wire::Json => watcher::watcher(api, config).boxed(),
        Wire::Protobuf => {
            let namespace = api.namespace().map(str::to_string);
            let accept =
                accept.and_then(|a| HeaderValue::from_str(a).ok()).unwrap_or(HeaderValue::from_static(PROTOBUF));
            watcher(api.into_client(), namespace, accept, config).boxed()
        }
    }
}

/// Whether an error says we will not get pods in protobuf from this server,
/// and so how, as the start of a line: it refuses protobuf (406 Not
/// Acceptable, 415 Unsupported Media Type), or something between us and it
/// answered in another format (a proxy that rewrites Accept, as `kubectl
/// proxy` does, or re-encodes or compresses). JSON it is, then.
pub fn refuses_protobuf(error: &watcher::Error) -> Option<String> {
    match error {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
            if s.code == 406 || s.code == 415 =>
        {
            let reason = http::StatusCode::from_u16(s.code).ok().and_then(|c| c.canonical_reason()).unwrap_or_default();
            Some(format!("the API server refuses pods in protobuf ({} {reason})", s.code))
        }
        watcher::Error::InitialListFailed(e) | watcher::Error::WatchStartFailed(e) => match wire_error(e) {
            Some(not @ WireError::NotProtobuf { .. }) => {
                Some(format!("pods were asked for in protobuf, but {not}", not = lowercase_first(&not.to_string())))
            }
            _ => None,
        },
        _ => None,
    }
}

/// Whether an error is a frame or a body this watcher refused to decode (and
/// so went back to Empty: the informer relists).
pub fn refused(error: &watcher::Error) -> bool {
    match error {
        watcher::Error::WatchFailed(e) | watcher::Error::InitialListFailed(e) => {
            wire_error(e).is_some_and(|w| !matches!(w, WireError::NotProtobuf { .. }))
        }
        _ => false,
    }
}

/// The [`WireError`] inside a kube error, where [`read_error`] put it.
fn wire_error(error: &kube::Error) -> Option<&WireError> {
    match error {
        kube::Error::ReadEvents(io) => io.get_ref().and_then(|e| e.downcast_ref::<WireError>()),
        _ => None,
    }
}

fn lowercase_first(text: &str) -> String {
    let mut chars = text.chars();
    chars.next().map(|c| c.to_lowercase().chain(chars).collect()).unwrap_or_default()
}

/// Where the watch is, as in kube's watcher.
enum State {
    /// Nothing yet, or starting over after a 410 Gone.
    Empty,
    /// Listing page by page: the pods of the current page still to hand out.
    InitPage {
        continue_token: Option<String>,
        objects: VecDeque<Pod>,
        resource_version: Option<String>,
    },
    /// A streaming list: a watch sending the list as events first.
    InitialWatch {
        stream: Events,
    },
    /// Listed; the watch is to be (re)started from `resource_version`.
    InitListed {
        resource_version: String,
    },
    Watching {
        resource_version: String,
        stream: Events,
    },
}

type Events = BoxStream<'static, Result<WatchEvent, kube::Error>>;

/// The protobuf watcher of the pods in `namespace` (all namespaces if None).
pub fn watcher(
    client: Client,
    namespace: Option<String>,
    accept: HeaderValue,
    config: watcher::Config,
) -> impl Stream<Item = watcher::Result<Event<Pod>>> + Send + 'static {
    let api = Requests { client, path: Pod::url_path(&(), namespace.as_deref()), accept };
    futures::stream::unfold((api, config, State::Empty), |(api, config, mut state)| async move {
        loop {
            let (item, next) = step(&api, &config, state).await;
            state = next;
            if let Some(item) = item {
                return Some((item, (api, config, state)));
            }
        }
    })
}

/// One step of the state machine: maybe an event (or error) to yield, and
/// the next state. The same transitions as kube's watcher.
async fn step(api: &Requests, config: &watcher::Config, state: State) -> (Option<watcher::Result<Event<Pod>>>, State) {
    match state {
        State::Empty => match config.initial_list_strategy {
            InitialListStrategy::ListWatch => (
                Some(Ok(Event::Init)),
                State::InitPage { continue_token: None, objects: VecDeque::new(), resource_version: None },
            ),
            InitialListStrategy::StreamingList => match api.watch(&watch_params(config, true), "0").await {
                Ok(stream) => (Some(Ok(Event::Init)), State::InitialWatch { stream }),
                Err(e) => (Some(Err(watcher::Error::WatchStartFailed(e))), State::Empty),
            },
        },
        State::InitPage { continue_token, mut objects, resource_version } => {
            if let Some(pod) = objects.pop_front() {
                return (
                    Some(Ok(Event::InitApply(pod))),
                    State::InitPage { continue_token, objects, resource_version },
                );
            }
            if continue_token.is_none()
                && let Some(resource_version) = resource_version
            {
                return (Some(Ok(Event::InitDone)), State::InitListed { resource_version });
            }
            let mut params = list_params(config);
            params.continue_token = continue_token;
            match api.list(&params).await {
                Ok(page) => {
                    let resource_version = Some(page.resource_version).filter(|s| !s.is_empty());
                    let continue_token = Some(page.continue_token).filter(|s| !s.is_empty());
                    if resource_version.is_none() && continue_token.is_none() {
                        return (Some(Err(watcher::Error::NoResourceVersion)), State::Empty);
                    }
                    (None, State::InitPage { continue_token, objects: page.items.into(), resource_version })
                }
                Err(e) => (Some(Err(watcher::Error::InitialListFailed(e))), State::Empty),
            }
        }
        State::InitialWatch { mut stream } => match next_or_idle(&mut stream, config.timeout).await {
            Some(Ok(WatchEvent::Added(pod) | WatchEvent::Modified(pod))) => {
                (Some(Ok(Event::InitApply(pod))), State::InitialWatch { stream })
            }
            // The API concepts say a streaming list sends no deletes.
            Some(Ok(WatchEvent::Deleted(_))) => (None, State::InitialWatch { stream }),
            Some(Ok(WatchEvent::Bookmark { resource_version, initial_events_end: true })) => {
                (Some(Ok(Event::InitDone)), State::Watching { resource_version, stream })
            }
            Some(Ok(WatchEvent::Bookmark { .. })) => (None, State::InitialWatch { stream }),
            Some(Ok(WatchEvent::Error(status))) => {
                let next = if status.code == 410 { State::Empty } else { State::InitialWatch { stream } };
                (Some(Err(watcher::Error::WatchError(Box::new(status)))), next)
            }
            // A refused frame: the list cannot be trusted to be whole.
            Some(Err(e)) => (Some(Err(watcher::Error::WatchFailed(e))), State::Empty),
            None => (None, State::Empty),
        },
        State::InitListed { resource_version } => {
            match api.watch(&watch_params(config, false), &resource_version).await {
                Ok(stream) => (None, State::Watching { resource_version, stream }),
                Err(e) => (Some(Err(watcher::Error::WatchStartFailed(e))), State::InitListed { resource_version }),
            }
        }
        State::Watching { resource_version, mut stream } => match next_or_idle(&mut stream, config.timeout).await {
            Some(Ok(WatchEvent::Added(pod) | WatchEvent::Modified(pod))) => match pod.metadata.resource_version.clone()
            {
                Some(rv) if !rv.is_empty() => {
                    (Some(Ok(Event::Apply(pod))), State::Watching { resource_version: rv, stream })
                }
                _ => (Some(Err(watcher::Error::NoResourceVersion)), State::Empty),
            },
            Some(Ok(WatchEvent::Deleted(pod))) => match pod.metadata.resource_version.clone() {
                Some(rv) if !rv.is_empty() => {
                    (Some(Ok(Event::Delete(pod))), State::Watching { resource_version: rv, stream })
                }
                _ => (Some(Err(watcher::Error::NoResourceVersion)), State::Empty),
            },
            Some(Ok(WatchEvent::Bookmark { resource_version, .. })) => {
                (None, State::Watching { resource_version, stream })
            }
            Some(Ok(WatchEvent::Error(status))) => {
                let next = if status.code == 410 { State::Empty } else { State::Watching { resource_version, stream } };
                (Some(Err(watcher::Error::WatchError(Box::new(status)))), next)
            }
            // A refused frame: an event was lost, and resuming from the last
            // resourceVersion would fetch the same frame again. Relist.
            Some(Err(e)) => (Some(Err(watcher::Error::WatchFailed(e))), State::Empty),
            // The stream ended: the server's timeout, or a broken connection
            // (already logged by `frames`). Resume from where we were.
            None => (None, State::InitListed { resource_version }),
        },
    }
}

/// The next event, or None once the watch has been silent for longer than
/// its own timeout (plus a margin): as kube's watcher, a silent connection
/// is given up and the watch resumed.
async fn next_or_idle(stream: &mut Events, timeout: Option<u32>) -> Option<Result<WatchEvent, kube::Error>> {
    let idle = Duration::from_secs(u64::from(timeout.unwrap_or(290))) + IDLE_MARGIN;
    tokio::time::timeout(idle, stream.next()).await.unwrap_or(None)
}

/// The LIST's parameters, as kube's watcher makes them.
fn list_params(config: &watcher::Config) -> ListParams {
    let (resource_version, version_match) = match config.list_semantic {
        ListSemantic::Any => (Some("0".to_string()), Some(VersionMatch::NotOlderThan)),
        ListSemantic::MostRecent => (None, None),
    };
    ListParams {
        label_selector: config.label_selector.clone(),
        field_selector: config.field_selector.clone(),
        resource_version,
        version_match,
        limit: config.page_size,
        ..ListParams::default()
    }
}

/// The WATCH's parameters; `initial` asks a streaming list's first watch to
/// send the list first.
fn watch_params(config: &watcher::Config, initial: bool) -> WatchParams {
    WatchParams {
        label_selector: config.label_selector.clone(),
        field_selector: config.field_selector.clone(),
        timeout: config.timeout,
        bookmarks: config.bookmarks,
        send_initial_events: initial && config.initial_list_strategy == InitialListStrategy::StreamingList,
    }
}

/// The two requests, in protobuf, to the pods' URL.
struct Requests {
    client: Client,
    path: String,
    accept: HeaderValue,
}

impl Requests {
    async fn list(&self, params: &ListParams) -> Result<PodPage, kube::Error> {
        let mut request = Request::new(&self.path).list(params).map_err(kube::Error::BuildRequest)?;
        // kube leaves resourceVersion=0 out of a LIST that has a limit (then
        // every first page would be a consistent read, from etcd). client-go
        // asks its first list at 0, served from the API server's watch cache:
        // so do we, for the first page of a first list (ListSemantic::Any,
        // which the informer sets only while there is no earlier state).
        let dropped_by_kube = params.limit.is_some() && params.continue_token.is_none();
        if params.resource_version.as_deref() == Some("0") && dropped_by_kube {
            let uri = format!("{}&resourceVersion=0", request.uri());
            let invalid = |e: http::uri::InvalidUri| kube::Error::BuildRequest(BuildError::BuildRequest(e.into()));
            *request.uri_mut() = uri.parse().map_err(invalid)?;
        }
        let response = self.send(request, Expect::List).await?;
        let (body, whole) = read_at_most(response.into_body(), super::MAX_LIST_BODY).await?;
        if !whole {
            return Err(read_error(WireError::BodyTooLarge));
        }
        super::pod_list(body).map_err(read_error)
    }

    async fn watch(&self, params: &WatchParams, resource_version: &str) -> Result<Events, kube::Error> {
        let mut request =
            Request::new(&self.path).watch(params, resource_version).map_err(kube::Error::BuildRequest)?;
        // As kube does for watches: no compression of a long-lived stream.
        request.headers_mut().insert(ACCEPT_ENCODING, HeaderValue::from_static("identity"));
        let response = self.send(request, Expect::Watch).await?;
        Ok(frames(response.into_body().into_data_stream()).boxed())
    }

    /// Sends `request` asking for protobuf. A success must be protobuf (see
    /// [`Expect`]), else it is [`WireError::NotProtobuf`]; a response that
    /// is not a success becomes `kube::Error::Api` with the server's Status,
    /// as kube's own.
    async fn send(&self, request: http::Request<Vec<u8>>, expect: Expect) -> Result<http::Response<Body>, kube::Error> {
        let (mut parts, body) = request.into_parts();
        parts.headers.insert(ACCEPT, self.accept.clone());
        let response = self.client.send(http::Request::from_parts(parts, Body::from(body))).await?;
        let code = response.status();
        if code.is_success() {
            return expect.check(response);
        }
        // The server's Status, in protobuf, or in JSON where it could not
        // answer in protobuf (a 406), or whatever text a proxy sent: read up
        // to MAX_ERROR_BODY of it (an error page can be anything) and cleaned
        // where it is logged (client::describe).
        let (body, _) = read_at_most(response.into_body(), super::MAX_ERROR_BODY).await?;
        let status = super::error_status(body.clone())
            .or_else(|| serde_json::from_slice::<kube::core::Status>(&body).ok())
            .unwrap_or_else(|| {
                let text = String::from_utf8_lossy(&body);
                kube::core::Status::failure(text.trim(), code.canonical_reason().unwrap_or_default())
            });
        Err(kube::Error::Api(Box::new(status.with_code(code.as_u16()))))
    }
}

/// What a successful answer must be: protobuf, and for a watch its stream
/// of frames, never compressed (we ask for `identity`; a body in another
/// encoding would be read as garbage).
#[derive(Clone, Copy)]
enum Expect {
    List,
    Watch,
}

impl Expect {
    fn check(self, response: http::Response<Body>) -> Result<http::Response<Body>, kube::Error> {
        let header = |name| response.headers().get(name).map(|v: &HeaderValue| String::from_utf8_lossy(v.as_bytes()));
        let content_type = header(CONTENT_TYPE).unwrap_or_default();
        let encoding = header(CONTENT_ENCODING).filter(|e| !e.trim().eq_ignore_ascii_case("identity"));
        // A media type and its parameters, compared without case or spaces.
        let mut parts = content_type.split(';').map(|p| p.trim().to_ascii_lowercase());
        let media_type = parts.next().unwrap_or_default();
        let streamed = parts.any(|p| p.replace(' ', "") == "stream=watch");
        let is_protobuf = media_type == PROTOBUF && streamed == matches!(self, Expect::Watch);
        if is_protobuf && encoding.is_none() {
            return Ok(response);
        }
        let shown = |t: &str| crate::text::cleaned(t, crate::text::WORD_CHARS * 2).into_owned();
        Err(read_error(WireError::NotProtobuf {
            content_type: shown(&content_type),
            content_encoding: encoding.as_deref().map(shown),
        }))
    }
}

/// A body, read up to `cap` bytes: the bytes, and whether that was all of it.
/// What lies past the cap is never read: the connection is dropped with the
/// body (a bounded allocation, whatever the other side sends).
async fn read_at_most(mut body: Body, cap: usize) -> Result<(Bytes, bool), kube::Error> {
    let mut out = bytes::BytesMut::new();
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame?.into_data() else { continue };
        if out.len() + data.len() > cap {
            out.extend_from_slice(&data[..cap - out.len()]);
            return Ok((out.freeze(), false));
        }
        out.extend_from_slice(&data);
    }
    Ok((out.freeze(), true))
}

/// A decode failure, as the error kube gives for an unreadable event stream.
fn read_error(e: WireError) -> kube::Error {
    kube::Error::ReadEvents(std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// The watch events in a response body, frame by frame. After a frame that
/// is refused the stream ends (its framing can no longer be trusted), and
/// the watcher relists. A connection that breaks ends the stream quietly,
/// after the one `watch interrupted` line, as kube's watcher does for JSON:
/// the watcher resumes from the last resourceVersion it saw.
fn frames(
    body: impl Stream<Item = Result<Bytes, kube::Error>> + Send + 'static,
) -> impl Stream<Item = Result<WatchEvent, kube::Error>> + Send {
    futures::stream::unfold((Box::pin(body), Frames::default(), false), |(mut body, mut frames, mut done)| async move {
        if done {
            return None;
        }
        loop {
            match frames.next_frame() {
                Ok(Some((frame, offset))) => {
                    let event = super::watch_event(frame, offset).map_err(read_error);
                    done = event.is_err();
                    return Some((event, (body, frames, done)));
                }
                Ok(None) => {}
                Err(e) => return Some((Err(read_error(e)), (body, frames, true))),
            }
            match body.next().await {
                Some(Ok(chunk)) => frames.push(&chunk),
                Some(Err(e)) => {
                    let why =
                        if crate::client::timed_out(&e) { Interruption::Silent } else { Interruption::ClosedMidStream };
                    watch_interrupted(why);
                    return None;
                }
                None => {
                    let end = frames.finish().map_err(read_error).err()?;
                    return Some((Err(end), (body, frames, true)));
                }
            }
        }
    })
}

/// Why kube-client ended a watch stream quietly (see logging.rs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Interruption {
    /// The connection closed in the middle of the response (a restarted API
    /// server, a proxy that dropped the connection).
    ClosedMidStream,
    /// Nothing arrived for the read timeout (a path that went silent).
    Silent,
}

/// A watch whose connection broke: the watcher (kube's for JSON, ours for
/// protobuf) resumes it from the last resourceVersion by itself, and tells
/// nobody. Logged here, once per break, so that every outage that breaks the
/// watch shows in the log, and counted as a watch error.
pub fn watch_interrupted(why: Interruption) {
    let reason = match why {
        Interruption::ClosedMidStream => {
            "the connection to the API server closed in the middle of the watch (was the server restarted?)".to_string()
        }
        Interruption::Silent => format!(
            "the API server sent nothing for {} s, the read timeout: the connection is abandoned",
            crate::client::READ_TIMEOUT.as_secs()
        ),
    };
    tracing::warn!("watch interrupted: {reason}; resuming from the last resourceVersion");
    crate::metrics::watch_error();
    crate::probes::watch_error(Some(reason));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(content_type: &str, encoding: Option<&str>) -> http::Response<Body> {
        // From bytes: a header may carry any byte but a control (a tab aside).
        let content_type = HeaderValue::from_bytes(content_type.as_bytes()).unwrap();
        let mut response = http::Response::builder().header(CONTENT_TYPE, content_type);
        if let Some(encoding) = encoding {
            response = response.header(CONTENT_ENCODING, encoding);
        }
        response.body(Body::empty()).unwrap()
    }

    /// What came back, as the informer's line names it; None when accepted.
    fn verdict(expect: Expect, content_type: &str, encoding: Option<&str>) -> Option<String> {
        let error = expect.check(answer(content_type, encoding)).err()?;
        refuses_protobuf(&watcher::Error::InitialListFailed(error))
    }

    #[tokio::test]
    async fn a_body_is_read_no_further_than_its_cap() {
        let body = || Body::from(vec![7u8; 100]);
        let (bytes, whole) = read_at_most(body(), 10).await.unwrap();
        assert_eq!((bytes.len(), whole), (10, false));
        let (bytes, whole) = read_at_most(body(), 100).await.unwrap();
        assert_eq!((bytes.len(), whole), (100, true));
    }

    #[test]
    fn only_protobuf_is_read_as_protobuf() {
        let pb = "application/vnd.kubernetes.protobuf";
        assert_eq!(verdict(Expect::List, pb, None), None);
        assert_eq!(verdict(Expect::List, pb, Some("identity")), None);
        assert_eq!(verdict(Expect::Watch, "application/vnd.kubernetes.protobuf;stream=watch", None), None);
        assert_eq!(verdict(Expect::Watch, "Application/Vnd.Kubernetes.Protobuf; stream=watch", None), None);
        let refused = |t: &str, e: Option<&str>| {
            let tail = e.map(|e| format!(" and Content-Encoding {e:?}")).unwrap_or_default();
            Some(format!(
                "pods were asked for in protobuf, but the answer to a request for protobuf came with Content-Type {t:?}{tail}"
            ))
        };
        assert_eq!(verdict(Expect::List, "application/json", None), refused("application/json", None));
        assert_eq!(verdict(Expect::List, pb, Some("gzip")), refused(pb, Some("gzip")));
        // A list where a watch was asked for, and the other way round.
        assert_eq!(verdict(Expect::Watch, pb, None), refused(pb, None));
        let stream = "application/vnd.kubernetes.protobuf;stream=watch";
        assert_eq!(verdict(Expect::List, stream, None), refused(stream, None));
        // What came back is cleaned before it is named.
        assert_eq!(verdict(Expect::List, "text/html\t\u{202e}lmth", None), refused(r"text/html\t\u{202e}lmth", None));
    }
}
