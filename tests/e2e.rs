//! End-to-end: the real binary, a real kube-apiserver, exact log lines.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::*;

const T: Duration = Duration::from_secs(30);

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn the_initial_list_is_logged_and_marked() {
    let c = cluster().await;
    let ns = namespace(&c.client, "initial").await;
    create(&c.client, &ns, "a", &[]).await;
    create(&c.client, &ns, "b", &[]).await;
    let logger = Logger::start(&c.kubeconfig, &["-n", &ns]);
    assert_eq!(logger.synced().await["pods"], 2);
    let mut events = logger.wait_events(&ns, 2).await;
    events.sort();
    assert_eq!(events, [format!("onAdd: {ns}/a"), format!("onAdd: {ns}/b")]);
    for line in logger.event_lines(&ns) {
        assert_eq!(line["initial_list"], true, "{line}");
        assert_eq!(line["phase"], "Pending");
    }
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn skip_existing_leaves_out_only_the_initial_list() {
    let c = cluster().await;
    let ns = namespace(&c.client, "skip").await;
    create(&c.client, &ns, "old", &[]).await;
    let logger = Logger::start(&c.kubeconfig, &["-n", &ns, "--skip-existing"]);
    logger.synced().await;
    create(&c.client, &ns, "new", &[]).await;
    assert_eq!(logger.wait_events(&ns, 1).await, [format!("onAdd: {ns}/new")]);
    assert!(logger.event_lines(&ns)[0].get("initial_list").is_none());
    // The skipped pod is still known: a change to it is an update, not an add.
    label(&c.client, &ns, "old", "touched", "yes").await;
    assert_eq!(logger.wait_events(&ns, 2).await[1], format!("onUpdate: {ns}/old"));
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn add_update_by_label_and_status_then_delete() {
    let c = cluster().await;
    let ns = namespace(&c.client, "life").await;
    let logger = Logger::start(&c.kubeconfig, &["-n", &ns]);
    logger.synced().await;
    create(&c.client, &ns, "kuard", &[("app", "kuard")]).await;
    logger.wait_events(&ns, 1).await;
    label(&c.client, &ns, "kuard", "tier", "web").await;
    logger.wait_events(&ns, 2).await;
    set_phase(&c.client, &ns, "kuard", "Running").await;
    logger.wait_events(&ns, 3).await;
    delete(&c.client, &ns, "kuard").await;
    let events = logger.wait_events(&ns, 4).await;
    assert_eq!(
        events,
        [
            format!("onAdd: {ns}/kuard"),
            format!("onUpdate: {ns}/kuard"),
            format!("onUpdate: {ns}/kuard"),
            format!("onDelete: {ns}/kuard")
        ]
    );
    let lines = logger.event_lines(&ns);
    assert_eq!(lines[1]["changes"], "label +tier=web");
    assert_eq!(lines[2]["changes"], "phase Pending -> Running");
    assert_eq!(lines[2]["phase"], "Running");
    assert_eq!(lines[3]["phase"], "Running");
    assert_eq!((lines[0]["namespace"].as_str(), lines[0]["name"].as_str()), (Some(ns.as_str()), Some("kuard")));
    assert!(lines[0].get("initial_list").is_none());
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn a_deleted_pod_is_terminating_first() {
    let c = cluster().await;
    let ns = namespace(&c.client, "terminating").await;
    let logger = Logger::start(&c.kubeconfig, &["-n", &ns]);
    logger.synced().await;
    create(&c.client, &ns, "held", &[]).await;
    add_finalizer(&c.client, &ns, "held").await;
    // A finalizer keeps the pod after the delete: it stays "Terminating".
    delete(&c.client, &ns, "held").await;
    let terminating = format!("onUpdate: {ns}/held");
    let line = logger
        .wait_for("the terminating update", T, |v| {
            v["message"] == terminating.as_str() && v["changes"] == "terminating"
        })
        .await;
    assert_eq!(line["phase"], "Pending");
    // Its finalizer gone, the API server removes it.
    let patch = serde_json::json!({"metadata": {"finalizers": null}});
    kube::Api::<k8s_openapi::api::core::v1::Pod>::namespaced(c.client.clone(), &ns)
        .patch("held", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch))
        .await
        .unwrap();
    let deleted = format!("onDelete: {ns}/held");
    logger.wait_message(&deleted, T).await;
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn delete_and_recreate_under_the_same_name() {
    let c = cluster().await;
    let ns = namespace(&c.client, "recreate").await;
    let logger = Logger::start(&c.kubeconfig, &["-n", &ns]);
    logger.synced().await;
    let first = create(&c.client, &ns, "p", &[]).await;
    logger.wait_events(&ns, 1).await;
    delete(&c.client, &ns, "p").await;
    let second = create(&c.client, &ns, "p", &[]).await;
    let events = logger.wait_events(&ns, 3).await;
    assert_eq!(events, [format!("onAdd: {ns}/p"), format!("onDelete: {ns}/p"), format!("onAdd: {ns}/p")]);
    let lines = logger.event_lines(&ns);
    let uid = |p: &k8s_openapi::api::core::v1::Pod| p.metadata.uid.clone().unwrap();
    assert_eq!(lines[0]["uid"], uid(&first));
    assert_eq!(lines[1]["uid"], uid(&first));
    assert_eq!(lines[2]["uid"], uid(&second));
    assert_ne!(uid(&first), uid(&second));
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn a_resync_that_changes_nothing_logs_no_update() {
    let c = cluster().await;
    let ns = namespace(&c.client, "resync").await;
    let logger = Logger::start_with(
        &c.kubeconfig,
        &["-n", &ns, "--resync", "1s"],
        &[("RUST_LOG", "warn,demo_controller=debug")],
    );
    logger.synced().await;
    create(&c.client, &ns, "p", &[]).await;
    logger.wait_events(&ns, 1).await;
    // Wait for resyncs to have queued the pod again...
    // ... and the worker to have synced it after three of them: each found
    // nothing new, no onUpdate, just a debug line.
    let key = format!("{ns}/p");
    let no_change = |l: &Logger| {
        l.lines()
            .iter()
            .filter(|v| v["key"] == key.as_str() && v["message"].as_str().is_some_and(|m| m.starts_with("no change")))
            .count()
    };
    let start = Instant::now();
    while no_change(&logger) < 3 {
        assert!(start.elapsed() < T, "no resync sync seen\n{}", logger.dump());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(logger.events(&ns), [format!("onAdd: {ns}/p")]);
}

/// A logger with one worker, held for 5 s on the key of a pod `blocker`
/// that this creates: what else happens meanwhile waits in the queue. It
/// returns once /healthz proves the worker holds `blocker`.
async fn with_the_only_worker_held(c: &Cluster, ns: &str, before: &[&str]) -> Logger {
    let stall = format!("stall={ns}/blocker@5s");
    let port = free_port();
    let probes = format!("127.0.0.1:{port}");
    let logger = Logger::start_with(
        &c.kubeconfig,
        &["-n", ns, "--workers", "1", "--probe-addr", &probes, "--stuck-after", "100ms"],
        &[("DEMO_CONTROLLER_FAULTS", &stall)],
    );
    logger.synced().await;
    for name in before {
        create(&c.client, ns, name, &[]).await;
    }
    logger.wait_count(ns, before.len()).await;
    create(&c.client, ns, "blocker", &[]).await;
    until_held(&logger, port, &format!("{ns}/blocker")).await;
    assert_eq!(logger.events(ns).len(), before.len(), "the worker should be held\n{}", logger.dump());
    logger
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn a_pod_created_and_deleted_faster_than_the_worker_is_still_logged() {
    let c = cluster().await;
    let ns = namespace(&c.client, "ghost").await;
    let logger = with_the_only_worker_held(&c, &ns, &[]).await;
    // `ghost` lives and dies while the worker is held: its key is queued
    // once, and by the time it is synced the pod is gone.
    create(&c.client, &ns, "ghost", &[]).await;
    delete(&c.client, &ns, "ghost").await;
    let events = logger.wait_events(&ns, 3).await;
    assert_eq!(events, [format!("onAdd: {ns}/blocker"), format!("onAdd: {ns}/ghost"), format!("onDelete: {ns}/ghost")]);
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn a_burst_on_one_key_is_deduplicated() {
    let c = cluster().await;
    let ns = namespace(&c.client, "burst").await;
    let logger = with_the_only_worker_held(&c, &ns, &["busy"]).await;
    for i in 1..=20 {
        label(&c.client, &ns, "busy", "v", &i.to_string()).await;
    }
    let events = logger.wait_events(&ns, 3).await;
    assert_eq!(events, [format!("onAdd: {ns}/busy"), format!("onAdd: {ns}/blocker"), format!("onUpdate: {ns}/busy")]);
    // Twenty changes, one sync: the line shows the state it found.
    assert_eq!(logger.event_lines(&ns)[2]["changes"], "label +v=20");
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn namespace_and_selector_narrow_the_watch() {
    let c = cluster().await;
    let ns = namespace(&c.client, "filter").await;
    let other = namespace(&c.client, "filter-other").await;
    let logger = Logger::start(&c.kubeconfig, &["-n", &ns, "-l", "app=web"]);
    logger.synced().await;
    create(&c.client, &other, "web", &[("app", "web")]).await;
    create(&c.client, &ns, "db", &[("app", "db")]).await;
    create(&c.client, &ns, "web", &[("app", "web")]).await;
    assert_eq!(logger.wait_events(&ns, 1).await, [format!("onAdd: {ns}/web")]);
    // A label change that brings a pod into the selector is an add.
    label(&c.client, &ns, "db", "app", "web").await;
    assert_eq!(logger.wait_events(&ns, 2).await, [format!("onAdd: {ns}/web"), format!("onAdd: {ns}/db")]);
    assert!(logger.events(&other).is_empty(), "{}", logger.dump());
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn sigterm_drains_and_exits_zero() {
    let c = cluster().await;
    let ns = namespace(&c.client, "sigterm").await;
    let mut logger = Logger::start(&c.kubeconfig, &["-n", &ns]);
    logger.synced().await;
    logger.signal("TERM");
    let status = logger.wait_exit(T).await;
    assert_eq!(status.code(), Some(0), "{}", logger.dump());
    let lines = logger.lines();
    assert_eq!(lines.last().unwrap()["message"], "shutdown complete", "{}", logger.dump());
    assert!(lines.iter().any(|v| v["message"] == "received SIGTERM: shutting down (send it again to exit at once)"));
}

/// A second signal during the drain exits at once with 128 + its number.
async fn second_signal_during_the_drain(sig: &str, name: &str, code: i32) {
    let c = cluster().await;
    let ns = namespace(&c.client, "twice").await;
    let stall = format!("stall={ns}/stuck");
    let port = free_port();
    let probes = format!("127.0.0.1:{port}");
    let mut logger = Logger::start_with(
        &c.kubeconfig,
        &["-n", &ns, "--workers", "1", "--probe-addr", &probes, "--stuck-after", "100ms"],
        &[("DEMO_CONTROLLER_FAULTS", &stall)],
    );
    logger.synced().await;
    create(&c.client, &ns, "stuck", &[]).await;
    until_held(&logger, port, &format!("{ns}/stuck")).await;
    logger.signal(sig);
    logger.wait_message("shutting down: watch stopped, draining the queue", T).await;
    logger.signal(sig);
    let status = logger.wait_exit(Duration::from_secs(5)).await;
    assert_eq!(status.code(), Some(code), "{}", logger.dump());
    assert_eq!(logger.lines().last().unwrap()["message"], format!("received {name} again: exiting at once"));
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn a_second_sigint_exits_at_once_with_130() {
    second_signal_during_the_drain("INT", "SIGINT", 130).await;
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn a_second_sigterm_exits_at_once_with_143() {
    second_signal_during_the_drain("TERM", "SIGTERM", 143).await;
}

/// A server that accepts TCP connections and never answers: start-up hangs
/// in connect (needs no control plane). Returns its port and a count of the
/// connections it took.
fn black_hole() -> (u16, Arc<AtomicUsize>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    std::thread::spawn(move || {
        let mut held = Vec::new(); // kept open, never read nor answered
        for stream in listener.incoming().map_while(Result::ok) {
            count.fetch_add(1, Ordering::SeqCst);
            held.push(stream);
        }
    });
    (port, accepted)
}

/// Start-up against a server that never answers waits up to 10 s per check;
/// a signal meanwhile must not wait for them: it ends the process at once,
/// with 128 + the signal's number.
#[tokio::test(flavor = "multi_thread")]
async fn a_signal_during_start_up_exits_at_once() {
    for (sig, name, code) in [("INT", "SIGINT", 130), ("TERM", "SIGTERM", 143)] {
        let (port, accepted) = black_hole();
        let kc = kubeconfig(&format!("black-hole-{name}"), &format!("https://127.0.0.1:{port}"), None, "    token: x");
        let mut logger = Logger::start(&kc, &[]);
        // Connecting: the server took the connection and says nothing.
        let start = Instant::now();
        while accepted.load(Ordering::SeqCst) == 0 {
            assert!(start.elapsed() < T, "it never connected\n{}", logger.dump());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let sent = Instant::now();
        logger.signal(sig);
        // Well under the 10 s the start-up check would take to give up.
        let status = logger.wait_exit(Duration::from_secs(5)).await;
        println!("figures: {name} while connecting: exit {:?} {:?} after the signal", status.code(), sent.elapsed());
        assert_eq!(status.code(), Some(code), "{}", logger.dump());
        let messages: Vec<String> =
            logger.lines().iter().map(|v| v["message"].as_str().unwrap_or_default().to_string()).collect();
        assert_eq!(
            messages,
            [
                format!("received {name}: shutting down (send it again to exit at once)"),
                format!("start-up cut short by {name}: exiting")
            ],
            "{}",
            logger.dump()
        );
        assert!(logger.stderr().is_empty(), "{}", logger.dump());
    }
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn a_signal_before_the_cache_synced_exits_zero() {
    // The first list never completes: the identity may not list pods.
    // Nothing was queued, so a signal ends a complete (empty) drain: exit 0.
    let c = cluster().await;
    let ns = namespace(&c.client, "unsynced").await;
    service_account(&c.client, &ns, "nobody").await;
    let kc = token_kubeconfig(&c.dir, &format!("{ns}-nobody"), &token(&c.client, &ns, "nobody").await);
    let mut logger = Logger::start(&kc, &["-n", &ns]);
    logger.wait_message("waiting for the first list of pods (cache sync)", T).await;
    logger.signal("TERM");
    let status = logger.wait_exit(T).await;
    assert_eq!(status.code(), Some(0), "{}", logger.dump());
    assert_eq!(logger.lines().last().unwrap()["message"], "shutdown complete (before the cache synced)");
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn text_logs_into_a_pipe_are_plain_lines() {
    let c = cluster().await;
    let ns = namespace(&c.client, "text").await;
    let mut cmd = std::process::Command::new(BIN);
    cmd.arg("--kubeconfig").arg(&c.kubeconfig).args(["-n", &ns, "--probe-addr", "0", "--metrics-addr", "0"]);
    let logger = Logger::spawn(cmd, &[]);
    let synced =
        logger.wait_for("cache synced", T, |v| v["raw"].as_str().is_some_and(|l| l.contains("cache synced"))).await;
    create(&c.client, &ns, "plain", &[]).await;
    let add = format!("onAdd: {ns}/plain");
    let line = logger.wait_for("the onAdd line", T, |v| v["raw"].as_str().is_some_and(|l| l.contains(&add))).await;
    let line = line["raw"].as_str().unwrap();
    assert!(
        !line.contains('\x1b') && !synced["raw"].as_str().unwrap().contains('\x1b'),
        "colour codes in a pipe: {line:?}"
    );
    // timestamp, level, the classic message, then the fields.
    let after_timestamp = line.split_once(' ').unwrap().1;
    assert!(
        after_timestamp.starts_with(&format!(" INFO {add} namespace=\"{ns}\" name=\"plain\" uid=\"")),
        "{after_timestamp:?}"
    );
    assert!(line.ends_with("phase=\"Pending\""), "{line:?}");
}

/// What the kubelet would write, written through pods/status, and what a
/// client changes in metadata or spec: each onUpdate says what changed in
/// words, or which part changed when no word covers it; hostile text in a
/// status stays one short line, in JSON and in text.
#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn an_update_says_why_or_which_part_changed() {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Patch, PatchParams};
    let c = cluster().await;
    let ns = namespace(&c.client, "why").await;
    let json = Logger::start(&c.kubeconfig, &["-n", &ns]);
    let mut cmd = std::process::Command::new(BIN);
    cmd.arg("--kubeconfig").arg(&c.kubeconfig).args(["-n", &ns, "--probe-addr", "0", "--metrics-addr", "0"]);
    let text = Logger::spawn(cmd, &[]);
    json.synced().await;
    text.wait_for("cache synced", T, |v| v["raw"].as_str().is_some_and(|l| l.contains("cache synced"))).await;
    create(&c.client, &ns, "p", &[]).await;
    json.wait_events(&ns, 1).await;

    let api = kube::Api::<Pod>::namespaced(c.client.clone(), &ns);
    let params = PatchParams::default();
    let mut n = 1;
    let mut update = async |patch: serde_json::Value, status: bool| {
        if status {
            api.patch_status("p", &params, &Patch::Merge(&patch)).await.expect("patch the status");
        } else {
            api.patch("p", &params, &Patch::Merge(&patch)).await.expect("patch the pod");
        }
        n += 1;
        json.wait_events(&ns, n).await;
        json.event_lines(&ns)[n - 1].clone()
    };
    let line = update(serde_json::json!({"metadata": {"annotations": {"note": "x"}}}), false).await;
    assert_eq!(line["changes"], "other fields (metadata)");
    let line = update(serde_json::json!({"spec": {"activeDeadlineSeconds": 3600}}), false).await;
    assert_eq!(line["changes"], "other fields (spec)", "the server counts spec changes in metadata.generation");
    let line = update(serde_json::json!({"status": {"nominatedNodeName": "n1"}}), true).await;
    assert_eq!(line["changes"], "other fields (status)");

    let waiting = |message: &str| {
        serde_json::json!({"status": {"containerStatuses": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
            "imageID": "", "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": "ErrImagePull", "message": message}}}]}})
    };
    let line = update(waiting("failed to pull image"), true).await;
    assert_eq!(line["changes"], "c: waiting ErrImagePull (failed to pull image), ready 0/0 -> 0/1");
    assert_eq!((line["reasons"].as_str(), line.get("exit_code")), (Some("ErrImagePull"), None));
    // A message with a newline and an escape sequence, and 300 kB of it.
    let hostile = format!("line one\nline two\u{1b}[2J{}", "x".repeat(300_000));
    let line = update(waiting(&hostile), true).await;
    let want =
        format!(r"c: waiting ErrImagePull (line one\nline two\u{{1b}}[2J{}…(cut, 300021 bytes))", "x".repeat(173));
    assert_eq!(line["changes"], want.as_str());
    let evicted = "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi.";
    let line =
        update(serde_json::json!({"status": {"phase": "Failed", "reason": "Evicted", "message": evicted}}), true).await;
    assert_eq!(line["changes"], format!("phase Pending -> Failed, Evicted: {evicted}"));
    assert_eq!(line["reasons"], "Evicted", "the container's reason did not change: not named again");

    // The same updates as text: one line each, the hostile one short. (That
    // logger syncs on its own: it may have merged two updates in one line.)
    let key = format!("onUpdate: {ns}/p");
    let is_update = |v: &serde_json::Value| v["raw"].as_str().is_some_and(|l| l.contains(&key));
    text.wait_for("the eviction as text", T, |v| is_update(v) && v["raw"].as_str().unwrap().contains("Evicted")).await;
    let lines = text.lines();
    let updates: Vec<&str> = lines.iter().filter(|v| is_update(v)).filter_map(|v| v["raw"].as_str()).collect();
    let cut = updates.iter().find(|l| l.contains("line one")).expect("the hostile update");
    assert!(cut.contains(r#"changes="c: waiting ErrImagePull (line one\\nline two\\u{1b}[2Jxxx"#), "{cut}");
    assert!(cut.len() < 600, "{} bytes: {cut}", cut.len());
    let whole = |v: &serde_json::Value| v["raw"].as_str().is_some_and(|l| l.starts_with("20")); // a timestamp
    assert!(lines.iter().all(whole), "a line broken in two: {}", text.dump());
}
