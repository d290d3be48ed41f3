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
//!   server, a proxy that dropped it, nothing for the client's read timeout),
//!   or that stays silent past the watch's timeout plus 5 s (no idle timer
//!   with a timeout of 0), ends the stream as kube's watcher ends a JSON one:
//!   the watch resumes from the last resourceVersion at once, or, while it
//!   was still sending a streaming list's initial events, the watcher lists
//!   again. [`Options::on_interrupted`] hears of it, with which of the two
//!   ([`Then`]); kube-client logs a warning of its own for JSON. Only if
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

/// How the watcher asks, and whom it tells of a broken connection:
/// `Options::default()`, then the setters.
#[derive(Clone)]
#[non_exhaustive]
pub struct Options {
    accept: HeaderValue,
    on_interrupted: Hook,
    position: Position,
}

/// The [`Options::on_interrupted`] hook, shared by the watcher's clones.
type Hook = Arc<dyn Fn(&kube::Error, Then) + Send + Sync>;

impl Default for Options {
    fn default() -> Options {
        Options {
            accept: HeaderValue::from_static(PROTOBUF),
            on_interrupted: Arc::new(log_interrupted),
            position: Position::default(),
        }
    }
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("accept", &self.accept)
            .field("position", &self.position)
            .finish_non_exhaustive()
    }
}

impl Options {
    /// Called once for each watch whose connection broke (the body gave an
    /// error: a restarted API server, a dropped proxy, the client's read
    /// timeout) or that the watcher gave up as idle (nothing for the watch's
    /// timeout plus 5 s, as kube's watcher does), with that error and what
    /// the watcher does next ([`Then`]). The default logs a warning through
    /// `tracing`. A closure, so it can hold what it reports to (a metrics
    /// handle, a channel).
    #[must_use]
    pub fn on_interrupted(mut self, hook: impl Fn(&kube::Error, Then) + Send + Sync + 'static) -> Options {
        self.on_interrupted = Arc::new(hook);
        self
    }

    /// The media type asked for, [`PROTOBUF`] by default. Another one is for
    /// tests: a real server answers an unknown type 406 Not Acceptable, which
    /// is how a program sees what it does with a server that refuses
    /// protobuf.
    #[doc(hidden)]
    #[must_use]
    pub fn accept(mut self, accept: HeaderValue) -> Options {
        self.accept = accept;
        self
    }

    /// Where the watcher writes how far the stream has come (see
    /// [`Position`]); a fresh one by default. Keep a clone to read it. Give
    /// the same one to a watcher built again after the last was dropped,
    /// and its readings carry on from the last one's. One watcher at a
    /// time: clones of these `Options` share it, and two watchers writing
    /// to one `Position` would mix their readings.
    #[must_use]
    pub fn position(mut self, position: Position) -> Options {
        self.position = position;
        self
    }
}

/// What the watcher does after a watch connection broke or went idle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Then {
    /// The watch is started again from the last resourceVersion it saw.
    Resume,
    /// The watch was still sending a streaming list's initial events: the
    /// list is incomplete, so the watcher lists again from the start.
    Relist,
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
///   has handled every change at or below it. A consumer that may stop
///   without asking again (a shutdown) says it is done with the last item
///   with [`Position::consumed`]. A relist in progress leaves it where it was
///   (its pods are not handled until its `InitDone`); after a relist it
///   stands for the state at the list's resourceVersion, not for every
///   change below it. It can go down: after a list of any freshness
///   (a streaming list, or the first LIST with `ListSemantic::Any`), which
///   the API server's watch cache may serve older than a bookmark seen
///   before.
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
    /// What `handled` becomes once the consumer is done with the item last
    /// handed out (None: it moves nothing, e.g. a pod of a list).
    out: Option<String>,
}

impl Position {
    /// Every change at or below this resourceVersion was handed out, and the
    /// consumer has asked for more since (or said it is done with the last
    /// item: [`Position::consumed`]). None before the first list is done.
    pub fn handled(&self) -> Option<String> {
        self.lock().handled.clone()
    }

    /// The resourceVersion of the last list completed (see [`Position`]).
    pub fn listed(&self) -> Option<String> {
        self.lock().listed.clone()
    }

    /// The consumer is done with the item it was handed last: `handled`
    /// moves past it now, as it would when the stream is next polled. For
    /// a consumer that may stop without polling again (a shutdown), so the
    /// position covers every item it handled.
    pub fn consumed(&self) {
        let mut marks = self.lock();
        if let Some(out) = marks.out.take() {
            marks.handled = Some(out);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Marks> {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The stream is polled again in `state`: what was handed out before is
    /// handled. Only a watch has a position; a list's pods are not handled
    /// until its `InitDone` (after which the state is `InitListed`).
    fn poll_in(&self, state: &State) {
        let mut marks = self.lock();
        marks.out = None;
        if let State::InitListed { resource_version } | State::Watching { resource_version, .. } = state {
            marks.handled = Some(resource_version.clone());
        }
    }

    /// An item is handed out, the watcher now in `state`: where `handled`
    /// goes once the consumer is done with it ([`Position::consumed`]).
    fn handed_out(&self, state: &State) {
        self.lock().out = match state {
            State::InitListed { resource_version } | State::Watching { resource_version, .. } => {
                Some(resource_version.clone())
            }
            _ => None,
        };
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
fn log_interrupted(error: &kube::Error, then: Then) {
    match then {
        Then::Resume => tracing::warn!("watch interrupted: {error}; resuming from the last resourceVersion"),
        Then::Relist => {
            tracing::warn!("watch interrupted: {error}; the streaming list was not complete: listing again")
        }
    }
}

/// Why a server will not give us pods in protobuf (see [`refusal`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
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

/// A watch's events; an error ends it.
type Events = BoxStream<'static, Result<WatchEvent<PodMsg>, Failure>>;

/// Why a watch gave no event.
#[derive(Debug)]
enum Failure {
    /// A frame refused (too long, too costly, not a pod event): the stream's
    /// framing can no longer be trusted.
    Refused(kube::Error),
    /// The connection broke, or went idle: the watch itself was fine.
    Broken(kube::Error),
}

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
    let start = (api, config, State::Empty, Lists::default(), position);
    futures::stream::unfold(start, |(api, config, mut state, mut lists, position)| async move {
        loop {
            // Polled again: the consumer is done with what it was handed
            // (and a bookmark, read inside this loop, hands out nothing).
            position.poll_in(&state);
            let (item, next) = step(&api, &config, state, &mut lists).await;
            state = next;
            if let Some(item) = item {
                if matches!(item, Ok(Event::InitDone)) {
                    position.list_done(&state);
                }
                position.handed_out(&state);
                return Some((item, (api, config, state, lists, position)));
            }
        }
    })
}

/// What the watcher remembers of its LISTs across states: whether it sent
/// one yet. client-go's rule: only a watcher's first LIST may be served from
/// the watch cache (resourceVersion 0, with `ListSemantic::Any`); every later
/// one (a relist after a 410, after a refused page or frame, after any failed
/// attempt) is a consistent read, never older than what was delivered. And
/// the watch cache answers a LIST at 0 whole, ignoring the page size, so a
/// first LIST refused as [`WireError::BodyTooLarge`] is asked again in pages,
/// not at 0 again forever.
#[derive(Debug, Default)]
struct Lists {
    /// A LIST's first page was asked for.
    sent: bool,
}

/// One step of the state machine: maybe an event (or error) to yield, and
/// the next state. The same transitions as kube's watcher.
async fn step<K: From<PodMsg> + Send + 'static>(
    api: &Requests,
    config: &watcher::Config,
    state: State,
    lists: &mut Lists,
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
            let first = continue_token.is_none() && !std::mem::replace(&mut lists.sent, true);
            let mut params = list_params(config, first);
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
            Some(Err(Failure::Refused(e))) => (Some(Err(watcher::Error::WatchFailed(e))), State::Empty),
            // Neither can a list whose connection broke, nor one the server
            // ended before its end marker (kube's watcher lists again too).
            Some(Err(Failure::Broken(e))) => {
                (api.on_interrupted)(&e, Then::Relist);
                (None, State::Empty)
            }
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
            Some(Err(Failure::Refused(e))) => (Some(Err(watcher::Error::WatchFailed(e))), State::Empty),
            // A broken or idle connection: told, then resumed from where we
            // were, as after the server's own timeout (the stream's end).
            Some(Err(Failure::Broken(e))) => {
                (api.on_interrupted)(&e, Then::Resume);
                (None, State::InitListed { resource_version })
            }
            None => (None, State::InitListed { resource_version }),
        },
    }
}

/// A pod's resourceVersion, read before the pod becomes a `K`: the watch
/// resumes from it, whatever `K` keeps.
fn resource_version_of(pod: &PodMsg) -> Option<String> {
    pod.metadata.as_ref().and_then(|m| m.resource_version.clone()).filter(|rv| !rv.is_empty())
}

/// The next event, None at the stream's end, or [`Failure::Broken`] once the
/// watch has been silent for longer than its own timeout (290 s when the
/// config sets none) plus a margin: as kube's watcher, a silent connection is
/// given up. A timeout of 0 turns this off, as in kube's watcher.
async fn next_or_idle(stream: &mut Events, timeout: Option<u32>) -> Option<Result<WatchEvent<PodMsg>, Failure>> {
    if timeout == Some(0) {
        return stream.next().await;
    }
    let idle = Duration::from_secs(u64::from(timeout.unwrap_or(290))) + IDLE_MARGIN;
    tokio::time::timeout(idle, stream.next()).await.unwrap_or_else(|_| {
        let why = format!(
            "nothing arrived on the watch for {} s, its timeout plus {} s",
            idle.as_secs(),
            IDLE_MARGIN.as_secs()
        );
        Some(Err(Failure::Broken(kube::Error::ReadEvents(std::io::Error::new(std::io::ErrorKind::TimedOut, why)))))
    })
}

/// The LIST's parameters, as kube's watcher makes them, but for the
/// resourceVersion: "0" (any freshness) only on the `first` LIST of the
/// watcher, and only with `ListSemantic::Any`; every other LIST is a
/// consistent read (see [`Lists`]).
fn list_params(config: &watcher::Config, first: bool) -> ListParams {
    let (resource_version, version_match) = match config.list_semantic {
        ListSemantic::Any if first => (Some("0".to_string()), Some(VersionMatch::NotOlderThan)),
        ListSemantic::Any | ListSemantic::MostRecent => (None, None),
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
    on_interrupted: Hook,
}

impl Requests {
    async fn list(&self, params: &ListParams) -> Result<PodPage<PodMsg>, kube::Error> {
        let mut request = Request::new(&self.path).list(params).map_err(kube::Error::BuildRequest)?;
        // kube leaves resourceVersion=0 out of a LIST that has a limit (then
        // every first page would be a consistent read, from etcd). client-go
        // asks its first list at 0, served from the API server's watch cache:
        // so do we, on the first page of the watcher's first LIST alone
        // (`list_params` asks for 0 nowhere else), with ListSemantic::Any
        // (`Config::any_semantic`; kube's default is MostRecent). The watch
        // cache answers it whole, whatever the limit; every later LIST is
        // consistent and paged.
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

/// A decode failure, as the error kube gives for an unreadable event stream:
/// how the watcher reports a [`WireError`] ([`wire_error`] finds it again).
/// Public for a program's tests, to make the errors this watcher yields.
pub fn read_error(e: WireError) -> kube::Error {
    kube::Error::ReadEvents(std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

fn refused_frame(e: WireError) -> Failure {
    Failure::Refused(read_error(e))
}

/// The watch events in a response body, frame by frame. After a frame that
/// is refused the stream ends (its framing can no longer be trusted), and
/// the watcher relists. A connection that breaks ends the stream with
/// [`Failure::Broken`]: the watcher tells `on_interrupted` and resumes from
/// the last resourceVersion it saw (or, in a streaming list's initial
/// events, lists again), as kube's watcher does for JSON (where kube-client
/// logs a warning).
fn frames(
    body: impl Stream<Item = Result<Bytes, kube::Error>> + Send + 'static,
) -> impl Stream<Item = Result<WatchEvent<PodMsg>, Failure>> + Send {
    futures::stream::unfold(
        (Box::pin(body), Frames::default(), false),
        move |(mut body, mut frames, mut done)| async move {
            if done {
                return None;
            }
            loop {
                match frames.next_frame() {
                    Ok(Some((frame, offset))) => {
                        let event = crate::watch_event(frame, offset).map_err(refused_frame);
                        done = event.is_err();
                        return Some((event, (body, frames, done)));
                    }
                    Ok(None) => {}
                    Err(e) => return Some((Err(refused_frame(e)), (body, frames, true))),
                }
                match body.next().await {
                    Some(Ok(chunk)) => frames.push(&chunk),
                    Some(Err(e)) => return Some((Err(Failure::Broken(e)), (body, frames, true))),
                    None => {
                        let end = frames.finish().map_err(refused_frame).err()?;
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

    /// A response body, chunk by chunk.
    type Chunks = BoxStream<'static, Result<http_body::Frame<Bytes>, std::io::Error>>;

    /// A kube `Client` over a function, for the requests the state machine
    /// makes: `answer` gets each request's URI and its number (from 1), and
    /// gives the body of a 200 answer in `content_type`. The URIs asked for
    /// are recorded.
    fn client_answering(
        content_type: impl Fn(&str) -> &'static str + Send + Sync + 'static,
        answer: impl Fn(&str, usize) -> Chunks + Send + Sync + 'static,
    ) -> (Client, Arc<std::sync::Mutex<Vec<String>>>) {
        let asked = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let service = {
            let asked = asked.clone();
            tower::service_fn(move |request: http::Request<Body>| {
                let uri = request.uri().to_string();
                let count = {
                    let mut asked = asked.lock().unwrap();
                    asked.push(uri.clone());
                    asked.len()
                };
                let body = http_body_util::StreamBody::new(answer(&uri, count));
                let response = http::Response::builder().header(CONTENT_TYPE, content_type(&uri)).body(body);
                async move { response }
            })
        };
        (Client::new(service, "default"), asked)
    }

    /// A LIST is answered in protobuf, a watch in its frames.
    fn protobuf_answers(uri: &str) -> &'static str {
        if uri.contains("watch=") { "application/vnd.kubernetes.protobuf;stream=watch" } else { PROTOBUF }
    }

    /// An empty last page at resourceVersion 7.
    fn empty_page() -> Chunks {
        use prost::Message as _;
        let list = crate::PodListMsg {
            metadata: Some(crate::ListMetaMsg { resource_version: Some("7".into()), r#continue: None }),
            items: Vec::new(),
        };
        let type_meta = crate::TypeMeta { api_version: Some("v1".into()), kind: Some("PodList".into()) };
        let unknown = crate::Unknown { type_meta: Some(type_meta), raw: Some(list.encode_to_vec().into()) };
        let body = [&crate::MAGIC[..], &unknown.encode_to_vec()].concat();
        futures::stream::iter([Ok(http_body::Frame::data(Bytes::from(body)))]).boxed()
    }

    /// The watch cache answers a LIST at resourceVersion 0 whole (no page
    /// size), so only the watcher's first LIST asks at 0: after it was
    /// refused for its size, the next is consistent (no resourceVersion)
    /// and paged.
    #[tokio::test]
    async fn only_the_first_list_asks_at_resource_version_0() {
        // A body past MAX_LIST_BODY, a MiB at a time.
        let too_large = || -> Chunks {
            let chunk = Bytes::from(vec![0; 1 << 20]);
            let chunks = crate::MAX_LIST_BODY / chunk.len() + 1;
            futures::stream::iter((0..chunks).map(move |_| Ok(http_body::Frame::data(chunk.clone())))).boxed()
        };
        let (client, asked) =
            client_answering(protobuf_answers, move |_, n| if n == 1 { too_large() } else { empty_page() });
        let config = watcher::Config::default().any_semantic();
        let mut events = std::pin::pin!(watcher::<PodMsg>(client, Some("ns"), config, Options::default()));
        assert!(matches!(events.next().await, Some(Ok(Event::Init))));
        match events.next().await {
            Some(Err(watcher::Error::InitialListFailed(e))) => {
                assert_eq!(wire_error(&e), Some(&WireError::BodyTooLarge));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(events.next().await, Some(Ok(Event::Init))));
        assert!(matches!(events.next().await, Some(Ok(Event::InitDone))));
        let asked = asked.lock().unwrap().clone();
        assert_eq!(asked.len(), 2, "{asked:?}");
        assert!(asked[0].contains("limit=500") && asked[0].contains("resourceVersion=0"), "{asked:?}");
        assert!(asked[1].contains("limit=500") && !asked[1].contains("resourceVersion"), "{asked:?}");
    }

    /// Each error's text, and what the watcher did next.
    type Heard = Arc<std::sync::Mutex<Vec<(String, Then)>>>;

    /// Options whose hook records what it heard.
    fn recording_hook() -> (Options, Heard) {
        let heard = Arc::new(std::sync::Mutex::new(Vec::new()));
        let options = Options::default().on_interrupted({
            let heard = heard.clone();
            move |e: &kube::Error, then| heard.lock().unwrap().push((e.to_string(), then))
        });
        (options, heard)
    }

    /// As kube's watcher: a watch timeout of 0 turns the client's idle timer
    /// off; any other gives up a silent watch after the timeout plus 5 s.
    /// (Virtual time: tokio moves the clock on while everything waits.)
    #[tokio::test(start_paused = true)]
    async fn a_watch_timeout_of_0_turns_the_idle_timer_off() {
        let mut silent: Events = futures::stream::pending().boxed();
        let a_day = Duration::from_secs(24 * 3600);
        assert!(tokio::time::timeout(a_day, next_or_idle(&mut silent, Some(0))).await.is_err(), "no idle timer");
        match next_or_idle(&mut silent, Some(1)).await {
            Some(Err(Failure::Broken(e))) => {
                assert_eq!(
                    e.to_string(),
                    "Error reading events stream: nothing arrived on the watch for 6 s, its timeout plus 5 s"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    /// A watch whose connection breaks, or that the idle timer gives up, is
    /// told to the hook with what comes next: the watch is resumed from its
    /// resourceVersion, or, in a streaming list's initial events, the list
    /// starts over.
    #[tokio::test(start_paused = true)]
    async fn a_broken_or_idle_watch_is_told_with_what_comes_next() {
        // Paged: the list, then a watch whose body breaks, then a silent one
        // (a timeout of 0: never given up).
        let broken = || -> Chunks { futures::stream::iter([Err(std::io::Error::other("connection reset"))]).boxed() };
        let (client, asked) = client_answering(protobuf_answers, move |uri, n| match n {
            1 => empty_page(),
            2 if uri.contains("watch=") => broken(),
            _ => futures::stream::pending().boxed(),
        });
        let (options, heard) = recording_hook();
        let config = watcher::Config::default().timeout(0);
        let mut events = std::pin::pin!(watcher::<PodMsg>(client, Some("ns"), config, options));
        assert!(matches!(events.next().await, Some(Ok(Event::Init))));
        assert!(matches!(events.next().await, Some(Ok(Event::InitDone))));
        assert!(tokio::time::timeout(Duration::from_secs(3600), events.next()).await.is_err());
        let heard = heard.lock().unwrap().clone();
        assert_eq!(heard.len(), 1, "{heard:?}");
        assert!(heard[0].0.contains("connection reset") && heard[0].1 == Then::Resume, "{heard:?}");
        let asked = asked.lock().unwrap().clone();
        assert!(asked.len() == 3 && asked[1..].iter().all(|a| a.contains("resourceVersion=7")), "{asked:?}");

        // Streaming: the watch carrying the list goes silent.
        let (client, _) = client_answering(protobuf_answers, |_, _| futures::stream::pending().boxed());
        let (options, heard) = recording_hook();
        let config = watcher::Config::default().streaming_lists().timeout(1);
        let mut events = std::pin::pin!(watcher::<PodMsg>(client, Some("ns"), config, options));
        assert!(matches!(events.next().await, Some(Ok(Event::Init))));
        assert!(matches!(events.next().await, Some(Ok(Event::Init))), "the list starts over");
        let idle = "Error reading events stream: nothing arrived on the watch for 6 s, its timeout plus 5 s";
        assert_eq!(heard.lock().unwrap().clone(), [(idle.to_string(), Then::Relist)]);
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
        // An event at 13 handed out, and the consumer says it is done with it.
        position.handed_out(&watching("13"));
        assert_eq!(position.handled().as_deref(), Some("12"), "handed out, not yet consumed");
        position.consumed();
        assert_eq!(position.handled().as_deref(), Some("13"));
        position.poll_in(&watching("13"));
        // A relist: its pages move nothing until its InitDone.
        position.poll_in(&State::Empty);
        let page =
            State::InitPage { continue_token: None, objects: VecDeque::new(), resource_version: Some("20".into()) };
        position.poll_in(&page);
        position.handed_out(&page); // a pod of the list, consumed: no position yet
        position.consumed();
        assert_eq!((position.handled(), position.listed()), (Some("13".into()), Some("10".into())));
        position.list_done(&watching("21")); // a streaming list's end bookmark
        assert_eq!(position.listed().as_deref(), Some("21"));
        // A clone reads the same handle: what a program keeps.
        assert_eq!(position.clone().handled().as_deref(), Some("13"));
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
