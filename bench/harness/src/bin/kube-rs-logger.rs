//! The pod logger a Rust user would write from kube's own examples
//! (`pod_reflector.rs`, `pod_watcher.rs`): k8s-openapi's `Pod`, a `watcher`
//! with kube's default backoff, `managedFields` dropped with `.modify()` before
//! the `reflector` store, and one line per `applied_objects()` event.
//!
//! It is a peer in `make bench`, not a teaching example: it is written the way
//! the examples are, so the numbers show what those few lines cost. Like them
//! it has no resync, no work queue and no delete lines (`applied_objects`
//! drops deletes).
//!
//! Lines (stdout, tracing's default format):
//! `cache synced pods=N elapsed_ms=M` once the store is ready, then
//! `applied: namespace/name` for every pod the watcher hands over.

use std::path::PathBuf;
use std::pin::pin;
use std::time::Instant;

use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client, Config, ResourceExt};
use tracing::{info, warn};
use tracing_subscriber::EnvFilter;

#[derive(Parser, Debug)]
#[command(about = "The kube-rs idiomatic pod logger (a peer in make bench)")]
struct Opts {
    /// Path to a kubeconfig [default: kube's usual inference]
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let opts = Opts::parse();
    // kube's examples start with `tracing_subscriber::fmt::init()` and
    // RUST_LOG=info; this is the same with info as the default level.
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt().with_env_filter(filter).init();
    let start = Instant::now();
    let config = match &opts.kubeconfig {
        Some(path) => {
            Config::from_custom_kubeconfig(Kubeconfig::read_from(path)?, &KubeConfigOptions::default()).await?
        }
        None => Config::infer().await?,
    };
    let api: Api<Pod> = Api::all(Client::try_from(config)?);

    let (reader, writer) = reflector::store::<Pod>();
    tokio::spawn(async move {
        if reader.wait_until_ready().await.is_ok() {
            info!("cache synced pods={} elapsed_ms={}", reader.len(), start.elapsed().as_millis());
        }
    });

    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        // The memory optimisation kube's pod_reflector example teaches.
        .modify(|pod| pod.managed_fields_mut().clear())
        .reflect(writer)
        .applied_objects();
    let mut stream = pin!(stream);
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            event = stream.next() => match event {
                Some(Ok(pod)) => info!("applied: {}/{}", pod.namespace().unwrap_or_default(), pod.name_any()),
                Some(Err(error)) => warn!("watch error: {error}"),
                None => break,
            },
        }
    }
    Ok(())
}
