//! demo-controller: a Kubernetes pod event logger to learn controllers from.
//!
//! This file is the program's front door: flags, client, signals, then it
//! hands over to the controller. The modules it uses live in the library
//! (src/lib.rs), which lists the path of one pod change module by module.

use std::process::ExitCode;

use demo_controller::pod::Pod;
use kube::Api;
use kube::runtime::watcher;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use demo_controller::cli::Args;
use demo_controller::controller::{Controller, Settings};
use demo_controller::{client, faults, logging, probes};

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse_or_exit();
    // Held until main returns: dropping it flushes the last log lines.
    let _logs = logging::init(args.log_format);
    let shutdown = CancellationToken::new();
    let second_signal = tokio::spawn(handle_signals(shutdown.clone()));

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
    tokio::select! {
        _ = controller.run(shutdown) => ExitCode::SUCCESS,
        // A second signal: give up on the drain, exit at once (130, as a shell
        // reports an interrupted command).
        Ok(name) = second_signal => {
            warn!(signal = name, "received {name} again: exiting at once");
            ExitCode::from(130)
        }
    }
}

/// One line on stderr, exit code 1: for what makes running pointless.
fn fatal(err: impl std::fmt::Display) -> ExitCode {
    eprintln!("error: {err}");
    ExitCode::FAILURE
}

/// SIGINT or SIGTERM starts a graceful shutdown; returns (with its name) on a
/// second one, for when you do not want to wait for the drain. The handlers
/// are installed once, at start-up, so no signal falls between two of them.
async fn handle_signals(shutdown: CancellationToken) -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term)) = (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) else {
        warn!("cannot install signal handlers: stop demo-controller with SIGKILL");
        return std::future::pending().await;
    };
    let mut next = async || {
        tokio::select! {
            _ = int.recv() => "SIGINT",
            _ = term.recv() => "SIGTERM",
        }
    };
    let name = next().await;
    info!(signal = name, "received {name}: shutting down (send it again to exit at once)");
    shutdown.cancel();
    next().await
}
