//! The watch against a real API server: a path that stops answering, the
//! reconnect backoff coming back down, a pod relabelled out of `--selector`,
//! the initial-list mark of pods gone before their first sync, and a server
//! that refuses streaming lists. Each scenario prints its figures (run with
//! --nocapture to see them).

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::*;
use futures::TryStreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{WatchEvent, WatchParams};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const T: Duration = Duration::from_secs(60);

/// A TCP relay on 127.0.0.1 in front of the real API server, that the test
/// can black-hole: it then stops forwarding bytes but keeps every connection
/// open, and accepts new ones without ever answering. A connection that was
/// black-holed stays dead after the path heals (as one through a load
/// balancer that lost its state); new connections work again.
///
/// It can also be a slow link: with a rate, what the server sends passes at
/// that many bytes a second (each connection on its own), as through a VPN.
struct Relay {
    port: u16,
    holed: Arc<AtomicBool>,
}

impl Relay {
    async fn start(target: SocketAddr) -> Relay {
        Relay::start_at(target, None).await
    }

    async fn start_at(target: SocketAddr, bytes_per_second: Option<u64>) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let holed = Arc::new(AtomicBool::new(false));
        let flag = holed.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(relay(client, target, flag.clone(), bytes_per_second));
            }
        });
        Relay { port, holed }
    }

    fn black_hole(&self, on: bool) {
        self.holed.store(on, Ordering::SeqCst);
    }
}

async fn relay(client: TcpStream, target: SocketAddr, holed: Arc<AtomicBool>, rate: Option<u64>) {
    let (mut client_r, client_w) = client.into_split();
    if holed.load(Ordering::SeqCst) {
        // Accepted, never answered: read and drop until the client gives up.
        let _keep = client_w;
        let mut buf = [0u8; 16384];
        while matches!(client_r.read(&mut buf).await, Ok(n) if n > 0) {}
        return;
    }
    // A slow link holds little in flight: a small receive buffer keeps the
    // kernel from soaking up megabytes the server could then count as sent.
    let Ok(socket) = tokio::net::TcpSocket::new_v4() else { return };
    if rate.is_some() {
        let _ = socket.set_recv_buffer_size(64 * 1024);
    }
    let Ok(upstream) = socket.connect(target).await else { return };
    let (up_r, up_w) = upstream.into_split();
    let dead = Arc::new(AtomicBool::new(false));
    let pump =
        |mut from: tokio::net::tcp::OwnedReadHalf, mut to: tokio::net::tcp::OwnedWriteHalf, rate: Option<u64>| {
            let (holed, dead) = (holed.clone(), dead.clone());
            async move {
                let mut buf = [0u8; 16384];
                // At a rate: small reads, each followed by its share of a second.
                let chunk = if rate.is_some() { 2048 } else { buf.len() };
                let start = Instant::now();
                let mut sent = 0u64;
                loop {
                    let n = match from.read(&mut buf[..chunk]).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    if holed.load(Ordering::SeqCst) {
                        dead.store(true, Ordering::SeqCst);
                    }
                    if dead.load(Ordering::SeqCst) {
                        continue; // dropped on the floor, connection kept open
                    }
                    if to.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                    if let Some(rate) = rate {
                        sent += n as u64;
                        let due = Duration::from_secs_f64(sent as f64 / rate as f64);
                        tokio::time::sleep(due.saturating_sub(start.elapsed())).await;
                    }
                }
                if dead.load(Ordering::SeqCst) {
                    // Not even a close is passed on: hold this side open (until
                    // the test's runtime ends).
                    std::future::pending::<()>().await;
                }
                let _ = to.shutdown().await;
            }
        };
    let up = tokio::spawn(pump(client_r, up_w, None));
    pump(up_r, client_w, rate).await;
    let _ = up.await;
}

/// A kubeconfig for the admin user of the shared control plane, at `url`.
fn admin_kubeconfig_at(dir: &std::path::Path, name: &str, url: &str) -> std::path::PathBuf {
    let pki = dir.join("pki");
    let user = format!(
        "    client-certificate-data: {}\n    client-key-data: {}",
        b64(&pki.join("admin.crt")),
        b64(&pki.join("admin.key"))
    );
    kubeconfig(name, url, Some(b64(&pki.join("ca.crt"))), &user)
}

fn messages(logger: &Logger, prefix: &str) -> Vec<Value> {
    logger.lines().into_iter().filter(|v| v["message"].as_str().is_some_and(|m| m.starts_with(prefix))).collect()
}

async fn wait_until(what: &str, logger: &Logger, limit: Duration, cond: impl Fn() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "{what} not within {limit:?}\n{}", logger.dump());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn a_black_holed_path_is_abandoned_and_the_watch_recovers_after_it_heals() {
    let c = cluster().await;
    let ns = namespace(&c.client, "blackhole").await;
    let url = server_url(&c.dir);
    let target: SocketAddr = url.trim_start_matches("https://").parse().expect("server address");
    let relay = Relay::start(target).await;
    let kc = admin_kubeconfig_at(&c.dir, "through-relay", &format!("https://127.0.0.1:{}", relay.port));
    let probe = free_port();
    let logger = Logger::start(&kc, &["-n", &ns, "--probe-addr", &format!("127.0.0.1:{probe}")]);
    logger.synced().await;
    create(&c.client, &ns, "before", &[]).await;
    logger.wait_message(&format!("onAdd: {ns}/before"), T).await;

    // Black-hole the path: the open watch goes silent.
    relay.black_hole(true);
    let holed_at = Instant::now();
    let failed = |l: &Logger| messages(l, "watch failed: ");
    // The silent watch is abandoned after the read timeout (54 s after its last
    // byte, at most ~104 s after the black-hole), then a new request that gets
    // no answer is abandoned too.
    wait_until("an abandoned watch", &logger, Duration::from_secs(180), || !failed(&logger).is_empty()).await;
    let detected = holed_at.elapsed();
    wait_until("a second abandoned request", &logger, T, || failed(&logger).len() >= 2).await;
    let f = failed(&logger);
    for line in &f {
        let m = line["message"].as_str().unwrap();
        assert!(m.contains("the API server did not answer in time"), "{m}");
        assert_eq!(line["level"], "WARN");
    }
    // Alive (a restart would not bring the server back); readiness says why.
    assert_eq!(http_get(probe, "/healthz").0, 200);
    let (status, body) = http_get(probe, "/readyz");
    assert_eq!(status, 200);
    assert!(body.starts_with("ok: cache synced; the watch failed and no event came since: "), "{body}");

    // Heal, and create a pod: it is logged within 60 s.
    relay.black_hole(false);
    let healed = Instant::now();
    create(&c.client, &ns, "after", &[]).await;
    logger.wait_message(&format!("onAdd: {ns}/after"), T).await;
    let recovered = healed.elapsed();
    println!(
        "figures: silent_watch_abandoned_after={:.1}s abandoned_requests={} logged_after_healing={:.1}s reasons={:?}",
        detected.as_secs_f64(),
        f.len(),
        recovered.as_secs_f64(),
        f.iter().map(|v| v["message"].as_str().unwrap().to_string()).collect::<Vec<_>>()
    );
    assert!(recovered < T, "logged {recovered:?} after healing");
    assert_eq!(logger.events(&ns), [format!("onAdd: {ns}/before"), format!("onAdd: {ns}/after")]);
}

/// The `retry_in` of a "watch failed" line, in seconds.
fn retry_in(line: &Value) -> f64 {
    let text = line["retry_in"].as_str().unwrap();
    match text.strip_suffix("ms") {
        Some(ms) => ms.parse::<f64>().unwrap() / 1000.0,
        None => text.strip_suffix('s').unwrap().parse().unwrap(),
    }
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn the_watch_backoff_comes_back_down_after_quiet_minutes() {
    let plane = Plane::start("backoff").await;
    let c = &plane.cluster;
    let ns = namespace(&c.client, "backoff").await;
    let logger = Logger::start(&c.kubeconfig, &["-n", &ns]);
    logger.synced().await;

    // A 20 s outage: the retries back off.
    plane.kill_apiserver();
    let outage = Instant::now();
    wait_until("a failed retry", &logger, T, || !messages(&logger, "watch failed: ").is_empty()).await;
    tokio::time::sleep(Duration::from_secs(20).saturating_sub(outage.elapsed())).await; // the outage itself
    plane.start_apiserver("kube-apiserver", None, &[]).await;
    create(&c.client, &ns, "back", &[]).await;
    logger.wait_message(&format!("onAdd: {ns}/back"), T).await;
    let before: Vec<f64> = messages(&logger, "watch failed: ").iter().map(retry_in).collect();
    assert!(before.len() >= 3, "{before:?}");
    assert!(*before.last().unwrap() >= 3.2, "the delays grew during the outage: {before:?}");

    // Three quiet minutes (the scenario's point: no failure, no event).
    tokio::time::sleep(Duration::from_secs(180)).await;

    // A blip: the API server restarts once.
    plane.kill_apiserver();
    let n = before.len();
    wait_until("the blip's failure", &logger, T, || messages(&logger, "watch failed: ").len() > n).await;
    plane.start_apiserver("kube-apiserver", None, &[]).await;
    let after = retry_in(&messages(&logger, "watch failed: ")[n]);
    create(&c.client, &ns, "after-blip", &[]).await;
    logger.wait_message(&format!("onAdd: {ns}/after-blip"), T).await;
    println!("figures: delays_during_20s_outage_s={before:?} first_delay_after_3_quiet_minutes_s={after}");
    assert!(after <= 2.0, "after quiet minutes the next blip retries within 2 s, not {after} s");
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn a_pod_relabelled_out_of_the_selector_is_not_reported_as_deleted() {
    let c = cluster().await;
    let ns = namespace(&c.client, "selector").await;
    create(&c.client, &ns, "p", &[("app", "web")]).await;
    let logger = Logger::start(&c.kubeconfig, &["-n", &ns, "-l", "app=web"]);
    logger.synced().await;
    logger.wait_message(&format!("onAdd: {ns}/p"), T).await;

    // What the server sends when a pod leaves the selector: DELETED, with the
    // pod as it was *before* the change (its old, matching labels, no
    // deletionTimestamp) at the change's resourceVersion. Nothing in the event
    // tells it from a deletion: the logger asks whether the pod still exists.
    let pods = Api::<Pod>::namespaced(c.client.clone(), &ns);
    let rv = pods.get("p").await.unwrap().metadata.resource_version.unwrap();
    let mut events = Box::pin(pods.watch(&WatchParams::default().labels("app=web").timeout(30), &rv).await.unwrap());
    label(&c.client, &ns, "p", "app", "db").await;
    let deleted = loop {
        match events.try_next().await.unwrap().expect("watch event") {
            WatchEvent::Deleted(pod) => break pod,
            _ => continue,
        }
    };
    let carried = deleted.metadata.labels.clone().unwrap_or_default();
    let now = pods.get("p").await.unwrap().metadata.resource_version;
    println!(
        "figures: deleted_event_labels={carried:?} deletion_timestamp={:?} event_rv={:?} rv_after_relabel={now:?}",
        deleted.metadata.deletion_timestamp, deleted.metadata.resource_version
    );
    assert_eq!(carried.get("app").map(String::as_str), Some("web"));
    assert!(deleted.metadata.deletion_timestamp.is_none());
    assert_eq!(deleted.metadata.resource_version, now);

    let gone = logger.wait_message(&format!("onDelete: {ns}/p"), T).await;
    assert_eq!(gone["reason"], "no longer matches the selector", "{gone}");
    label(&c.client, &ns, "p", "app", "web").await;
    let back = logger
        .wait_for("onAdd with a reason", T, |v| v["message"] == format!("onAdd: {ns}/p") && v["reason"].is_string())
        .await;
    assert_eq!(back["reason"], "now matches the selector", "{back}");
    delete(&c.client, &ns, "p").await;
    let events = logger.wait_events(&ns, 4).await;
    let deletes = logger.event_lines(&ns).into_iter().filter(|v| v["message"] == format!("onDelete: {ns}/p"));
    let reasons: Vec<Value> = deletes.map(|v| v["reason"].clone()).collect();
    assert_eq!(reasons, [Value::from("no longer matches the selector"), Value::Null], "{events:?}");
    assert_eq!(
        events,
        [format!("onAdd: {ns}/p"), format!("onDelete: {ns}/p"), format!("onAdd: {ns}/p"), format!("onDelete: {ns}/p")]
    );
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn initial_pods_gone_before_their_first_sync_keep_the_initial_mark() {
    let c = cluster().await;
    let ns = namespace(&c.client, "initial").await;
    create(&c.client, &ns, "deleted", &[]).await;
    create(&c.client, &ns, "replaced", &[]).await;
    // One slow worker: every sync waits 3 s before it reads the cache, so the
    // changes below land before either pod's first sync.
    let env = [("DEMO_CONTROLLER_FAULTS", "slow=3s")];
    let all = Logger::start_with(&c.kubeconfig, &["-n", &ns, "--workers", "1"], &env);
    let skip = Logger::start_with(&c.kubeconfig, &["-n", &ns, "--workers", "1", "--skip-existing"], &env);
    all.synced().await;
    skip.synced().await;
    delete(&c.client, &ns, "deleted").await;
    delete(&c.client, &ns, "replaced").await;
    create(&c.client, &ns, "replaced", &[]).await;

    let lines = |l: &Logger| -> Vec<(String, bool)> {
        let mut v: Vec<(String, bool)> = l
            .event_lines(&ns)
            .iter()
            .map(|v| (v["message"].as_str().unwrap().to_string(), v["initial_list"] == true))
            .collect();
        v.sort();
        v
    };
    all.wait_events(&ns, 5).await;
    skip.wait_events(&ns, 3).await;
    let (add, del) = (|n: &str| format!("onAdd: {ns}/{n}"), |n: &str| format!("onDelete: {ns}/{n}"));
    let mut want_all = vec![
        (add("deleted"), true),
        (del("deleted"), false),
        (add("replaced"), true),
        (del("replaced"), false),
        (add("replaced"), false),
    ];
    want_all.sort();
    assert_eq!(lines(&all), want_all, "{}", all.dump());
    let mut want_skip = vec![(del("deleted"), false), (del("replaced"), false), (add("replaced"), false)];
    want_skip.sort();
    assert_eq!(lines(&skip), want_skip, "{}", skip.dump());
    println!("figures: lines_without_skip={} lines_with_skip_existing={}", lines(&all).len(), lines(&skip).len());
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn a_server_without_streaming_lists_gets_a_paged_list_once() {
    let plane = Plane::start("no-watchlist").await;
    let port = free_port();
    plane.start_apiserver("old-apiserver", Some(port), &["--feature-gates=WatchList=false"]).await;
    let url = format!("https://127.0.0.1:{port}");
    let admin = plane.admin_client(&url).await;
    let ns = namespace(&admin, "fallback").await;
    create(&admin, &ns, "existing", &[]).await;
    let logger = Logger::start(&plane.admin_kubeconfig(&url), &["-n", &ns]);
    logger.synced().await;
    logger.wait_message(&format!("onAdd: {ns}/existing"), T).await;
    create(&admin, &ns, "new", &[]).await;
    logger.wait_message(&format!("onAdd: {ns}/new"), T).await;
    let fallback = messages(&logger, "the API server does not serve streaming lists");
    assert_eq!(fallback.len(), 1, "{}", logger.dump());
    assert_eq!(fallback[0]["level"], "INFO");
    let m = fallback[0]["message"].as_str().unwrap();
    assert!(m.ends_with("): using a paged LIST instead"), "{m}");
    assert!(messages(&logger, "watch failed").is_empty(), "a refusal is not a watch error\n{}", logger.dump());
    println!("figures: fallback_line={m:?}");

    // The default server (WatchList on) serves streaming lists: no fallback.
    let on = Logger::start(&plane.cluster.kubeconfig, &["-n", &ns]);
    on.synced().await;
    on.wait_message(&format!("onAdd: {ns}/new"), T).await;
    assert!(messages(&on, "the API server does not serve streaming lists").is_empty(), "{}", on.dump());
}

/// A first list that takes longer than the server keeps a watch open, over a
/// slow link: the logger still gets to `cache synced`, says how far it got
/// every 10 s meanwhile, and a streaming list the server cut short is logged
/// and done again as a paged LIST (never started over, silently, forever).
///
/// The server's watch timeout is shortened to 4 s through the test seam
/// (`watch-timeout`, src/faults.rs), so the list only needs to outlast 4 s,
/// not the 50 s a real run asks for.
///
/// For a measurement at scale, DEMO_CONTROLLER_TEST_SLOW_LIST=PODS,BYTES_PER_S,
/// PADDING,WATCH_TIMEOUT (e.g. 10000,1000000,4200,50: pods of about 5.5 KB,
/// a 1 MB/s link and the real 50 s timeout) overrides the defaults below.
async fn a_list_longer_than_the_watch_timeout(paged: bool) {
    let measuring = std::env::var("DEMO_CONTROLLER_TEST_SLOW_LIST").ok();
    let knobs: Vec<usize> = measuring
        .as_ref()
        .map(|v| v.split(',').map(|n| n.trim().parse().expect("a number")).collect())
        .unwrap_or_else(|| vec![1000, 1_000_000, 10_000, 4]);
    let limit = Duration::from_secs(if measuring.is_some() { 1200 } else { 120 });
    let (pods, rate, padding, watch_timeout) = (knobs[0], knobs[1] as u64, knobs[2], knobs[3]);
    let c = cluster().await;
    let ns = namespace(&c.client, if paged { "slowlist-paged" } else { "slowlist-streaming" }).await;
    create_many(&c.client, &ns, "p", pods, &[], padding).await;
    let url = server_url(&c.dir);
    let target: SocketAddr = url.trim_start_matches("https://").parse().expect("server address");
    // About 11 KB a pod: 1,000 pods at 1 MB/s take about 11 s, more than
    // the kernel's buffers on the way can hold, so the server is still
    // sending when its 4 s watch timeout comes.
    let relay = Relay::start_at(target, Some(rate)).await;
    let kc = admin_kubeconfig_at(&c.dir, &format!("slow-link-{paged}"), &format!("https://127.0.0.1:{}", relay.port));
    let mut args = vec!["-n", ns.as_str()];
    if paged {
        args.push("--paged-list");
    }
    let started = Instant::now();
    let seam = format!("watch-timeout={watch_timeout}s");
    let logger = Logger::start_with(&kc, &args, &[("DEMO_CONTROLLER_FAULTS", &seam)]);
    let synced = logger.wait_message("cache synced", limit).await;
    let took = started.elapsed();
    assert_eq!(synced["pods"], pods, "{}", logger.dump());
    let progress = messages(&logger, "still listing pods: ");
    let cut = messages(&logger, "the streaming list ended after ");
    println!(
        "figures: paged={paged} pods={pods} link={rate}B/s synced_after={:.1}s progress_lines={} cut_streams={} first_progress={:?}",
        took.as_secs_f64(),
        progress.len(),
        cut.len(),
        progress.first().map(|v| v["message"].clone())
    );
    assert!(!progress.is_empty(), "no progress line during a long list\n{}", logger.dump());
    for line in &progress {
        assert_eq!(line["level"], "INFO");
        assert!(line["pods"].is_u64() && line["elapsed_s"].as_u64() >= Some(5), "{line}");
    }
    if paged {
        assert!(cut.is_empty(), "a paged LIST is not bounded by the watch timeout\n{}", logger.dump());
    } else {
        // Cut once, logged once with the reason, then paged: never a second cut.
        assert_eq!(cut.len(), 1, "{}", logger.dump());
        assert_eq!(cut[0]["level"], "WARN");
        let m = cut[0]["message"].as_str().unwrap();
        let reason = format!(
            "before the server marked its end (the server closes a watch after {watch_timeout} s): listing with paged LIST requests instead, in "
        );
        assert!(m.contains(&reason), "{m}");
    }
    // And it watches from there: a new pod is logged.
    create(&c.client, &ns, "after", &[]).await;
    logger.wait_message(&format!("onAdd: {ns}/after"), T).await;
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn a_list_longer_than_the_watch_timeout_still_syncs_streaming() {
    a_list_longer_than_the_watch_timeout(false).await;
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn a_list_longer_than_the_watch_timeout_still_syncs_paged() {
    a_list_longer_than_the_watch_timeout(true).await;
}

/// The API server's count of requests it sent etcd for pods, by operation.
async fn etcd_pod_requests(client: &kube::Client, operation: &str) -> f64 {
    let text = client.request_text(http::Request::get("/metrics").body(vec![]).unwrap()).await.expect("/metrics");
    let series = format!("etcd_requests_total{{group=\"\",operation=\"{operation}\",resource=\"pods\"}} ");
    text.lines().find_map(|l| l.strip_prefix(&series)).map_or(0.0, |v| v.parse().unwrap())
}

/// Pods relabelled out of `--selector` in bulk: each DELETED event makes the
/// logger ask whether the pod still exists, and the API server answers from
/// its watch cache, not with an etcd read per pod. (A LIST without a
/// resourceVersion, as before, costs one etcd read each.) On a control plane
/// of its own, so no other test's requests are counted.
#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn pods_leaving_the_selector_in_bulk_cost_no_etcd_read_each() {
    let n: usize = std::env::var("DEMO_CONTROLLER_TEST_RELABELS").ok().and_then(|v| v.parse().ok()).unwrap_or(100);
    let plane = Plane::start("relabel").await;
    let c = &plane.cluster;
    let ns = namespace(&c.client, "relabel").await;
    let pods = Api::<Pod>::namespaced(c.client.clone(), &ns);
    create_many(&c.client, &ns, "p", n, &[("app", "web")], 0).await;
    let logger = Logger::start(&c.kubeconfig, &["-n", &ns, "-l", "app=web"]);
    logger.synced().await;
    logger.wait_count(&ns, n).await;
    let gets_before = etcd_pod_requests(&c.client, "get").await;
    let lists_before = etcd_pod_requests(&c.client, "list").await;
    let patch = serde_json::json!({"metadata": {"labels": {"app": "db"}}});
    for batch in (0..n).collect::<Vec<_>>().chunks(25) {
        let patches = batch.iter().map(|i| {
            let (pods, patch) = (pods.clone(), patch.clone());
            async move {
                pods.patch(&format!("p{i}"), &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch)).await
            }
        });
        for done in futures::future::join_all(patches).await {
            done.expect("relabel pod");
        }
    }
    let left =
        |l: &Logger| l.event_lines(&ns).iter().filter(|v| v["reason"] == "no longer matches the selector").count();
    let start = Instant::now();
    while left(&logger) < n {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "{} of {n} relabels logged\n{}",
            left(&logger),
            logger.dump()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let gets = etcd_pod_requests(&c.client, "get").await - gets_before;
    let lists = etcd_pod_requests(&c.client, "list").await - lists_before;
    // The same n questions asked directly, both ways, for the API server's
    // cost of each: a consistent LIST by name (what a selector check asked
    // before) against one not older than a resourceVersion (what it asks now).
    let rv = pods.list_metadata(&kube::api::ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
    let mut cost = Vec::new();
    for at in [None, Some(rv.as_str())] {
        let (gets0, cpu0) = (etcd_pod_requests(&c.client, "get").await, plane.cpu_ms("kube-apiserver"));
        for batch in (0..n).collect::<Vec<_>>().chunks(25) {
            let asks = batch.iter().map(|i| {
                let mut by_name = kube::api::ListParams::default().fields(&format!("metadata.name=p{i}"));
                if let Some(rv) = at {
                    by_name = by_name.at(rv).matching(kube::api::VersionMatch::NotOlderThan);
                }
                let pods = pods.clone();
                async move { pods.list_metadata(&by_name).await }
            });
            for answer in futures::future::join_all(asks).await {
                answer.expect("list by name");
            }
        }
        let gets = etcd_pod_requests(&c.client, "get").await - gets0;
        cost.push((gets, plane.cpu_ms("kube-apiserver") - cpu0));
    }
    println!(
        "figures: relabelled_out={n} logger_etcd_pod_gets={gets} logger_etcd_pod_lists={lists} \
         direct_consistent_list_by_name: etcd_gets={} apiserver_cpu_ms={} \
         direct_not_older_than_event: etcd_gets={} apiserver_cpu_ms={}",
        cost[0].0, cost[0].1, cost[1].0, cost[1].1
    );
    assert!(gets + lists < n as f64 / 4.0, "{gets} etcd gets and {lists} lists for {n} selector checks");
    let plain = logger
        .event_lines(&ns)
        .iter()
        .filter(|v| v["message"].as_str().unwrap().starts_with("onDelete") && v["reason"].is_null())
        .count();
    assert_eq!(plain, 0, "every relabelled pod was reported as having left the selector");
}
