//! results.md: the tables, the floors, the targets and how each number is taken.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::cluster::PodSize;
use crate::measure::{Measurement, percentile};
use crate::pair::Pair;
use crate::peers::{ALL, FLOORS, LOGGERS, Peer};

/// Everything one run measured.
pub struct Results {
    pub rows: Vec<SizeRow>,
    /// Each logger's VmRSS with 0 pods in the cluster.
    pub base_mib: BTreeMap<Peer, f64>,
    pub pod: PodSize,
    /// demo-controller's default is a streaming list (it has --paged-list).
    pub demo_streams: bool,
    pub available: Vec<Peer>,
    /// Pods per burst.
    pub burst: usize,
}

pub struct SizeRow {
    pub n: usize,
    pub m: BTreeMap<Peer, Measurement>,
    /// The leader and its warm standby (`--leader-elect`), when measured.
    pub pair: Option<Pair>,
}

const MIB: f64 = 1024.0 * 1024.0;

impl Results {
    /// Whether `peer` reads its first list as a stream (else paged LISTs).
    pub fn streams(&self, peer: Peer) -> bool {
        match peer {
            Peer::FloorStream | Peer::FloorStreamProtobuf | Peer::GoWatchList => true,
            Peer::Demo | Peer::DemoJson => self.demo_streams,
            _ => false,
        }
    }

    /// The sync-time floor for `peer`'s wire and way of listing.
    pub fn sync_floor(&self, row: &SizeRow, peer: Peer) -> Option<f64> {
        row.m.get(&floor_of(self.streams(peer), peer.protobuf())).map(|m| m.sync_ms)
    }

    /// The smallest logger process with 0 pods, plus the kept fields' bytes per pod.
    pub fn memory_floor_mib(&self, n: usize) -> Option<f64> {
        let base = self.base_mib.values().copied().reduce(f64::min)?;
        Some(base + (n * self.pod.kept) as f64 / MIB)
    }

    /// (steady RSS - the same logger's RSS with 0 pods) / N, in bytes.
    pub fn rss_per_pod(&self, row: &SizeRow, peer: Peer) -> Option<f64> {
        let (m, base) = (row.m.get(&peer)?, self.base_mib.get(&peer)?);
        Some((m.steady_mib - base) * MIB / row.n as f64)
    }
}

/// The floor of a wire and a list mode.
fn floor_of(streams: bool, protobuf: bool) -> Peer {
    match (streams, protobuf) {
        (true, true) => Peer::FloorStreamProtobuf,
        (true, false) => Peer::FloorStream,
        (false, true) => Peer::FloorListProtobuf,
        (false, false) => Peer::FloorList,
    }
}

/// One line of the main table.
struct Metric {
    name: &'static str,
    get: fn(&Results, &SizeRow, Peer, &Measurement) -> Option<f64>,
    decimals: usize,
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

const METRICS: &[Metric] = &[
    Metric { name: "time to cache synced (ms)", get: |_, _, _, m| Some(m.sync_ms), decimals: 0 },
    Metric {
        name: "  / sync floor of its wire and list mode (x)",
        get: |r, row, p, m| ratio(Some(m.sync_ms), r.sync_floor(row, p)),
        decimals: 2,
    },
    Metric { name: "CPU to sync (ms)", get: |_, _, _, m| Some(m.sync_cpu_ms), decimals: 0 },
    Metric { name: "peak RSS after sync, VmHWM (MiB)", get: |_, _, _, m| Some(m.peak_mib), decimals: 1 },
    Metric { name: "steady RSS after sync, VmRSS (MiB)", get: |_, _, _, m| Some(m.steady_mib), decimals: 1 },
    Metric {
        name: "  / memory floor (x)",
        get: |r, row, _, m| ratio(Some(m.steady_mib), r.memory_floor_mib(row.n)),
        decimals: 2,
    },
    Metric { name: "RSS per pod (bytes)", get: |r, row, p, _| r.rss_per_pod(row, p), decimals: 0 },
    Metric {
        name: "  / kept fields' bytes per pod (x)",
        get: |r, row, p, _| ratio(r.rss_per_pod(row, p), Some(r.pod.kept as f64)),
        decimals: 1,
    },
    Metric { name: "relist peak RSS, VmHWM (MiB)", get: |_, _, _, m| m.relist_peak_mib, decimals: 1 },
    Metric { name: "  / steady RSS (x)", get: |_, _, _, m| ratio(m.relist_peak_mib, Some(m.steady_mib)), decimals: 2 },
    Metric { name: "no-change resync CPU (ms)", get: |_, _, _, m| m.resync_cpu_ms, decimals: 0 },
    Metric { name: "no-change resync lines printed", get: |_, _, _, m| m.resync_lines.map(|l| l as f64), decimals: 0 },
    Metric { name: "idle CPU (% of one core)", get: |_, _, _, m| m.idle_cpu_pct, decimals: 3 },
    Metric { name: "burst lag p50 (ms)", get: |_, _, _, m| percentile(&m.lags, 50.0), decimals: 1 },
    Metric { name: "burst lag p99 (ms)", get: |_, _, _, m| percentile(&m.lags, 99.0), decimals: 1 },
    Metric { name: "burst lag max (ms)", get: |_, _, _, m| percentile(&m.lags, 100.0), decimals: 1 },
    Metric {
        name: "bare watch's lag p99, same burst (ms)",
        get: |_, _, _, m| percentile(&m.floor_lags, 99.0),
        decimals: 1,
    },
    Metric {
        name: "lag added over the bare watch p50 (ms)",
        get: |_, _, _, m| percentile(&m.added_lags, 50.0),
        decimals: 1,
    },
    Metric {
        name: "lag added over the bare watch p99 (ms)",
        get: |_, _, _, m| percentile(&m.added_lags, 99.0),
        decimals: 1,
    },
    Metric { name: API_CPU, get: |_, _, _, m| m.api_cpu_ms, decimals: 0 },
    Metric { name: API_CPU_SPREAD, get: |_, _, _, m| m.api_cpu_spread_ms, decimals: 0 },
    Metric { name: "kube-apiserver RSS growth during sync (MiB)", get: |_, _, _, m| m.api_rss_growth_mib, decimals: 1 },
    Metric { name: "etcd CPU during sync (ms)", get: |_, _, _, m| m.etcd_cpu_ms, decimals: 0 },
];

/// kube-apiserver's CPU for a logger's first sync: the median of
/// [`crate::measure::SERVER_TRIES`] (the names say 3: a test holds them to it).
const API_CPU: &str = "kube-apiserver CPU during sync, median of 3 syncs (ms)";
const API_CPU_SPREAD: &str = "  spread of those 3 syncs, highest - lowest (ms)";

fn cell(v: Option<f64>, decimals: usize) -> String {
    v.map_or("n/a".to_string(), |v| format!("{v:.decimals$}"))
}

/// 12345 -> "12,345"
pub fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The loggers' table: one block of metrics per N, one column per logger.
pub fn table(r: &Results) -> String {
    let mut out = String::from("| N | metric |");
    for p in LOGGERS {
        let _ = write!(out, " {} |", p.label());
    }
    out.push_str("\n|---:|---|");
    out.push_str(&"---:|".repeat(LOGGERS.len()));
    out.push('\n');
    for row in &r.rows {
        for metric in METRICS {
            let _ = write!(out, "| {} | {} |", thousands(row.n), metric.name);
            for p in LOGGERS {
                let v = row.m.get(&p).and_then(|m| (metric.get)(r, row, p, m));
                let _ = write!(out, " {} |", cell(v, metric.decimals));
            }
            out.push('\n');
        }
    }
    out
}

/// The floors' table.
pub fn floors(r: &Results) -> String {
    let mut out = String::from(
        "| N | floor | time (ms) | CPU (ms) | peak RSS (MiB) | kube-apiserver CPU (ms) | kube-apiserver RSS growth (MiB) | etcd CPU (ms) |\n\
         |---:|---|---:|---:|---:|---:|---:|---:|\n",
    );
    for row in &r.rows {
        for p in FLOORS {
            let Some(m) = row.m.get(&p) else { continue };
            let _ = writeln!(
                out,
                "| {} | {} | {:.0} | {:.0} | {:.1} | {} | {} | {} |",
                thousands(row.n),
                p.label(),
                m.sync_ms,
                m.sync_cpu_ms,
                m.peak_mib,
                cell(m.api_cpu_ms, 0),
                cell(m.api_rss_growth_mib, 1),
                cell(m.etcd_cpu_ms, 0)
            );
        }
        let _ = writeln!(
            out,
            "| {} | memory floor: smallest logger with 0 pods + N x {} B | | | {} | | | |",
            thousands(row.n),
            r.pod.kept,
            cell(r.memory_floor_mib(row.n), 1)
        );
    }
    out
}

/// Two replicas with `--leader-elect`: the standby beside the leader, at each N.
pub fn two_replicas(r: &Results) -> String {
    /// A metric of one replica; the second argument is the steady RSS of
    /// demo-controller without `--leader-elect` at the same N, if measured.
    type Get = fn(&Measurement, Option<f64>) -> Option<f64>;
    let metrics: [(&str, Get, usize); 9] = [
        ("time to cache synced (ms)", |m, _| Some(m.sync_ms), 0),
        ("CPU to sync (ms)", |m, _| Some(m.sync_cpu_ms), 0),
        ("kube-apiserver CPU during sync (ms)", |m, _| m.api_cpu_ms, 0),
        ("steady RSS after sync, VmRSS (MiB)", |m, _| Some(m.steady_mib), 1),
        ("  / demo-controller's steady RSS without --leader-elect (x)", |m, alone| ratio(Some(m.steady_mib), alone), 2),
        ("relist peak RSS, VmHWM (MiB)", |m, _| m.relist_peak_mib, 1),
        ("idle CPU (% of one core)", |m, _| m.idle_cpu_pct, 3),
        ("no-change resync CPU (ms)", |m, _| m.resync_cpu_ms, 0),
        ("no-change resync lines printed", |m, _| m.resync_lines.map(|l| l as f64), 0),
    ];
    let mut out = String::from("| N | metric | leader | standby |\n|---:|---|---:|---:|\n");
    for row in &r.rows {
        let Some(pair) = &row.pair else { continue };
        let alone = row.m.get(&Peer::Demo).map(|m| m.steady_mib);
        for (name, get, decimals) in metrics {
            let (leader, standby) = (get(&pair.leader, alone), get(&pair.standby, alone));
            let _ = writeln!(
                out,
                "| {} | {name} | {} | {} |",
                thousands(row.n),
                cell(leader, decimals),
                cell(standby, decimals)
            );
        }
    }
    out
}

/// The targets, at N = 10,000 (or the largest N measured).
pub fn targets(r: &Results) -> String {
    let Some(row) = r.rows.iter().find(|row| row.n == 10_000).or(r.rows.last()) else {
        return String::new();
    };
    let Some(demo) = row.m.get(&Peer::Demo) else {
        return String::new();
    };
    let mut out = format!(
        "Checked at N = {}{}. demo-controller means its default mode ({}).\n\n\
         | target | measured | met |\n|---|---:|:---:|\n",
        thousands(row.n),
        if row.n == 10_000 { "" } else { " (the issue sets them at 10,000)" },
        if r.demo_streams { "streaming list" } else { "paged LIST: this build has no --paged-list, so no streaming" }
    );
    let mut line = |target: &str, measured: Option<String>, met: Option<bool>| {
        let met = met.map_or("n/a", |ok| if ok { "met" } else { "**missed**" });
        let _ = writeln!(out, "| {target} | {} | {met} |", measured.unwrap_or_else(|| "n/a".into()));
    };
    let x = |v: Option<f64>| v.map(|v| format!("{v:.2}x"));
    let get = |p: Peer, f: fn(&Measurement) -> f64| row.m.get(&p).map(f);
    let better_go = |f: fn(&Measurement) -> f64| {
        [get(Peer::GoWatchList, f), get(Peer::GoPaged, f)].into_iter().flatten().reduce(f64::min)
    };

    let rss = ratio(Some(demo.steady_mib), better_go(|m| m.steady_mib));
    line("RSS after sync <= 0.4x the better client-go mode", x(rss), rss.map(|v| v <= 0.4));
    let rss = ratio(Some(demo.steady_mib), get(Peer::KubeRs, |m| m.steady_mib));
    line("RSS after sync <= 0.25x the kube-rs idiomatic logger", x(rss), rss.map(|v| v <= 0.25));
    let per_pod = |n| r.rows.iter().find(|row| row.n == n).and_then(|row| r.rss_per_pod(row, Peer::Demo));
    let flat = ratio(per_pod(100_000), per_pod(10_000));
    line(
        "RSS per pod flat within 15% from 10,000 to 100,000",
        flat.map(|v| format!("{v:.2}x")).or(Some("n/a (100,000 not in this run)".into())),
        flat.map(|v| (v - 1.0).abs() <= 0.15),
    );
    let per_pod_100k = per_pod(100_000);
    line(
        "RSS per pod <= 1,200 bytes at 100,000 pods",
        per_pod_100k
            .map(|v| format!("{} bytes", thousands(v.round() as usize)))
            .or(Some("n/a (100,000 not in this run)".into())),
        per_pod_100k.map(|v| v <= 1_200.0),
    );
    let relist = ratio(demo.relist_peak_mib, Some(demo.steady_mib));
    line("relist peak <= 2x steady", x(relist), relist.map(|v| v <= 2.0));
    for n in [10_000, 100_000] {
        let at = r.rows.iter().find(|row| row.n == n).and_then(|row| row.m.get(&Peer::Demo));
        let relist = at.and_then(|m| ratio(m.relist_peak_mib, Some(m.steady_mib)));
        line(
            &format!("relist peak <= 1.3x steady at {} pods", thousands(n)),
            x(relist).or(Some(format!("n/a ({} not in this run)", thousands(n)))),
            relist.map(|v| v <= 1.3),
        );
    }
    let sync = ratio(Some(demo.sync_ms), better_go(|m| m.sync_ms));
    line("time to cache synced <= 0.8x the better client-go mode", x(sync), sync.map(|v| v <= 0.8));
    let floor = ratio(Some(demo.sync_ms), r.sync_floor(row, Peer::Demo));
    let floor_name = floor_of(r.streams(Peer::Demo), Peer::Demo.protobuf()).label();
    line(&format!("time to cache synced <= 1.5x the {floor_name}"), x(floor), floor.map(|v| v <= 1.5));
    let big = r.rows.iter().find(|row| row.n == 100_000);
    let floor = big.and_then(|big| ratio(big.m.get(&Peer::Demo).map(|m| m.sync_ms), r.sync_floor(big, Peer::Demo)));
    line(
        &format!("time to cache synced <= 1.2x the {floor_name} at 100,000 pods"),
        x(floor).or(Some("n/a (100,000 not in this run)".into())),
        floor.map(|v| v <= 1.2),
    );
    if let Some(paged) = row.m.get(&Peer::DemoPaged) {
        let floor = ratio(Some(paged.sync_ms), r.sync_floor(row, Peer::DemoPaged));
        let floor_name = floor_of(false, Peer::DemoPaged.protobuf()).label();
        line(
            &format!("--paged-list: time to cache synced <= 1.5x the {floor_name}"),
            x(floor),
            floor.map(|v| v <= 1.5),
        );
    }
    let added = percentile(&demo.added_lags, 99.0);
    line(
        "burst lag added over the bare watch, p99 <= 20 ms",
        added.map(|v| format!("{v:.1} ms")),
        added.map(|v| v <= 20.0),
    );
    line(
        "no-change resync CPU <= 50 ms",
        demo.resync_cpu_ms.map(|v| format!("{v:.0} ms")),
        demo.resync_cpu_ms.map(|v| v <= 50.0),
    );
    line(
        "no-change resync prints nothing",
        demo.resync_lines.map(|v| format!("{v} lines")),
        demo.resync_lines.map(|v| v == 0),
    );
    line(
        "idle CPU < 0.5% of a core",
        demo.idle_cpu_pct.map(|v| format!("{v:.3} %")),
        demo.idle_cpu_pct.map(|v| v < 0.5),
    );
    let api = ratio(demo.api_cpu_ms, get(Peer::GoWatchList, |m| m.api_cpu_ms.unwrap_or(f64::NAN)));
    line(
        "kube-apiserver CPU for the initial sync <= the client-go logger's (both defaults)",
        x(api),
        api.filter(|v| v.is_finite()).map(|v| v <= 1.0),
    );
    if let Some(paged) = row.m.get(&Peer::DemoPaged) {
        let api = ratio(paged.api_cpu_ms, get(Peer::GoPaged, |m| m.api_cpu_ms.unwrap_or(f64::NAN)));
        line(
            "kube-apiserver CPU for the initial sync <= client-go's (both paged)",
            x(api),
            api.filter(|v| v.is_finite()).map(|v| v <= 1.0),
        );
    }
    // Protobuf (the default wire) against JSON (--wire json), mode for mode.
    for (pb, json, mode) in
        [(Peer::Demo, Peer::DemoJson, "default list mode"), (Peer::DemoPaged, Peer::DemoPagedJson, "paged")]
    {
        let (Some(pb), Some(json)) = (row.m.get(&pb), row.m.get(&json)) else {
            continue;
        };
        let cpu = ratio(Some(pb.sync_cpu_ms), Some(json.sync_cpu_ms));
        line(&format!("protobuf ({mode}): client CPU to sync <= 0.5x the JSON path"), x(cpu), cpu.map(|v| v <= 0.5));
        let rss = ratio(Some(pb.steady_mib), Some(json.steady_mib));
        line(
            &format!("protobuf ({mode}): RSS after sync no worse than the JSON path (<= 1.05x: noise)"),
            x(rss),
            rss.map(|v| v <= 1.05),
        );
        let (a, b) = (percentile(&pb.added_lags, 99.0), percentile(&json.added_lags, 99.0));
        line(
            &format!("protobuf ({mode}): burst lag added p99 unchanged from JSON (within 5 ms)"),
            a.zip(b).map(|(a, b)| format!("{a:.1} ms vs {b:.1} ms")),
            a.zip(b).map(|(a, b)| a <= b + 5.0),
        );
    }
    let best_pb =
        [get(Peer::Demo, |m| m.sync_ms), get(Peer::DemoPaged, |m| m.sync_ms)].into_iter().flatten().reduce(f64::min);
    let sync = ratio(best_pb, better_go(|m| m.sync_ms));
    line(
        "protobuf, its better list mode: time to cache synced <= 0.8x the better client-go mode",
        x(sync),
        sync.map(|v| v <= 0.8),
    );
    out
}

/// The facts about a run that results.md records.
pub struct Facts {
    pub date: String,
    pub commit: String,
    /// The git trees of src/ and crates/ measured (`src/ TREE, crates/ TREE`).
    pub code: String,
    pub machine: String,
    pub load: String,
    pub server: String,
    pub command: String,
    pub parameters: String,
    pub conditions: String,
}

pub fn markdown(r: &Results, f: &Facts) -> String {
    let missing: Vec<&str> = ALL.iter().filter(|p| !r.available.contains(p)).map(|p| p.label()).collect();
    let missing = if missing.is_empty() {
        String::new()
    } else {
        format!("- not in this run (n/a below): {}\n", missing.join(", "))
    };
    format!(
        "# Benchmark: demo-controller against client-go, kube-rs and the floors\n\n\
         Written by bench/harness (`make bench`); do not edit by hand, run `{command}` again.\n\n\
         - started: {date}\n- commit: {commit}\n- code measured: {code}\n- machine: {machine}\n- load when it started: {load}\n\
         - conditions: {conditions}\n\
         - control plane: kube-apiserver {server} on 127.0.0.1 + etcd on a unix socket, no kubelet (statuses written through pods/status)\n\
         - parameters: {parameters}\n\
         - pod: {json} bytes of JSON as the server sends it, {json_nm} without managedFields; \
         demo-controller keeps {kept} bytes of field values per pod (name, namespace, uid, resourceVersion, labels, \
         nodeName, phase, conditions, each container's ready, restartCount, state and last state)\n{missing}\n\
         ## Loggers\n\n{table}\n\
         ## Floors\n\n{floors}\n\
         ## Two replicas\n\n{two_replicas}\n\
         ## Targets\n\n{targets}\n\
         ## How to read it\n\n\
         Each peer runs alone against the same API server and the same N pods, one after the other \
         (floors first, then the loggers in the column order); the harness and the control plane share the machine. \
         Every line a peer prints is stamped with the harness's clock as it arrives on the pipe.\n\n\
         - **time to cache synced**: spawn to the line containing `cache synced` (process start, TLS, the whole \
         list). **/ sync floor**: divided by the floor of the same wire and list mode (streaming: {demo_mode}\
         client-go with WatchList on; paged: the others; protobuf: demo-controller without --wire json, and \
         client-go, whose clientset asks for protobuf; JSON: the others).\n\
         - **floors**: each is measured three times at each N and the fastest try is kept. `bench-floor list` reads every page of a LIST (500 a page) and drops it; `bench-floor stream` \
         reads the streaming list to its initial-events-end bookmark and drops it; `list-protobuf` and \
         `stream-protobuf` do the same in protobuf, reading no more of each page or frame than its next-page token \
         or its event type; `bench-floor watch` prints one \
         line per ADDED event and runs beside each logger during its burst. The memory floor is the smallest \
         logger's VmRSS with 0 pods plus N times the bytes of the field values demo-controller keeps.\n\
         - **RSS**: VmHWM (peak) and VmRSS (steady) from /proc, once all N initial add lines are out and no line came \
         for 1 s. **RSS per pod**: (steady - the same logger's RSS with 0 pods) / N.\n\
         - **CPU**: utime + stime from /proc in clock ticks (10 ms), so a small value is +-10 ms. \
         **kube-apiserver/etcd**: their CPU and kube-apiserver's VmRSS change from spawn to `cache synced` \
         (Go's heap rarely shrinks, so RSS growth depends on what ran before).\n\
         - **idle CPU**: over the idle window after the initial lines. **resync**: CPU and lines from 2 s before \
         the first resync is due until the output and CPU are quiet for 1 s; the client-go logger logs onUpdate \
         per pod on a resync, as client-go controllers do; kube-rs has no resync (n/a).\n\
         - **burst**: {burst} pods created in a new namespace, {concurrency} creates in flight; a pod's lag runs from \
         its create's response reaching the harness to the logger's first line for it (`onAdd`; the kube-rs logger's \
         `applied`). The bare watch sees the same events at the same time: **lag added** is, per pod, the \
         logger's line minus the bare watch's line. A lag can be slightly negative (the event may reach a client \
         before the create's response reaches the harness). Burst pods carry the same spec, no status.\n\
         - **relist**: after the burst, etcd gets one write and is compacted, and kube-apiserver is killed and \
         started again; each client's watch resumes with a resourceVersion older than the new watch cache, gets \
         410 Gone and lists again. VmHWM is reset (clear_refs) just before, and read once the logger has used at \
         least half its first list's CPU again and gone quiet (client-go logs the 410 only at -v=4, so the CPU \
         is the signal). demo-controller waits out its watch-error backoff before it relists.\n\
         - **two replicas**: demo-controller with `--leader-elect` as demo-controller.yaml runs it, twice, on a \
         Lease of their own: the leader first (it takes the Lease, syncs and logs every pod), then the standby \
         beside it (it finds the Lease held, syncs its cache and logs nothing). Sync time and CPU are each one's own; \
         the API server's cost during the standby's sync also holds whatever the leader asked of it meanwhile (a \
         Lease renewal every retry period, 2 s); idle CPU is one window for both (the leader renews the Lease and \
         writes its mark, the standby reads it); each resync is measured in its own window, as above; the relist \
         is one restart both relist from. The Lease's duration and renew deadline are raised (90 s, 60 s) so the \
         restart does not end the leader's term. No burst: the standby prints no line to time.\n\n\
         ![RSS per pod and sync time against N, and the burst-lag distribution](results.svg)\n",
        command = f.command,
        date = f.date,
        commit = f.commit,
        code = f.code,
        machine = f.machine,
        load = f.load,
        conditions = f.conditions,
        server = f.server,
        parameters = f.parameters,
        json = thousands(r.pod.json),
        json_nm = thousands(r.pod.json_without_managed_fields),
        kept = r.pod.kept,
        table = table(r),
        floors = floors(r),
        two_replicas = two_replicas(r),
        targets = targets(r),
        demo_mode = if r.demo_streams { "demo-controller, " } else { "" },
        burst = thousands(r.burst),
        concurrency = crate::cluster::CONCURRENCY,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_cost_rows_name_the_number_of_tries() {
        let tries = format!("{} syncs", crate::measure::SERVER_TRIES);
        assert!(API_CPU.contains(&tries), "{API_CPU}");
        assert!(API_CPU_SPREAD.contains(&format!("those {}", crate::measure::SERVER_TRIES)), "{API_CPU_SPREAD}");
    }

    #[test]
    fn thousands_groups_digits() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(10_000), "10,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }

    #[test]
    fn a_ratio_needs_both_values_and_a_positive_base() {
        assert_eq!(ratio(Some(1.0), Some(4.0)), Some(0.25));
        assert_eq!(ratio(None, Some(4.0)), None);
        assert_eq!(ratio(Some(1.0), Some(0.0)), None);
    }

    /// The standby's figures sit beside the leader's, each against the same
    /// binary measured alone; an N without the pair has no rows.
    #[test]
    fn two_replicas_puts_the_standby_beside_the_leader() {
        let m = |steady_mib| Measurement { steady_mib, relist_peak_mib: None, ..Measurement::default() };
        let alone = BTreeMap::from([(Peer::Demo, m(40.0))]);
        let rows = vec![
            SizeRow { n: 1_000, m: BTreeMap::new(), pair: None },
            SizeRow { n: 10_000, m: alone, pair: Some(Pair { leader: m(50.0), standby: m(45.0) }) },
        ];
        let r = Results {
            rows,
            base_mib: BTreeMap::new(),
            pod: PodSize::default(),
            demo_streams: true,
            available: vec![Peer::Demo, Peer::DemoPair],
            burst: 0,
        };
        let table = two_replicas(&r);
        assert!(table.contains("| 10,000 | steady RSS after sync, VmRSS (MiB) | 50.0 | 45.0 |\n"), "{table}");
        assert!(
            table.contains("| 10,000 |   / demo-controller's steady RSS without --leader-elect (x) | 1.25 | 1.12 |\n"),
            "{table}"
        );
        assert!(table.contains("| 10,000 | relist peak RSS, VmHWM (MiB) | n/a | n/a |\n"), "{table}");
        assert!(!table.contains("| 1,000 |"), "{table}");
    }
}
