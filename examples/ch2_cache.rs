// ANCHOR: whole
//! Chapter 2: the cache.
//!
//! ```sh
//! cargo run --example ch2_cache -- -n default
//! ```
//!
//! On its own, in a project of yours (`cargo new`, this file as src/main.rs):
//!
//! ```sh
//! cargo add kube@5 k8s-openapi@0.29 tokio@1 futures@0.3 clap@4 -F kube@5/runtime,k8s-openapi@0.29/v1_35,tokio@1/full,clap@4/derive
//! ```
//!
//! Chapter 1's events, now written into a reflector `Store`: kube's
//! counterpart of client-go's Indexer, a map from each pod's key to its
//! newest state. After every event we read the store by the pod's key and
//! print what it holds, so you see *when* the cache changes:
//!
//! - During a list (`Init`, `InitApply`) the store does not change yet: it
//!   keeps its old contents and swaps to the whole new list at `InitDone`.
//!   A program that reads the store for an `InitApply` pod finds nothing (at
//!   start-up) or the old state (during a relist). This is why chapters 3
//!   and 4 queue the keys of a list at `InitDone`.
//! - `Store::wait_until_ready()` returns at the first `InitDone`: client-go's
//!   WaitForCacheSync. From then on the store holds every pod.
//!
//! Why a controller reads its cache and not the server: the cache is kept
//! current by the one watch it already has, so reading it costs no request.
//! A controller that asked the server for every key would send the API
//! server one GET per change per pod, for the same answer a few milliseconds
//! older. The cache can be a little behind the server, never inconsistent
//! with the events we have seen. An `Apply` or `Delete` arrives after the
//! store holds it; an `InitApply` arrives before (the store takes the list at
//! `InitDone`), at start-up and in every relist.

use std::process::ExitCode;

use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, ResourceExt};

#[derive(Parser)]
struct Args {
    /// Watch pods in this namespace only [default: all namespaces]
    #[arg(short, long)]
    namespace: Option<String>,
}

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
    println!("chapter 2: the same events, written into a cache (a reflector Store) and read back by key");

    // ANCHOR: store
    // `store` is the read handle (cheap to clone, for everyone who reads);
    // `writer` is the one write handle, given to `reflect`, which applies
    // every event to the store *before* passing it on.
    let (store, writer) = reflector::store::<Pod>();
    let events = watcher::watcher(api, watcher::Config::default()).default_backoff().reflect(writer);
    let mut events = std::pin::pin!(events);

    // Waiting for the cache while nothing polls the watch would wait forever,
    // so the wait runs next to the loop that drives it.
    let mut ready = std::pin::pin!(store.wait_until_ready());
    let mut announced = false;
    // One Ctrl-C listener for the whole loop, so a Ctrl-C between two events
    // is not missed.
    let mut ctrl_c = std::pin::pin!(tokio::signal::ctrl_c());
    loop {
        let next = tokio::select! {
            _ = &mut ctrl_c => return Ok(()),
            result = &mut ready, if !announced => {
                announced = true;
                match result {
                    Ok(()) => println!("cache synced (pods: {}): {}", store.len(), keys(&store)),
                    Err(err) => println!("the store's writer is gone: {err}"),
                }
                continue;
            }
            next = events.next() => next,
        };
        match next {
            Some(Ok(event)) => println!("{}", after(&event, &store)),
            Some(Err(err)) => println!("watch error (the watcher retries): {err}"),
            None => return Ok(()),
        }
    }
    // ANCHOR_END: store
}

// ANCHOR: after
/// The event, and what the store holds for its pod right after it.
fn after(event: &Event<Pod>, store: &Store<Pod>) -> String {
    match event {
        Event::Init => format!("Init -> the store keeps what it holds (pods: {}) until InitDone", store.len()),
        Event::InitApply(p) => format!("InitApply {} -> store: {}", key(p), lookup(store, p)),
        Event::InitDone => format!("InitDone -> the store swapped to the new list (pods: {})", store.len()),
        Event::Apply(p) => format!("Apply {} -> store: {}", key(p), lookup(store, p)),
        Event::Delete(p) => format!("Delete {} -> store: {}", key(p), lookup(store, p)),
    }
}

/// A pod's key, `namespace/name`: what a controller calls a pod by.
fn key(pod: &Pod) -> String {
    format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any())
}

/// Reads the cache's copy of `pod`, by its namespace and name: no request to
/// the server.
fn lookup(store: &Store<Pod>, pod: &Pod) -> String {
    match store.get(&ObjectRef::from_obj(pod)) {
        Some(pod) => {
            let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("-");
            format!("rv={} phase={phase}", pod.resource_version().unwrap_or_default())
        }
        None => "not there".into(),
    }
}
// ANCHOR_END: after

/// Every key in the cache, sorted, for one readable line.
fn keys(store: &Store<Pod>) -> String {
    let mut keys: Vec<String> = store.state().iter().map(|pod| key(pod)).collect();
    keys.sort();
    keys.join(", ")
}
// ANCHOR_END: whole
