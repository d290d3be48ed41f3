//! Chapter 5: chapter 4 again, on kube's own `Controller`.
//!
//! ```sh
//! cargo run --example ch5_controller_runtime -- -n default
//! ```
//!
//! Chapter 4 wired the watch, the cache, the queue and the worker by hand.
//! `kube::runtime::Controller` is that machinery, ready-made, and the way
//! most kube-rs users write a controller (as controller-runtime's Reconciler
//! is for Go users). You hand it one function, `reconcile`, and it calls it
//! with the *current state* of an object whenever that object may need work:
//!
//! - It lists and watches into its own reflector store, and calls nothing
//!   until the store holds the first list (WaitForCacheSync).
//! - Its scheduler is the work queue: one pending request per object (dedup),
//!   never two reconciles of one object at once, one more run if the object
//!   changed meanwhile.
//! - `reconcile` returns an `Action`: `requeue(d)` asks to be called again
//!   after `d` (a resync per object), `await_change()` waits for the next
//!   change. An error goes to `error_policy`, which picks the retry delay.
//!
//! What it does differently from chapter 4: there is no onAdd, onUpdate or
//! onDelete. `reconcile` gets the object as it is now, never the event or the
//! old state, and a deleted object is not reconciled at all (see `run`'s
//! loop). So this chapter logs what each pod *is*, not what happened to it.

use std::convert::Infallible;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};

#[derive(Parser)]
struct Args {
    /// Watch pods in this namespace only [default: all namespaces]
    #[arg(short, long)]
    namespace: Option<String>,
    /// Reconcile each pod again this long after its last reconcile, changed or not
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    requeue: Duration,
}

/// What every reconcile can read: here only the requeue period. A real
/// controller keeps its `Client` here, to write what it reconciles.
struct Context {
    requeue: Duration,
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

// ANCHOR: run
async fn run(args: Args) -> Result<(), kube::Error> {
    let client = Client::try_default().await?;
    let api: Api<Pod> = match &args.namespace {
        Some(ns) => Api::namespaced(client, ns),
        None => Api::all(client),
    };
    println!(
        "chapter 5: chapter 4 on kube::runtime::Controller: reconcile(pod) on its state, no onAdd/onUpdate/onDelete"
    );

    // The first signal starts a graceful shutdown: no new reconciles, the
    // running ones finish, and the stream below ends.
    let (graceful, shutdown) = futures::channel::oneshot::channel::<()>();
    tokio::spawn(on_signals(graceful));
    let context = Arc::new(Context { requeue: args.requeue });
    let results = Controller::new(api, watcher::Config::default()).graceful_shutdown_on(shutdown.map(|_| ())).run(
        reconcile,
        error_policy,
        context,
    );
    // Nothing runs until this stream is polled. Each item is the outcome of
    // one reconcile request.
    let mut results = std::pin::pin!(results);
    while let Some(result) = results.next().await {
        match result {
            Ok(_) => {} // reconcile printed its line
            // A request for an object the store no longer holds: a pod deleted
            // before its reconcile ran. `reconcile` is not called for it.
            Err(controller::Error::ObjectNotFound(obj)) => {
                let ns = obj.namespace.as_deref().unwrap_or_default();
                println!("not reconciled: {ns}/{} is gone from the cache (deleted)", obj.name);
            }
            // A watch error: the controller's watcher retries by itself.
            Err(controller::Error::QueueError(err)) => println!("watch error (the watcher retries): {err}"),
            Err(err) => println!("controller error: {err}"),
        }
    }
    println!("shutdown complete");
    Ok(())
}
// ANCHOR_END: run

// ANCHOR: reconcile
/// The reconciler: called with the pod's state now, for any reason (a
/// change, the first list, a requeue), and never told which. It must give
/// the same answer for the same state (be idempotent).
///
/// A deleted pod is seen only while it is terminating (its deletionTimestamp
/// set, still in the cache): `Controller::new` triggers on applied objects,
/// and a Delete event triggers nothing. A controller that must act on a
/// delete puts a finalizer on the object (`kube::runtime::finalizer`).
async fn reconcile(pod: Arc<Pod>, ctx: Arc<Context>) -> Result<Action, Infallible> {
    let key = format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any());
    if pod.metadata.deletion_timestamp.is_some() {
        println!("reconcile: {key} is terminating");
        // Nothing will be left to do once it is gone.
        return Ok(Action::await_change());
    }
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("unknown");
    println!("reconcile: {key} exists (phase {phase})");
    Ok(Action::requeue(ctx.requeue))
}

/// Called when `reconcile` fails, to choose when to try again. This
/// reconciler cannot fail (`Infallible` has no values), so neither can this.
fn error_policy(_pod: Arc<Pod>, error: &Infallible, _ctx: Arc<Context>) -> Action {
    match *error {}
}
// ANCHOR_END: reconcile

/// The first SIGINT or SIGTERM starts the graceful shutdown; a second one
/// exits at once, with 128 + its number, as a shell expects.
async fn on_signals(graceful: futures::channel::oneshot::Sender<()>) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term)) = (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) else {
        println!("cannot install signal handlers: stop this with SIGKILL");
        return;
    };
    let (name, _) = next_signal(&mut int, &mut term).await;
    println!("received {name}: shutting down (send it again to exit at once)");
    let _ = graceful.send(());
    let (name, code) = next_signal(&mut int, &mut term).await;
    println!("received {name} again: exiting at once");
    std::process::exit(code);
}

/// The next SIGINT or SIGTERM: its name and the exit code it asks for.
async fn next_signal(
    int: &mut tokio::signal::unix::Signal,
    term: &mut tokio::signal::unix::Signal,
) -> (&'static str, i32) {
    tokio::select! {
        _ = int.recv() => ("SIGINT", 130),
        _ = term.recv() => ("SIGTERM", 143),
    }
}
