//! Leader election against the real API server, with short timings: two
//! loggers, one Lease, pods created and deleted every 100 ms. The promises:
//! one of them logs; a standby never does; a handoff (SIGTERM) logs nothing
//! twice and loses nothing; a crash (SIGKILL) loses nothing and marks what
//! it may repeat, a delete the new leader learns of only from a relist
//! included; a leader cut off from the API server stops logging.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ObjectMeta, PostParams};
use kube::{Api, Client};
use serde_json::Value;

use common::*;
use demo_controller::leader::RELEASED;
use demo_controller::scope::Stamp;

const T: Duration = Duration::from_secs(30);

/// lease 3s > renew deadline 2s > 1.2 x retry period 0.5s.
const TIMINGS: [&str; 6] = [
    "--leader-elect-lease-duration",
    "3s",
    "--leader-elect-renew-deadline",
    "2s",
    "--leader-elect-retry-period",
    "500ms",
];

/// Timings a leader keeps its lease with through an outage of the API
/// server of a minute or two (the handoff is a release: nobody waits for
/// the lease to expire).
const OUTLASTING: [&str; 6] = [
    "--leader-elect-lease-duration",
    "300s",
    "--leader-elect-renew-deadline",
    "240s",
    "--leader-elect-retry-period",
    "500ms",
];

/// A candidate for the lease `demo-controller` in `ns`, watching `ns`.
fn candidate(kubeconfig: &std::path::Path, ns: &str) -> Logger {
    candidate_with(kubeconfig, ns, &[])
}

fn candidate_with(kubeconfig: &std::path::Path, ns: &str, more: &[&str]) -> Logger {
    candidate_timed(kubeconfig, ns, TIMINGS, more)
}

fn candidate_timed(kubeconfig: &std::path::Path, ns: &str, timings: [&str; 6], more: &[&str]) -> Logger {
    candidate_env(kubeconfig, ns, timings, more, &[])
}

fn candidate_env(
    kubeconfig: &std::path::Path,
    ns: &str,
    timings: [&str; 6],
    more: &[&str],
    env: &[(&str, &str)],
) -> Logger {
    let mut args = vec!["-n", ns, "--leader-elect", "--leader-elect-resource-namespace", ns];
    args.extend(timings);
    args.extend(more);
    Logger::start_with(kubeconfig, &args, env)
}

fn is_event(v: &Value) -> bool {
    v["message"].as_str().is_some_and(|m| m.starts_with("on"))
}

/// The identity in its `became leader` line.
async fn leads(logger: &Logger) -> String {
    let line = logger.wait_message("became leader", T).await;
    line["identity"].as_str().expect("identity").to_string()
}

/// No onAdd/onUpdate/onDelete line before its `became leader` (or at all).
fn silent_until_it_leads(logger: &Logger) {
    let lines = logger.lines();
    let until = lines.iter().position(|v| v["message"] == "became leader").unwrap_or(lines.len());
    let early: Vec<&Value> = lines[..until].iter().filter(|v| is_event(v)).collect();
    assert!(early.is_empty(), "a standby logged: {early:?}\n{}", logger.dump());
}

/// Pods created every 100 ms, each deleted 300 ms after it was created.
struct Churn {
    stop: Arc<AtomicBool>,
    made: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Churn {
    fn start(client: &Client, ns: &str) -> Churn {
        let (stop, made) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicUsize::new(0)));
        let api = Api::<Pod>::namespaced(client.clone(), ns);
        let (flag, count) = (stop.clone(), made.clone());
        let task = tokio::spawn(async move {
            let mut i = 0;
            while !flag.load(Ordering::SeqCst) {
                api.create(&PostParams::default(), &pod(&format!("c{i}"), &[])).await.expect("create pod");
                count.store(i + 1, Ordering::SeqCst);
                if i >= 3 {
                    api.delete(&format!("c{}", i - 3), &DeleteParams::default()).await.expect("delete pod");
                }
                i += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            for j in i.saturating_sub(3)..i {
                api.delete(&format!("c{j}"), &DeleteParams::default()).await.expect("delete pod");
            }
        });
        Churn { stop, made, task }
    }

    fn made(&self) -> usize {
        self.made.load(Ordering::SeqCst)
    }

    async fn until_made(&self, n: usize) {
        while self.made() < n {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// 30 pods more, then it stops creating and deletes what is left, and
    /// waits until the loggers have both lines of every pod (or a deadline).
    /// Returns how many pods it made.
    async fn more_then_finish(self, ns: &str, loggers: &[&Logger]) -> usize {
        self.until_made(self.made() + 30).await;
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.expect("churn task");
        let made = self.made.load(Ordering::SeqCst);
        until_complete(ns, made, loggers).await;
        made
    }
}

/// Lines per (message) over all loggers, for the churn's pods.
fn tally(ns: &str, loggers: &[&Logger]) -> BTreeMap<String, Vec<Value>> {
    let mut by_message: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for logger in loggers {
        for line in logger.event_lines(ns) {
            let message = line["message"].as_str().unwrap_or_default().to_string();
            by_message.entry(message).or_default().push(line);
        }
    }
    by_message
}

/// (lost, duplicated): every churn pod must have one onAdd and one onDelete.
fn lost_and_duplicated(ns: &str, made: usize, lines: &BTreeMap<String, Vec<Value>>) -> (usize, usize) {
    let (mut lost, mut twice) = (0, 0);
    for i in 0..made {
        for kind in ["onAdd", "onDelete"] {
            match lines.get(&format!("{kind}: {ns}/c{i}")).map_or(0, Vec::len) {
                0 => lost += 1,
                1 => {}
                n => twice += n - 1,
            }
        }
    }
    (lost, twice)
}

/// Waits until every churn pod has both lines somewhere (or the deadline).
async fn until_complete(ns: &str, made: usize, loggers: &[&Logger]) {
    let start = Instant::now();
    while lost_and_duplicated(ns, made, &tally(ns, loggers)).0 > 0 && start.elapsed() < T {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn timestamp(line: &Value) -> f64 {
    // RFC 3339 with microseconds, UTC: seconds of the day are enough for a
    // difference within one test.
    let t = line["timestamp"].as_str().expect("timestamp");
    let time = &t[t.find('T').expect("T") + 1..t.len() - 1];
    let parts: Vec<f64> = time.split(':').map(|p| p.parse().expect("number")).collect();
    parts[0] * 3600.0 + parts[1] * 60.0 + parts[2]
}

/// A leads, B stands by for it and has synced, 30 pods of churn are made.
async fn leader_and_standby_under_churn(c: &Cluster, prefix: &str) -> (String, Logger, Logger, Churn) {
    let ns = namespace(&c.client, prefix).await;
    let a = candidate(&c.kubeconfig, &ns);
    let a_id = leads(&a).await;
    let b = candidate(&c.kubeconfig, &ns);
    b.wait_message(&format!("standing by: {a_id} leads"), T).await;
    b.synced().await;
    let churn = Churn::start(&c.client, &ns);
    churn.until_made(30).await;
    (ns, a, b, churn)
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn a_graceful_handoff_logs_nothing_twice_and_loses_nothing() {
    let c = cluster().await;
    let (ns, mut a, b, churn) = leader_and_standby_under_churn(&c, "handoff").await;
    a.signal("TERM");
    assert_eq!(a.wait_exit(T).await.code(), Some(0), "{}", a.dump());
    let released = a.wait_message("released the lease", T).await;
    let b_id = leads(&b).await;
    let took_over = b.wait_message("became leader", T).await;
    assert_eq!(took_over["released"], true, "{took_over}");
    let made = churn.more_then_finish(&ns, &[&a, &b]).await;
    // Nothing more follows: B's marker comes after every churn line.
    b.wait_events(&ns, b.events(&ns).len()).await;

    // A new standby stands by for B.
    let c2 = candidate(&c.kubeconfig, &ns);
    c2.wait_message(&format!("standing by: {b_id} leads"), T).await;

    let lines = tally(&ns, &[&a, &b]);
    let (lost, twice) = lost_and_duplicated(&ns, made, &lines);
    silent_until_it_leads(&b);
    silent_until_it_leads(&c2);
    assert!(a.lines().iter().all(|v| v["replayed"].is_null()) && b.lines().iter().all(|v| v["replayed"].is_null()));
    let handoff = timestamp(&took_over) - timestamp(&released);
    println!("figures: handoff pods={made} lost={lost} duplicated={twice} released_to_leading={handoff:.3}s");
    let repeats: Vec<&Vec<Value>> = lines.values().filter(|seen| seen.len() > 1).collect();
    assert_eq!((lost, twice), (0, 0), "lost or twice: {repeats:#?}\n{}\n{}", a.dump(), b.dump());
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn a_crash_loses_nothing_and_marks_what_it_repeats() {
    let c = cluster().await;
    let (ns, a, b, churn) = leader_and_standby_under_churn(&c, "failover").await;
    a.signal("KILL");
    let killed = Instant::now();
    let took_over = b.wait_message("became leader", T).await;
    let failover = killed.elapsed();
    assert_eq!(took_over["released"], false, "{took_over}");
    let made = churn.more_then_finish(&ns, &[&a, &b]).await;
    b.wait_events(&ns, b.events(&ns).len()).await;

    silent_until_it_leads(&b);
    let lines = tally(&ns, &[&a, &b]);
    let (lost, twice) = lost_and_duplicated(&ns, made, &lines);
    // A line B repeats says so: every second line of a change is replayed.
    let mut replayed = 0;
    for (message, seen) in &lines {
        if message.contains("/c") && seen.len() > 1 {
            for line in &seen[1..] {
                assert_eq!(line["replayed"], true, "a repeat not marked: {line}");
                replayed += 1;
            }
        }
    }
    println!(
        "figures: failover pods={made} lost={lost} duplicated={twice} replayed_lines={replayed} kill_to_leading={:.3}s",
        failover.as_secs_f64()
    );
    assert_eq!(lost, 0, "lost:\n{}\n{}", a.dump(), b.dump());
}

/// The Lease `demo-controller` in `ns`, held for an hour by an identity that
/// is no demo-controller (so it writes no mark).
async fn held_by_someone_else(client: &kube::Client, ns: &str) -> Api<Lease> {
    let leases = Api::<Lease>::namespaced(client.clone(), ns);
    let lease = Lease {
        metadata: ObjectMeta { name: Some("demo-controller".into()), ..Default::default() },
        spec: Some(LeaseSpec {
            holder_identity: Some("someone-else".into()),
            lease_duration_seconds: Some(3600),
            ..Default::default()
        }),
    };
    leases.create(&PostParams::default(), &lease).await.expect("create lease");
    leases
}

/// The Lease `demo-controller` in `ns`, released: no holder, the release
/// stamp of an earlier holder on this very Lease. A candidate takes it
/// without waiting it out (but for two retry periods of deference when its
/// first list holds pods the mark does not cover); without it, the first
/// candidate would wait out a Lease that may have been deleted by hand (a
/// lease duration and three retry periods: minutes with OUTLASTING).
async fn released_lease(client: &kube::Client, ns: &str) {
    let lease = Lease {
        metadata: ObjectMeta { name: Some("demo-controller".into()), ..Default::default() },
        spec: Some(LeaseSpec { lease_duration_seconds: Some(1), ..Default::default() }),
    };
    let leases = Api::<Lease>::namespaced(client.clone(), ns);
    let lease = leases.create(&PostParams::default(), &lease).await.expect("create lease");
    release_as(&leases, lease, "an-earlier-holder").await;
}

/// Releases `lease` as its holder `holder` does: the holder cleared, the
/// stamp that names it and this Lease (its uid).
async fn release_as(leases: &Api<Lease>, mut lease: Lease, holder: &str) -> Lease {
    lease.spec.get_or_insert_default().holder_identity = None;
    let stamp = Stamp { holder: holder.into(), uid: lease.metadata.uid.clone().expect("a uid") };
    lease.metadata.annotations.get_or_insert_default().insert(RELEASED.into(), stamp.record());
    leases.replace("demo-controller", &PostParams::default(), &lease).await.expect("release lease")
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn a_lease_held_by_another_identity_is_respected() {
    let c = cluster().await;
    let ns = namespace(&c.client, "held").await;
    let leases = held_by_someone_else(&c.client, &ns).await;
    create(&c.client, &ns, "before", &[]).await;
    let (probes, metrics) = (free_port(), free_port());
    let (probe_addr, metrics_addr) = (format!("127.0.0.1:{probes}"), format!("127.0.0.1:{metrics}"));
    let a = candidate_with(&c.kubeconfig, &ns, &["--probe-addr", &probe_addr, "--metrics-addr", &metrics_addr]);
    a.wait_message("standing by: someone-else leads", T).await;
    a.synced().await;
    // A warm standby: ready (its cache synced), no line.
    assert_eq!(http_get(probes, "/readyz").0, 200);
    create(&c.client, &ns, "during", &[]).await;
    // Its cache holds both pods (its /readyz is the cache's), yet no line:
    // proven once it leads, when the held changes come out after its
    // `became leader`. The holder gives the lease up, as a release does:
    // its holder cleared, with the stamp that says it stopped first (a
    // holder cleared without it is waited out: it may still lead).
    let held = leases.get("demo-controller").await.expect("get lease");
    release_as(&leases, held, "someone-else").await;
    leads(&a).await;
    let mut events = a.wait_events(&ns, 2).await;
    events.sort();
    assert_eq!(events, [format!("onAdd: {ns}/before"), format!("onAdd: {ns}/during")]);
    silent_until_it_leads(&a);
    let page = http_get(metrics, "/metrics").1;
    assert!(page.contains("leader_election_master_status{name=\"demo-controller\"} 1\n"), "{page}");
}

/// A TCP relay on 127.0.0.1 in front of the API server whose link can be
/// cut one way. Once cut, nothing the logger sends reaches the server (no
/// request, a Lease renew included, on a connection open or new), while
/// what the server sends on connections already open still arrives: the
/// open watch keeps bringing events. A leader cut off this way sees pods
/// change past its renew deadline, and only its own deadline keeps it from
/// logging them.
struct OneWayLink {
    port: u16,
    cut: Arc<AtomicBool>,
}

impl OneWayLink {
    async fn start(server: std::net::SocketAddr) -> OneWayLink {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the relay");
        let port = listener.local_addr().expect("the relay's address").port();
        let cut = Arc::new(AtomicBool::new(false));
        let flag = cut.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(relay_one_way(client, server, flag.clone()));
            }
        });
        OneWayLink { port, cut }
    }

    /// A kubeconfig for the admin user of the control plane in `dir`, through this relay.
    fn kubeconfig(&self, dir: &std::path::Path, name: &str) -> std::path::PathBuf {
        let pki = dir.join("pki");
        let user = format!(
            "    client-certificate-data: {}\n    client-key-data: {}",
            b64(&pki.join("admin.crt")),
            b64(&pki.join("admin.key"))
        );
        kubeconfig(name, &format!("https://127.0.0.1:{}", self.port), Some(b64(&pki.join("ca.crt"))), &user)
    }
}

async fn relay_one_way(client: tokio::net::TcpStream, server: std::net::SocketAddr, cut: Arc<AtomicBool>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(upstream) = tokio::net::TcpStream::connect(server).await else { return };
    let (mut client_r, mut client_w) = client.into_split();
    let (mut server_r, mut server_w) = upstream.into_split();
    let up = async move {
        let mut buf = [0u8; 16384];
        while let Ok(n @ 1..) = client_r.read(&mut buf).await {
            // Cut: dropped on the floor, the connection kept open.
            if !cut.load(Ordering::SeqCst) && server_w.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
    };
    let down = tokio::io::copy(&mut server_r, &mut client_w);
    let _ = tokio::join!(up, down);
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn a_leader_cut_off_from_the_api_server_stops_logging_and_exits() {
    let c = cluster().await;
    let ns = namespace(&c.client, "cutoff").await;
    let server = server_url(&c.dir).trim_start_matches("https://").parse().expect("the server's address");
    let link = OneWayLink::start(server).await;
    let mut a = candidate(&link.kubeconfig(&c.dir, "cut-off-leader"), &ns);
    let a_id = leads(&a).await;
    a.synced().await;
    let b = candidate(&c.kubeconfig, &ns);
    b.wait_message(&format!("standing by: {a_id} leads"), T).await;
    b.synced().await;
    let churn = Churn::start(&c.client, &ns);
    churn.until_made(10).await;

    // The API server lives and pods keep changing; A's renews no longer
    // reach it, and its open watch still brings every change.
    link.cut.store(true, Ordering::SeqCst);
    let cut = Instant::now();
    // B takes the lease a lease duration after the last renew it saw, so
    // past A's renew deadline: every pod made from now on is A's to leave.
    leads(&b).await;
    let taken = cut.elapsed();
    // The first pod whose create was sent after B led: the one after the
    // pod being created now.
    let late = churn.made() + 1;
    let made = churn.more_then_finish(&ns, &[&a, &b]).await;
    b.wait_events(&ns, b.events(&ns).len()).await;

    let logged_late: Vec<String> = a
        .events(&ns)
        .into_iter()
        .filter(|m| m.rsplit_once("/c").and_then(|(_, i)| i.parse::<usize>().ok()).is_some_and(|i| i >= late))
        .collect();
    assert_eq!(logged_late, Vec::<String>::new(), "the cut-off leader logged past its renew deadline:\n{}", a.dump());
    let gone = a.wait_message("lost the lease: no renew within the renew deadline, exiting (exit code 1)", T).await;
    assert_eq!(a.wait_exit(T).await.code(), Some(1), "{}", a.dump());
    let lines = a.lines();
    let at = lines.iter().position(|v| *v == gone).expect("the line");
    assert!(!lines[at..].iter().any(is_event), "a line after the lease was lost:\n{}", a.dump());
    // B logs what changed: both lines of every pod made after it took over,
    // and nothing is lost over the two.
    silent_until_it_leads(&b);
    for i in late..made {
        for kind in ["onAdd", "onDelete"] {
            let line = format!("{kind}: {ns}/c{i}");
            assert!(b.events(&ns).contains(&line), "the standby did not log {line}:\n{}", b.dump());
        }
    }
    let lines = tally(&ns, &[&a, &b]);
    let (lost, twice) = lost_and_duplicated(&ns, made, &lines);
    // What B repeats of A's lines says so, as after a crash.
    for seen in lines.values().filter(|seen| seen.len() > 1) {
        for line in &seen[1..] {
            assert_eq!(line["replayed"], true, "a repeat not marked: {line}\n{}", b.dump());
        }
    }
    println!(
        "figures: cut_off pods={made} lost={lost} duplicated={twice} cut_to_standby_leading={:.3}s (lease 3s, renew deadline 2s)",
        taken.as_secs_f64()
    );
    assert_eq!(lost, 0, "lost:\n{}\n{}", a.dump(), b.dump());
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn a_paused_leader_writes_no_line_past_its_renew_deadline() {
    // A process stopped (SIGSTOP, a long GC pause, a frozen VM) for longer
    // than the lease duration resumes believing it leads; its watch and
    // workers may run before its elector does. The gate checks the renew
    // deadline at each line.
    let c = cluster().await;
    let ns = namespace(&c.client, "paused").await;
    let mut a = candidate(&c.kubeconfig, &ns);
    let a_id = leads(&a).await;
    let b = candidate(&c.kubeconfig, &ns);
    b.wait_message(&format!("standing by: {a_id} leads"), T).await;
    b.synced().await;
    a.signal("STOP");
    leads(&b).await;
    create(&c.client, &ns, "during", &[]).await;
    a.signal("CONT");
    create(&c.client, &ns, "after", &[]).await;
    assert_eq!(b.wait_events(&ns, 2).await, [format!("onAdd: {ns}/during"), format!("onAdd: {ns}/after")]);
    assert_eq!(a.wait_exit(T).await.code(), Some(1), "{}", a.dump());
    a.wait_message("lost the lease: no renew within the renew deadline, exiting (exit code 1)", T).await;
    assert_eq!(a.events(&ns), Vec::<String>::new(), "the paused leader logged:\n{}", a.dump());
}

/// The leader's mark on the lease, once it is at least `at_least`.
async fn mark_reaches(client: &Client, ns: &str, at_least: u64) -> u64 {
    let leases = Api::<Lease>::namespaced(client.clone(), ns);
    let start = Instant::now();
    loop {
        let lease = leases.get("demo-controller").await.expect("get lease");
        let annotations = lease.metadata.annotations.unwrap_or_default();
        let mark = annotations.get("demo-controller.example.com/logged-up-to").and_then(|m| m.parse::<u64>().ok());
        if let Some(mark) = mark.filter(|m| *m >= at_least) {
            return mark;
        }
        assert!(start.elapsed() < T, "the lease's mark never reached {at_least} (it is {mark:?})");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn resource_version(pod: &Pod) -> u64 {
    pod.metadata.resource_version.as_deref().and_then(|rv| rv.parse().ok()).expect("a resourceVersion")
}

/// A leads, B (with metrics on `metrics`) stands by, both started with
/// `env`; `gone` and then `other` are created, A logs both, its mark passes
/// both, and B holds both too (silently: its cache's gauge says so).
/// Returns the namespace, A, B.
async fn gone_and_other_logged(
    c: &Cluster,
    prefix: &str,
    timings: [&str; 6],
    metrics: u16,
    env: &[(&str, &str)],
) -> (String, Logger, Logger) {
    let ns = namespace(&c.client, prefix).await;
    released_lease(&c.client, &ns).await;
    let a = candidate_env(&c.kubeconfig, &ns, timings, &[], env);
    let a_id = leads(&a).await;
    a.synced().await;
    let metrics_addr = format!("127.0.0.1:{metrics}");
    let b = candidate_env(&c.kubeconfig, &ns, timings, &["--metrics-addr", &metrics_addr], env);
    b.wait_message(&format!("standing by: {a_id} leads"), T).await;
    b.synced().await;
    create(&c.client, &ns, "gone", &[]).await;
    a.wait_message(&format!("onAdd: {ns}/gone"), T).await;
    // A later change of another pod: the leader's mark passes gone's
    // resourceVersion once it has logged it.
    let other = create(&c.client, &ns, "other", &[]).await;
    a.wait_message(&format!("onAdd: {ns}/other"), T).await;
    mark_reaches(&c.client, &ns, resource_version(&other)).await;
    until_metric(&b, metrics, "demo_controller_cache_pods 2").await;
    (ns, a, b)
}

/// Waits until the logger's /metrics on `port` has the sample `line`.
async fn until_metric(logger: &Logger, port: u16, line: &str) {
    let start = Instant::now();
    while !http_get(port, "/metrics").1.contains(&format!("{line}\n")) {
        assert!(start.elapsed() < 2 * T + T / 2, "never {line}\n{}", logger.dump());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The API server goes away; a second one on the same etcd comes up, and
/// compacts the history every second. Returns a client of the second.
async fn api_server_away(plane: &Plane) -> Client {
    let port = free_port();
    plane.start_apiserver("second-apiserver", Some(port), &["--etcd-compaction-interval=1s"]).await;
    plane.kill_apiserver();
    plane.admin_client(&format!("https://127.0.0.1:{port}")).await
}

/// Through the second API server, `gone` is deleted and the history
/// compacted past it; then the API server comes back. A watch that was open
/// cannot resume: it relists, and only the list says `gone` is gone.
async fn gone_unseen_then_back(plane: &Plane, second: &Client, ns: &str) {
    delete(second, ns, "gone").await;
    let unseen = current_resource_version(second, ns).await;
    for i in 0..20 {
        label(second, ns, "other", "bump", &i.to_string()).await;
    }
    wait_compacted(second, ns, &unseen).await;
    plane.start_apiserver("kube-apiserver", None, &[]).await;
}

/// The relist comes after the watch's backoff, grown while the server was
/// away: up to 30 s, plus up to half again of jitter.
const RELIST: &str = "the watch expired (410 Gone: its resourceVersion was compacted away); relisting";

fn deletes_of_gone(logger: &Logger, ns: &str) -> Vec<Value> {
    logger.event_lines(ns).into_iter().filter(|v| v["message"] == format!("onDelete: {ns}/gone")).collect()
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn a_delete_only_a_relist_finds_is_not_lost_when_the_leader_dies() {
    // A delete that nobody watched: the leader dies without seeing it, and
    // the standby learns of it only from a relist, which knows the pod's
    // last resourceVersion, not the delete's. The leader's mark had passed
    // the pod's last change; it says nothing of the delete.
    let plane = Plane::start("leader-relist").await;
    let c = &plane.cluster;
    let (ns, mut a, b) = gone_and_other_logged(c, "unseen", TIMINGS, free_port(), &[]).await;
    // The API server goes away, then the leader dies.
    let second = api_server_away(&plane).await;
    a.signal("KILL");
    a.wait_exit(T).await;
    gone_unseen_then_back(&plane, &second, &ns).await;

    // The standby takes the expired lease and relists, in either order.
    b.wait_message(RELIST, 2 * T + T / 2).await;
    let took_over = b.wait_message("became leader", 2 * T + T / 2).await;
    assert_eq!(took_over["released"], false, "{took_over}");
    // Every line of what came before the marker is in (see wait_events).
    b.wait_events(&ns, 0).await;
    let deletes = deletes_of_gone(&b, &ns);
    assert_eq!(deletes.len(), 1, "the delete found by the relist was lost or doubled:\n{}\n{}", a.dump(), b.dump());
    // Whether it says replayed=true is not asserted: that depends on whether
    // the dead leader's last mark had passed where the standby's own stream
    // was when its relist started (then it may have been logged), a race
    // between two replicas' bookmarks that only the standby sees.
    silent_until_it_leads(&b);
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn a_delete_both_relists_found_is_repeated_at_the_handoff_only_where_no_list_bounds_it() {
    // Both relist after the same outage and find the same delete: the leader
    // logs it, the standby keeps it until the leader's mark passes its
    // list, and drops it then; on JSON, where no list's resourceVersion
    // bounds it, the new leader logs it again, saying so. A renew deadline
    // longer than the outage keeps the leader leading through it.
    let plane = Plane::start("leader-relist-both").await;
    let c = &plane.cluster;
    let metrics = free_port();
    let (ns, mut a, b) = gone_and_other_logged(c, "unseen-both", OUTLASTING, metrics, &[]).await;
    let second = api_server_away(&plane).await;
    gone_unseen_then_back(&plane, &second, &ns).await;
    a.wait_message(&format!("onDelete: {ns}/gone"), 2 * T + T / 2).await;
    // The standby's relist is done (its first list and this one): any list
    // read from now on is at least as new as the standby's.
    until_metric(&b, metrics, "demo_controller_relists_total 2").await;
    let after = current_resource_version(&c.client, &ns).await.parse::<u64>().expect("a number");
    // A change the leader logs moves its mark past that list.
    create(&c.client, &ns, "later", &[]).await;
    a.wait_message(&format!("onAdd: {ns}/later"), T).await;
    mark_reaches(&c.client, &ns, after + 1).await;
    a.signal("TERM");
    assert_eq!(a.wait_exit(T).await.code(), Some(0), "{}", a.dump());
    let took_over = b.wait_message("became leader", T).await;
    assert_eq!(took_over["released"], true, "{took_over}");
    b.wait_events(&ns, 0).await;
    silent_until_it_leads(&b);
    let again = deletes_of_gone(&b, &ns);
    if std::env::var("DEMO_CONTROLLER_WIRE").as_deref() == Ok("json") {
        // kube's JSON watcher does not say the list's resourceVersion: the
        // standby could not tell, so it logs the delete, saying so.
        assert_eq!(again.len(), 1, "{again:?}\n{}", b.dump());
        assert_eq!(again[0]["replayed"], true, "{again:?}");
    } else {
        assert_eq!(again, Vec::<Value>::new(), "logged twice:\n{}\n{}", a.dump(), b.dump());
    }
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn in_a_quiet_namespace_the_stream_alone_carries_the_mark_past_a_relists_delete() {
    // As above on protobuf, but nothing changes in the namespace after the
    // relists: the newest pod resourceVersion logged stays below the
    // standby's list (etcd's revision, which the Lease's renewals move), so
    // only a mark that is the leader's stream position, moved by the
    // bookmark the API server sends 2 s before it ends each watch (here
    // every 5 s; a shorter timeout leaves no room for one), can pass it.
    // Were the mark a pod's resourceVersion, it would never reach the
    // list, and the new leader would log the delete again.
    let plane = Plane::start("leader-relist-quiet").await;
    let c = &plane.cluster;
    let metrics = free_port();
    let quick = [("DEMO_CONTROLLER_FAULTS", "watch-timeout=5s"), ("DEMO_CONTROLLER_WIRE", "protobuf")];
    let (ns, mut a, b) = gone_and_other_logged(c, "quiet", OUTLASTING, metrics, &quick).await;
    let second = api_server_away(&plane).await;
    gone_unseen_then_back(&plane, &second, &ns).await;
    a.wait_message(&format!("onDelete: {ns}/gone"), 2 * T + T / 2).await;
    until_metric(&b, metrics, "demo_controller_relists_total 2").await;
    // At least the standby's list's resourceVersion (read after it).
    let after = current_resource_version(&c.client, &ns).await.parse::<u64>().expect("a number");
    mark_reaches(&c.client, &ns, after).await;
    a.signal("TERM");
    assert_eq!(a.wait_exit(T).await.code(), Some(0), "{}", a.dump());
    let took_over = b.wait_message("became leader", T).await;
    assert_eq!(took_over["released"], true, "{took_over}");
    b.wait_events(&ns, 0).await;
    silent_until_it_leads(&b);
    let again = deletes_of_gone(&b, &ns);
    assert_eq!(again, Vec::<Value>::new(), "logged twice:\n{}\n{}", a.dump(), b.dump());
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn a_take_whose_answer_was_lost_still_resumes_from_the_dead_leaders_mark() {
    // The standby's take of the expired lease reaches the server, and its
    // answer is lost (a timeout after the commit): at its next try it finds
    // itself the holder. What it kept past the dead leader's mark, the dead
    // leader never logged: it must come out, saying it may be a replay.
    let c = cluster().await;
    let ns = namespace(&c.client, "lost-take").await;
    let mut a = candidate(&c.kubeconfig, &ns);
    let a_id = leads(&a).await;
    a.synced().await;
    let b = candidate_env(&c.kubeconfig, &ns, TIMINGS, &[], &[("DEMO_CONTROLLER_FAULTS", "lose-take-answer")]);
    b.wait_message(&format!("standing by: {a_id} leads"), T).await;
    b.synced().await;
    let before = create(&c.client, &ns, "before", &[]).await;
    a.wait_message(&format!("onAdd: {ns}/before"), T).await;
    mark_reaches(&c.client, &ns, resource_version(&before)).await;
    a.signal("KILL");
    a.wait_exit(T).await;
    for i in 0..5 {
        create(&c.client, &ns, &format!("after-{i}"), &[]).await;
    }
    b.wait_message("DEMO_CONTROLLER_FAULTS: the answer to this take of the lease is lost", T).await;
    let took_over = b.wait_message("became leader", T).await;
    assert_eq!(took_over["released"], false, "{took_over}");
    let events = b.wait_events(&ns, 5).await;
    let want: Vec<String> = (0..5).map(|i| format!("onAdd: {ns}/after-{i}")).collect();
    assert_eq!(events, want, "{}", b.dump());
    assert!(b.event_lines(&ns).iter().all(|v| v["replayed"] == true), "{}", b.dump());
    silent_until_it_leads(&b);
}

/// What is done to the lease behind its leader's back.
#[derive(Clone, Copy)]
enum Behind {
    /// Another identity writes itself in as the holder.
    Usurped,
    /// The lease is deleted.
    Deleted,
}

/// A leader whose renew deadline is minutes away reads the lease changed
/// behind its back: it stops at once and exits 1, saying why.
async fn a_leader_reading_the_lease_changed(behind: Behind, prefix: &str, reason: &str) {
    let c = cluster().await;
    let ns = namespace(&c.client, prefix).await;
    released_lease(&c.client, &ns).await;
    let mut a = candidate_timed(&c.kubeconfig, &ns, OUTLASTING, &[]);
    leads(&a).await;
    a.synced().await;
    create(&c.client, &ns, "p", &[]).await;
    a.wait_events(&ns, 1).await;
    let leases = Api::<Lease>::namespaced(c.client.clone(), &ns);
    match behind {
        Behind::Usurped => loop {
            // The leader renews every half second: a conflict is retried.
            let mut lease = leases.get("demo-controller").await.expect("get lease");
            lease.spec.as_mut().expect("spec").holder_identity = Some("someone-else".into());
            match leases.replace("demo-controller", &PostParams::default(), &lease).await {
                Ok(_) => break,
                Err(kube::Error::Api(e)) if e.code == 409 => continue,
                Err(e) => panic!("replace lease: {e}"),
            }
        },
        Behind::Deleted => {
            leases.delete("demo-controller", &DeleteParams::default()).await.expect("delete lease");
        }
    }
    let lost = a.wait_message(&format!("lost the lease: {reason}, exiting (exit code 1)"), T).await;
    assert_eq!(lost["level"], "WARN", "{lost}");
    assert_eq!(a.wait_exit(T).await.code(), Some(1), "{}", a.dump());
    let lines = a.lines();
    let at = lines.iter().position(|v| *v == lost).expect("the line");
    assert!(!lines[at..].iter().any(is_event), "a line after the lease was lost:\n{}", a.dump());
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn a_leader_that_reads_another_holder_stops_at_once_and_exits() {
    a_leader_reading_the_lease_changed(Behind::Usurped, "usurped", "someone-else holds it").await;
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn a_leader_whose_lease_was_deleted_stops_at_once_and_exits() {
    a_leader_reading_the_lease_changed(Behind::Deleted, "deleted", "the lease was deleted").await;
}

/// A leader's lease emptied behind its back while it still leads: deleted,
/// or its holder cleared, without the release stamp.
#[derive(Clone, Copy)]
enum ByHand {
    Deleted,
    Cleared,
}

/// lease 10s > renew deadline 8s > 1.2 x retry period 1s.
const HELD: [&str; 6] = [
    "--leader-elect-lease-duration",
    "10s",
    "--leader-elect-renew-deadline",
    "8s",
    "--leader-elect-retry-period",
    "1s",
];

/// A leads on HELD; its renew 8's answer comes 6 s late, so it leads on,
/// unaware, for those 6 s. The lease is emptied by hand meanwhile. The
/// standby B (lease 3s) must not take it until A's lease duration has
/// passed: A stops at its next renew, and a pod made once B leads is logged
/// once, by B.
async fn a_lease_emptied_by_hand(how: ByHand, prefix: &str, reason: &str) {
    let c = cluster().await;
    let ns = namespace(&c.client, prefix).await;
    released_lease(&c.client, &ns).await;
    let late = [("DEMO_CONTROLLER_FAULTS", "renew-late=6s@8")];
    let mut a = candidate_env(&c.kubeconfig, &ns, HELD, &[], &late);
    let a_id = leads(&a).await;
    a.synced().await;
    let b = candidate(&c.kubeconfig, &ns);
    b.wait_message(&format!("standing by: {a_id} leads"), T).await;
    b.synced().await;
    let taking = "DEMO_CONTROLLER_FAULTS: taking in the answer to renew 8 6s late";
    assert!(!a.lines().iter().any(|v| v["message"] == taking), "B stood by too late:\n{}", a.dump());
    a.wait_message(taking, T).await;
    let leases = Api::<Lease>::namespaced(c.client.clone(), &ns);
    match how {
        ByHand::Deleted => leases.delete("demo-controller", &DeleteParams::default()).await.map(|_| ()),
        ByHand::Cleared => {
            let mut lease = leases.get("demo-controller").await.expect("get lease");
            lease.spec.as_mut().expect("spec").holder_identity = None;
            leases.replace("demo-controller", &PostParams::default(), &lease).await.map(|_| ())
        }
    }
    .expect("empty the lease");
    let took_over = b.wait_message("became leader", T).await;
    assert_eq!(took_over["released"], false, "{took_over}");
    create(&c.client, &ns, "after", &[]).await;
    b.wait_message(&format!("onAdd: {ns}/after"), T).await;
    assert_eq!(a.wait_exit(T).await.code(), Some(1), "{}", a.dump());
    let lines = tally(&ns, &[&a, &b]);
    assert_eq!(lines[&format!("onAdd: {ns}/after")].len(), 1, "logged by both:\n{}\n{}", a.dump(), b.dump());
    let lost = format!("lost the lease: {reason}, exiting (exit code 1)");
    assert!(a.lines().iter().any(|v| v["message"] == lost), "no `{lost}`:\n{}", a.dump());
    let done = if matches!(how, ByHand::Deleted) { "deleted" } else { "cleared" };
    let waited = format!(
        "the lease was {done} without a release: waiting 10s before taking it, as {a_id} may lead until its next renew"
    );
    assert!(b.lines().iter().any(|v| v["message"] == waited), "no `{waited}`:\n{}", b.dump());
    silent_until_it_leads(&b);
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn a_lease_deleted_by_hand_is_waited_out_so_two_replicas_never_log_at_once() {
    a_lease_emptied_by_hand(ByHand::Deleted, "deleted-by-hand", "the lease was deleted").await;
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn a_holder_cleared_by_hand_is_waited_out_so_two_replicas_never_log_at_once() {
    a_lease_emptied_by_hand(ByHand::Cleared, "cleared-by-hand", "its holder was cleared").await;
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn a_deleted_lease_goes_to_the_standby_that_followed_the_leader_not_to_a_fresh_replica() {
    // The leader exits when it finds its lease deleted, and comes back as a
    // new process (its container restarted) that never saw a holder. A pod
    // deleted in the gap, while nobody led, is known only to the standby,
    // which kept its line: the standby must lead, not the fresh replica.
    // HELD's 10 s lease: the standby waits 10 s from the deletion, the fresh
    // replica 13 s from its first read, which comes after the deletion.
    let c = cluster().await;
    let ns = namespace(&c.client, "fresh-after-delete").await;
    released_lease(&c.client, &ns).await;
    let mut a = candidate_timed(&c.kubeconfig, &ns, HELD, &[]);
    let a_id = leads(&a).await;
    a.synced().await;
    let b = candidate_timed(&c.kubeconfig, &ns, HELD, &[]);
    b.wait_message(&format!("standing by: {a_id} leads"), T).await;
    b.synced().await;
    let gone = create(&c.client, &ns, "gone", &[]).await;
    a.wait_message(&format!("onAdd: {ns}/gone"), T).await;
    mark_reaches(&c.client, &ns, resource_version(&gone)).await;
    Api::<Lease>::namespaced(c.client.clone(), &ns)
        .delete("demo-controller", &DeleteParams::default())
        .await
        .expect("delete lease");
    assert_eq!(a.wait_exit(T).await.code(), Some(1), "{}", a.dump());
    delete(&c.client, &ns, "gone").await;
    let again = candidate_timed(&c.kubeconfig, &ns, HELD, &[]);
    again.synced().await;
    let b_id = leads(&b).await;
    again.wait_message(&format!("standing by: {b_id} leads"), T).await;
    let deletes = b.wait_message(&format!("onDelete: {ns}/gone"), T).await;
    assert_eq!(deletes["replayed"], true, "no release: it may repeat, and says so: {deletes}");
    let waited = "no holder of the lease seen yet: waiting 13s before taking it, so that a standby that followed an earlier leader takes it first";
    assert!(again.lines().iter().any(|v| v["message"] == waited), "no `{waited}`:\n{}", again.dump());
    silent_until_it_leads(&again);
    assert!(again.events(&ns).is_empty(), "{}", again.dump());
    let lost = "lost the lease: the lease was deleted, exiting (exit code 1)";
    assert!(a.lines().iter().any(|v| v["message"] == lost), "no `{lost}`:\n{}", a.dump());
}

/// lease 8s > renew deadline 5s > 1.2 x retry period 2s.
const SLOW: [&str; 6] =
    ["--leader-elect-lease-duration", "8s", "--leader-elect-renew-deadline", "5s", "--leader-elect-retry-period", "2s"];

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn lines_held_past_the_renew_deadline_are_logged_once_a_late_renew_succeeds() {
    // Renew 8 starts 2 s after renew 7 and its answer is taken in 4.5 s
    // later: after renew 7's deadline (5 s after it), so the lines of those
    // 1.5 s are held back, and before its own deadline, so it reopens the
    // gate. The lines held must come out then, or the next mark says they
    // were logged and a handoff loses them.
    let c = cluster().await;
    let ns = namespace(&c.client, "late-renew").await;
    let late = [("DEMO_CONTROLLER_FAULTS", "renew-late=4500ms@8")];
    let mut a = candidate_env(&c.kubeconfig, &ns, SLOW, &[], &late);
    let a_id = leads(&a).await;
    a.synced().await;
    let b = candidate_timed(&c.kubeconfig, &ns, SLOW, &[]);
    b.wait_message(&format!("standing by: {a_id} leads"), T).await;
    b.synced().await;
    let churn = Churn::start(&c.client, &ns);
    churn.until_made(3).await;
    let taking = "DEMO_CONTROLLER_FAULTS: taking in the answer to renew 8 4.5s late";
    assert!(!a.lines().iter().any(|v| v["message"] == taking), "the churn started too late:\n{}", a.dump());
    a.wait_message(taking, 2 * T).await;
    a.wait_message("DEMO_CONTROLLER_FAULTS: took in the answer to renew 8", T).await;
    // A's mark moves on past what it held, then it hands over.
    churn.until_made(churn.made() + 10).await;
    a.signal("TERM");
    assert_eq!(a.wait_exit(T).await.code(), Some(0), "{}", a.dump());
    let took_over = b.wait_message("became leader", T).await;
    assert_eq!(took_over["released"], true, "{took_over}");
    let made = churn.more_then_finish(&ns, &[&a, &b]).await;
    b.wait_events(&ns, b.events(&ns).len()).await;
    let lines = tally(&ns, &[&a, &b]);
    let (lost, twice) = lost_and_duplicated(&ns, made, &lines);
    silent_until_it_leads(&b);
    assert!(a.lines().iter().all(|v| v["replayed"].is_null()) && b.lines().iter().all(|v| v["replayed"].is_null()));
    assert_eq!((lost, twice), (0, 0), "lost or twice:\n{}\n{}", a.dump(), b.dump());
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn a_drain_that_timed_out_does_not_release_and_its_repeats_say_so() {
    // The leader has a backlog it cannot drain in time (a slow sync, one
    // worker). Its mark never passed the backlog, yet it logged part of it
    // during the drain: a release with that mark would make the new leader
    // repeat those lines as if for the first time.
    let c = cluster().await;
    let ns = namespace(&c.client, "undrained").await;
    create_many(&c.client, &ns, "b-", 2000, &[], 0).await;
    let slow = [("DEMO_CONTROLLER_FAULTS", "slow=20ms")];
    let mut a = candidate_env(&c.kubeconfig, &ns, TIMINGS, &["--workers", "1"], &slow);
    let a_id = leads(&a).await;
    a.wait_message("workers started", T).await;
    let b = candidate(&c.kubeconfig, &ns);
    b.wait_message(&format!("standing by: {a_id} leads"), T).await;
    b.wait_message("workers started", T).await;
    a.signal("TERM");
    assert_eq!(a.wait_exit(T).await.code(), Some(3), "{}", a.dump());
    assert!(!a.lines().iter().any(|v| v["message"] == "released the lease"), "{}", a.dump());
    let took_over = b.wait_message("became leader", T).await;
    assert_eq!(took_over["released"], false, "{took_over}");
    b.wait_events(&ns, 2000).await;
    let logged_by_a: std::collections::BTreeSet<String> = a.events(&ns).into_iter().collect();
    let unmarked: Vec<Value> = b
        .event_lines(&ns)
        .into_iter()
        .filter(|v| logged_by_a.contains(v["message"].as_str().unwrap_or_default()) && v["replayed"] != true)
        .collect();
    assert!(!logged_by_a.is_empty(), "{}", a.dump());
    assert_eq!(unmarked, Vec::<Value>::new(), "repeated without replayed=true");
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn a_lease_duration_in_parts_of_a_second_is_rounded_up_on_the_lease() {
    // The Lease says its duration in whole seconds, and a standby waits
    // what it says: cut down to 1s, it could take the lease before the
    // leader's renew deadline (1s here) has passed.
    let c = cluster().await;
    let ns = namespace(&c.client, "rounded").await;
    let timings = [
        "--leader-elect-lease-duration",
        "1500ms",
        "--leader-elect-renew-deadline",
        "1s",
        "--leader-elect-retry-period",
        "200ms",
    ];
    let a = candidate_timed(&c.kubeconfig, &ns, timings, &[]);
    leads(&a).await;
    let lease = Api::<Lease>::namespaced(c.client.clone(), &ns).get("demo-controller").await.expect("get lease");
    assert_eq!(lease.spec.and_then(|s| s.lease_duration_seconds), Some(2));
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn a_mark_no_leader_can_have_written_is_refused_with_a_warning() {
    // A mark at or above the Lease's own resourceVersion (a backup restored
    // from another cluster, a hand edit) would silence every line up to it.
    let c = cluster().await;
    let ns = namespace(&c.client, "bogus-mark").await;
    let bogus = 999_999_999_999u64;
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some("demo-controller".into()),
            annotations: Some([("demo-controller.example.com/logged-up-to".to_string(), bogus.to_string())].into()),
            ..Default::default()
        },
        spec: Some(LeaseSpec::default()),
    };
    Api::<Lease>::namespaced(c.client.clone(), &ns).create(&PostParams::default(), &lease).await.expect("lease");
    create(&c.client, &ns, "p", &[]).await;
    let a = candidate(&c.kubeconfig, &ns);
    let warned = a
        .wait_for("the refused mark", T, |v| {
            v["message"].as_str().is_some_and(|m| m.starts_with("ignoring the lease's mark: it is at or above"))
        })
        .await;
    assert_eq!((warned["level"].as_str(), warned["mark"].as_u64()), (Some("WARN"), Some(bogus)), "{warned}");
    leads(&a).await;
    assert_eq!(a.wait_events(&ns, 1).await, [format!("onAdd: {ns}/p")], "{}", a.dump());
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn a_replica_refused_the_lease_says_so_once_and_is_not_ready() {
    let c = cluster().await;
    let ns = namespace(&c.client, "no-lease").await;
    service_account(&c.client, &ns, "watcher").await;
    grant_pod_reading(&c.client, &ns, "watcher").await;
    let kc = token_kubeconfig(&c.dir, &format!("{ns}-watcher"), &token(&c.client, &ns, "watcher").await);
    let (probes, metrics) = (free_port(), free_port());
    let (probe_addr, metrics_addr) = (format!("127.0.0.1:{probes}"), format!("127.0.0.1:{metrics}"));
    let a = candidate_with(&kc, &ns, &["--probe-addr", &probe_addr, "--metrics-addr", &metrics_addr]);
    let prefix = format!("cannot get the lease {ns}/demo-controller: ");
    let refused = a.wait_for(&prefix, T, |v| v["message"].as_str().is_some_and(|m| m.starts_with(&prefix))).await;
    assert_eq!(refused["level"], "WARN", "{refused}");
    let said = refused["message"].as_str().expect("message");
    assert!(said.contains("(Forbidden, 403)") && said.contains("grant get, create and update on leases"), "{said}");
    // A lease duration of tries later (then the workers start: waiting for
    // a mark is over), still that one line.
    a.wait_message("workers started", T).await;
    let about_the_lease: Vec<Value> = a
        .lines()
        .into_iter()
        .filter(|v| v["level"] == "WARN" && v["message"].as_str().is_some_and(|m| m.contains("lease")))
        .collect();
    assert_eq!(about_the_lease, std::slice::from_ref(&refused), "{}", a.dump());
    let (status, body) = http_get(probes, "/readyz");
    assert_eq!((status, body.trim()), (503, format!("the lease is refused to this replica: {said}").as_str()));
    let page = http_get(metrics, "/metrics").1;
    assert!(page.contains("leader_election_master_status{name=\"demo-controller\"} 0\n"), "{page}");
    assert_eq!(a.events(&ns), Vec::<String>::new());
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn a_kept_line_dropped_at_the_bound_is_said_and_counted() {
    // The holder writes no mark (not a demo-controller), so the standby
    // keeps every line; its bound is lowered to 1 byte by the test seam:
    // each line pushes out the one before.
    let c = cluster().await;
    let ns = namespace(&c.client, "kept-bound").await;
    let leases = held_by_someone_else(&c.client, &ns).await;
    let metrics = free_port();
    let metrics_addr = format!("127.0.0.1:{metrics}");
    let bound = [("DEMO_CONTROLLER_FAULTS", "kept-bytes=1")];
    let a = candidate_env(&c.kubeconfig, &ns, TIMINGS, &["--metrics-addr", &metrics_addr], &bound);
    a.wait_message("standing by: someone-else leads", T).await;
    a.wait_message("workers started", T).await;
    for i in 0..3 {
        create(&c.client, &ns, &format!("p{i}"), &[]).await;
    }
    let dropped = |i: usize| {
        format!(
            "dropped a kept line at the bound: onAdd: {ns}/p{i} is lost if this replica leads before the leader's mark passes it"
        )
    };
    a.wait_message(&dropped(1), T).await;
    assert_eq!(
        a.warnings().into_iter().filter(|w| w.starts_with("dropped")).collect::<Vec<_>>(),
        [dropped(0), dropped(1)]
    );
    until_metric(&a, metrics, "demo_controller_kept_lines_dropped_total 2").await;
    // The holder stops renewing, and its lease runs out: no release.
    let mut held = leases.get("demo-controller").await.expect("get lease");
    held.spec.as_mut().expect("spec").lease_duration_seconds = Some(1);
    leases.replace("demo-controller", &PostParams::default(), &held).await.expect("shorten the lease");
    let took_over = a.wait_message("became leader", T).await;
    assert_eq!((took_over["released"].as_bool(), took_over["kept"].as_u64()), (Some(false), Some(1)), "{took_over}");
    assert_eq!(a.wait_events(&ns, 1).await, [format!("onAdd: {ns}/p2")], "{}", a.dump());
    // A lease that ran out is no release (no stamp says the holder stopped
    // first): the line it may have logged says so.
    assert_eq!(a.event_lines(&ns)[0]["replayed"], true, "{}", a.dump());
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn under_steady_churn_the_mark_moves_though_the_queue_is_never_idle() {
    // One worker and a slow sync (100 ms): the churn's changes come faster
    // than they are logged, so the queue is not idle again while it runs.
    // A mark that moved only with an idle queue would stay where it was,
    // and a crash would replay everything since.
    let c = cluster().await;
    let ns = namespace(&c.client, "watermark").await;
    let slow = [("DEMO_CONTROLLER_FAULTS", "slow=100ms")];
    let a = candidate_env(&c.kubeconfig, &ns, TIMINGS, &["--workers", "1"], &slow);
    leads(&a).await;
    a.wait_message("workers started", T).await;
    let churn = Churn::start(&c.client, &ns);
    churn.until_made(20).await;
    let first = mark_reaches(&c.client, &ns, 0).await;
    let moved = mark_reaches(&c.client, &ns, first + 1).await;
    let again = mark_reaches(&c.client, &ns, moved + 1).await;
    let made = churn.made();
    let logged = a.events(&ns).len();
    println!("figures: watermark marks={first},{moved},{again} pods_made={made} lines_logged={logged}");
    assert!(logged < 2 * made, "the queue caught up: the test shows nothing\n{}", a.dump());
    churn.stop.store(true, Ordering::SeqCst);
    churn.task.await.expect("churn task");
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn a_lagging_standby_marks_what_it_logs_after_a_crash_that_the_dead_leader_may_have_logged() {
    // The leader's mark cannot pass a key its worker is stuck on, so it
    // stays below the pods created next, which it logs all the same. The
    // standby syncs slowly (one worker, 50 ms a sync): when the leader is
    // killed, many of those pods are still in its queue, and reach its
    // worker only after it took the lease over. Each of those lines repeats
    // one the dead leader wrote, and must say so.
    let c = cluster().await;
    let ns = namespace(&c.client, "lagging").await;
    let stuck = format!("stall={ns}/pin@1h");
    let mut a = candidate_env(&c.kubeconfig, &ns, TIMINGS, &["--workers", "2"], &[("DEMO_CONTROLLER_FAULTS", &stuck)]);
    let a_id = leads(&a).await;
    a.wait_message("workers started", T).await;
    let slow = [("DEMO_CONTROLLER_FAULTS", "slow=50ms")];
    let b = candidate_env(&c.kubeconfig, &ns, TIMINGS, &["--workers", "1"], &slow);
    b.wait_message(&format!("standing by: {a_id} leads"), T).await;
    b.wait_message("workers started", T).await;
    create(&c.client, &ns, "pin", &[]).await;
    create_many(&c.client, &ns, "p", 200, &[], 0).await;
    a.wait_count(&ns, 200).await;
    a.signal("KILL");
    a.wait_exit(T).await;
    let took_over = b.wait_message("became leader", T).await;
    assert_eq!(took_over["released"], false, "{took_over}");
    b.wait_events(&ns, 201).await;
    let by_a: std::collections::BTreeSet<String> = a.events(&ns).into_iter().collect();
    let after_the_take = b.event_lines(&ns).len() - took_over["kept"].as_u64().expect("kept") as usize;
    let unmarked: Vec<Value> = b
        .event_lines(&ns)
        .into_iter()
        .filter(|v| by_a.contains(v["message"].as_str().unwrap_or_default()) && v["replayed"] != true)
        .collect();
    println!("figures: lagging logged_by_a={} logged_by_b_after_the_take={after_the_take}", by_a.len());
    assert!(after_the_take > 1, "the standby did not lag: the test shows nothing\n{}", b.dump());
    assert_eq!(unmarked, Vec::<Value>::new(), "repeated without replayed=true");
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn a_lagging_standby_marks_a_merged_line_that_repeats_part_of_what_the_released_leader_logged() {
    // The standby's first sync of p hangs (a worker that lags). Meanwhile
    // the leader logs p's onAdd and releases the lease, and p is deleted.
    // The standby, leading now, merges p's life into one sync: an onAdd at
    // the delete's resourceVersion, past the mark, and the onDelete. The
    // onAdd repeats the leader's: it says replayed=true. The onDelete,
    // which nobody logged, is plain.
    let c = cluster().await;
    let ns = namespace(&c.client, "merged").await;
    let mut a = candidate(&c.kubeconfig, &ns);
    let a_id = leads(&a).await;
    a.wait_message("workers started", T).await;
    let stall = format!("stall={ns}/p@15s");
    let b = candidate_env(&c.kubeconfig, &ns, TIMINGS, &[], &[("DEMO_CONTROLLER_FAULTS", &stall)]);
    b.wait_message(&format!("standing by: {a_id} leads"), T).await;
    b.wait_message("workers started", T).await;
    create(&c.client, &ns, "p", &[]).await;
    assert_eq!(a.wait_count(&ns, 1).await, vec![format!("onAdd: {ns}/p")]);
    a.signal("TERM");
    assert_eq!(a.wait_exit(T).await.code(), Some(0), "{}", a.dump());
    a.wait_message("released the lease", T).await;
    delete(&c.client, &ns, "p").await;
    let took_over = b.wait_message("became leader", T).await;
    assert_eq!(took_over["released"], true, "{took_over}");
    b.wait_events(&ns, 2).await;
    let lines: Vec<(String, bool)> = b
        .event_lines(&ns)
        .iter()
        .map(|v| (v["message"].as_str().unwrap_or_default().to_string(), v["replayed"] == true))
        .collect();
    let expected = vec![(format!("onAdd: {ns}/p"), true), (format!("onDelete: {ns}/p"), false)];
    assert_eq!(lines, expected, "{}", b.dump());
}

/// The message of a WARN line that names a range that may be missing
/// deletes (book/src/appendix/standby.md quotes it), from its fields.
fn missing_deletes(line: &Value) -> String {
    let after = line["after"].as_u64().expect("after");
    match line["through"].as_u64() {
        Some(through) => format!(
            "deletes between resourceVersion {after} and {through} may be missing: this replica saw that range only as a list, and a list does not show a pod that was created and deleted"
        ),
        None => format!(
            "deletes after resourceVersion {after} may be missing: this replica saw what came after it only as a list, and a list does not show a pod that was created and deleted"
        ),
    }
}

fn is_missing_deletes(line: &Value) -> bool {
    line["message"].as_str().is_some_and(|m| m.starts_with("deletes ") && m.contains(" may be missing: "))
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn a_replica_started_again_logs_what_came_meanwhile_and_says_which_deletes_may_be_missing() {
    // The simplest case, as a new user tries it: one replica logs p1-p3 and
    // is stopped; p4 is created and p1 deleted while none runs. Started
    // again, it resumes after its mark and logs p4's onAdd. p1's delete no
    // list can show: a WARN line names the range it lies in.
    let c = cluster().await;
    let ns = namespace(&c.client, "again").await;
    let mut first = candidate(&c.kubeconfig, &ns);
    leads(&first).await;
    first.synced().await;
    for name in ["p1", "p2", "p3"] {
        create(&c.client, &ns, name, &[]).await;
    }
    first.wait_events(&ns, 3).await;
    first.signal("TERM");
    assert_eq!(first.wait_exit(T).await.code(), Some(0), "{}", first.dump());
    let released = first.wait_message("released the lease", T).await;
    let mark = released["logged_up_to"].as_u64().expect("a mark");
    create(&c.client, &ns, "p4", &[]).await;
    delete(&c.client, &ns, "p1").await;
    let deleted_by = current_resource_version(&c.client, &ns).await.parse::<u64>().expect("a number");

    let again = candidate(&c.kubeconfig, &ns);
    let took_over = again.wait_message("became leader", T).await;
    assert_eq!((took_over["resumes_after"].as_u64(), &took_over["released"]), (Some(mark), &Value::Bool(true)));
    let events = again.wait_events(&ns, 1).await;
    assert!(events.contains(&format!("onAdd: {ns}/p4")), "{}", again.dump());
    let warning = again.wait_for("the missing deletes", T, is_missing_deletes).await;
    assert_eq!(
        (&warning["level"], warning["message"].as_str()),
        (&Value::from("WARN"), Some(&*missing_deletes(&warning)))
    );
    assert_eq!(warning["after"].as_u64(), Some(mark), "{warning}");
    // The range holds p1's delete, unless a list older than it (a lagging
    // watch cache) still held p1, and its delete came as an event.
    let logged = events.contains(&format!("onDelete: {ns}/p1"));
    assert!(logged || warning["through"].as_u64().is_none_or(|t| t >= deleted_by), "{warning}\n{}", again.dump());
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn a_standby_whose_watch_is_down_takes_the_lease_only_once_it_is_back_and_says_what_may_be_missing() {
    // A leads through a second API server; B stands by through the first,
    // which goes away: B's watch and its Lease requests fail. A logs what
    // changes, then is stopped and releases the lease. Pods are created and
    // deleted while B cannot see them. The first API server comes back: B's
    // Lease requests get through at once, its watch only once it relisted
    // (the history it would resume from is compacted). B must not lead
    // before: it would lead from a cache that lacks what changed, and say
    // nothing of the deletes no list shows.
    let plane = Plane::start("leader-watch-down").await;
    let c = &plane.cluster;
    let port = free_port();
    plane.start_apiserver("second-apiserver", Some(port), &["--etcd-compaction-interval=1s"]).await;
    let second_kc = plane.admin_kubeconfig(&format!("https://127.0.0.1:{port}"));
    let second = client_for(&second_kc).await;
    let ns = namespace(&second, "watch-down").await;
    released_lease(&second, &ns).await;
    let mut a = candidate_timed(&second_kc, &ns, OUTLASTING, &[]);
    let a_id = leads(&a).await;
    a.synced().await;
    let b = candidate_timed(&c.kubeconfig, &ns, OUTLASTING, &[]);
    b.wait_message(&format!("standing by: {a_id} leads"), T).await;
    b.synced().await;
    let before = create(&second, &ns, "before", &[]).await;
    a.wait_message(&format!("onAdd: {ns}/before"), T).await;
    mark_reaches(&second, &ns, resource_version(&before)).await;

    plane.kill_apiserver();
    // A logs these; B's watch is down.
    create(&second, &ns, "during", &[]).await;
    delete(&second, &ns, "during").await;
    a.wait_message(&format!("onDelete: {ns}/during"), T).await;
    a.signal("TERM");
    assert_eq!(a.wait_exit(T).await.code(), Some(0), "{}", a.dump());
    let mark = a.wait_message("released the lease", T).await["logged_up_to"].as_u64().expect("a mark");
    // Nobody watches these but through a list; `kept` outlives it.
    create(&second, &ns, "meanwhile", &[]).await;
    delete(&second, &ns, "meanwhile").await;
    create(&second, &ns, "kept", &[]).await;
    let unseen = current_resource_version(&second, &ns).await;
    label(&second, &ns, "before", "bump", "1").await;
    wait_compacted(&second, &ns, &unseen).await;
    plane.start_apiserver("kube-apiserver", None, &[]).await;

    let took_over = b.wait_message("became leader", 2 * T).await;
    assert_eq!((took_over["resumes_after"].as_u64(), &took_over["released"]), (Some(mark), &Value::Bool(true)));
    let lines = b.lines();
    let at = |pred: &dyn Fn(&Value) -> bool| lines.iter().position(pred);
    let relisted = at(&|v| v["message"] == RELIST);
    let led = at(&|v| v["message"] == "became leader");
    assert!(relisted.is_some() && relisted < led, "led before its watch was back:\n{}", b.dump());
    // Why it waits, said once (if its first read of the lease after the
    // outage found the watch still down, as it nearly always does).
    let waiting = "not taking the lease while this replica's watch of pods is down: waiting until it delivers again (";
    let said = lines.iter().filter(|v| v["message"].as_str().is_some_and(|m| m.starts_with(waiting))).count();
    assert!(said <= 1, "said more than once:\n{}", b.dump());

    // `meanwhile` has no line; the WARN line names a range that holds it.
    let warning = b.wait_for("the missing deletes", T, is_missing_deletes).await;
    assert_eq!(
        (&warning["level"], warning["message"].as_str()),
        (&Value::from("WARN"), Some(&*missing_deletes(&warning)))
    );
    assert_eq!(warning["after"].as_u64(), Some(mark), "{warning}");
    let unseen = unseen.parse::<u64>().expect("a number");
    assert!(warning["through"].as_u64().is_none_or(|t| t >= unseen), "{warning}");
    let mut events = b.wait_events(&ns, 2).await;
    events.sort();
    assert_eq!(events, [format!("onAdd: {ns}/kept"), format!("onUpdate: {ns}/before")], "{}", b.dump());
    // Every line once, or said to be a repeat.
    let lines = tally(&ns, &[&a, &b]);
    for (message, seen) in &lines {
        assert!(seen[1..].iter().all(|v| v["replayed"] == true), "{message} repeated: {seen:?}");
    }
    for name in ["before", "during"] {
        assert!(lines.contains_key(&format!("onAdd: {ns}/{name}")), "{name}:\n{}\n{}", a.dump(), b.dump());
    }
    assert!(lines.contains_key(&format!("onDelete: {ns}/during")), "{}\n{}", a.dump(), b.dump());
}

/// The lease's resourceVersion now.
async fn lease_version(leases: &Api<Lease>) -> String {
    let lease = leases.get("demo-controller").await.expect("get lease");
    lease.metadata.resource_version.expect("a resourceVersion")
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn a_rollout_that_widens_the_selector_adds_the_pods_newly_in_scope() {
    // A rollout that changes -l: the old leader's mark says what it logged
    // of the pods it watched, nothing of the others. A new replica that
    // followed it would never add b1, and its next change would be an
    // onUpdate of a pod never added.
    let c = cluster().await;
    let ns = namespace(&c.client, "widened").await;
    released_lease(&c.client, &ns).await;
    let leases = Api::<Lease>::namespaced(c.client.clone(), &ns);
    create(&c.client, &ns, "a1", &[("app", "a")]).await;
    create(&c.client, &ns, "b1", &[("app", "b")]).await;
    let mut r1 = candidate_with(&c.kubeconfig, &ns, &["-l", "app=a"]);
    let r1_id = leads(&r1).await;
    r1.synced().await;
    let a2 = create(&c.client, &ns, "a2", &[("app", "a")]).await;
    let mut logged = r1.wait_events(&ns, 2).await;
    logged.sort();
    assert_eq!(logged, [format!("onAdd: {ns}/a1"), format!("onAdd: {ns}/a2")]);
    // Its mark passes b1's creation (and a2's).
    mark_reaches(&c.client, &ns, resource_version(&a2)).await;
    // The new replica watches every pod of the namespace (no -l). It
    // stands by through several of r1's renews, reading each.
    let r2 = candidate(&c.kubeconfig, &ns);
    r2.wait_message(&format!("standing by: {r1_id} leads"), T).await;
    r2.synced().await;
    let mut versions = vec![lease_version(&leases).await];
    while versions.len() < 4 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let version = lease_version(&leases).await;
        if versions.last() != Some(&version) {
            versions.push(version);
        }
    }
    r1.signal("TERM");
    r1.wait_message("released the lease", T).await;
    assert_eq!(r1.wait_exit(T).await.code(), Some(0), "{}", r1.dump());
    leads(&r2).await;
    label(&c.client, &ns, "b1", "tier", "web").await;
    r2.wait_message(&format!("onUpdate: {ns}/b1"), T).await;
    let b1: Vec<String> = r2.events(&ns).into_iter().filter(|e| e.ends_with("/b1")).collect();
    assert_eq!(b1, [format!("onAdd: {ns}/b1"), format!("onUpdate: {ns}/b1")], "{}", r2.dump());
    // a1 and a2 are in both scopes: r1 logged them, and r2's lines say so.
    let again: Vec<Value> =
        r2.event_lines(&ns).into_iter().filter(|v| v["name"] == "a1" || v["name"] == "a2").collect();
    assert_eq!(again.len(), 2, "{}", r2.dump());
    assert!(again.iter().all(|v| v["replayed"] == true), "{}", r2.dump());
    // One WARN line, naming both scopes, not one per read of the lease.
    let warned: Vec<String> =
        r2.warnings().into_iter().filter(|w| w.contains("was written for another scope")).collect();
    assert_eq!(warned.len(), 1, "{}", r2.dump());
    let both = (format!("(-n {ns}, -l 'app=a')"), format!("(-n {ns}, no -l)"));
    assert!(warned[0].contains(&both.0) && warned[0].contains(&both.1), "{}", warned[0]);
    silent_until_it_leads(&r2);
}

/// A candidate starts on `lease`, released by no holder it can trust: it
/// says so in one WARN line, leaves the lease alone, and takes it only once
/// it would have expired, as after a crash (released=false).
async fn a_stamp_not_from_its_holder(c: &Cluster, ns: &str, lease: Lease) {
    let leases = Api::<Lease>::namespaced(c.client.clone(), ns);
    let lease = leases.create(&PostParams::default(), &lease).await.expect("create lease");
    let a = candidate(&c.kubeconfig, ns);
    let doubted = a
        .wait_for("the stamp refused", T, |v| {
            v["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("the lease's release stamp was not written by its last"))
        })
        .await;
    assert_eq!(doubted["level"], "WARN", "{doubted}");
    // Untouched when it said so: not taken at once.
    let now = leases.get("demo-controller").await.expect("get lease");
    assert_eq!(now.metadata.resource_version, lease.metadata.resource_version, "{}", a.dump());
    let became = a.wait_message("became leader", T).await;
    assert_eq!(became["released"], false, "{became}");
    let taken = leases.get("demo-controller").await.expect("get lease");
    let spec = taken.spec.expect("spec");
    assert_eq!(spec.holder_identity.as_ref(), became["identity"].as_str().map(str::to_string).as_ref());
    assert!(!taken.metadata.annotations.unwrap_or_default().contains_key(RELEASED));
    let warned: Vec<String> = a.warnings().into_iter().filter(|w| w.contains("release stamp")).collect();
    assert_eq!(warned.len(), 1, "{}", a.dump());
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn a_release_stamp_restored_from_a_backup_is_waited_out() {
    // A Lease released by its holder, backed up, deleted and restored: the
    // restored copy is a new object, and its stamp names the old one.
    let c = cluster().await;
    let ns = namespace(&c.client, "restored").await;
    released_lease(&c.client, &ns).await;
    let leases = Api::<Lease>::namespaced(c.client.clone(), &ns);
    let backup = leases.get("demo-controller").await.expect("get lease");
    leases.delete("demo-controller", &DeleteParams::default()).await.expect("delete lease");
    let restored = Lease {
        metadata: ObjectMeta {
            name: Some("demo-controller".into()),
            annotations: backup.metadata.annotations.clone(),
            ..Default::default()
        },
        spec: backup.spec.clone(),
    };
    a_stamp_not_from_its_holder(&c, &ns, restored).await;
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn a_release_stamp_written_by_hand_is_waited_out() {
    // The stamp as a hand edit writes it: no holder named, no Lease named.
    let c = cluster().await;
    let ns = namespace(&c.client, "hand-stamp").await;
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some("demo-controller".into()),
            annotations: Some([(RELEASED.to_string(), "true".to_string())].into()),
            ..Default::default()
        },
        spec: Some(LeaseSpec { lease_duration_seconds: Some(1), ..Default::default() }),
    };
    a_stamp_not_from_its_holder(&c, &ns, lease).await;
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn a_mark_an_older_version_wrote_without_a_scope_is_followed_and_said_once() {
    // An older demo-controller released the Lease with a mark and no scope
    // record: an upgrade's new replica still resumes after it, and says
    // once that it cannot tell what the mark was written for.
    let c = cluster().await;
    let ns = namespace(&c.client, "old-mark").await;
    let before = create(&c.client, &ns, "before", &[]).await;
    let leases = Api::<Lease>::namespaced(c.client.clone(), &ns);
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some("demo-controller".into()),
            annotations: Some(
                [("demo-controller.example.com/logged-up-to".to_string(), resource_version(&before).to_string())]
                    .into(),
            ),
            ..Default::default()
        },
        spec: Some(LeaseSpec { lease_duration_seconds: Some(1), ..Default::default() }),
    };
    let lease = leases.create(&PostParams::default(), &lease).await.expect("create lease");
    release_as(&leases, lease, "an-older-holder").await;
    let a = candidate(&c.kubeconfig, &ns);
    leads(&a).await;
    create(&c.client, &ns, "after", &[]).await;
    assert_eq!(a.wait_events(&ns, 1).await, [format!("onAdd: {ns}/after")], "{}", a.dump());
    let said: Vec<String> = a.warnings().into_iter().filter(|w| w.contains("mark says no scope")).collect();
    assert_eq!(said.len(), 1, "{}", a.dump());
    assert!(said[0].contains(&format!("(-n {ns}, no -l)")), "{}", said[0]);
}

/// Waits until the logger's workers (metrics on `port`) finished `n` syncs.
async fn until_syncs(logger: &Logger, port: u16, n: u64) {
    let series = "workqueue_work_duration_seconds_count{name=\"pods\"} ";
    let start = Instant::now();
    loop {
        let page = http_get(port, "/metrics").1;
        let syncs = page.lines().find_map(|l| l.strip_prefix(series)?.parse::<u64>().ok());
        if syncs.is_some_and(|syncs| syncs >= n) {
            return;
        }
        assert!(start.elapsed() < T, "never {n} syncs ({syncs:?})\n{}", logger.dump());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn a_late_joiner_that_leads_does_not_make_the_standby_drop_in_silence_a_delete_only_it_saw() {
    // A leads and stops (paused: it holds the lease and logs nothing more);
    // `gone` is deleted; B, the standby that followed A, keeps its onDelete,
    // and is paused too. A's lease expires (cut short by hand here, its
    // holder kept, as an expiry after a crash finds it). C starts fresh: its
    // first list holds only `stays`, older than A's mark, and no trace of
    // `gone`, so C cannot log that delete. C leads, and its marks pass the
    // delete's resourceVersion, which C saw only as a list. B, continued,
    // must not drop its line as covered by those marks in silence: it names
    // the delete in a WARN line.
    // (A is never continued: its renew deadline is far off, and the lease
    // cut short by hand broke the rule that it passes before the lease
    // expires. It is killed at the end.)
    let c = cluster().await;
    let ns = namespace(&c.client, "late-joiner").await;
    released_lease(&c.client, &ns).await;
    // Protobuf, whatever DEMO_CONTROLLER_WIRE says: on JSON kube's watcher
    // does not say the list's resourceVersion, so no range goes on the Lease
    // (and in an empty namespace A has no mark for B to start its workers).
    let a = candidate_timed(&c.kubeconfig, &ns, OUTLASTING, &["--wire", "protobuf"]);
    let a_id = leads(&a).await;
    a.synced().await;
    let metrics = free_port();
    let metrics_addr = format!("127.0.0.1:{metrics}");
    let b = candidate_timed(&c.kubeconfig, &ns, OUTLASTING, &["--wire", "protobuf", "--metrics-addr", &metrics_addr]);
    b.wait_message(&format!("standing by: {a_id} leads"), T).await;
    b.wait_message("workers started", T).await;
    create(&c.client, &ns, "stays", &[]).await;
    let gone = create(&c.client, &ns, "gone", &[]).await;
    a.wait_events(&ns, 2).await;
    let mark = mark_reaches(&c.client, &ns, resource_version(&gone)).await;
    // B's workers took in all three pods (A's marker too), one sync each.
    until_syncs(&b, metrics, 3).await;

    a.signal("STOP");
    delete(&c.client, &ns, "gone").await;
    let deleted = current_resource_version(&c.client, &ns).await.parse::<u64>().expect("a number");
    // B's worker took the delete in: its line waits at B's gate.
    until_syncs(&b, metrics, 4).await;
    b.signal("STOP");
    let leases = Api::<Lease>::namespaced(c.client.clone(), &ns);
    let mut lease = leases.get("demo-controller").await.expect("get lease");
    lease.spec.as_mut().expect("spec").lease_duration_seconds = Some(1);
    leases.replace("demo-controller", &PostParams::default(), &lease).await.expect("expire the lease");

    let late = candidate_with(&c.kubeconfig, &ns, &["--wire", "protobuf"]);
    let took_over = late.wait_message("became leader", T).await;
    let late_id = took_over["identity"].as_str().expect("identity").to_string();
    assert_eq!((took_over["resumes_after"].as_u64(), &took_over["released"]), (Some(mark), &Value::Bool(false)));
    // C says that deletes in the range it saw only as a list may be missing.
    let warning = late.wait_for("the missing deletes", T, is_missing_deletes).await;
    assert_eq!(
        (warning["after"].as_u64(), warning["message"].as_str()),
        (Some(mark), Some(&*missing_deletes(&warning)))
    );
    assert!(warning["through"].as_u64().is_some_and(|t| t >= deleted), "{warning}");
    mark_reaches(&c.client, &ns, deleted).await;

    b.signal("CONT");
    b.wait_message(&format!("standing by: {late_id} leads"), T).await;
    // B names the delete in a WARN line (a standby writes no event line),
    // rather than drop it in silence as covered by C's mark.
    let unlogged = format!(
        "the delete of {ns}/gone may be missing: the leader saw resourceVersions {mark} to {} only as a list, and a standby logs no line",
        warning["through"]
    );
    let said = b.wait_message(&unlogged, T).await;
    assert_eq!((&said["level"], &said["uid"]), (&Value::from("WARN"), &Value::from(gone.metadata.uid.clone())));
    let said_once = b.lines().iter().filter(|v| v["message"] == unlogged).count();
    assert_eq!(said_once, 1, "{}", b.dump());
    // No replica logs it as an onDelete: C never saw the pod, B stands by.
    late.wait_events(&ns, 0).await;
    let lines = tally(&ns, &[&a, &b, &late]);
    assert!(!lines.contains_key(&format!("onDelete: {ns}/gone")), "{lines:?}");
    silent_until_it_leads(&b);
}
