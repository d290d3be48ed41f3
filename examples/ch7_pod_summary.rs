// ANCHOR: whole
//! Chapter 7: the write side. A controller that keeps a PodSummary's status
//! true.
//!
//! ```sh
//! cargo run --example ch7_pod_summary -- --print-crd | kubectl apply -f -
//! cargo run --example ch7_pod_summary -- -n default
//! cargo run --example ch7_pod_summary -- -n default --pitfall write-twice   # see a conflict
//! ```
//!
//! A PodSummary is a custom resource made from the Rust type below. Its spec
//! holds a label selector. Its status says how many pods of its namespace the
//! selector matches, how many are in each phase, and the sum of their
//! containers' restarts. This program writes that status, an Event for each
//! status it writes, and a Warning Event for a selector it cannot read;
//! nothing else.
//!
//! The shape is chapter 4's, with two caches instead of one:
//!
//! ```text
//! watch pods         -> pod cache      -> the summaries of the pod's namespace -> queue
//! watch podsummaries -> summary cache  -> the summary itself                   -> queue
//! queue -> workers -> sync: read both caches, compute the status, write it if it differs
//! ```
//!
//! It stands alone: its key, its queue and its resource are all in this file.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::{fmt, process::ExitCode, sync::Arc, sync::Mutex, time::Duration};

use clap::{Parser, ValueEnum};
use futures::{FutureExt, StreamExt, future::try_join_all};
use k8s_openapi::{api::core::v1::Pod, apimachinery::pkg::apis::meta::v1::LabelSelector};
use kube::core::{Selector, SelectorExt};
use kube::runtime::events::{self, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher, watcher::Event};
use kube::{Api, Client, CustomResource, CustomResourceExt, Resource, ResourceExt, api::PostParams};
use serde::{Deserialize, Serialize, de::DeserializeOwned};

#[derive(Parser)]
struct Args {
    /// Watch pods and podsummaries in this namespace only [default: all namespaces]
    #[arg(short, long)]
    namespace: Option<String>,
    /// Print the PodSummary CustomResourceDefinition as YAML, made from the Rust type, and exit
    #[arg(long)]
    print_crd: bool,
    /// Put one classic mistake back, to see what it does
    #[arg(long, value_enum)]
    pitfall: Option<Pitfall>,
}

#[derive(Clone, Copy, PartialEq, ValueEnum)]
enum Pitfall {
    /// After each status write, send the same copy again, with the resourceVersion the write just made stale, as a
    /// writer with a stale cache would: the server answers 409 Conflict, and the key is retried
    WriteTwice,
}

// ANCHOR: resource
// The custom resource. `CustomResource` makes the `PodSummary` type (with
// metadata, this spec and an optional status) and its CRD (`PodSummary::crd()`).
// The doc comments become the CRD's descriptions, which `kubectl explain` shows.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, schemars::JsonSchema)]
#[kube(group = "demo.example.com", version = "v1alpha1", kind = "PodSummary", plural = "podsummaries")]
#[kube(namespaced, status = "PodSummaryStatus", doc = "Counts the pods of its namespace that its selector matches")]
/// Which pods to count
pub struct PodSummarySpec {
    /// Which pods of the summary's namespace to count
    pub selector: LabelSelector,
}

/// Written by the controller, from the pods the selector matches
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(default, rename_all = "camelCase")]
pub struct PodSummaryStatus {
    /// The pods the selector matches
    pub matched: i64,
    /// How many of them are in each phase
    pub phases: BTreeMap<String, i64>,
    /// The sum of their containers' restart counts
    pub restarts: i64,
    /// The spec's generation this status was computed from
    pub observed_generation: i64,
}
// ANCHOR_END: resource

impl fmt::Display for PodSummaryStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let phases: Vec<String> = self.phases.iter().map(|(phase, n)| format!("{phase}: {n}")).collect();
        write!(f, "matched={} phases={{{}}} restarts={}", self.matched, phases.join(", "), self.restarts)?;
        write!(f, " observedGeneration={}", self.observed_generation)
    }
}

/// A work queue key: a PodSummary's `namespace/name`.
type Key = String;

fn key_of(summary: &PodSummary) -> Key {
    format!("{}/{}", summary.namespace().unwrap_or_default(), summary.name_any())
}

// ANCHOR: queue
/// Chapter 3's de-duplicating queue, plus what a writer needs: a retry of a
/// key after a backoff that grows with each failure of that key.
#[derive(Default)]
struct Queue {
    state: Mutex<QueueState>,
    ready: tokio::sync::Notify,
}

#[derive(Default)]
struct QueueState {
    /// Keys waiting for a worker, in order.
    waiting: VecDeque<Key>,
    /// Keys added and not yet handed out: a second add is a no-op (dedup).
    dirty: HashSet<Key>,
    /// Keys a worker holds. One added meanwhile waits until `done`.
    processing: HashSet<Key>,
    /// Failures in a row per key, for the backoff.
    failures: HashMap<Key, u32>,
    /// Set on Ctrl-C or SIGTERM: no key is added any more, not even a retry.
    shutting_down: bool,
}

impl QueueState {
    /// The next waiting key, marked as held by a worker.
    fn take(&mut self) -> Option<Key> {
        let key = self.waiting.pop_front()?;
        self.dirty.remove(&key);
        self.processing.insert(key.clone());
        Some(key)
    }
}

impl Queue {
    fn add(&self, key: Key) {
        let mut state = lock(&self.state);
        if !state.shutting_down && state.dirty.insert(key.clone()) && !state.processing.contains(&key) {
            state.waiting.push_back(key);
            self.ready.notify_one();
        }
    }

    /// Waits for a key and marks it as being processed; None once the queue
    /// is shut down and empty. As in chapter 3, the wake-up is registered
    /// before the look, so none is lost between them.
    async fn get(&self) -> Option<Key> {
        loop {
            let mut woken = std::pin::pin!(self.ready.notified());
            woken.as_mut().enable();
            {
                let mut state = lock(&self.state);
                if let Some(key) = state.take() {
                    return Some(key);
                } else if state.shutting_down {
                    return None;
                }
            }
            woken.await;
        }
    }

    /// Takes no new key; `get` hands out what is waiting, then None.
    fn shut_down(&self) {
        lock(&self.state).shutting_down = true;
        self.ready.notify_waiters();
    }

    /// The worker is finished with `key`; if it was added meanwhile, it waits again.
    fn done(&self, key: &Key) {
        let mut state = lock(&self.state);
        if state.processing.remove(key) && state.dirty.contains(key) {
            state.waiting.push_back(key.clone());
            self.ready.notify_one();
        }
    }

    /// Adds `key` again after 10 ms, 20 ms, 40 ms ... (at most 10 s): the
    /// more often it failed in a row, the longer it waits.
    fn add_rate_limited(self: &Arc<Self>, key: Key) {
        let failures = *lock(&self.state).failures.entry(key.clone()).and_modify(|n| *n += 1).or_insert(1);
        let delay = Duration::from_millis(5 << failures.min(11)).min(Duration::from_secs(10));
        let queue = self.clone();
        tokio::spawn(tokio::time::sleep(delay).map(move |()| queue.add(key)));
    }

    /// The key synced: its next failure starts the backoff afresh.
    fn forget(&self, key: &Key) {
        lock(&self.state).failures.remove(key);
    }
}
// ANCHOR_END: queue

struct Controller {
    pods: Store<Pod>,
    summaries: Store<PodSummary>,
    queue: Arc<Queue>,
    client: Client,
    reporter: Reporter,
    pitfall: Option<Pitfall>,
    /// The bad selectors said already, as `key generation`.
    warned: Mutex<HashSet<String>>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let Err(err) = run(Args::parse()).await else { return ExitCode::SUCCESS };
    eprintln!("error: {err}");
    ExitCode::FAILURE
}

// ANCHOR: run
/// Starts both informers, waits until both caches hold their first list,
/// then starts the workers. On Ctrl-C or SIGTERM it shuts down as chapter 4
/// does: the watches first, then the queue, which the workers drain.
async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    if args.print_crd {
        print!("{}", serde_saphyr::to_string(&PodSummary::crd())?);
        return Ok(());
    }
    let mut signals = Signals::new()?;
    let client = Client::try_default().await?;
    let (pod_api, summary_api) = match &args.namespace {
        Some(ns) => (Api::namespaced(client.clone(), ns), Api::namespaced(client.clone(), ns)),
        None => (Api::all(client.clone()), Api::all(client.clone())),
    };
    let (pods, pod_writer) = reflector::store();
    let (summaries, summary_writer) = reflector::store();
    let reporter = Reporter { controller: "ch7-pod-summary".into(), instance: None };
    let (queue, pitfall, warned) = (Arc::default(), args.pitfall, Mutex::default());
    let ctl = Arc::new(Controller { pods, summaries, queue, client, reporter, pitfall, warned });
    println!("chapter 7: PodSummary status from the pods it selects: two caches -> queue -> workers -> status");

    let (c, d) = (ctl.clone(), ctl.clone());
    let watches = [
        tokio::spawn(informer(pod_api, pod_writer, move |event| c.handle_pod(event))),
        tokio::spawn(informer(summary_api, summary_writer, move |event| d.handle_summary(event))),
    ];
    // Nothing is computed before both caches hold their first list: a sync
    // that ran with an empty pod cache would write `matched=0` for every
    // summary: a classic bug of controllers.
    println!("waiting for both caches to sync");
    tokio::select! {
        synced = async { tokio::try_join!(ctl.pods.wait_until_ready(), ctl.summaries.wait_until_ready()) } => synced?,
        name = signals.next() => {
            println!("received {name}: exiting before the caches synced");
            return Ok(());
        }
    };
    println!("caches synced (pods: {}, podsummaries: {})", ctl.pods.len(), ctl.summaries.len());
    // Two workers, so that the queue's rule "one key, one worker at a time" matters.
    let workers = try_join_all((0..2).map(|_| tokio::spawn(ctl.clone().run_worker())));
    let name = signals.next().await;
    watches.iter().for_each(|watch| watch.abort());
    println!("received {name}: watches stopped, draining the queue (send it again to exit at once)");
    ctl.queue.shut_down();
    tokio::select! {
        drained = workers => drained.map(|_| println!("shutdown complete"))?,
        name = signals.next() => println!("received {name} again: exiting at once"),
    }
    Ok(())
}

/// Ctrl-C (SIGINT) and SIGTERM, the signals that stop a program in a terminal
/// and in a pod.
struct Signals(tokio::signal::unix::Signal, tokio::signal::unix::Signal);

impl Signals {
    fn new() -> std::io::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Signals(signal(SignalKind::interrupt())?, signal(SignalKind::terminate())?))
    }

    /// Waits for the next one and says which it was.
    async fn next(&mut self) -> &'static str {
        tokio::select! {
            _ = self.0.recv() => "SIGINT",
            _ = self.1.recv() => "SIGTERM",
        }
    }
}
// ANCHOR_END: run

/// An informer: list + watch into a store, calling `handle` with each event
/// once the store holds it. Watch errors are logged and retried.
async fn informer<K>(api: Api<K>, writer: Writer<K>, handle: impl Fn(&Event<K>))
where
    K: Resource<DynamicType = ()> + Clone + fmt::Debug + DeserializeOwned + Send + Sync + 'static,
{
    let mut events = std::pin::pin!(watcher::watcher(api, Default::default()).default_backoff().reflect(writer));
    while let Some(next) = events.next().await {
        match next {
            Ok(event) => handle(&event),
            Err(err) => println!("watch error (the watcher retries): {err}"),
        }
    }
}

impl Controller {
    // ANCHOR: handlers
    /// sample-controller's `handleObject`: a pod changed, so find the
    /// summaries it counts in and queue them. Kube's `Apply` carries only the
    /// pod's new state, and a relabelled pod must also leave the summary it
    /// matched before: so every summary of the pod's namespace is queued. The
    /// sync of one that the pod never matched finds nothing to change.
    fn handle_pod(&self, event: &Event<Pod>) {
        match event {
            Event::Apply(pod) | Event::Delete(pod) => {
                let in_namespace = self.summaries.state().into_iter().filter(|s| s.namespace() == pod.namespace());
                in_namespace.for_each(|summary| self.queue.add(key_of(&summary)));
            }
            // A (re)list may bring any change: queue every summary, once the
            // store holds the list (keys queued at InitApply would read the old one).
            Event::InitDone => self.summaries.state().iter().for_each(|summary| self.queue.add(key_of(summary))),
            Event::Init | Event::InitApply(_) => {}
        }
    }

    /// sample-controller's `enqueueFoo`: a summary changed, so queue it. Its
    /// own status writes come back here too: the sync then finds nothing to
    /// change. A deleted summary needs nothing: its status went with it.
    fn handle_summary(&self, event: &Event<PodSummary>) {
        match event {
            Event::Apply(summary) => self.queue.add(key_of(summary)),
            Event::InitDone => self.summaries.state().iter().for_each(|summary| self.queue.add(key_of(summary))),
            Event::Delete(_) | Event::Init | Event::InitApply(_) => {}
        }
    }
    // ANCHOR_END: handlers

    // ANCHOR: worker
    async fn run_worker(self: Arc<Self>) {
        while let Some(key) = self.queue.get().await {
            match self.sync(&key).await {
                Ok(()) => self.queue.forget(&key),
                Err(err) => {
                    // 409: the summary changed since the cache saw it. Never
                    // write again blindly: sync again later, from the cache,
                    // which the watch brings up to date meanwhile.
                    if matches!(&err, kube::Error::Api(status) if status.is_conflict()) {
                        println!("conflict: {key}: the cache was stale, retrying");
                    } else {
                        println!("sync failed: {key}: {err}; retrying");
                    }
                    self.queue.add_rate_limited(key.clone());
                }
            }
            self.queue.done(&key);
        }
    }
    // ANCHOR_END: worker

    // ANCHOR: sync
    /// sample-controller's `syncHandler`: read the summary and the pods from
    /// the caches, compute the status from nothing, and write it through the
    /// status subresource only if it differs.
    async fn sync(&self, key: &Key) -> Result<(), kube::Error> {
        let (namespace, name) = key.split_once('/').unwrap_or_default();
        let Some(cached) = self.summaries.get(&ObjectRef::new(name).within(namespace)) else {
            return Ok(()); // deleted
        };
        let selector = match Selector::try_from(cached.spec.selector.clone()) {
            Ok(selector) => selector,
            Err(err) => return self.bad_selector(&cached, err.to_string()).await,
        };
        let mut status =
            PodSummaryStatus { observed_generation: cached.metadata.generation.unwrap_or(0), ..Default::default() };
        for pod in self.pods.state() {
            if pod.namespace() == cached.namespace() && selector.matches(pod.labels()) {
                let phase = pod.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_else(|| "Unknown".into());
                status.matched += 1;
                *status.phases.entry(phase).or_default() += 1;
                let containers = pod.status.as_ref().and_then(|s| s.container_statuses.as_ref()).into_iter().flatten();
                status.restarts += containers.map(|c| i64::from(c.restart_count)).sum::<i64>();
            }
        }
        if cached.status.as_ref() == Some(&status) {
            return Ok(()); // true already: no write, no event
        }
        // `cached` is an Arc<PodSummary>: shared with the store, read-only.
        // The write goes from a copy, which keeps the cached resourceVersion:
        // if the summary changed since, the server answers 409 Conflict.
        let mut summary = (*cached).clone();
        let was = summary.status.replace(status.clone()).map_or("no status".into(), |s| s.to_string());
        let api: Api<PodSummary> = Api::namespaced(self.client.clone(), namespace);
        api.replace_status(name, &PostParams::default(), &summary).await?;
        println!("status: {key} {status} (was {was})");
        self.record(&cached, EventType::Normal, "Summarized", status.to_string()).await;
        if self.pitfall == Some(Pitfall::WriteTwice) {
            api.replace_status(name, &PostParams::default(), &summary).await?;
        }
        Ok(())
    }
    // ANCHOR_END: sync

    // ANCHOR: record
    /// sample-controller's `recorder.Event`: an events.k8s.io/v1 Event on the
    /// summary, which `kubectl describe podsummary` shows. A failure is logged:
    /// the status is written, and the Event is only a note about it. One
    /// `Recorder` merges the Events of one reason on one object, six minutes
    /// long, into the first (a series with a count: the later notes are
    /// lost), so each write gets a new one, as kube's docs advise: one per sync.
    async fn record(&self, summary: &PodSummary, type_: EventType, reason: &str, note: String) {
        let (reason, note, action) = (reason.into(), Some(note), "UpdateStatus".into());
        let event = events::Event { type_, reason, note, action, secondary: None };
        let recorder = Recorder::new(self.client.clone(), self.reporter.clone());
        match recorder.publish(&event, &summary.object_ref(&())).await {
            Ok(()) => println!("event: {} {}", event.reason, key_of(summary)),
            Err(err) => println!("event failed: {}: {err}", key_of(summary)),
        }
    }

    /// A selector the program cannot read (an unknown operator, `In` with no
    /// values) is the user's to fix: a line and a Warning Event that
    /// `kubectl describe` shows, once per generation of the spec (every pod
    /// change of the namespace queues this summary again). The status is left
    /// as it was: its observedGeneration, behind the spec's, tells a reader
    /// that it was not computed from this spec. No retry (`Ok`): it would
    /// fail the same way, and a fixed spec queues the key again.
    async fn bad_selector(&self, summary: &PodSummary, err: String) -> Result<(), kube::Error> {
        if lock(&self.warned).insert(format!("{} {:?}", key_of(summary), summary.metadata.generation)) {
            println!("bad selector: {}: {err}", key_of(summary));
            self.record(summary, EventType::Warning, "BadSelector", err).await;
        }
        Ok(())
    }
    // ANCHOR_END: record
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

// ANCHOR_END: whole
