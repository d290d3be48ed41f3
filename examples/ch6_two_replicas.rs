//! Chapter 6: two replicas, one Lease.
//!
//! ```sh
//! cargo run --example ch6_two_replicas -- -n default    # in two terminals
//! ```
//!
//! Two copies of a logger log every event twice; one copy leaves a gap
//! while its pod is replaced. So both run the whole controller (informer,
//! cache, queue, workers: the warm standby needs no list when it takes
//! over) and a Lease decides whose lines are written. The elector is the
//! program's own (`demo_controller::leader`, as Go controllers import
//! client-go's `tools/leaderelection`); this file only wires it to the
//! controller of chapter 4's shape, the way `src/main.rs` does with
//! `--leader-elect`.
//!
//! `--pitfall keep-logging` makes the leader ignore its renew deadline (a
//! deadline longer than the lease, which client-go's checks refuse): stop
//! it (Ctrl-Z, or SIGSTOP) longer than the lease while the other takes
//! over, resume it, and both log the same pods.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use demo_controller::controller::{Controller, Settings, Stopped};
use demo_controller::leader::{Elector, Gate, Timings};
use demo_controller::pod::Pod;
use kube::runtime::watcher;
use kube::{Api, Client};
use tokio_util::sync::CancellationToken;

#[derive(Parser)]
struct Args {
    /// The namespace of the pods and of the Lease
    #[arg(short, long)]
    namespace: String,
    /// A standby takes the lease this long after the leader's last renew
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
    lease_duration: Duration,
    /// The leader writes no line once no renew succeeded for this long
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    renew_deadline: Duration,
    /// How often candidates try to take the lease and the leader renews it
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    retry_period: Duration,
    /// Make a classic mistake on purpose (see the chapter)
    #[arg(long, value_enum)]
    pitfall: Option<Pitfall>,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Pitfall {
    /// The leader keeps logging after its renew deadline
    KeepLogging,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    lines::init();
    let args = Args::parse();
    let timings = Timings {
        lease_duration: args.lease_duration,
        renew_deadline: args.renew_deadline,
        retry_period: args.retry_period,
    };
    let timings = match args.pitfall {
        // The pitfall: a deadline that never comes, unchecked.
        Some(Pitfall::KeepLogging) => Timings { renew_deadline: Duration::from_secs(24 * 3600), ..timings },
        None => match timings.check() {
            Ok(timings) => timings,
            Err(err) => return fail(err),
        },
    };
    match run(&args.namespace, timings).await {
        Ok(code) => code,
        Err(err) => fail(err),
    }
}

fn fail(err: impl std::fmt::Display) -> ExitCode {
    eprintln!("error: {err}");
    ExitCode::FAILURE
}

// ANCHOR: run
async fn run(ns: &str, timings: Timings) -> Result<ExitCode, kube::Error> {
    let client = Client::try_default().await?;
    let settings = Settings {
        workers: 1,
        resync: None,
        skip_existing: false,
        wire: Default::default(),
        protobuf_accept: None,
        faults: Default::default(),
    };
    // Every line of the workers passes the gate, closed until we lead.
    let gate = Gate::standby();
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let controller = Controller::with_gate(pods, watcher::Config::default(), settings, gate.clone());
    // The elector reads the queue (idle?) and how far the watch came: its
    // progress, written on the Lease as the mark a new leader resumes from.
    let (queue, position) = (controller.queue(), controller.position());
    let mut elector = Elector::new(Api::namespaced(client, ns), "demo-controller", timings, gate, queue, position);

    let shutdown = CancellationToken::new();
    let ctrl_c = shutdown.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            ctrl_c.cancel();
        }
    });
    #[cfg(unix)]
    {
        let term = shutdown.clone();
        let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .map_err(|e| kube::Error::Service(Box::new(e)))?;
        tokio::spawn(async move {
            sigterm.recv().await;
            term.cancel();
        });
    }

    // The controller runs; the election runs beside it, once the cache is
    // synced (only a warm replica runs for the lease), until the drain is
    // over (the lease is held to the last line), then gives the lease up.
    let run = controller.clone().run(shutdown.clone());
    tokio::pin!(run);
    tokio::select! {
        stopped = &mut run => {
            elector.release().await;
            Ok(if stopped == Stopped::Drained { ExitCode::SUCCESS } else { ExitCode::from(3) })
        }
        () = async { let joined = controller.synced().await; elector.run(joined).await } => {
            // Lost: no line after `lost the lease`; exit, as client-go's
            // OnStoppedLeading does, to come back as a standby.
            shutdown.cancel();
            run.await;
            Ok(ExitCode::FAILURE)
        }
    }
}
// ANCHOR_END: run

/// The chapter's lines: each event's message and, where present, whether a
/// takeover followed a release or a line may repeat one (`released`,
/// `replayed`); no time, UID or identity suffix, so the book can show them.
mod lines {
    use tracing::field::{Field, Visit};
    use tracing_subscriber::layer::{Context, SubscriberExt};
    use tracing_subscriber::util::SubscriberInitExt;

    struct Line(String, String);

    impl Visit for Line {
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            match field.name() {
                "message" => self.0 = format!("{value:?}"),
                "released" | "replayed" => self.1.push_str(&format!(" {}={value:?}", field.name())),
                _ => {}
            }
        }
    }

    struct Print;

    impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Print {
        fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
            if !event.metadata().target().starts_with("demo_controller") {
                return;
            }
            let mut line = Line(String::new(), String::new());
            event.record(&mut line);
            println!("{}{}", line.0, line.1);
        }
    }

    pub fn init() {
        let filter = tracing_subscriber::EnvFilter::new("demo_controller=info");
        tracing_subscriber::registry().with(tracing_subscriber::Layer::with_filter(Print, filter)).init();
    }
}
