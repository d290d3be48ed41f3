// ANCHOR: whole
//! Chapter 1: what an informer sees.
//!
//! Run it against any cluster (the local one: `make cluster-up`, then the
//! `export KUBECONFIG=...` it prints):
//!
//! ```sh
//! cargo run --example ch1_watch -- -n default
//! ```
//!
//! On its own, in a project of yours (`cargo new`, this file as src/main.rs):
//!
//! ```sh
//! cargo add kube@5 k8s-openapi@0.29 tokio@1 futures@0.3 clap@4 -F kube@5/runtime,k8s-openapi@0.29/v1_35,tokio@1/full,clap@4/derive
//! ```
//!
//! and, in another terminal, create, label and delete a pod:
//!
//! ```sh
//! kubectl -n default run kuard --image=registry.k8s.io/pause:3.10
//! kubectl -n default label pod kuard tier=web
//! kubectl -n default delete pod kuard
//! ```
//!
//! Every controller starts here. It LISTs the pods once, then WATCHes every
//! change after the list's resourceVersion. kube's `watcher` does both and
//! hands us one stream of events:
//!
//! - `Init`, then one `InitApply` per listed pod, then `InitDone`: a full list.
//!   This happens at start-up *and again* whenever the watch cannot resume
//!   (the server answers 410 Gone because the resourceVersion we hold is too
//!   old). A watch that resumes gets the changes it missed as ordinary
//!   events; after a 410 the relist is how a controller catches up.
//! - `Apply`: a pod was created *or* changed. kube has no separate "added":
//!   the event does not say which one, and carries no old object.
//! - `Delete`: a pod is gone, with its final state.
//!
//! Each line prints the pod's resourceVersion: a number the server gives each
//! change, shared by all objects, so one pod's numbers can skip. A later
//! change has a larger one, and a watch resumes from it.

use std::process::ExitCode;

use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, ResourceExt};

/// The flags. Every chapter takes `-n`: a namespace of your own keeps the
/// output to the pods you play with.
#[derive(Parser)]
struct Args {
    /// Watch pods in this namespace only [default: all namespaces]
    #[arg(short, long)]
    namespace: Option<String>,
}

// One thread is plenty for one watch, and it keeps the chapter simple.
#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    // A chapter shows good habits too: a failure is one line, never a panic.
    match run(Args::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), kube::Error> {
    // ANCHOR: api
    // The client reads $KUBECONFIG (or ~/.kube/config, or the in-cluster
    // config), like kubectl.
    let client = Client::try_default().await?;
    // k8s-openapi's `Pod` is the pod type every kube example uses: every
    // field, as the server sends it.
    let api: Api<Pod> = match &args.namespace {
        Some(ns) => Api::namespaced(client, ns),
        None => Api::all(client),
    };
    // ANCHOR_END: api
    println!("chapter 1: every event kube's watcher yields for pods, with its resourceVersion (Ctrl-C stops)");

    // ANCHOR: watch
    // Nothing is listed or watched until the stream is polled. The backoff
    // spaces out retries after an error instead of hammering the server.
    let events = watcher::watcher(api, watcher::Config::default()).default_backoff();
    let mut events = std::pin::pin!(events);
    // One Ctrl-C listener for the whole loop, so a Ctrl-C between two events
    // is not missed.
    let mut ctrl_c = std::pin::pin!(tokio::signal::ctrl_c());
    loop {
        let next = tokio::select! {
            _ = &mut ctrl_c => return Ok(()),
            next = events.next() => next,
        };
        match next {
            Some(Ok(event)) => println!("{}", describe(&event)),
            // 410 Gone: the server no longer has the history after our
            // resourceVersion (etcd compacted it), so the watch cannot resume.
            Some(Err(watcher::Error::WatchError(status))) if status.code == 410 => {
                println!("watch error: 410 Gone, too old to resume; the watcher lists again ({})", status.message)
            }
            // An error is never the end: the watcher retries on its next poll,
            // resuming the watch or, after a 410 Gone, listing again (you
            // would see `Init` once more). Ending here on the first error, as
            // `?` would, is the classic mistake.
            Some(Err(err)) => println!("watch error (the watcher retries): {err}"),
            None => return Ok(()),
        }
    }
    // ANCHOR_END: watch
}

// ANCHOR: describe
/// One line per event: its kind, the pod's `namespace/name`, its
/// resourceVersion, and what the event means for an informer.
fn describe(event: &Event<Pod>) -> String {
    let pod = |p: &Pod| {
        let rv = p.resource_version().unwrap_or_default();
        format!("{}/{} rv={rv}", p.namespace().unwrap_or_default(), p.name_any())
    };
    match event {
        Event::Init => "Init: a list begins (at start-up, or a relist after the watch could not resume)".into(),
        Event::InitApply(p) => format!("InitApply: {} (one pod of the list)", pod(p)),
        Event::InitDone => "InitDone: the list is complete; watching changes from here".into(),
        Event::Apply(p) => format!("Apply: {} (created or changed: the event does not say which)", pod(p)),
        Event::Delete(p) => format!("Delete: {} (its final state)", pod(p)),
    }
}
// ANCHOR_END: describe
// ANCHOR_END: whole
