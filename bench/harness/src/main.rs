//! `make bench`: demo-controller against the client-go logger (WatchList on and
//! off), the kube-rs idiomatic logger and the floors, on one control plane,
//! with the same realistic pods, one peer at a time.
//!
//! Normally run by bench/run.sh, which builds every peer, starts and stops a
//! dedicated control plane and passes its kubeconfig and directory:
//!
//! ```text
//! bash bench/run.sh [--sizes 1000,10000] [--with-100k] [--burst 5000] [--idle 60s] [--out bench]
//! ```
//!
//! At each N the harness first makes the cluster hold exactly N pods (fresh
//! namespaces, create + status patch), then runs the floors and each logger in
//! turn, then two replicas of demo-controller with --leader-elect (a leader and
//! its warm standby, pair.rs); what each measures is in measure.rs and pair.rs,
//! and results.md says how to read it. Before the first N it runs every logger with 0 pods, for the memory
//! floor. Ctrl-C (or SIGTERM) kills the running peers, deletes the pods and
//! namespaces made so far and exits 130.

mod cluster;
mod measure;
mod measured;
mod pair;
mod peers;
mod plot;
mod process;
mod record;
mod report;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Parser;

use crate::cluster::{ControlPlane, NAMESPACES};
use crate::measure::{Measurement, SERVER_TRIES, Settings, percentile};
use crate::peers::{ALL, Binaries, Peer};
use crate::report::{Facts, Results, SizeRow, thousands};

/// How often each floor is measured at each N; the fastest try is the floor.
const FLOOR_TRIES: usize = 3;

#[derive(Parser, Debug)]
#[command(about = "Benchmark demo-controller against its peers and the floors (see bench/run.sh)")]
struct Opts {
    /// Cluster sizes to measure at, in pods, comma-separated
    #[arg(long, value_delimiter = ',', default_value = "1000,10000")]
    sizes: Vec<usize>,

    /// Add 100,000 pods to the sizes (long: creating them alone takes minutes)
    #[arg(long)]
    with_100k: bool,

    /// Pods created as fast as the API server takes them, for the lag (0: no burst)
    #[arg(long, default_value_t = 5000)]
    burst: usize,

    /// How long to measure idle CPU for (the resync comes after it)
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    idle: Duration,

    /// The resync period is the idle window plus this: room for the sync, the
    /// initial lines and reading the memory before the idle window starts
    #[arg(long, default_value = "40s", value_parser = humantime::parse_duration)]
    resync_margin: Duration,

    /// Only these peers, by their log-file names (demo-controller,
    /// demo-controller-paged, demo-controller-json, demo-controller-paged-json,
    /// client-go-watchlist, client-go-paged, kube-rs,
    /// demo-controller-two-replicas, floor-list, floor-stream,
    /// floor-list-protobuf, floor-stream-protobuf), comma-separated; the rest
    /// are n/a. For before-and-after comparisons with --out elsewhere, not for results.md
    #[arg(long, value_delimiter = ',')]
    peers: Vec<String>,

    /// Directory for results.md and results.svg
    #[arg(long, default_value = "bench")]
    out: PathBuf,

    /// Only create the pods of the first size and exit, leaving them (to
    /// profile a logger against them by hand)
    #[arg(long)]
    populate_only: bool,

    /// Where each peer's output is written when it ends, as N-peer.log
    #[arg(long, default_value = "target/bench-logs")]
    logs: PathBuf,

    /// A line for results.md on the conditions of this run (machine load, who else ran)
    #[arg(long, env = "BENCH_CONDITIONS", default_value = "not stated")]
    conditions: String,

    /// The cluster to use, admin rights needed [default: $KUBECONFIG]
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: Option<PathBuf>,

    /// Measure nothing: write results.json beside the results.md given, read
    /// back from its tables (for a results.md from before the harness wrote both)
    #[arg(long)]
    record_from: Option<PathBuf>,

    /// The cluster/up.sh directory of that cluster: needed for the API server's
    /// cost and the forced relist (which restarts kube-apiserver); n/a without
    #[arg(long, env = "BENCH_CLUSTER_DIR")]
    cluster_dir: Option<PathBuf>,

    /// The demo-controller binary
    #[arg(long, default_value = "target/release/demo-controller")]
    demo_controller: PathBuf,

    /// The kube-rs idiomatic logger
    #[arg(long, default_value = "target/release/kube-rs-logger")]
    kube_rs_logger: PathBuf,

    /// The floors' bare clients
    #[arg(long, default_value = "target/release/bench-floor")]
    floor: PathBuf,

    /// The client-go logger (bench/build-go-logger.sh prints it); without it its columns are n/a
    #[arg(long, env = "BENCH_GO_LOGGER")]
    go_logger: Option<PathBuf>,
}

#[tokio::main]
async fn main() {
    let mut opts = Opts::parse();
    if let Some(md) = &opts.record_from {
        let markdown = std::fs::read_to_string(md).unwrap_or_else(|e| {
            eprintln!("error: cannot read {}: {e}", md.display());
            std::process::exit(1);
        });
        write_record(&md.with_file_name("results.json"), &markdown);
        return;
    }
    let Some(kubeconfig) = opts.kubeconfig.clone() else {
        eprintln!("error: no cluster: set KUBECONFIG or pass --kubeconfig (bench/run.sh starts one and does)");
        std::process::exit(2);
    };
    if opts.with_100k {
        opts.sizes.push(100_000);
    }
    opts.sizes.sort_unstable();
    opts.sizes.dedup();
    if opts.sizes.is_empty() || opts.sizes.contains(&0) {
        eprintln!("error: --sizes needs sizes above 0, such as --sizes 1000,10000");
        std::process::exit(2);
    }

    let client = cluster::client_for(&kubeconfig).await;
    tokio::spawn(stop_on_signal(client.clone()));
    let server = match client.apiserver_version().await {
        Ok(info) => info.git_version,
        Err(e) => {
            eprintln!("error: cannot reach the API server ({e}): is the control plane up and --kubeconfig right?");
            std::process::exit(1);
        }
    };
    let facts = facts(server, &opts);
    let bins = Binaries::new(
        opts.demo_controller.clone(),
        opts.kube_rs_logger.clone(),
        opts.floor.clone(),
        opts.go_logger.clone(),
    );
    let control_plane = opts.cluster_dir.clone().map(|dir| ControlPlane { dir });
    let all = || ALL.iter().copied();
    if let Some(unknown) = opts.peers.iter().find(|name| !all().any(|p| p.slug() == name.as_str())) {
        let names: Vec<&str> = all().map(Peer::slug).collect();
        eprintln!("error: --peers: no peer is called '{unknown}'; the peers are {}", names.join(", "));
        std::process::exit(2);
    }
    let chosen = |p: Peer| opts.peers.is_empty() || opts.peers.iter().any(|name| name == p.slug());
    let available: Vec<Peer> = all().filter(|&p| bins.available(p) && chosen(p)).collect();
    for p in ALL.iter().filter(|p| !available.contains(p)) {
        eprintln!("bench: {} is not in this run (n/a in the results)", p.label());
    }
    if control_plane.is_none() {
        eprintln!("bench: no --cluster-dir: the API server's cost and the relist are n/a");
    }
    let settings = Settings {
        kubeconfig: &kubeconfig,
        idle: opts.idle,
        resync: opts.idle + opts.resync_margin,
        burst: opts.burst,
        control_plane: control_plane.as_ref(),
        logs: &opts.logs,
    };
    eprintln!(
        "bench: this run should take about {} (a rough estimate; a busy machine takes longer)",
        estimate(&opts, &available)
    );

    if opts.populate_only {
        let namespaces = cluster::create_pods(&client, opts.sizes[0]).await;
        eprintln!("bench: left {} pods in {}", opts.sizes[0], namespaces.join(", "));
        return;
    }
    let pods = cluster::count_pods(&client).await;
    if pods != 0 {
        eprintln!(
            "error: the cluster already holds {pods} pods; the benchmark needs an empty one (bench/run.sh starts one)"
        );
        std::process::exit(1);
    }
    let started = Instant::now();
    let mut base_mib = BTreeMap::new();
    for &peer in available.iter().filter(|p| p.is_logger()) {
        let rss = measure::base_rss(&bins, peer, &settings).await;
        eprintln!("bench: N=0: {}: {rss:.1} MiB", peer.label());
        base_mib.insert(peer, rss);
    }

    let mut rows = Vec::new();
    let mut previous: Vec<String> = Vec::new();
    let mut pod = cluster::PodSize::default();
    for &n in &opts.sizes {
        cluster::delete_namespaces(&client, &previous).await;
        previous = cluster::create_pods(&client, n).await;
        let total = cluster::count_pods(&client).await;
        assert_eq!(total, n, "the cluster should hold exactly {n} pods, it holds {total}");
        // The creates leave the API server busy for a moment (its caches,
        // etcd's compaction of the revisions); the first peer should not pay for it.
        tokio::time::sleep(Duration::from_secs(5)).await;
        if pod.json == 0 {
            pod = cluster::pod_size(&client, &previous[0]).await;
            eprintln!("bench: one pod is {} bytes of JSON, {} kept by demo-controller", pod.json, pod.kept);
        }
        let mut row = SizeRow { n, m: BTreeMap::new(), pair: None };
        for &peer in &available {
            eprintln!("bench: N={n}: {} ({:.0} s into the run)", peer.label(), started.elapsed().as_secs_f64());
            if peer == Peer::DemoPair {
                let pair = pair::measure(&client, &bins, n, &settings).await;
                eprintln!(
                    "bench: N={n}: {}: synced in {:.0} ms (standby), {:.1} MiB steady (leader), {:.1} MiB (standby)",
                    peer.label(),
                    pair.standby.sync_ms,
                    pair.leader.steady_mib,
                    pair.standby.steady_mib
                );
                row.pair = Some(pair);
            } else {
                let m = measure_peer(&client, &bins, peer, n, &settings).await;
                eprintln!(
                    "bench: N={n}: {}: synced in {:.0} ms, {:.1} MiB steady, lag p99 {} ms",
                    peer.label(),
                    m.sync_ms,
                    m.steady_mib,
                    percentile(&m.lags, 99.0).map_or("n/a".into(), |v| format!("{v:.1}"))
                );
                row.m.insert(peer, m);
            }
            let total = cluster::count_pods(&client).await;
            assert_eq!(total, n, "after {}'s burst the cluster should hold {n} pods again", peer.label());
        }
        rows.push(row);
    }
    cluster::delete_namespaces(&client, &previous).await;

    let results = Results { rows, base_mib, pod, demo_streams: bins.demo_paged, available, burst: opts.burst };
    println!("{}", report::table(&results));
    println!("{}", report::targets(&results));
    std::fs::create_dir_all(&opts.out).expect("create the --out directory");
    let (md, svg) = (opts.out.join("results.md"), opts.out.join("results.svg"));
    let markdown = report::markdown(&results, &facts);
    std::fs::write(&md, &markdown).expect("write results.md");
    write_record(&opts.out.join("results.json"), &markdown);
    if let Err(e) = plot::draw(&results, &svg) {
        eprintln!("bench: drawing {} failed: {e}", svg.display());
        std::process::exit(1);
    }
    eprintln!(
        "bench: wrote {} and {} in {:.1} min",
        md.display(),
        svg.display(),
        started.elapsed().as_secs_f64() / 60.0
    );
}

/// One logger, or a floor: the best the machine can do, so the fastest of three tries.
async fn measure_peer(client: &kube::Client, bins: &Binaries, peer: Peer, n: usize, s: &Settings<'_>) -> Measurement {
    if peer.is_logger() {
        return measure::measure(client, bins, peer, n, s).await;
    }
    let mut best: Option<Measurement> = None;
    for _ in 0..FLOOR_TRIES {
        let m = measure::measure(client, bins, peer, n, s).await;
        if best.as_ref().is_none_or(|b| m.sync_ms < b.sync_ms) {
            best = Some(m);
        }
    }
    best.expect("FLOOR_TRIES is above 0")
}

/// A rough run time: pod creation at ~150 pods/s (create + status patch),
/// each logger's idle window and resync wait, its burst at ~150 creates/s and
/// its relist (a kube-apiserver restart takes ~10 s).
fn estimate(opts: &Opts, peers: &[Peer]) -> String {
    let mut secs = 0.0;
    for &n in &opts.sizes {
        let n = n as f64;
        secs += n / 150.0;
        for &p in peers {
            secs += 3.0 + n / 5_000.0;
            if p.is_logger() || p == Peer::DemoPair {
                let wait = if p.has_resync() {
                    (opts.idle + opts.resync_margin).as_secs_f64() + 5.0
                } else {
                    opts.idle.as_secs_f64()
                };
                let relist = if opts.cluster_dir.is_some() { 20.0 + n / 5_000.0 } else { 0.0 };
                // The pair has no burst, but a second process to sync.
                let burst = if p.is_logger() { opts.burst as f64 / 150.0 } else { 3.0 + n / 5_000.0 };
                // A logger syncs twice more, for kube-apiserver's cost.
                let tries = if p.is_logger() { (SERVER_TRIES - 1) as f64 * (3.0 + n / 5_000.0) } else { 0.0 };
                secs += wait + burst + 5.0 + relist + tries;
            }
        }
    }
    secs += 10.0 * peers.len() as f64; // the 0-pod round
    humantime::format_duration(Duration::from_secs(secs as u64 / 60 * 60 + 60)).to_string()
}

/// Ctrl-C or SIGTERM (bench/run.sh forwards its own): kill the peers, delete
/// what the harness created (bounded: the cluster may be what failed), exit 130.
async fn stop_on_signal(client: kube::Client) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term)) = (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) else {
        return;
    };
    tokio::select! {
        _ = int.recv() => {}
        _ = term.recv() => {}
    }
    for pid in process::LIVE.lock().unwrap_or_else(|p| p.into_inner()).iter() {
        process::send_signal(*pid, "KILL");
    }
    let namespaces = NAMESPACES.lock().unwrap_or_else(|p| p.into_inner()).clone();
    eprintln!("bench: interrupted; deleting {} namespace(s) it made", namespaces.len());
    let cleanup = cluster::delete_namespaces(&client, &namespaces);
    if tokio::time::timeout(Duration::from_secs(30), cleanup).await.is_err() {
        eprintln!("bench: cleanup did not finish within 30 s");
    }
    std::process::exit(130);
}

/// Writes results.json (see record.rs) from results.md's text.
fn write_record(path: &std::path::Path, markdown: &str) {
    let text = serde_json::to_string_pretty(&record::from_markdown(markdown)).unwrap_or_default();
    if let Err(e) = std::fs::write(path, text + "\n") {
        eprintln!("error: cannot write {}: {e}", path.display());
        std::process::exit(1);
    }
}

/// The facts results.md records, taken when the run starts.
fn facts(server: String, opts: &Opts) -> Facts {
    // The commit and the trees of what ships, so the book can tell results of older code.
    let code = measured::code();
    let command = std::env::var("BENCH_COMMAND").unwrap_or_else(|_| {
        let args: Vec<String> = std::env::args().skip(1).collect();
        format!("target/release/bench {}", args.join(" "))
    });
    let sizes: Vec<String> = opts.sizes.iter().map(|&n| thousands(n)).collect();
    Facts {
        date: measured::date(),
        commit: code.commit,
        code: code.trees,
        machine: measured::machine(),
        load: measured::load(),
        server,
        command,
        parameters: format!(
            "sizes {}, burst {} pods, idle window {}, resync period {} (idle + margin, so the first resync comes after \
             the idle window)",
            sizes.join(", "),
            thousands(opts.burst),
            humantime::format_duration(opts.idle),
            humantime::format_duration(opts.idle + opts.resync_margin)
        ),
        conditions: opts.conditions.clone(),
    }
}
