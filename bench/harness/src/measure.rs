//! One peer at one N: spawn it, and take every number in order.
//!
//! ```text
//! spawn ── "cache synced" ── N initial lines, quiet ── RSS ── idle window ── resync ── burst ── relist ── SIGTERM
//!   │        time, CPU, API server cost              peak/steady  CPU %      CPU, lines  lag   peak RSS
//!   └─ the resync period R = idle + margin, so the first resync comes after the idle window
//! ```

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use futures::stream::{self, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::{Api, Client};

use crate::cluster::{self, CONCURRENCY, ControlPlane, ServerUsage};
use crate::peers::{Binaries, Peer};
use crate::process::{Line, Running, added_key, cpu_ticks, memory_mib, reset_peak, ticks_to_ms};

/// What was measured for one peer at one N. `None` is "not measured" (n/a).
#[derive(Clone, Debug, Default)]
pub struct Measurement {
    /// From spawn to the `cache synced` line, and the process's CPU by then.
    pub sync_ms: f64,
    pub sync_cpu_ms: f64,
    /// kube-apiserver's CPU and RSS growth, and etcd's CPU, from spawn to synced.
    /// For a logger, kube-apiserver's CPU is the median of [`SERVER_TRIES`]
    /// syncs, and `api_cpu_spread_ms` the highest less the lowest of them.
    pub api_cpu_ms: Option<f64>,
    pub api_cpu_spread_ms: Option<f64>,
    pub api_rss_growth_mib: Option<f64>,
    pub etcd_cpu_ms: Option<f64>,
    /// VmHWM and VmRSS once the initial lines are out and quiet.
    pub peak_mib: f64,
    pub steady_mib: f64,
    pub idle_cpu_pct: Option<f64>,
    /// The first resync: CPU and lines printed.
    pub resync_cpu_ms: Option<f64>,
    pub resync_lines: Option<usize>,
    /// Burst: each pod's lag from its create's acknowledgement to the logger's
    /// line, the bare watch's lag for the same pod, and the difference.
    pub lags: Vec<f64>,
    pub floor_lags: Vec<f64>,
    pub added_lags: Vec<f64>,
    /// VmHWM during a forced relist (peak reset just before it), if one was seen.
    pub relist_peak_mib: Option<f64>,
}

pub struct Settings<'a> {
    pub kubeconfig: &'a Path,
    pub idle: Duration,
    pub resync: Duration,
    pub burst: usize,
    pub control_plane: Option<&'a ControlPlane>,
    /// Each peer's output goes to `logs/N-peer.log` when it ends.
    pub logs: &'a Path,
}

impl Settings<'_> {
    pub fn log(&self, n: usize, name: &str) -> Option<std::path::PathBuf> {
        std::fs::create_dir_all(self.logs).ok()?;
        Some(self.logs.join(format!("{n}-{name}.log")))
    }
}

/// A peer with 0 pods in the cluster: its RSS once synced and quiet (the
/// memory floor's fixed part).
pub async fn base_rss(bins: &Binaries, peer: Peer, s: &Settings<'_>) -> f64 {
    let mut run = Running::spawn(bins.command(peer, s.kubeconfig, s.resync), s.log(0, peer.slug()));
    wait_synced(&mut run).await;
    run.wait_quiet(true, Duration::from_secs(60)).await;
    let rss = memory_mib(run.pid).1;
    run.stop().await;
    rss
}

async fn wait_synced(run: &mut Running) -> Instant {
    run.wait_for("cache synced", 0, Duration::from_secs(600), |l| {
        l.text.to_ascii_lowercase().contains("cache synced").then_some(l.at)
    })
    .await
}

/// Spawns `cmd` and waits for its `cache synced` line: the time, the CPU and
/// the servers' cost of the sync go into `m`. Returns the process, when it
/// synced and its CPU ticks by then.
pub async fn spawn_synced(
    cmd: std::process::Command,
    log: Option<std::path::PathBuf>,
    s: &Settings<'_>,
    m: &mut Measurement,
) -> (Running, Instant, u64) {
    let server_before = s.control_plane.map(ControlPlane::usage);
    let mut run = Running::spawn(cmd, log);
    let synced_at = wait_synced(&mut run).await;
    let sync_ticks = cpu_ticks(run.pid);
    m.sync_ms = ms(synced_at - run.spawned);
    m.sync_cpu_ms = ticks_to_ms(sync_ticks);
    server_cost(s.control_plane, server_before, m);
    (run, synced_at, sync_ticks)
}

/// Waits until `run` has printed an add line for `n` pods (its first list's).
pub async fn wait_initial_adds(run: &mut Running, n: usize) {
    let mut adds = 0;
    run.wait_for(&format!("{n} initial add lines"), 0, Duration::from_secs(900), |l| {
        adds += usize::from(added_key(&l.text).is_some());
        (adds >= n).then_some(())
    })
    .await;
}

/// The first resync, due at `due`, of N unchanged pods: the CPU and the lines
/// from 2 s before it is due until the output and the CPU have settled.
pub async fn resync(run: &mut Running, due: Instant) -> (f64, usize) {
    tokio::time::sleep_until((due - Duration::from_secs(2)).into()).await;
    let (before, mut cursor) = (cpu_ticks(run.pid), run.len());
    tokio::time::sleep_until((due + Duration::from_secs(2)).into()).await;
    run.wait_quiet(true, Duration::from_secs(300)).await;
    (ticks_to_ms(cpu_ticks(run.pid) - before), run.take_new(&mut cursor).len())
}

/// The kube-apiserver and etcd cost since `before` (nothing without a control plane).
fn server_cost(cp: Option<&ControlPlane>, before: Option<ServerUsage>, m: &mut Measurement) {
    if let (Some(cp), Some(before)) = (cp, before) {
        let after = cp.usage();
        m.api_cpu_ms = Some(ticks_to_ms(after.apiserver_ticks.saturating_sub(before.apiserver_ticks)));
        m.api_rss_growth_mib = Some(after.apiserver_rss_mib - before.apiserver_rss_mib);
        m.etcd_cpu_ms = Some(ticks_to_ms(after.etcd_ticks.saturating_sub(before.etcd_ticks)));
    }
}

/// How many first syncs of a logger measure kube-apiserver's CPU: one quiet
/// run's figure has moved by more than 2x between two runs.
pub const SERVER_TRIES: usize = 3;

/// The first sync again, [`SERVER_TRIES`] in all with the one measured: each
/// a fresh process, stopped once synced. `api_cpu_ms` becomes their median.
async fn server_tries(bins: &Binaries, peer: Peer, n: usize, s: &Settings<'_>, m: &mut Measurement) {
    let Some(first) = m.api_cpu_ms else { return };
    let mut tries = vec![first];
    for i in 1..SERVER_TRIES {
        let mut again = Measurement::default();
        let log = s.log(n, &format!("{}-sync-{}", peer.slug(), i + 1));
        let (run, _, _) = spawn_synced(bins.command(peer, s.kubeconfig, s.resync), log, s, &mut again).await;
        run.stop().await;
        tries.extend(again.api_cpu_ms);
    }
    (m.api_cpu_ms, m.api_cpu_spread_ms) = median_and_spread(tries);
}

/// The median (the lower middle of an even count) and the highest less the lowest.
pub fn median_and_spread(mut values: Vec<f64>) -> (Option<f64>, Option<f64>) {
    values.sort_by(f64::total_cmp);
    let (Some(low), Some(high)) = (values.first(), values.last()) else { return (None, None) };
    (Some(values[(values.len() - 1) / 2]), Some(high - low))
}

pub async fn measure(client: &Client, bins: &Binaries, peer: Peer, n: usize, s: &Settings<'_>) -> Measurement {
    let mut m = Measurement::default();

    // 1. Time to sync, the CPU it took, and what it cost the servers.
    let cmd = bins.command(peer, s.kubeconfig, s.resync);
    let (mut run, synced_at, sync_ticks) = spawn_synced(cmd, s.log(n, peer.slug()), s, &mut m).await;

    // 2. Memory once every pod is cached and (for a logger) logged.
    if peer.is_logger() {
        wait_initial_adds(&mut run, n).await;
    }
    run.wait_quiet(!peer.is_logger(), Duration::from_secs(120)).await;
    (m.peak_mib, m.steady_mib) = memory_mib(run.pid);
    if !peer.is_logger() {
        run.stop().await;
        return m;
    }

    // 3. Idle CPU. The resync period was chosen to come after this window;
    //    should the sync have been slow, the window shrinks to what fits.
    let idle_start = Instant::now();
    let resync_due = synced_at + s.resync;
    let mut idle = s.idle;
    if peer.has_resync() {
        let room = resync_due.saturating_duration_since(idle_start).saturating_sub(Duration::from_secs(3));
        if room < idle {
            eprintln!(
                "bench: {}: only {room:?} before the resync; idle window shortened (raise --resync-margin)",
                peer.label()
            );
            idle = room;
        }
    }
    let before = cpu_ticks(run.pid);
    tokio::time::sleep(idle).await;
    run.check_alive();
    if idle >= Duration::from_secs(1) {
        m.idle_cpu_pct = Some(100.0 * ticks_to_ms(cpu_ticks(run.pid) - before) / ms(idle_start.elapsed()));
    }

    // 4. The first resync, of N unchanged pods: CPU and lines from just
    //    before it is due until the output and the CPU have settled.
    if peer.has_resync() {
        let (cpu, lines) = resync(&mut run, resync_due).await;
        (m.resync_cpu_ms, m.resync_lines) = (Some(cpu), Some(lines));
    }

    // 5. The burst, with the bare watch beside the logger.
    if s.burst > 0 {
        burst(client, bins, &mut run, s, &mut m).await;
    }

    // 6. A forced relist of the N pods.
    if let Some(cp) = s.control_plane {
        [m.relist_peak_mib] = relist(cp, [(&mut run, sync_ticks)]).await;
    }
    run.stop().await;

    // 7. The first sync's cost to kube-apiserver, twice more.
    server_tries(bins, peer, n, s, &mut m).await;
    m
}

/// Creates `s.burst` pods in a new namespace as fast as the API server takes
/// them, then matches each create's acknowledgement with the logger's line and
/// the bare watch's line. Deletes them again, so the next peer starts from N.
async fn burst(client: &Client, bins: &Binaries, run: &mut Running, s: &Settings<'_>, m: &mut Measurement) {
    let count = s.burst;
    let mut watch = Running::spawn(bins.floor_watch(s.kubeconfig), s.log(run.pid as usize, "bare-watch"));
    wait_synced(&mut watch).await;
    let ns = cluster::namespace(client, "bench-burst").await;
    let api = Api::<Pod>::namespaced(client.clone(), &ns);
    let (first_line, first_watch_line) = (run.len(), watch.len());
    let acks: HashMap<String, Instant> = stream::iter(0..count)
        .map(|i| {
            let api = &api;
            async move {
                let name = format!("burst-{i:05}");
                cluster::create_pod(api, &name, i).await;
                (name, Instant::now())
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;

    let prefix = format!("{ns}/");
    let seen = first_lines(run, first_line, &prefix, count).await;
    let floor = first_lines(&mut watch, first_watch_line, &prefix, count).await;
    watch.stop().await;
    for (name, ack) in &acks {
        m.lags.push(signed_ms(seen[name], *ack));
        m.floor_lags.push(signed_ms(floor[name], *ack));
        m.added_lags.push(signed_ms(seen[name], floor[name]));
    }
    for v in [&mut m.lags, &mut m.floor_lags, &mut m.added_lags] {
        v.sort_by(f64::total_cmp);
    }

    // One DELETE on the namespace's pods collection, then let the logger log them.
    cluster::delete_namespaces(client, std::slice::from_ref(&ns)).await;
    run.wait_quiet(true, Duration::from_secs(300)).await;
}

/// When each pod of `prefix` first appeared in an add line, from line `from` on.
async fn first_lines(run: &mut Running, from: usize, prefix: &str, count: usize) -> HashMap<String, Instant> {
    let mut seen: HashMap<String, Instant> = HashMap::with_capacity(count);
    let mut record = |line: &Line| {
        if let Some(name) = added_key(&line.text).and_then(|key| key.strip_prefix(prefix)) {
            seen.entry(name.to_string()).or_insert(line.at);
        }
        (seen.len() >= count).then_some(())
    };
    run.wait_for(&format!("the add lines of {count} burst pods"), from, Duration::from_secs(300), &mut record).await;
    seen
}

/// Restarts kube-apiserver over a compacted etcd (see
/// [`ControlPlane::restart_compacted`]) and returns the peak RSS of each
/// process in `runs` (with its CPU ticks for its first list) while it
/// relists, or `None` where no relist could be seen.
///
/// A relist is seen by its cost: the process's CPU grows by at least half
/// of what its first list took (client-go logs the 410 only at -v=4, so a
/// line cannot be the signal for every peer). A 410 line, where a peer prints
/// one, only ends the wait for it early.
pub async fn relist<const N: usize>(cp: &ControlPlane, mut runs: [(&mut Running, u64); N]) -> [Option<f64>; N] {
    let mut before = [(0, 0); N];
    for ((run, _), before) in runs.iter().zip(&mut before) {
        reset_peak(run.pid);
        *before = (run.len(), cpu_ticks(run.pid));
    }
    // Blocking (processes, curl); the runtime's other worker keeps serving Ctrl-C.
    tokio::task::block_in_place(|| cp.restart_compacted());
    let gone = |l: &Line| {
        let t = l.text.to_ascii_lowercase();
        (t.contains("410") || t.contains("too old") || t.contains("expired")).then_some(())
    };
    for ((run, _), (from, _)) in runs.iter_mut().zip(&before) {
        let _ = run.try_wait_for(*from, Duration::from_secs(20), gone).await;
    }
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut seen = [false; N];
    while seen.contains(&false) && Instant::now() < deadline {
        for (((run, sync_ticks), (_, ticks)), seen) in runs.iter_mut().zip(&before).zip(&mut seen) {
            run.check_alive();
            *seen |= cpu_ticks(run.pid).saturating_sub(*ticks) >= (*sync_ticks / 2).max(2);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut peaks = [None; N];
    for (((run, _), seen), peak) in runs.iter_mut().zip(seen).zip(&mut peaks) {
        if !seen {
            eprintln!(
                "bench: pid {}: no relist seen within 90 s of the restart (CPU did not grow): no relist peak",
                run.pid
            );
            continue;
        }
        run.wait_quiet(true, Duration::from_secs(300)).await;
        *peak = Some(memory_mib(run.pid).0);
    }
    peaks
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// `later - earlier` in ms, negative when `later` is in fact earlier.
fn signed_ms(later: Instant, earlier: Instant) -> f64 {
    match later.checked_duration_since(earlier) {
        Some(d) => ms(d),
        None => -ms(earlier - later),
    }
}

/// Nearest-rank percentile of sorted values.
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_of_the_tries_and_their_spread() {
        assert_eq!(median_and_spread(vec![790.0, 300.0, 410.0]), (Some(410.0), Some(490.0)));
        assert_eq!(median_and_spread(vec![20.0, 10.0]), (Some(10.0), Some(10.0)));
        assert_eq!(median_and_spread(vec![130.0]), (Some(130.0), Some(0.0)));
        assert_eq!(median_and_spread(vec![]), (None, None));
    }

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), Some(50.0));
        assert_eq!(percentile(&v, 99.0), Some(99.0));
        assert_eq!(percentile(&v, 100.0), Some(100.0));
        assert_eq!(percentile(&[7.0], 99.0), Some(7.0));
        assert_eq!(percentile(&[], 99.0), None);
    }
}
