//! Health as Kubernetes asks for it.
//!
//! - Readiness (`/readyz`): true exactly when the first full list of pods is
//!   in the cache: "wait for cache sync", made visible. Until then it answers
//!   503 with the reason, e.g. the last watch error (a missing permission).
//!   With `--leader-elect`, it also answers 503 while the API server refuses
//!   the Lease to this replica (401, 403): it could never take over.
//! - Liveness (`/healthz`): true while the watch task and every worker run and
//!   no worker has been stuck on one key for longer than `--stuck-after`. A
//!   restart cures those. An API server outage does *not* fail liveness: a
//!   restart would not bring the server back, and the watch recovers by itself.
//!
//! The state is process-wide (like the metrics), set with one-line calls from
//! the informer and the controller.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use crate::key::Key;
use crate::queue::Queue;

/// Where a small HTTP server of ours listens, and what a busy port means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Serve {
    /// `None`: turned off.
    pub addr: Option<std::net::SocketAddr>,
    /// Whether a port already in use stops the program. In a pod, or when the
    /// address was asked for with a flag, it does: the kubelet's probes or
    /// the scrape would fail for good. On a laptop, where a learner runs
    /// `cargo run` and something else may hold the default port, it is a
    /// warning and the logger runs without that server.
    pub busy_is_fatal: bool,
}

#[derive(Default)]
struct State {
    synced: AtomicBool,
    watch_running: AtomicBool,
    last_watch_error: Mutex<Option<String>>,
    /// Watch failures so far: tells one outage from the next (see
    /// [`watch_failing`]).
    watch_failures: std::sync::atomic::AtomicU64,
    workers_expected: AtomicUsize,
    workers_running: AtomicUsize,
    shutting_down: AtomicBool,
    /// With `--leader-elect`: the API server refuses us the Lease (401,
    /// 403), and the line that says so.
    lease_refused: Mutex<Option<String>>,
}

static STATE: LazyLock<State> = LazyLock::new(State::default);

pub fn synced() {
    STATE.synced.store(true, Ordering::SeqCst);
}

/// Remembers the last watch error for `/readyz`; `None` clears it.
pub fn watch_error(error: Option<String>) {
    let mut last = STATE.last_watch_error.lock().unwrap_or_else(|p| p.into_inner());
    if error.is_some() {
        STATE.watch_failures.fetch_add(1, Ordering::SeqCst);
    }
    *last = error;
}

/// The watch failed and no event came since: the last failure's number and
/// reason (None: the watch delivers). The elector asks it before it takes
/// the Lease (catchup.rs).
pub fn watch_failing() -> Option<(u64, String)> {
    let last = STATE.last_watch_error.lock().unwrap_or_else(|p| p.into_inner());
    last.clone().map(|error| (STATE.watch_failures.load(Ordering::SeqCst), error))
}

/// With `--leader-elect`: the Lease is refused to us (`Some(line)`, a 401
/// or 403), or no longer (`None`). A replica that can never lead is not
/// ready: it could not take over.
pub fn lease_refused(line: Option<String>) {
    *STATE.lease_refused.lock().unwrap_or_else(|p| p.into_inner()) = line;
}

pub fn shutting_down() {
    STATE.shutting_down.store(true, Ordering::SeqCst);
}

/// Marks a task as running until the guard drops (it returns or panics).
pub struct Running(&'static AtomicUsize);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

pub fn worker_running() -> Running {
    STATE.workers_expected.fetch_add(1, Ordering::SeqCst);
    STATE.workers_running.fetch_add(1, Ordering::SeqCst);
    Running(&STATE.workers_running)
}

pub fn watch_running() -> WatchRunning {
    STATE.watch_running.store(true, Ordering::SeqCst);
    WatchRunning
}

pub struct WatchRunning;

impl Drop for WatchRunning {
    fn drop(&mut self) {
        STATE.watch_running.store(false, Ordering::SeqCst);
    }
}

/// `Ok(reason)` when ready, `Err(reason)` when not.
pub fn readiness() -> Result<String, String> {
    let last = STATE.last_watch_error.lock().unwrap_or_else(|p| p.into_inner()).clone();
    if let Some(line) = STATE.lease_refused.lock().unwrap_or_else(|p| p.into_inner()).clone() {
        return Err(format!("the lease is refused to this replica: {line}"));
    }
    if STATE.synced.load(Ordering::SeqCst) {
        // Still ready: the cache is served, and the watch retries by itself.
        return Ok(match last {
            Some(error) => format!("ok: cache synced; the watch failed and no event came since: {error}"),
            None => "ok: cache synced".into(),
        });
    }
    Err(match last {
        Some(error) => format!("cache not synced: the first list of pods has not succeeded yet: {error}"),
        None => "cache not synced: waiting for the first list of pods".into(),
    })
}

pub fn liveness(queue: &Queue<Key>, stuck_after: Duration) -> Result<String, String> {
    if STATE.shutting_down.load(Ordering::SeqCst) {
        return Ok("ok: shutting down".into());
    }
    if !STATE.watch_running.load(Ordering::SeqCst) {
        return Err("the watch task has ended".into());
    }
    let (running, expected) =
        (STATE.workers_running.load(Ordering::SeqCst), STATE.workers_expected.load(Ordering::SeqCst));
    if running < expected {
        return Err(format!("{} of {expected} workers have ended", expected - running));
    }
    if let Some((key, held)) = queue.in_flight().into_iter().max_by_key(|(_, held)| *held)
        && held > stuck_after
    {
        return Err(format!("a worker is stuck on {key} for {}s (limit {}s)", held.as_secs(), stuck_after.as_secs()));
    }
    Ok("ok".into())
}

/// A port we were asked to serve on but could not bind.
#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {addr} for {what}: {source}: pass {flag} with a free port, or 0 to turn it off")]
pub struct ListenError {
    addr: std::net::SocketAddr,
    what: &'static str,
    flag: &'static str,
    source: std::io::Error,
}

/// Serves the probes and the metrics on the side thread (see signals.rs), so
/// they answer even while the main thread is busy or blocked on stdout. Both
/// listeners are bound before this returns, so a port already in use is
/// known at start-up: fatal where [`Serve::busy_is_fatal`] says so, else one
/// warning line and the logger runs without that server.
pub fn serve(
    side: &tokio::runtime::Handle,
    probes: Serve,
    metrics: Serve,
    queue: Arc<Queue<Key>>,
    stuck_after: Duration,
) -> Result<(), ListenError> {
    use axum::Router;
    use axum::http::StatusCode;
    use axum::routing::get;

    let answer = |result: Result<String, String>| match result {
        Ok(text) => (StatusCode::OK, text + "\n"),
        Err(text) => (StatusCode::SERVICE_UNAVAILABLE, text + "\n"),
    };
    let probe_routes =
        Router::new().route("/readyz", get(move || async move { answer(readiness()) })).route("/healthz", {
            let queue = queue.clone();
            get(move || async move { answer(liveness(&queue, stuck_after)) })
        });
    let metric_routes = Router::new().route(
        "/metrics",
        get(move || async move {
            queue.in_flight(); // refreshes the unfinished-work gauges
            ([("content-type", crate::metrics::CONTENT_TYPE)], crate::metrics::render())
        }),
    );
    let servers = match (probes.addr, metrics.addr) {
        (Some(p), Some(m)) if p == m => {
            let serve = Serve { addr: Some(p), busy_is_fatal: probes.busy_is_fatal || metrics.busy_is_fatal };
            vec![(serve, "probes and metrics", probe_routes.merge(metric_routes))]
        }
        _ => vec![(probes, "probes", probe_routes), (metrics, "metrics", metric_routes)],
    };
    for (serve, what, router) in servers {
        let Some(addr) = serve.addr else { continue };
        let flag = if what == "metrics" { "--metrics-addr" } else { "--probe-addr" };
        // A std listener, bound here and now; the side runtime adopts it.
        let listener = match std::net::TcpListener::bind(addr).and_then(|l| l.set_nonblocking(true).map(|()| l)) {
            Ok(listener) => listener,
            Err(source) if !serve.busy_is_fatal => {
                let err = ListenError { addr, what, flag, source };
                tracing::warn!("{err}; running without {what}");
                continue;
            }
            Err(source) => return Err(ListenError { addr, what, flag, source }),
        };
        tracing::info!(%addr, "serving {what}");
        side.spawn(async move {
            match tokio::net::TcpListener::from_std(listener) {
                Ok(listener) => {
                    let _ = axum::serve(listener, router).await;
                }
                Err(err) => tracing::warn!("cannot serve {what} on {addr}: {err}"),
            }
        });
    }
    Ok(())
}
