// ANCHOR: whole
//! Chapter 3: the work queue.
//!
//! ```sh
//! cargo run --example ch3_queue -- -n default
//! ```
//!
//! then change one pod ten times in a row, faster than the worker works:
//!
//! ```sh
//! kubectl -n default run kuard --image=registry.k8s.io/pause:3.10
//! for i in $(seq 10); do kubectl -n default label pod kuard --overwrite n=$i; done
//! ```
//!
//! On its own, in a project of yours (`cargo new`, this file as src/main.rs):
//!
//! ```sh
//! cargo add kube@5 k8s-openapi@0.29 tokio@1 futures@0.3 clap@4 humantime@2 -F kube@5/runtime,k8s-openapi@0.29/v1_35,tokio@1/full,clap@4/derive
//! ```
//!
//! An event handler does not do the work. It only puts the pod's key,
//! `namespace/name`, on a work queue, and a worker takes keys off it. This
//! chapter builds that queue, with the rules of client-go's workqueue:
//!
//! - A key that is already waiting is not added again (dedup).
//! - A key a worker holds is not handed out again until the worker calls
//!   `done`; a change meanwhile marks the key dirty, and it comes back once
//!   after `done`.
//!
//! So ten changes to one pod while the worker is busy become *one* more key,
//! and the worker reads the pod's newest state from the cache: it never
//! needs the ten events, only the last state (level, not edge). The worker
//! here is slow on purpose (`--work-time`) so you can see the merging.

use std::collections::{HashMap, HashSet, VecDeque};
use std::process::ExitCode;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, ResourceExt};
use tokio::sync::Notify;

// ANCHOR: queue
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
// ANCHOR_END: queue

#[derive(Parser)]
struct Args {
    /// Watch pods in this namespace only [default: all namespaces]
    #[arg(short, long)]
    namespace: Option<String>,
    /// How long the worker spends on each key, to let changes pile up
    #[arg(long, default_value = "3s", value_parser = humantime::parse_duration)]
    work_time: Duration,
}

/// Events seen per key since a worker last took it: only to print how many
/// events one sync covers. A real controller does not count them (it does
/// not need to: the state in the cache is all it reads).
type Merged = Mutex<HashMap<String, u32>>;

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

async fn run(args: Args) -> Result<(), kube::Error> {
    let client = Client::try_default().await?;
    let api: Api<Pod> = match &args.namespace {
        Some(ns) => Api::namespaced(client, ns),
        None => Api::all(client),
    };
    println!("chapter 3: event handlers put keys on a de-duplicating queue; one slow worker takes them");

    let (store, writer) = reflector::store::<Pod>();
    let queue: Arc<Queue> = Arc::default();
    let merged: Arc<Merged> = Arc::default();
    let worker = tokio::spawn(worker(queue.clone(), store.clone(), merged.clone(), args.work_time));

    let events = watcher::watcher(api, watcher::Config::default()).default_backoff().reflect(writer);
    let mut events = std::pin::pin!(events);
    // One Ctrl-C listener for the whole loop, so a Ctrl-C between two events
    // is not missed.
    let mut ctrl_c = std::pin::pin!(tokio::signal::ctrl_c());
    loop {
        let next = tokio::select! {
            _ = &mut ctrl_c => break,
            next = events.next() => next,
        };
        match next {
            Some(Ok(event)) => handle(&event, &store, &queue, &merged),
            Some(Err(err)) => println!("watch error (the watcher retries): {err}"),
            None => break,
        }
    }
    // Shutdown: no more keys come in; the worker finishes what is queued and
    // then `get` returns None.
    queue.shut_down();
    println!("shutting down: {} keys left to drain (Ctrl-C again to exit at once)", queue.len());
    tokio::select! {
        result = worker => if let Err(err) = result {
            println!("the worker failed: {err}");
        },
        _ = tokio::signal::ctrl_c() => {
            println!("Ctrl-C again: exiting at once, {} keys not drained", queue.len());
            std::process::exit(130);
        }
    }
    println!("shutdown complete");
    Ok(())
}

/// The event handlers: one key per change. The keys of a list are queued at
/// `InitDone`, when the store holds the list (chapter 2 showed why).
fn handle(event: &Event<Pod>, store: &Store<Pod>, queue: &Queue, merged: &Merged) {
    let keys = match event {
        Event::Apply(pod) | Event::Delete(pod) => vec![key(pod)],
        Event::InitDone => store.state().iter().map(|pod| key(pod)).collect(),
        Event::Init | Event::InitApply(_) => return,
    };
    let kind = match event {
        Event::Apply(_) => "Apply",
        Event::Delete(_) => "Delete",
        _ => "InitDone",
    };
    for key in keys {
        *lock(merged).entry(key.clone()).or_default() += 1;
        // `add` says whether the key was queued now. If not, it was already
        // waiting, or a worker holds it and it comes back after `done`.
        if queue.add(key.clone()) {
            println!("handler: {kind} {key} -> queued");
        } else {
            println!("handler: {kind} {key} -> merged: already queued or being worked on");
        }
    }
}

// ANCHOR: worker
/// One worker: take a key, read the pod's newest state from the cache, work,
/// and tell the queue it is done with the key.
async fn worker(queue: Arc<Queue>, store: Store<Pod>, merged: Arc<Merged>, work_time: Duration) {
    while let Some(key) = queue.get().await {
        let events = lock(&merged).remove(&key).unwrap_or(0);
        // The key says where to look in the cache: namespace, then name.
        let (namespace, name) = key.split_once('/').unwrap_or_default();
        let state = match store.get(&ObjectRef::new(name).within(namespace)) {
            Some(pod) => format!("rv={}", pod.resource_version().unwrap_or_default()),
            None => "gone from the cache".into(),
        };
        println!("worker: {key} {state} (events since it was last taken: {events})");
        tokio::time::sleep(work_time).await; // the "work"
        // Without `done` this key would stay in `processing` forever, and
        // every later change to the pod would wait behind it (chapter 4's
        // `--pitfall never-done` shows that).
        queue.done(&key);
        println!("worker: done {key}");
    }
}
// ANCHOR_END: worker

/// A pod's key, `namespace/name`, as client-go writes it.
fn key(pod: &Pod) -> String {
    format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any())
}
// ANCHOR_END: whole
