//! demo-controller: a Kubernetes pod event logger to learn controllers from.
//!
//! This file is the program's front door: flags, client, signals, then it
//! hands over to the controller. The modules it uses live in the library
//! (src/lib.rs), which lists the path of one pod change module by module.
//!
//! Exit codes (the README lists the same):
//! - 0: a clean shutdown: every key queued before the signal was synced (or
//!   the signal came before the first list, when nothing was queued yet);
//! - 1: it cannot run (bad kubeconfig, unknown context, server unreachable,
//!   port in use...), with one line on stderr saying what and how to fix it;
//! - 2: a bad flag (clap's usual code for a usage error);
//! - 3: the drain was cut by its time limit: queued work was dropped;
//! - 128 + the signal's number (130 for SIGINT, 143 for SIGTERM): a second
//!   signal made it exit at once, during start-up or during the drain.

use std::process::ExitCode;

use demo_controller::pod::Pod;
use kube::Api;
use kube::runtime::watcher;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use demo_controller::cli::Args;
use demo_controller::controller::{Controller, Settings, Stopped};
use demo_controller::{client, faults, logging, probes};

/// Exit code of a drain cut by its time limit (see the list above).
const EXIT_DRAIN_CUT: u8 = 3;

/// One thread runs everything: the watch, the workers, the probes. A sync is a
/// cache read and a line, a fraction of a millisecond that never blocks, so
/// `--workers` syncs take turns at their awaits; on one thread a key goes from
/// the informer to a worker without waking another thread (bench/profile.md
/// found a third of a burst's CPU going to threads waking each other). A controller whose
/// sync does heavy CPU work would want the multi-threaded runtime instead.
#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args = Args::parse_or_exit();
    logging::init(args.log_format);
    let shutdown = CancellationToken::new();
    let second_signal = tokio::spawn(handle_signals(shutdown.clone()));

    // Everything, start-up included, races the second signal: connecting to
    // a server that never answers must not make Ctrl-C wait for a timeout.
    tokio::select! {
        code = run(args, shutdown) => code,
        Ok(signal) = second_signal => {
            warn!(signal = signal.name, "received {} again: exiting at once", signal.name);
            ExitCode::from(128 + signal.number)
        }
    }
}

/// Start-up, then the controller until it stops; returns the exit code.
async fn run(args: Args, shutdown: CancellationToken) -> ExitCode {
    // Fatal start-up problems (no kubeconfig, unknown context, server not
    // there) get one line on stderr and exit code 1.
    let client = match client::connect(args.kubeconfig.clone(), args.context.clone()).await {
        Ok(client) => client,
        Err(err) => return fatal(err),
    };
    let api: Api<Pod> = match &args.namespace {
        Some(ns) => Api::namespaced(client, ns),
        None => Api::all(client),
    };
    let mut watch = watcher::Config::default();
    if !args.paged_list {
        watch = watch.streaming_lists(); // informer.rs falls back if refused
    }
    if let Some(selector) = &args.selector {
        if let Err(err) = client::check_selector(&api, selector).await {
            return fatal(err);
        }
        watch = watch.labels(selector);
    }

    let faults = match faults::Faults::from_env() {
        Ok(faults) => faults,
        Err(err) => return fatal(err),
    };
    let settings = Settings {
        workers: args.workers,
        resync: Some(args.resync).filter(|d| !d.is_zero()),
        skip_existing: args.skip_existing,
        faults,
    };
    info!(
        namespace = args.namespace.as_deref().unwrap_or("<all>"),
        selector = args.selector.as_deref().unwrap_or(""),
        resync = settings.resync.map_or("off".into(), |d| humantime::format_duration(d).to_string()),
        workers = settings.workers,
        "demo-controller starting"
    );
    let controller = Controller::new(api, watch, settings);
    if let Err(err) = probes::serve(args.probe_addr.0, args.metrics_addr.0, controller.queue(), args.stuck_after).await
    {
        return fatal(err);
    }
    match controller.run(shutdown).await {
        Stopped::Drained => ExitCode::SUCCESS,
        Stopped::Cut { .. } => ExitCode::from(EXIT_DRAIN_CUT),
    }
}

/// One line on stderr, exit code 1: for what makes running pointless.
fn fatal(err: impl std::fmt::Display) -> ExitCode {
    eprintln!("error: {err}");
    ExitCode::FAILURE
}

/// A signal we act on: its name for the log, its number for the exit code.
#[derive(Clone, Copy)]
struct Signal {
    name: &'static str,
    number: u8,
}

/// SIGINT or SIGTERM starts a graceful shutdown; returns on a second one,
/// for when you do not want to wait for the drain. The handlers are
/// installed once, at start-up, so no signal falls between two of them.
async fn handle_signals(shutdown: CancellationToken) -> Signal {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term)) = (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) else {
        warn!("cannot install signal handlers: stop demo-controller with SIGKILL");
        return std::future::pending().await;
    };
    let mut next = async || {
        tokio::select! {
            _ = int.recv() => Signal { name: "SIGINT", number: 2 },
            _ = term.recv() => Signal { name: "SIGTERM", number: 15 },
        }
    };
    let first = next().await;
    info!(signal = first.name, "received {}: shutting down (send it again to exit at once)", first.name);
    shutdown.cancel();
    next().await
}
