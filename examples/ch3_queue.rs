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
//! An event handler does not do the work. It only puts the pod's key,
//! `namespace/name`, on a work queue, and a worker takes keys off it. The
//! queue is the crate's own (`demo_controller::queue::Queue`, the program's
//! real queue, as Go controllers use client-go's workqueue), and its rules
//! are the lesson:
//!
//! - A key that is already waiting is not added again (dedup).
//! - A key a worker holds is not handed out again until the worker calls
//!   `done`; a change meanwhile parks the key and it comes back once after.
//!
//! So ten changes to one pod while the worker is busy become *one* more key,
//! and the worker reads the pod's newest state from the cache: it never
//! needs the ten events, only the last state (level, not edge). The worker
//! here is slow on purpose (`--work-time`) so you can see the merging.

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Parser;
use demo_controller::key::Key;
use demo_controller::pod::Pod;
use demo_controller::queue::Queue;
use futures::StreamExt;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, ResourceExt};

#[derive(Parser)]
struct Args {
    /// Watch pods in this namespace only [default: all namespaces]
    #[arg(short, long)]
    namespace: Option<String>,
    /// How long the worker spends on each key, to let changes pile up
    #[arg(long, default_value = "3s", value_parser = humantime::parse_duration)]
    work_time: Duration,
}

// ANCHOR: merged
/// Events seen per key since a worker last took it: only to print how many
/// events one sync covers. A real controller does not count them (it does
/// not need to: the state in the cache is all it reads).
type Merged = Mutex<HashMap<Key, u32>>;
// ANCHOR_END: merged

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

    // ANCHOR: start
    let (store, writer) = reflector::store::<Pod>();
    let queue: Arc<Queue<Key>> = Queue::new("chapter3");
    let merged: Arc<Merged> = Arc::default();
    let worker = tokio::spawn(worker(queue.clone(), store.clone(), merged.clone(), args.work_time));
    // ANCHOR_END: start

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
    // ANCHOR: shutdown
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
    // ANCHOR_END: shutdown
}

// ANCHOR: handle
/// The event handlers: one key per change. The keys of a list are queued at
/// `InitDone`, when the store holds the list (chapter 2 showed why).
fn handle(event: &Event<Pod>, store: &Store<Pod>, queue: &Queue<Key>, merged: &Merged) {
    let keys = match event {
        Event::Apply(pod) | Event::Delete(pod) => vec![Key::of(pod)],
        Event::InitDone => store.state().iter().map(|pod| Key::of(pod)).collect(),
        Event::Init | Event::InitApply(_) => return,
    };
    let kind = match event {
        Event::Apply(_) => "Apply",
        Event::Delete(_) => "Delete",
        _ => "InitDone",
    };
    for key in keys {
        *merged.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).entry(key.clone()).or_default() += 1;
        // `add` says whether the key was newly queued. If not, it was already
        // waiting, or a worker holds it and it will come back after `done`.
        if queue.add(key.clone()) {
            println!("handler: {kind} {key} -> queued");
        } else {
            println!("handler: {kind} {key} -> merged: already queued or being worked on");
        }
    }
}
// ANCHOR_END: handle

// ANCHOR: worker
/// One worker: take a key, read the pod's newest state from the cache, work,
/// and tell the queue it is done with the key.
async fn worker(queue: Arc<Queue<Key>>, store: Store<Pod>, merged: Arc<Merged>, work_time: Duration) {
    while let Some(key) = queue.get().await {
        let events = merged.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).remove(&key).unwrap_or(0);
        let state = match store.get(&ObjectRef::new(&key.name).within(&key.namespace)) {
            Some(pod) => format!("rv={}", pod.resource_version().unwrap_or_default()),
            None => "gone from the cache".into(),
        };
        println!("worker: {key} {state} (events since it was last taken: {events})");
        tokio::time::sleep(work_time).await; // the "work"
        // Without `done` this key would stay "being worked on" forever, and
        // every later change to the pod would park behind it (chapter 4's
        // `--pitfall never-done` shows that).
        queue.done(&key);
        println!("worker: done {key}");
    }
}
// ANCHOR_END: worker
// ANCHOR_END: whole
