// ANCHOR: whole
//! Chapter 4: the whole controller in one file.
//!
//! ```sh
//! cargo run --example ch4_controller -- -n default
//! cargo run --example ch4_controller -- -n default --pitfall never-done   # put a mistake back
//! ```
//!
//! On its own, in a project of yours (`cargo new`, this file as src/main.rs):
//!
//! ```sh
//! cargo add kube@5 k8s-openapi@0.29 tokio@1 futures@0.3 clap@4 humantime@2 tokio-util@0.7 -F kube@5/runtime,k8s-openapi@0.29/v1_35,tokio@1/full,clap@4/derive
//! ```
//!
//! Chapters 1 to 3 put together, in the shape of kubernetes/sample-controller
//! (`run`, `run_worker`, `process_next_work_item`, `sync_handler`):
//!
//! ```text
//! watch + reflect -> store (cache)            Controller::watch
//!    event handlers -> namespace/name keys    Controller::on_event
//!    resync timer   -> every cached key       Controller::resync
//! queue (dedup) -> one worker                 Controller::process_next_work_item
//!    cache now vs last synced -> onAdd / onUpdate / onDelete   Controller::sync_handler
//! ```
//!
//! It is deliberately minimal: the comment at the end of this file lists
//! what it leaves out. `--pitfall NAME` puts back one classic mistake of the
//! Go seeds, so you can watch which line goes missing or appears wrongly.

use std::collections::{HashMap, HashSet, VecDeque};
use std::process::ExitCode;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use clap::{Parser, ValueEnum};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store, store::Writer};
use kube::runtime::watcher::{self, Config, Event};
use kube::{Api, Client, ResourceExt};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

#[derive(Parser)]
struct Args {
    /// Watch pods in this namespace only [default: all namespaces]
    #[arg(short, long)]
    namespace: Option<String>,
    /// Queue every cached key again this often (0: never). It re-reads the cache and never asks the server
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    resync: Duration,
    /// Pods per LIST page (a list of more pods arrives in several pages)
    #[arg(long, default_value_t = 500)]
    page_size: u32,
    /// Put one classic mistake back, to see what it breaks
    #[arg(long, value_enum)]
    pitfall: Option<Pitfall>,
}

#[derive(Clone, Copy, PartialEq, ValueEnum)]
enum Pitfall {
    /// Never call `done`: the key stays in `processing`, and later changes wait behind it forever
    NeverDone,
    /// Queue each listed pod as it arrives (InitApply), before kube's store holds the list, and start the worker
    /// without waiting: the worker finds no pod and logs no onAdd for them, until the first resync
    QueueAtInitApply,
    /// Log every synced pod as updated, even when a resync brought it back unchanged
    LogEveryResync,
    /// Log what the event that queued the key says, instead of comparing states
    ActOnEvent,
}

// Chapter 3's queue, copied as it is so that this file stands alone.
/// A de-duplicating work queue of keys, with the rules of client-go's
/// workqueue. `queue` is the order keys are handed out in, `dirty` every key
/// that needs work, `processing` every key a worker holds.
#[derive(Default)]
struct Queue {
    state: Mutex<State>,
    /// Wakes a worker waiting in `get`.
    notify: Notify,
}

#[derive(Default)]
struct State {
    queue: VecDeque<String>,
    dirty: HashSet<String>,
    processing: HashSet<String>,
    shutting_down: bool,
}

impl Queue {
    /// Adds `key`, unless it is waiting already. A key a worker holds is
    /// only marked dirty: `done` queues it again. True if it was queued now.
    fn add(&self, key: String) -> bool {
        let mut s = lock(&self.state);
        if s.shutting_down || !s.dirty.insert(key.clone()) || s.processing.contains(&key) {
            return false;
        }
        s.queue.push_back(key);
        self.notify.notify_one();
        true
    }

    /// Waits for a key and marks it processing. None once the queue is shut
    /// down and empty. The lock is never held across the `.await`.
    async fn get(&self) -> Option<String> {
        loop {
            // Registered before the look, so a wake-up after it is not lost.
            let mut woken = std::pin::pin!(self.notify.notified());
            woken.as_mut().enable();
            {
                let mut s = lock(&self.state);
                if let Some(key) = s.queue.pop_front() {
                    s.dirty.remove(&key);
                    s.processing.insert(key.clone());
                    return Some(key);
                }
                if s.shutting_down {
                    return None;
                }
            }
            woken.await;
        }
    }

    /// The worker is finished with `key`. If it changed meanwhile (dirty),
    /// it is queued again, once.
    fn done(&self, key: &str) {
        let mut s = lock(&self.state);
        s.processing.remove(key);
        if s.dirty.contains(key) {
            s.queue.push_back(key.to_string());
            self.notify.notify_one();
        }
    }

    /// Takes no new key; `get` hands out what is queued, then None.
    fn shut_down(&self) {
        lock(&self.state).shutting_down = true;
        self.notify.notify_waiters();
    }

    fn len(&self) -> usize {
        lock(&self.state).queue.len()
    }
}

/// Locks a mutex. A panic while it was held leaves whole sets and maps here
/// (each change is one insert or remove), so a poisoned lock is used as is.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

struct Controller {
    /// The cache (chapter 2). Only `watch` writes it, through its `Writer`.
    store: Store<Pod>,
    /// The de-duplicating work queue (chapter 3): keys, never objects.
    queue: Queue,
    /// The pod as each key's last sync saw it: what "changed" is measured
    /// against. The cache shares it (an `Arc`), so it costs no copy.
    last_synced: Mutex<HashMap<String, Arc<Pod>>>,
    /// Only for `--pitfall act-on-event`: the kind of the latest event per key.
    event_kind: Mutex<HashMap<String, &'static str>>,
    pitfall: Option<Pitfall>,
}

// One thread: the worker runs whenever the watch waits for the server. That
// is plenty for a logger, and it makes `--pitfall queue-at-init-apply` repeatable:
// with `--page-size 1`, the worker runs between two pages of the first list,
// reads a store that does not hold the list yet (it swaps at InitDone), finds
// nothing and logs nothing; only the pods of the last page get their onAdd,
// until the first resync queues every key again from the filled store.
#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    match run(Args::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}

// ANCHOR: run
/// Run: start the watch, wait for the cache to sync, start the resync timer
/// and the worker, and on Ctrl-C or SIGTERM shut down in order.
async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let client = Client::try_default().await?;
    let api: Api<Pod> = match &args.namespace {
        Some(ns) => Api::namespaced(client, ns),
        None => Api::all(client),
    };
    let shutdown = CancellationToken::new();
    tokio::spawn(on_signal(shutdown.clone()));
    let (store, writer) = reflector::store::<Pod>();
    let (queue, last_synced, event_kind) = (Queue::default(), Mutex::default(), Mutex::default());
    let ctl = Arc::new(Controller { store, queue, last_synced, event_kind, pitfall: args.pitfall });
    println!("chapter 4: a pod controller: watch -> cache -> queue -> worker -> onAdd/onUpdate/onDelete");

    let config = Config::default().page_size(args.page_size);
    let watch = tokio::spawn(ctl.clone().watch(api, config, writer, shutdown.clone()));
    // WaitForCacheSync. Here the keys of the first list are queued at
    // InitDone, when the store already holds it, so no key reaches the
    // worker before the cache has synced, wait or no wait. The wait keeps
    // what reads the store without a key (the resync timer here, a lister
    // in a bigger controller) from acting on a cache that is still empty,
    // and says when we are ready. `--pitfall queue-at-init-apply` shows what
    // kube's store does to keys queued per listed pod when nothing waits
    // (client-go's indexer holds each object before AddFunc runs; kube's
    // swaps the whole list in at InitDone).
    if args.pitfall != Some(Pitfall::QueueAtInitApply) {
        println!("waiting for the cache to sync");
        tokio::select! {
            result = ctl.store.wait_until_ready() => result?,
            _ = shutdown.cancelled() => {
                println!("shutdown complete (before the cache synced)");
                return Ok(());
            }
        }
        println!("cache synced (pods: {})", ctl.store.len());
    }
    tokio::spawn(ctl.clone().resync(args.resync, shutdown.clone()));
    let worker = tokio::spawn(ctl.clone().run_worker());
    println!("worker started");

    // Shutdown: stop the watch first (no new keys), then close the queue; the
    // worker finishes what is queued, and `get` returns None.
    shutdown.cancelled().await;
    watch.await?;
    println!("shutting down: watch stopped, {} keys left to drain", ctl.queue.len());
    ctl.queue.shut_down();
    worker.await?;
    println!("shutdown complete");
    Ok(())
}
// ANCHOR_END: run

impl Controller {
    // ANCHOR: on_event
    /// The informer: list + watch into the store, and every change to a key.
    /// Watch errors are logged and retried, never fatal.
    async fn watch(self: Arc<Self>, api: Api<Pod>, config: Config, writer: Writer<Pod>, stop: CancellationToken) {
        let events = watcher::watcher(api, config).default_backoff().reflect(writer);
        let mut events = std::pin::pin!(events);
        // None once `stop` is cancelled; Some(None) if the stream ends.
        while let Some(Some(next)) = stop.run_until_cancelled(events.next()).await {
            match next {
                Ok(event) => self.on_event(&event),
                Err(err) => println!("watch error (the watcher retries): {err}"),
            }
        }
    }

    /// The event handlers (client-go's AddFunc, UpdateFunc, DeleteFunc): they
    /// only queue keys. The keys of a (re)list wait for InitDone, when the
    /// store holds the new list.
    fn on_event(&self, event: &Event<Pod>) {
        match event {
            Event::Apply(pod) => self.enqueue(key(pod), "onUpdate"),
            Event::Delete(pod) => self.enqueue(key(pod), "onDelete"),
            Event::InitApply(pod) if self.pitfall == Some(Pitfall::QueueAtInitApply) => self.enqueue(key(pod), "onAdd"),
            Event::InitDone if self.pitfall != Some(Pitfall::QueueAtInitApply) => {
                for pod in self.store.state() {
                    self.enqueue(key(&pod), "onAdd");
                }
            }
            Event::Init | Event::InitApply(_) | Event::InitDone => {}
        }
    }

    /// Queues `key`. `kind` is what a Go event handler would call the event;
    /// only the act-on-event pitfall looks at it.
    fn enqueue(&self, key: String, kind: &'static str) {
        if self.pitfall == Some(Pitfall::ActOnEvent) {
            lock(&self.event_kind).insert(key.clone(), kind);
        }
        self.queue.add(key);
    }
    // ANCHOR_END: on_event

    // ANCHOR: resync
    /// Resync: every period, queue every key *in the cache* again. It never
    /// asks the server, so it cannot catch a change the watch missed (the
    /// relist after a 410 does that). It is for controllers whose actions on
    /// the outside world can drift or fail; for this logger an unchanged pod
    /// logs nothing.
    async fn resync(self: Arc<Self>, period: Duration, stop: CancellationToken) {
        if period.is_zero() {
            return; // `--resync 0`: no resync, as a resync period of 0 means in client-go
        }
        let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        while stop.run_until_cancelled(ticker.tick()).await.is_some() {
            let pods = self.store.state();
            println!("resync: queueing every pod in the cache (pods: {})", pods.len());
            for pod in pods {
                self.enqueue(key(&pod), "onUpdate");
            }
        }
    }
    // ANCHOR_END: resync

    // ANCHOR: worker
    /// runWorker: process keys until the queue is shut down and drained.
    async fn run_worker(self: Arc<Self>) {
        while self.process_next_work_item().await {
            // A sync here never waits, so without this the worker would keep
            // the one thread through a whole backlog: the watch, the resync
            // and Ctrl-C would wait until the queue is empty.
            tokio::task::yield_now().await;
        }
    }

    /// processNextWorkItem: take one key, sync it, and tell the queue.
    async fn process_next_work_item(&self) -> bool {
        let Some(key) = self.queue.get().await else {
            return false;
        };
        // This sync cannot fail: it only logs. A controller whose sync can
        // fail puts the key back after a growing delay, a few times at most
        // (client-go's AddRateLimited and Forget). This queue has no delays.
        self.sync_handler(&key);
        // Done: the queue may hand this key out again (and will, if it
        // changed meanwhile).
        if self.pitfall != Some(Pitfall::NeverDone) {
            self.queue.done(&key);
        }
        true
    }
    // ANCHOR_END: worker

    // ANCHOR: sync_handler
    /// syncHandler: compare the pod in the cache now with the state at the
    /// last sync, and log the difference. It never trusts the event that
    /// queued the key: dedup merges events, a resync replays them, and kube's
    /// `Apply` does not say "added" or "updated".
    fn sync_handler(&self, key: &str) {
        if self.pitfall == Some(Pitfall::ActOnEvent) {
            if let Some(kind) = lock(&self.event_kind).remove(key) {
                println!("{kind}: {key}");
            }
            return;
        }
        let (namespace, name) = key.split_once('/').unwrap_or_default();
        let now = self.store.get(&ObjectRef::new(name).within(namespace));
        let mut last_synced = lock(&self.last_synced);
        let lines: &[&str] = match (last_synced.get(key), &now) {
            (None, None) => &[],
            (None, Some(_)) => &["onAdd"],
            (Some(_), None) => &["onDelete"],
            // The same name, a new UID: the pod was deleted and made again.
            (Some(old), Some(new)) if old.uid() != new.uid() => &["onDelete", "onAdd"],
            (Some(old), Some(new)) if old.resource_version() != new.resource_version() => &["onUpdate"],
            // The same resourceVersion: a resync. Nothing changed.
            (Some(_), Some(_)) if self.pitfall == Some(Pitfall::LogEveryResync) => &["onUpdate"],
            (Some(_), Some(_)) => &[],
        };
        match now {
            Some(pod) => last_synced.insert(key.to_string(), pod),
            None => last_synced.remove(key),
        };
        drop(last_synced);
        for line in lines {
            println!("{line}: {key}");
        }
    }
    // ANCHOR_END: sync_handler
}

/// A pod's key, `namespace/name`, as client-go writes it.
fn key(pod: &Pod) -> String {
    format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any())
}

/// Cancels `shutdown` on the first Ctrl-C (SIGINT) or SIGTERM; exits at once
/// on a second one, for when the drain takes longer than you want to wait.
async fn on_signal(shutdown: CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term)) = (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) else {
        println!("cannot install signal handlers: stop this with SIGKILL");
        return;
    };
    loop {
        let (name, code) = tokio::select! {
            _ = int.recv() => ("SIGINT", 130),
            _ = term.recv() => ("SIGTERM", 143),
        };
        if shutdown.is_cancelled() {
            println!("received {name} again: exiting at once");
            std::process::exit(code);
        }
        println!("received {name}: shutting down (send it again to exit at once)");
        shutdown.cancel();
    }
}

// ANCHOR: left_out
// What this chapter leaves out, and where the full program (src/ in this
// repository) handles it:
//
// - Pods deleted while the watch was down: after a relist the store drops
//   them silently at InitDone: no onDelete is logged here, and their entries
//   stay in `last_synced`. src/informer.rs
//   `Cache::apply` (InitDone) keeps them as tombstones (client-go's
//   DeletedFinalStateUnknown), and src/worker.rs `decide` logs them.
// - Short-lived pods: created and deleted before the worker got to the key,
//   they are in neither the cache nor `last_synced`, so nothing is logged.
//   src/informer.rs `Cache::apply` (Delete) keeps the final state, and
//   src/worker.rs `decide` logs onAdd then onDelete.
// - The final state in onDelete and what changed in onUpdate, with the
//   reasons kubectl describe would give (OOMKilled, exit 3, CrashLoopBackOff):
//   src/describe.rs `PodState::diff`, src/line.rs `log`.
// - Retries with a backoff that grows, Forget and a retry limit, for a sync
//   that fails: src/controller.rs `process_next_work_item`, `MAX_ATTEMPTS`,
//   src/queue.rs `Queue::add_rate_limited`. (In the logger only the fault
//   seam, src/faults.rs, makes a sync fail.)
// - A watch backoff that grows while a LIST keeps failing (kube's resets at
//   every `Init`): src/informer.rs `Backoff`, `run`.
// - Several workers and a drain with a time limit: src/controller.rs
//   `Controller::run`. Signals heard on a thread of their own, so a second
//   one exits even while stdout is blocked: src/signals.rs.
// - A sync that fails half-way losing what it read: src/worker.rs
//   `Worker::sync` cannot fail after it takes what it reads (src/informer.rs
//   `Cache::take` says what a sync that can fail must do instead).
// - A network path that accepts and never answers: src/client.rs
//   `READ_TIMEOUT` and src/informer.rs `WATCH_TIMEOUT_SECS` abandon a silent
//   request and retry it. Here a LIST, or the request that opens a watch,
//   would wait forever (kube-client 5 sets no read timeout), and a silent
//   open watch is dropped only after kube's idle timeout: the watch timeout
//   (290 s by default) plus 5 s.
// - A pod relabelled out of a --selector, which the server reports as
//   DELETED: src/worker.rs `Worker::sync` asks the server why
//   (`Worker::left_selector`) and logs reason="no longer matches the selector".
// - Streaming lists with a fallback to a paged LIST where the server refuses
//   them: src/informer.rs `run`.
// - Readiness and liveness probes and metrics: src/probes.rs, src/metrics.rs.
// - Clear errors for a bad kubeconfig or selector: src/client.rs.
// ANCHOR_END: left_out
// ANCHOR_END: whole
