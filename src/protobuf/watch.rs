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
//! `WatchError` for an ERROR event, `WatchFailed` for a broken stream), so the
//! informer's backoff, relist and messages apply unchanged. A frame that does
//! not decode is a `WatchFailed` naming its byte offset; the stream ends there
//! and the watch resumes from the last good resourceVersion after the backoff.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use http::header::{ACCEPT, ACCEPT_ENCODING, HeaderValue};
use http_body_util::BodyExt;
use kube::api::{ListParams, VersionMatch, WatchParams};
use kube::client::Body;
use kube::core::Request;
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

/// Whether an error says the server does not serve pods in protobuf (406
/// Not Acceptable, 415 Unsupported Media Type), and so how: JSON it is, then.
pub fn refuses_protobuf(error: &watcher::Error) -> Option<String> {
    match error {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
            if s.code == 406 || s.code == 415 =>
        {
            let reason = http::StatusCode::from_u16(s.code).ok().and_then(|c| c.canonical_reason()).unwrap_or_default();
            Some(format!("{} {reason}", s.code))
        }
        _ => None,
    }
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
            Some(Err(e)) => (Some(Err(watcher::Error::WatchFailed(e))), State::InitialWatch { stream }),
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
            Some(Err(e)) => (Some(Err(watcher::Error::WatchFailed(e))), State::Watching { resource_version, stream }),
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
        let request = Request::new(&self.path).list(params).map_err(kube::Error::BuildRequest)?;
        let response = self.send(request).await?;
        let body = response.into_body().collect().await?.to_bytes();
        super::pod_list(body).map_err(read_error)
    }

    async fn watch(&self, params: &WatchParams, resource_version: &str) -> Result<Events, kube::Error> {
        let mut request =
            Request::new(&self.path).watch(params, resource_version).map_err(kube::Error::BuildRequest)?;
        // As kube does for watches: no compression of a long-lived stream.
        request.headers_mut().insert(ACCEPT_ENCODING, HeaderValue::from_static("identity"));
        let response = self.send(request).await?;
        Ok(frames(response.into_body().into_data_stream()).boxed())
    }

    /// Sends `request` asking for protobuf; a response that is not a success
    /// becomes `kube::Error::Api` with the server's Status, as kube's own.
    async fn send(&self, request: http::Request<Vec<u8>>) -> Result<http::Response<Body>, kube::Error> {
        let (mut parts, body) = request.into_parts();
        parts.headers.insert(ACCEPT, self.accept.clone());
        let response = self.client.send(http::Request::from_parts(parts, Body::from(body))).await?;
        let code = response.status();
        if code.is_success() {
            return Ok(response);
        }
        // The server's Status, in protobuf, or in JSON where it could not
        // answer in protobuf (a 406), or whatever text a proxy sent.
        let body = response.into_body().collect().await?.to_bytes();
        let status = super::error_status(body.clone())
            .or_else(|| serde_json::from_slice::<kube::core::Status>(&body).ok())
            .unwrap_or_else(|| {
                let text = String::from_utf8_lossy(&body);
                kube::core::Status::failure(text.trim(), code.canonical_reason().unwrap_or_default())
            });
        Err(kube::Error::Api(Box::new(status.with_code(code.as_u16()))))
    }
}

/// A decode failure, as the error kube gives for an unreadable event stream.
fn read_error(e: WireError) -> kube::Error {
    kube::Error::ReadEvents(std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// The watch events in a response body, frame by frame. After a frame that
/// does not decode the stream ends (its framing can no longer be trusted):
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
                Some(Err(e)) => return Some((Err(e), (body, frames, true))),
                None => {
                    let end = frames.finish().map_err(read_error).err()?;
                    return Some((Err(end), (body, frames, true)));
                }
            }
        }
    })
}
