//! demo-controller: a Kubernetes pod event logger to learn controllers from.
//!
//! This file is the program's front door: flags, client, signals, then it
//! hands over to the controller. The modules it uses live in the library
//! (src/lib.rs), which lists the path of one pod change module by module.
//!
//! Exit codes (book/src/appendix/operations.md lists the same):
//! - 0: a clean shutdown: every key that was queued or waiting for a retry
//!   when the signal came was synced (or the signal came before the first
//!   list, when nothing was queued yet);
//! - 1: it cannot run (bad kubeconfig, unknown context, server unreachable,
//!   port in use...), with one line on stderr saying what and how to fix it;
//!   or, with `--leader-elect`, it lost the lease (`lost the lease`);
//! - 2: a bad flag (clap's usual code for a usage error);
//! - 3: keys were left unsynced: the drain hit its time limit, or a key
//!   whose sync had failed failed again on its last try during the drain
//!   (the last line says how many);
//! - 128 + the signal's number (130 for SIGINT, 143 for SIGTERM): a signal
//!   during start-up, or a second signal, made it exit at once.

use std::process::ExitCode;

use demo_controller::pod::ApiPod;
use kube::Api;
use kube::runtime::watcher;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use demo_controller::cli::Args;
use demo_controller::controller::{Controller, Settings, Stopped};
use demo_controller::{client, faults, leader, logging, probes, signals};

/// jemalloc rather than glibc's malloc: see Cargo.toml (a cache built while a
/// list's buffers come and go fragments glibc's heap).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Exit code of a shutdown that left keys unsynced (see the list above).
const EXIT_UNSYNCED: u8 = 3;

/// One thread runs the controller: the watch and the workers. A sync is a
/// cache read and a line, a fraction of a millisecond, so `--workers` syncs
/// take turns at their awaits; on one thread a key goes from the informer to
/// a worker without waking another thread (bench/profile.md measured what
/// threads waking each other cost during a burst). A controller whose sync
/// does heavy CPU work would want the multi-threaded runtime instead.
///
/// Signals, probes and metrics run on a second, small thread (signals.rs), so
/// they answer even while this one is blocked writing into a full stdout.
// ANCHOR: main
fn main() -> ExitCode {
    let args = Args::parse_or_exit();
    logging::init(args.log_format);
    let (side, runtime) =
        match (signals::side_thread(), tokio::runtime::Builder::new_current_thread().enable_all().build()) {
            (Ok(side), Ok(runtime)) => (side, runtime),
            (Err(err), _) | (_, Err(err)) => return fatal(format!("cannot start the runtime: {err}")),
        };
    let first_signal = signals::listen(&side);
    runtime.block_on(async move {
        let shutdown = CancellationToken::new();
        let signal = tokio::spawn(signals::first(first_signal, shutdown.clone()));
        // Start-up (connecting, checking the selector, binding the probes)
        // races the first signal: a server that never answers must not make
        // Ctrl-C wait for a timeout.
        let (controller, elector) = tokio::select! {
            started = start(&args, &side) => match started {
                Ok(started) => started,
                Err(code) => return code,
            },
            Ok(signal) = signal => {
                warn!(signal = signal.name, "start-up cut short by {}: exiting", signal.name);
                return ExitCode::from(signal.exit_code());
            }
        };
        let stopped = match elector {
            None => controller.run(shutdown).await,
            Some(mut elector) => {
                let run = controller.clone().run(shutdown.clone());
                tokio::pin!(run);
                // The election goes on through the drain: the lease is held
                // until the last line, then released for the standby.
                tokio::select! {
                    stopped = &mut run => {
                        elector.release().await;
                        stopped
                    }
                    () = async { let joined = controller.synced().await; elector.run(joined).await } => {
                        // Lost: the gate is closed, no line follows. Exit as
                        // client-go's OnStoppedLeading does, for the kubelet
                        // to restart us as a standby: after a lost lease we
                        // cannot tell what else was missed, and a fresh
                        // start is the state every test has seen.
                        shutdown.cancel();
                        run.await;
                        return ExitCode::FAILURE;
                    }
                }
            }
        };
        match stopped {
            Stopped::Drained => ExitCode::SUCCESS,
            Stopped::Unsynced { .. } => ExitCode::from(EXIT_UNSYNCED),
        }
    })
}
// ANCHOR_END: main

/// Start-up: client, selector check, probes, and with `--leader-elect` the
/// elector. A fatal problem is one line on stderr and exit code 1.
async fn start(args: &Args, side: &tokio::runtime::Handle) -> Result<Started, ExitCode> {
    let client = client::connect(args.kubeconfig.clone(), args.context.clone()).await.map_err(fatal)?;
    let leases = args.leader_elect.then(|| Api::namespaced(client.clone(), &args.lease_namespace()));
    let api: Api<ApiPod> = match &args.namespace {
        Some(ns) => Api::namespaced(client, ns),
        None => Api::all(client),
    };
    let faults = faults::Faults::from_env().map_err(fatal)?;
    let mut watch = watcher::Config::default();
    if let Some(secs) = faults.watch_timeout {
        watch = watch.timeout(secs);
    }
    if args.paged_list {
        // The first list, at "0" (informer.rs says why); relists are consistent.
        watch = watch.any_semantic();
    } else {
        watch = watch.streaming_lists(); // informer.rs falls back if refused
    }
    if let Some(selector) = &args.selector {
        client::check_selector(&api, selector).await.map_err(fatal)?;
        watch = watch.labels(selector);
    }

    let election_faults = faults.election.clone();
    let settings = Settings {
        workers: args.workers,
        resync: Some(args.resync).filter(|d| !d.is_zero()),
        skip_existing: args.skip_existing,
        wire: args.wire,
        protobuf_accept: faults.protobuf_accept.clone(),
        faults,
    };
    info!(
        namespace = args.namespace.as_deref().unwrap_or("<all>"),
        selector = args.selector.as_deref().unwrap_or(""),
        resync = settings.resync.map_or("off".into(), |d| humantime::format_duration(d).to_string()),
        workers = settings.workers,
        wire = %settings.wire,
        "demo-controller starting"
    );
    let Some(leases) = leases else {
        let controller = Controller::new(api, watch, settings);
        probes::serve(side, args.probes(), args.metrics(), controller.queue(), args.stuck_after).map_err(fatal)?;
        return Ok((controller, None));
    };
    // A candidate: every line passes the gate, closed until it leads.
    let gate = leader::Gate::standby();
    if let Some(max_bytes) = election_faults.kept_bytes {
        gate.bound_kept_bytes(max_bytes);
    }
    let controller = Controller::with_gate(api, watch, settings, gate.clone());
    let timings = args.leader_timings().map_err(fatal)?; // checked at parse: cannot fail here
    let (name, queue, watch) = (&args.leader_elect_resource_name, controller.queue(), controller.watch());
    let elector = leader::Elector::new(leases, name, timings, gate, queue, watch)
        .in_namespace(&args.lease_namespace())
        .watching(leader::Scope::new(args.namespace.as_deref(), args.selector.as_deref()))
        .with_faults(election_faults);
    info!(
        identity = elector.identity(),
        lease = format!("{}/{}", args.lease_namespace(), args.leader_elect_resource_name),
        "leader election: logging once this replica holds the lease"
    );
    probes::serve(side, args.probes(), args.metrics(), controller.queue(), args.stuck_after).map_err(fatal)?;
    Ok((controller, Some(elector)))
}

type Started = (std::sync::Arc<Controller>, Option<leader::Elector>);

/// One line on stderr, exit code 1: for what makes running pointless.
fn fatal(err: impl std::fmt::Display) -> ExitCode {
    eprintln!("error: {err}");
    ExitCode::FAILURE
}
