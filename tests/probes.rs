//! /readyz, /healthz and /metrics of the running binary. (Readiness held back
//! by a missing permission is in faults.rs, with the backoff it shows.)

mod common;

use std::time::{Duration, Instant};

use common::*;

const T: Duration = Duration::from_secs(30);

/// The value of one sample of a Prometheus text page.
fn sample(page: &str, series: &str) -> Option<f64> {
    page.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// GET /metrics as Prometheus does: (Content-Type, body).
fn scrape(port: u16) -> (String, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect to /metrics");
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let accept = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5";
    write!(stream, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: {accept}\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let content_type = head
        .lines()
        .find_map(|l| l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case("content-type")).map(|(_, v)| v.trim()))
        .expect("a Content-Type header");
    (content_type.to_string(), body.to_string())
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn metrics_are_served_as_the_openmetrics_they_are() {
    use openmetrics_parser::{OpenMetricsType, openmetrics::parse_openmetrics};
    let c = cluster().await;
    let ns = namespace(&c.client, "openmetrics").await;
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let logger = Logger::start(&c.kubeconfig, &["-n", &ns, "--metrics-addr", &addr]);
    logger.synced().await;
    create(&c.client, &ns, "a", &[]).await;
    logger.wait_events(&ns, 1).await;
    let (content_type, page) = scrape(port);
    // Prometheus chooses its parser by this header; the body must be what it says.
    assert_eq!(content_type, "application/openmetrics-text; version=1.0.0; charset=utf-8");
    let parsed = parse_openmetrics(&page).unwrap_or_else(|e| panic!("/metrics is not OpenMetrics: {e:?}\n{page}"));
    for (family, kind) in [
        ("workqueue_adds", OpenMetricsType::Counter),
        ("workqueue_depth", OpenMetricsType::Gauge),
        ("workqueue_work_duration_seconds", OpenMetricsType::Histogram),
        ("demo_controller_events", OpenMetricsType::Counter),
        ("demo_controller_cache_pods", OpenMetricsType::Gauge),
    ] {
        assert_eq!(parsed.families.get(family).map(|f| f.family_type), Some(kind), "{family}\n{page}");
    }
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn metrics_count_exactly_what_happened() {
    let c = cluster().await;
    let ns = namespace(&c.client, "metrics").await;
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let logger = Logger::start(&c.kubeconfig, &["-n", &ns, "--metrics-addr", &addr, "--resync", "0"]);
    logger.synced().await;
    for name in ["a", "b", "c"] {
        create(&c.client, &ns, name, &[]).await;
    }
    logger.wait_count(&ns, 3).await;
    label(&c.client, &ns, "a", "x", "1").await;
    logger.wait_count(&ns, 4).await;
    set_phase(&c.client, &ns, "b", "Running").await;
    logger.wait_count(&ns, 5).await;
    delete(&c.client, &ns, "c").await;
    logger.wait_count(&ns, 6).await;

    let (status, page) = http_get(port, "/metrics");
    assert_eq!(status, 200);
    // (No marker pods here, unlike wait_events: these exact counts are the
    // proof that no extra line was logged.)
    // Every logged line is counted, terminating updates included.
    let terminating = logger.lines().iter().filter(|v| v["changes"] == "terminating").count() as f64;
    assert_eq!(sample(&page, "demo_controller_events_total{kind=\"onAdd\"}"), Some(3.0), "{page}");
    assert_eq!(sample(&page, "demo_controller_events_total{kind=\"onUpdate\"}"), Some(2.0 + terminating));
    assert_eq!(sample(&page, "demo_controller_events_total{kind=\"onDelete\"}"), Some(1.0));
    assert_eq!(sample(&page, "demo_controller_cache_pods"), Some(2.0));
    assert_eq!(sample(&page, "demo_controller_relists_total"), Some(1.0));
    assert_eq!(sample(&page, "demo_controller_resyncs_total"), Some(0.0));
    assert_eq!(sample(&page, "demo_controller_watch_errors_total"), Some(0.0));
    assert_eq!(sample(&page, "workqueue_depth{name=\"pods\"}"), Some(0.0));
    // Each of the 6 (+terminating) changes was one add to the queue and one sync.
    let changes = 6.0 + terminating;
    assert_eq!(sample(&page, "workqueue_adds_total{name=\"pods\"}"), Some(changes));
    assert_eq!(sample(&page, "workqueue_work_duration_seconds_count{name=\"pods\"}"), Some(changes));
    assert_eq!(sample(&page, "workqueue_queue_duration_seconds_count{name=\"pods\"}"), Some(changes));
    assert_eq!(sample(&page, "workqueue_retries_total{name=\"pods\"}"), Some(0.0));
    assert_eq!(sample(&page, "workqueue_unfinished_work_seconds{name=\"pods\"}"), Some(0.0));
    assert_eq!(sample(&page, "workqueue_longest_running_processor_seconds{name=\"pods\"}"), Some(0.0));
    for family in [
        "# TYPE workqueue_queue_duration_seconds histogram",
        "# TYPE workqueue_work_duration_seconds histogram",
        "# TYPE workqueue_adds counter",
        "# TYPE workqueue_depth gauge",
    ] {
        assert!(page.contains(family), "missing {family}\n{page}");
    }
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn readyz_is_200_after_sync_and_healthz_fails_on_a_stuck_worker() {
    let c = cluster().await;
    let ns = namespace(&c.client, "stuck").await;
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let faults = format!("stall={ns}/stuck");
    let logger = Logger::start_with(
        &c.kubeconfig,
        &["-n", &ns, "--probe-addr", &addr, "--metrics-addr", &addr, "--stuck-after", "2s", "--workers", "2"],
        &[("DEMO_CONTROLLER_FAULTS", &faults)],
    );
    logger.synced().await;
    assert_eq!(http_get(port, "/readyz"), (200, "ok: cache synced\n".into()));
    assert_eq!(http_get(port, "/healthz"), (200, "ok\n".into()));
    create(&c.client, &ns, "stuck", &[]).await;
    let start = Instant::now();
    let body = loop {
        let (status, body) = http_get(port, "/healthz");
        if status == 503 {
            break body;
        }
        assert!(start.elapsed() < T, "/healthz never failed\n{}", logger.dump());
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let prefix = format!("a worker is stuck on {ns}/stuck for ");
    assert!(body.starts_with(&prefix) && body.ends_with("s (limit 2s)\n"), "{body}");
    // The other worker still serves other keys; readiness is unaffected.
    create(&c.client, &ns, "free", &[]).await;
    logger.wait_message(&format!("onAdd: {ns}/free"), T).await;
    assert_eq!(http_get(port, "/readyz").0, 200);
    let (_, page) = http_get(port, "/metrics");
    assert!(sample(&page, "workqueue_longest_running_processor_seconds{name=\"pods\"}").unwrap() > 2.0, "{page}");
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn healthz_stays_200_while_the_apiserver_is_down() {
    let plane = Plane::start("probes-down").await;
    let c = &plane.cluster;
    let ns = namespace(&c.client, "outage").await;
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let logger = Logger::start(&c.kubeconfig, &["-n", &ns, "--probe-addr", &addr]);
    logger.synced().await;
    plane.kill_apiserver();
    logger.wait_for("a watch error", T, |v| v["message"].as_str().is_some_and(|m| m.starts_with("watch failed"))).await;
    // An outage is not the logger's illness: a restart would not help.
    for _ in 0..5 {
        assert_eq!(http_get(port, "/healthz"), (200, "ok\n".into()));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    plane.start_apiserver("kube-apiserver", None, &[]).await;
    create(&c.client, &ns, "after", &[]).await;
    logger.wait_message(&format!("onAdd: {ns}/after"), T).await;
    assert_eq!(http_get(port, "/healthz").0, 200);
    assert_eq!(http_get(port, "/readyz").0, 200);
}

/// GET `path` on 127.0.0.1:`port`: (status, how long the answer took).
fn timed_get(port: u16, path: &str) -> (u16, Duration) {
    let start = Instant::now();
    let (status, _) = http_get(port, path);
    (status, start.elapsed())
}

/// Nobody reads the logger's stdout (a paused pipe, a full log disk): its
/// log writes block. The probes still answer, and a second SIGTERM still
/// ends it at once with 143: they live on a thread of their own.
#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn a_blocked_stdout_silences_neither_probes_nor_signals() {
    use std::process::{Command, Stdio};
    let c = cluster().await;
    let ns = namespace(&c.client, "blocked-stdout").await;
    let port = free_port();
    let mut child = Command::new(BIN)
        .arg("--kubeconfig")
        .arg(&c.kubeconfig)
        .args(["-n", &ns, "--log-format", "json", "--metrics-addr", "0", "--probe-addr", &format!("127.0.0.1:{port}")])
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped()) // held, never read: the pipe fills
        .stderr(Stdio::null())
        .spawn()
        .expect("start demo-controller");
    let stdout = child.stdout.take();
    let start = Instant::now();
    while http_get(port, "/readyz").0 != 200 {
        assert!(start.elapsed() < T, "never ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Each onAdd line is about 250 bytes: 600 pods fill a 64 KiB pipe twice.
    create_many(&c.client, &ns, "p", 600, &[], 0).await;
    // By now the pipe is full and the logger's writes block (the bytes read
    // at the end prove the pipe filled). The probes answer all the same.
    let mut worst = Duration::ZERO;
    for _ in 0..20 {
        let (health, took) = timed_get(port, "/healthz");
        let (ready, took2) = timed_get(port, "/readyz");
        assert_eq!((health, ready), (200, 200));
        worst = worst.max(took).max(took2);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let sent = Instant::now();
    for _ in 0..2 {
        assert!(
            std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(sent.elapsed() < Duration::from_secs(10), "two SIGTERMs did not end it while stdout was blocked");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    println!(
        "figures: probe_worst_latency_while_stdout_blocked={worst:?} exit={:?} after={:?}",
        status.code(),
        sent.elapsed()
    );
    assert_eq!(status.code(), Some(143));
    // What it wrote before the pipe filled is still there to read.
    use std::io::Read;
    let mut out = String::new();
    stdout.unwrap().read_to_string(&mut out).unwrap();
    assert!(out.contains("\"message\":\"cache synced\""), "{}", &out[..out.len().min(2000)]);
    assert!(out.len() >= 60_000, "stdout was never full: {} bytes", out.len());
}

/// Outside a pod, the probes' default port on loopback may be taken (another
/// program on a laptop): one warning, and the logger runs without them.
#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn a_busy_default_probe_port_outside_a_pod_is_a_warning() {
    let c = cluster().await;
    let ns = namespace(&c.client, "busy-port").await;
    // Taken by us, or already by someone else: either way busy.
    let _held = std::net::TcpListener::bind("127.0.0.1:8081");
    let mut cmd = std::process::Command::new(BIN);
    cmd.arg("--kubeconfig").arg(&c.kubeconfig).args(["-n", &ns, "--log-format", "json", "--metrics-addr", "0"]);
    cmd.env_remove("KUBERNETES_SERVICE_HOST").env_remove("RUST_LOG");
    let logger = Logger::spawn(cmd, &[]);
    logger.synced().await;
    let warning = logger
        .wait_for("the busy-port warning", T, |v| v["message"].as_str().is_some_and(|m| m.starts_with("cannot listen")))
        .await;
    assert_eq!(warning["level"], "WARN");
    let m = warning["message"].as_str().unwrap();
    assert!(m.starts_with("cannot listen on 127.0.0.1:8081 for probes: "), "{m}");
    assert!(m.ends_with("pass --probe-addr with a free port, or 0 to turn it off; running without probes"), "{m}");
    create(&c.client, &ns, "p", &[]).await;
    logger.wait_message(&format!("onAdd: {ns}/p"), T).await;
}
