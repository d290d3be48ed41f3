//! Two replicas of demo-controller with `--leader-elect`, as demo-controller.yaml
//! runs them: what the warm standby costs beside the leader at one N.
//!
//! ```text
//! leader: spawn ── became leader, cache synced ── N add lines ── RSS ──┐
//! standby:                                    spawn ── standing by, cache synced ── RSS
//!                                                     time, CPU, API server cost
//! both:   idle window ── resync (each its own) ── forced relist ── SIGTERM
//!         CPU %            CPU, lines               peak RSS
//! ```
//!
//! There is no burst: the standby prints no line to time, and the leader's lag
//! is the demo-controller column's (the same binary, the same informer).

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use kube::Client;
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};

use crate::cluster;
use crate::measure::{Measurement, Settings, ms, relist, resync, spawn_synced, wait_initial_adds};
use crate::peers::{Binaries, Peer};
use crate::process::{cpu_ticks, memory_mib, ticks_to_ms};

/// The leader's measurement and the standby's, at one N.
pub struct Pair {
    pub leader: Measurement,
    pub standby: Measurement,
}

/// Runs the leader, then the standby beside it, and measures both.
pub async fn measure(client: &Client, bins: &Binaries, n: usize, s: &Settings<'_>) -> Pair {
    // The Lease (demo-controller, the default name) in a fresh namespace per
    // N: no earlier holder to wait out, no mark from an earlier N to resume
    // from, and on a cluster with a namespace controller, Ctrl-C's cleanup of
    // the namespace takes the Lease with it.
    let lease_ns = cluster::namespace(client, "bench-lease").await;
    // Released, so the leader takes it without waiting it out (but for two
    // retry periods of deference: its first list holds pods no mark covers);
    // a Lease it finds missing it waits out (a lease duration and three retry
    // periods), as one deleted by hand may still have a leader. The release
    // stamp counts only if it names this Lease's uid (and a holder), as a
    // holder's release does: so the Lease is created first, then stamped.
    let lease = Lease {
        metadata: ObjectMeta { name: Some("demo-controller".into()), ..Default::default() },
        spec: Some(LeaseSpec { lease_duration_seconds: Some(1), ..Default::default() }),
    };
    let leases = Api::<Lease>::namespaced(client.clone(), &lease_ns);
    let mut released = match leases.create(&PostParams::default(), &lease).await {
        Ok(created) => created,
        Err(e) => panic!("bench: cannot create the Lease {lease_ns}/demo-controller: {e}"),
    };
    let stamp = serde_json::json!({"holder": "an-earlier-holder", "uid": released.metadata.uid.clone()});
    released.metadata.annotations =
        Some([("demo-controller.example.com/released".to_string(), stamp.to_string())].into());
    if let Err(e) = leases.replace("demo-controller", &PostParams::default(), &released).await {
        panic!("bench: cannot stamp the Lease {lease_ns}/demo-controller as released: {e}");
    }
    let command = || bins.command(Peer::DemoPair, s.kubeconfig, s.resync);
    let (mut leader, mut standby) = (Measurement::default(), Measurement::default());

    // 1. The leader: it takes the released Lease, syncs and logs every pod once.
    let log = s.log(n, "demo-controller-leader");
    let (mut lead, lead_synced, lead_sync_ticks) = spawn_synced(elect(command(), &lease_ns), log, s, &mut leader).await;
    lead.wait_for("became leader", 0, Duration::from_secs(120), |l| l.text.contains("became leader").then_some(()))
        .await;
    wait_initial_adds(&mut lead, n).await;
    lead.wait_quiet(false, Duration::from_secs(120)).await;

    // 2. The standby: it finds the Lease held, syncs its cache and logs nothing.
    let log = s.log(n, "demo-controller-standby");
    let (mut stand, stand_synced, stand_sync_ticks) =
        spawn_synced(elect(command(), &lease_ns), log, s, &mut standby).await;
    stand.wait_for("standing by", 0, Duration::from_secs(60), |l| l.text.contains("standing by").then_some(())).await;
    // It prints nothing while its workers take the first list in: quiet means its CPU too.
    stand.wait_quiet(true, Duration::from_secs(120)).await;
    (leader.peak_mib, leader.steady_mib) = memory_mib(lead.pid);
    (standby.peak_mib, standby.steady_mib) = memory_mib(stand.pid);

    // 3. Idle CPU of both over the same window, which ends before the
    //    leader's first resync (the earlier of the two).
    let idle_start = Instant::now();
    let (lead_due, stand_due) = (lead_synced + s.resync, stand_synced + s.resync);
    let room = lead_due.saturating_duration_since(idle_start).saturating_sub(Duration::from_secs(3));
    let idle = s.idle.min(room);
    if idle < s.idle {
        eprintln!(
            "bench: two replicas: only {room:?} before the resync; idle window shortened (raise --resync-margin)"
        );
    }
    let before = (cpu_ticks(lead.pid), cpu_ticks(stand.pid));
    tokio::time::sleep(idle).await;
    lead.check_alive();
    stand.check_alive();
    if idle >= Duration::from_secs(1) {
        let secs = ms(idle_start.elapsed());
        leader.idle_cpu_pct = Some(100.0 * ticks_to_ms(cpu_ticks(lead.pid) - before.0) / secs);
        standby.idle_cpu_pct = Some(100.0 * ticks_to_ms(cpu_ticks(stand.pid) - before.1) / secs);
    }

    // 4. Each one's first resync, each in its own window.
    let ((lead_cpu, lead_lines), (stand_cpu, stand_lines)) =
        tokio::join!(resync(&mut lead, lead_due), resync(&mut stand, stand_due));
    (leader.resync_cpu_ms, leader.resync_lines) = (Some(lead_cpu), Some(lead_lines));
    (standby.resync_cpu_ms, standby.resync_lines) = (Some(stand_cpu), Some(stand_lines));

    // 5. A forced relist: both relist the N pods at once.
    if let Some(cp) = s.control_plane {
        [leader.relist_peak_mib, standby.relist_peak_mib] =
            relist(cp, [(&mut lead, lead_sync_ticks), (&mut stand, stand_sync_ticks)]).await;
    }
    stand.stop().await;
    lead.stop().await;
    if let Err(e) = leases.delete("demo-controller", &DeleteParams::default()).await {
        eprintln!("bench: could not delete the Lease {lease_ns}/demo-controller: {e}");
    }
    cluster::delete_namespaces(client, std::slice::from_ref(&lease_ns)).await;
    Pair { leader, standby }
}

/// `cmd` as one of two replicas on the Lease demo-controller in `namespace`. The Lease outlasts
/// the forced relist's kube-apiserver restart (about 10 s, the default renew
/// deadline), so the leader's term does not end in the middle of the
/// measurement; the retry period, which sets what renewing costs, is the default.
fn elect(mut cmd: std::process::Command, namespace: &str) -> std::process::Command {
    cmd.args(["--leader-elect", "--leader-elect-resource-namespace", namespace]).args([
        "--leader-elect-lease-duration",
        "90s",
        "--leader-elect-renew-deadline",
        "60s",
    ]);
    cmd
}
