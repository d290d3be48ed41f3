//! List and watch pods in protobuf: kube's watcher, for this one resource,
//! speaking the API server's own format.
//!
//! kube 5's `watcher` can only ask for JSON, so this is its state machine
//! (kube-runtime 5.0 `watcher::step_trampolined`) again, step for step, over
//! requests that ask for `application/vnd.kubernetes.protobuf`. It yields the
//! same `watcher::Event`s and `watcher::Error`s, so a reflector, a program's
//! cache and everything after them do not know which wire a pod came over:
//!
//! ```text
//! Empty --(paged)----> Init, LIST page by page: InitApply each pod --> InitDone
//!       --(streaming)-> Init, WATCH sendInitialEvents=true: InitApply each pod,
//!                       until the bookmark marked k8s.io/initial-events-end: InitDone
//! then WATCH from the list's resourceVersion: Apply, Delete; a bookmark moves the
//! resourceVersion on; the stream's end resumes from it; 410 Gone: Empty again.
//! ```
//!
//! One thing more than kube's: the resourceVersion it is at, which kube's
//! watcher keeps to itself, is written to a [`Position`] the program can
//! read (bookmarks included: they are asked for unless the config disables
//! them, `allowWatchBookmarks=true`, as in kube).
//!
//! Errors take the same shape as kube's (`InitialListFailed`, `WatchStartFailed`,
//! `WatchError` for an ERROR event), so a program's backoff, relist and
//! messages apply unchanged. Where the two wires could differ, they do not:
//!
//! - A connection that breaks in the middle of a watch (a restarted API
//!   server, a proxy that dropped it, nothing for the client's read timeout)
//!   ends the stream as kube's watcher ends a JSON one: the watch resumes
//!   from the last resourceVersion at once, and [`Options::on_interrupted`]
//!   hears of it (kube-client logs a warning of its own for JSON). Only if
//!   resuming fails is it a `WatchStartFailed`.
//!
//! Where they must differ, the caller decides:
//!
//! - A server that will not answer in protobuf: a 406 Not Acceptable or 415
//!   Unsupported Media Type is `kube::Error::Api` with that code, as kube
//!   gives it; a 2xx answer that is not protobuf (Content-Type,
//!   Content-Encoding) is [`WireError::NotProtobuf`] ([`wire_error`] finds
//!   it). This watcher never switches to JSON by itself: it retries as kube's
//!   does, and a program that wants JSON then starts kube's own watcher.
//! - A frame that is refused (too long, too costly to decode, or not a pod
//!   event) is a `WatchFailed` naming its byte offset, and the watcher goes
//!   back to Empty: a frame was lost and the stream's framing can no longer
//!   be trusted, so its next step lists again ([`refused`] tells these apart).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use http::header::{ACCEPT, ACCEPT_ENCODING, CONTENT_ENCODING, CONTENT_TYPE, HeaderValue};
use http_body_util::BodyExt;
use kube::Client;
use kube::Resource as _;
use kube::api::{ListParams, VersionMatch, WatchParams};
use kube::client::Body;
use kube::core::Request;
use kube::core::request::Error as BuildError;
use kube::runtime::watcher::{self, Event, InitialListStrategy, ListSemantic};

use crate::{Frames, PodMsg, PodPage, WatchEvent, WireError};

/// What we ask for. (A watch is answered with `;stream=watch` added: frames.)
pub const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// kube's watcher gives a watch its timeout plus this before calling it idle.
const IDLE_MARGIN: Duration = Duration::from_secs(5);

/// How the watcher asks, and whom it tells of a broken connection.
#[derive(Clone, Debug)]
pub struct Options {
    /// The media type asked for, [`PROTOBUF`] by default. Another one is for
    /// tests: a real server answers an unknown type 406 Not Acceptable, which
    /// is how a program sees what it does with a server that refuses
    /// protobuf.
    pub accept: HeaderValue,
    /// Called once for each watch whose connection broke (the watcher then
    /// resumes it by itself), with the error the body gave. The default logs
    /// a warning through `tracing`. A plain `fn`: the hook is for a log line
    /// or a counter, which live in statics, and a `fn` keeps [`Options`]
    /// `Clone` and `Debug` with nothing to share.
    pub on_interrupted: fn(&kube::Error),
    /// Where the watcher writes how far the stream has come (see
    /// [`Position`]). Keep a clone to read it; give the same one to the
    /// watcher a program builds again after it dropped one, and it goes on
    /// from where the last one stopped.
    pub position: Position,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            accept: HeaderValue::from_static(PROTOBUF),
            on_interrupted: log_interrupted,
            position: Position::default(),
        }
    }
}

/// How far the watch stream has come, in resourceVersions: what kube's
/// watcher keeps to itself. A program that must say "every change up to here
/// is handled" (a leader's progress, for one) reads it here.
///
/// Two readings, written by the watcher as it goes:
///
/// - [`Position::handled`]: the resourceVersion up to which the stream has
///   been handed out *and the consumer came back for more*: the last event's,
///   a bookmark's, or a list's once its `InitDone` was taken. It is written
///   when the stream is polled for the next event, never when an event is
///   handed out: a consumer that handles each event before it asks for the
///   next (the usual `while let Some(e) = stream.next().await { handle(e) }`)
///   has handled every change at or below it. A relist in progress leaves it
///   where it was (its pods are not handled until its `InitDone`).
/// - [`Position::listed`]: the resourceVersion of the last list whose
///   `InitDone` was handed out (the LIST's, or a streaming list's end
///   bookmark's), written before that `InitDone` is: a pod the list lacks
///   was deleted (or left the selector) no later than it.
#[derive(Clone, Debug, Default)]
pub struct Position(Arc<Mutex<Marks>>);

#[derive(Debug, Default)]
struct Marks {
    handled: Option<String>,
    listed: Option<String>,
}

impl Position {
    /// Every change at or below this resourceVersion was handed out, and the
    /// consumer has asked for more since. None before the first list is done.
    pub fn handled(&self) -> Option<String> {
        self.lock().handled.clone()
    }

    /// The resourceVersion of the last list completed (see [`Position`]).
    pub fn listed(&self) -> Option<String> {
        self.lock().listed.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Marks> {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The stream is polled again in `state`: what was handed out before is
    /// handled. Only a watch has a position; a list's pods are not handled
    /// until its `InitDone` (after which the state is `InitListed`).
    fn poll_in(&self, state: &State) {
        if let State::InitListed { resource_version } | State::Watching { resource_version, .. } = state {
            self.lock().handled = Some(resource_version.clone());
        }
    }

    /// A list's `InitDone` is about to be handed out, the watcher now in `state`.
    fn list_done(&self, state: &State) {
        if let State::InitListed { resource_version } | State::Watching { resource_version, .. } = state {
            self.lock().listed = Some(resource_version.clone());
        }
    }
}

/// The default [`Options::on_interrupted`]: a warning, so that an outage that
/// broke the watch is seen, not only survived.
fn log_interrupted(error: &kube::Error) {
    tracing::warn!("watch interrupted: {error}; resuming from the last resourceVersion");
}

/// Why a server will not give us pods in protobuf (see [`refusal`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal<'a> {
    /// It said so: 406 Not Acceptable or 415 Unsupported Media Type.
    Status(u16),
    /// Something answered a success in another format: a proxy that rewrote
    /// the Accept header, re-encoded or compressed the body. The headers as
    /// they came (cut to 256 characters).
    Answer {
        /// The Content-Type that came back.
        content_type: &'a str,
        /// The Content-Encoding, if not `identity`.
        content_encoding: Option<&'a str>,
    },
}

/// Whether `error` says this server (or what stands between it and us) will
/// not give us pods in protobuf, and how. Retrying will not change that, so
/// this is where a program reads JSON instead, with kube's own watcher; the
/// watcher here never does so by itself (it would not know how the program
/// wants it said, or whether it wants JSON at all).
pub fn refusal(error: &watcher::Error) -> Option<Refusal<'_>> {
    match error {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
            if s.code == 406 || s.code == 415 =>
        {
            Some(Refusal::Status(s.code))
        }
        watcher::Error::InitialListFailed(e) | watcher::Error::WatchStartFailed(e) => match wire_error(e) {
            Some(WireError::NotProtobuf { content_type, content_encoding }) => {
                Some(Refusal::Answer { content_type, content_encoding: content_encoding.as_deref() })
            }
            _ => None,
        },
        _ => None,
    }
}

/// Whether an error is a frame or a body this watcher refused to decode (and
/// so went back to Empty: its next step lists again). A program that counts
/// relists, or words them, tells these from other failures by it.
pub fn refused(error: &watcher::Error) -> bool {
    match error {
        watcher::Error::WatchFailed(e) | watcher::Error::InitialListFailed(e) => {
            wire_error(e).is_some_and(|w| !matches!(w, WireError::NotProtobuf { .. }))
        }
        _ => false,
    }
}

/// The [`WireError`] inside a kube error, if it holds one: the watcher puts
/// its decode failures (and [`WireError::NotProtobuf`]) in
/// `kube::Error::ReadEvents`, the error kube gives for an unreadable event
/// stream, so they travel in kube's own error types.
pub fn wire_error(error: &kube::Error) -> Option<&WireError> {
    match error {
        kube::Error::ReadEvents(io) => io.get_ref().and_then(|e| e.downcast_ref::<WireError>()),
        _ => None,
    }
}

/// Where the watch is, as in kube's watcher. Pods wait here as messages,
/// and become `K` one at a time, as each is handed out.
enum State {
    /// Nothing yet, or starting over after a 410 Gone.
    Empty,
    /// Listing page by page: the pods of the current page still to hand out.
    InitPage {
        continue_token: Option<String>,
        objects: VecDeque<PodMsg>,
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

type Events = BoxStream<'static, Result<WatchEvent<PodMsg>, kube::Error>>;

/// The protobuf watcher of the pods in `namespace` (all namespaces if None):
/// kube's `watcher(api, config)` for pods, read in protobuf. Each pod comes
/// out as `K` (see the crate's docs for the choices), ready for kube's
/// `reflector` when `K` is a kube `Resource`.
///
/// `config` is read as kube's watcher reads it: the selectors, the page size,
/// the list semantic, streaming lists or paged, the watch timeout and
/// bookmarks.
pub fn watcher<K: From<PodMsg> + Send + 'static>(
    client: Client,
    namespace: Option<&str>,
    config: watcher::Config,
    options: Options,
) -> impl Stream<Item = watcher::Result<Event<K>>> + Send + 'static {
    let path = k8s_openapi::api::core::v1::Pod::url_path(&(), namespace);
    let position = options.position;
    let api = Requests { client, path, accept: options.accept, on_interrupted: options.on_interrupted };
    futures::stream::unfold((api, config, State::Empty, position), |(api, config, mut state, position)| async move {
        loop {
            // Polled again: the consumer is done with what it was handed
            // (and a bookmark, read inside this loop, hands out nothing).
            position.poll_in(&state);
            let (item, next) = step(&api, &config, state).await;
            state = next;
            if let Some(item) = item {
                if matches!(item, Ok(Event::InitDone)) {
                    position.list_done(&state);
                }
                return Some((item, (api, config, state, position)));
            }
        }
    })
}

/// One step of the state machine: maybe an event (or error) to yield, and
/// the next state. The same transitions as kube's watcher.
async fn step<K: From<PodMsg> + Send + 'static>(
    api: &Requests,
    config: &watcher::Config,
    state: State,
) -> (Option<watcher::Result<Event<K>>>, State) {
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
                    Some(Ok(Event::InitApply(K::from(pod)))),
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
                (Some(Ok(Event::InitApply(K::from(pod)))), State::InitialWatch { stream })
            }
            // The API concepts say a streaming list sends no deletes.
            Some(Ok(WatchEvent::Deleted(_))) => (None, State::InitialWatch { stream }),
            Some(Ok(WatchEvent::Bookmark { resource_version, initial_events_end: true })) => {
                (Some(Ok(Event::InitDone)), State::Watching { resource_version, stream })
            }
            Some(Ok(WatchEvent::Bookmark { .. })) => (None, State::InitialWatch { stream }),
            Some(Ok(WatchEvent::Error(status))) => {
                let next = if status.code == 410 { State::Empty } else { State::InitialWatch { stream } };
                (Some(Err(watcher::Error::WatchError(status))), next)
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
            Some(Ok(WatchEvent::Added(pod) | WatchEvent::Modified(pod))) => match resource_version_of(&pod) {
                Some(rv) => (Some(Ok(Event::Apply(K::from(pod)))), State::Watching { resource_version: rv, stream }),
                None => (Some(Err(watcher::Error::NoResourceVersion)), State::Empty),
            },
            Some(Ok(WatchEvent::Deleted(pod))) => match resource_version_of(&pod) {
                Some(rv) => (Some(Ok(Event::Delete(K::from(pod)))), State::Watching { resource_version: rv, stream }),
                None => (Some(Err(watcher::Error::NoResourceVersion)), State::Empty),
            },
            Some(Ok(WatchEvent::Bookmark { resource_version, .. })) => {
                (None, State::Watching { resource_version, stream })
            }
            Some(Ok(WatchEvent::Error(status))) => {
                let next = if status.code == 410 { State::Empty } else { State::Watching { resource_version, stream } };
                (Some(Err(watcher::Error::WatchError(status))), next)
            }
            // A refused frame: an event was lost, and resuming from the last
            // resourceVersion would fetch the same frame again. Relist.
            Some(Err(e)) => (Some(Err(watcher::Error::WatchFailed(e))), State::Empty),
            // The stream ended: the server's timeout, or a broken connection
            // (already told to `on_interrupted` by `frames`). Resume from
            // where we were.
            None => (None, State::InitListed { resource_version }),
        },
    }
}

/// A pod's resourceVersion, read before the pod becomes a `K`: the watch
/// resumes from it, whatever `K` keeps.
fn resource_version_of(pod: &PodMsg) -> Option<String> {
    pod.metadata.as_ref().and_then(|m| m.resource_version.clone()).filter(|rv| !rv.is_empty())
}

/// The next event, or None once the watch has been silent for longer than
/// its own timeout (plus a margin): as kube's watcher, a silent connection
/// is given up and the watch resumed.
async fn next_or_idle(stream: &mut Events, timeout: Option<u32>) -> Option<Result<WatchEvent<PodMsg>, kube::Error>> {
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
    on_interrupted: fn(&kube::Error),
}

impl Requests {
    async fn list(&self, params: &ListParams) -> Result<PodPage<PodMsg>, kube::Error> {
        let mut request = Request::new(&self.path).list(params).map_err(kube::Error::BuildRequest)?;
        // kube leaves resourceVersion=0 out of a LIST that has a limit (then
        // every first page would be a consistent read, from etcd). client-go
        // asks its first list at 0, served from the API server's watch cache:
        // so do we, for the first page of a first list (ListSemantic::Any,
        // which a program sets only while it has no earlier state: kube's
        // default).
        let dropped_by_kube = params.limit.is_some() && params.continue_token.is_none();
        if params.resource_version.as_deref() == Some("0") && dropped_by_kube {
            let uri = format!("{}&resourceVersion=0", request.uri());
            let invalid = |e: http::uri::InvalidUri| kube::Error::BuildRequest(BuildError::BuildRequest(e.into()));
            *request.uri_mut() = uri.parse().map_err(invalid)?;
        }
        let response = self.send(request, Expect::List).await?;
        let (body, whole) = read_at_most(response.into_body(), crate::MAX_LIST_BODY).await?;
        if !whole {
            return Err(read_error(WireError::BodyTooLarge));
        }
        crate::pod_list(body).map_err(read_error)
    }

    async fn watch(&self, params: &WatchParams, resource_version: &str) -> Result<Events, kube::Error> {
        let mut request =
            Request::new(&self.path).watch(params, resource_version).map_err(kube::Error::BuildRequest)?;
        // As kube does for watches: no compression of a long-lived stream.
        request.headers_mut().insert(ACCEPT_ENCODING, HeaderValue::from_static("identity"));
        let response = self.send(request, Expect::Watch).await?;
        Ok(frames(response.into_body().into_data_stream(), self.on_interrupted).boxed())
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
        // to MAX_ERROR_BODY of it (an error page can be anything), kept as
        // it came: the program cleans what it shows.
        let (body, _) = read_at_most(response.into_body(), crate::MAX_ERROR_BODY).await?;
        let status = crate::error_status(body.clone())
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
        Err(read_error(WireError::NotProtobuf {
            content_type: at_most(&content_type, SHOWN_CHARS),
            content_encoding: encoding.as_deref().map(|e| at_most(e, SHOWN_CHARS)),
        }))
    }
}

/// How much of a header [`WireError::NotProtobuf`] keeps: a media type is a
/// few dozen characters, and a header can be kilobytes.
const SHOWN_CHARS: usize = 256;

/// The first `max` characters of `text`.
fn at_most(text: &str, max: usize) -> String {
    text.chars().take(max).collect()
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
/// after one call of `on_interrupted`, as kube's watcher does for JSON (where
/// kube-client logs a warning): the watcher resumes from the last
/// resourceVersion it saw.
fn frames(
    body: impl Stream<Item = Result<Bytes, kube::Error>> + Send + 'static,
    on_interrupted: fn(&kube::Error),
) -> impl Stream<Item = Result<WatchEvent<PodMsg>, kube::Error>> + Send {
    futures::stream::unfold(
        (Box::pin(body), Frames::default(), false),
        move |(mut body, mut frames, mut done)| async move {
            if done {
                return None;
            }
            loop {
                match frames.next_frame() {
                    Ok(Some((frame, offset))) => {
                        let event = crate::watch_event(frame, offset).map_err(read_error);
                        done = event.is_err();
                        return Some((event, (body, frames, done)));
                    }
                    Ok(None) => {}
                    Err(e) => return Some((Err(read_error(e)), (body, frames, true))),
                }
                match body.next().await {
                    Some(Ok(chunk)) => frames.push(&chunk),
                    Some(Err(e)) => {
                        on_interrupted(&e);
                        return None;
                    }
                    None => {
                        let end = frames.finish().map_err(read_error).err()?;
                        return Some((Err(end), (body, frames, true)));
                    }
                }
            }
        },
    )
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

    /// What was refused, as the error says it; None when accepted.
    fn verdict(expect: Expect, content_type: &str, encoding: Option<&str>) -> Option<WireError> {
        let error = expect.check(answer(content_type, encoding)).err()?;
        let error = watcher::Error::InitialListFailed(error);
        assert!(!refused(&error), "not protobuf is not a refused frame: the caller picks another wire");
        match &error {
            watcher::Error::InitialListFailed(e) => Some(wire_error(e).expect("a WireError in ReadEvents").clone()),
            _ => None,
        }
    }

    fn not_protobuf(content_type: &str, encoding: Option<&str>) -> Option<WireError> {
        Some(WireError::NotProtobuf {
            content_type: content_type.to_string(),
            content_encoding: encoding.map(str::to_string),
        })
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
        assert_eq!(verdict(Expect::List, "application/json", None), not_protobuf("application/json", None));
        assert_eq!(verdict(Expect::List, pb, Some("gzip")), not_protobuf(pb, Some("gzip")));
        // A list where a watch was asked for, and the other way round.
        assert_eq!(verdict(Expect::Watch, pb, None), not_protobuf(pb, None));
        let stream = "application/vnd.kubernetes.protobuf;stream=watch";
        assert_eq!(verdict(Expect::List, stream, None), not_protobuf(stream, None));
        // What came back is kept as it came, cut, and quoted in the message.
        let long = format!("text/html\t\u{202e}{}", "x".repeat(1000));
        let Some(error) = verdict(Expect::List, &long, None) else { panic!("accepted {long:?}") };
        assert_eq!(error, not_protobuf(&long[..SHOWN_CHARS + 2], None).unwrap(), "256 characters (U+202E is 3 bytes)");
        assert!(error.to_string().contains(r#"Content-Type "text/html\t\u{202e}xx"#), "{error}");
    }

    #[test]
    fn the_position_moves_with_the_watch_never_with_a_list_in_progress() {
        let position = Position::default();
        let watching =
            |rv: &str| State::Watching { resource_version: rv.into(), stream: futures::stream::empty().boxed() };
        position.poll_in(&State::Empty);
        assert_eq!((position.handled(), position.listed()), (None, None), "nothing listed yet");
        // A list's InitDone: listed at once, handled once the consumer asks for more.
        let listed = State::InitListed { resource_version: "10".into() };
        position.list_done(&listed);
        assert_eq!((position.handled(), position.listed()), (None, Some("10".into())));
        position.poll_in(&listed);
        assert_eq!(position.handled().as_deref(), Some("10"));
        position.poll_in(&watching("12")); // an event at 12 (or a bookmark) was handled
        assert_eq!(position.handled().as_deref(), Some("12"));
        // A relist: its pages move nothing until its InitDone.
        position.poll_in(&State::Empty);
        let page =
            State::InitPage { continue_token: None, objects: VecDeque::new(), resource_version: Some("20".into()) };
        position.poll_in(&page);
        assert_eq!((position.handled(), position.listed()), (Some("12".into()), Some("10".into())));
        position.list_done(&watching("21")); // a streaming list's end bookmark
        assert_eq!(position.listed().as_deref(), Some("21"));
        // A clone reads the same handle: what a program keeps.
        assert_eq!(position.clone().handled().as_deref(), Some("12"));
    }

    #[test]
    fn a_refused_frame_is_told_from_other_failures() {
        let read = |e: WireError| read_error(e);
        assert!(refused(&watcher::Error::WatchFailed(read(WireError::Truncated { offset: 9 }))));
        assert!(refused(&watcher::Error::InitialListFailed(read(WireError::BodyTooLarge))));
        let api = kube::Error::Api(Box::new(kube::core::Status::failure("", "").with_code(406)));
        assert!(!refused(&watcher::Error::InitialListFailed(api)));
    }
}
