//! demo-controller as a pod on a real node: the image built from the
//! unchanged Dockerfile, demo-controller.yaml applied unchanged, a real kubelet
//! and containerd running it (cluster/node/up.sh). Everything is observed the
//! way a user would: pod status from the API, the log through the API's
//! pods/log endpoint (as `kubectl logs`), the container's process from inside the node.
//!
//! These tests need root and the local node: `make test` as root starts it and
//! sets DEMO_CONTROLLER_TEST_NODE; without root it reports them as not run.
//! They share one Deployment, so they take turns (the `turn` lock).

mod common;

use common::{node_admin as admin, node_dir, until};

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Namespace, Pod, Secret};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{DeleteParams, ListParams, LogParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::{Api, Client};
use serde_json::{Value, json};

const NS: &str = "demo-controller";

/// The tests share the one Deployment: one at a time.
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Applies demo-controller.yaml as it is (every object, unchanged).
async fn apply_manifest(client: &Client) {
    for object in common::manifest() {
        common::apply(client, &object, false).await.expect("apply demo-controller.yaml");
    }
}

/// The manifest applied unchanged and rolled out: the pod of the Deployment
/// that leads, Ready. Undoes what earlier tests changed (env, args) by
/// applying again.
async fn deployed(client: &Client) -> Pod {
    apply_manifest(client).await;
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), NS);
    // A test may have added env or args: the manifest's own spec back.
    let template = common::manifest().into_iter().find(|o| o["kind"] == "Deployment").unwrap();
    let mut current = deploys.get("demo-controller").await.unwrap();
    let container = &current.spec.as_ref().unwrap().template.spec.as_ref().unwrap().containers[0];
    let args = template["spec"]["template"]["spec"]["containers"][0]["args"].as_array().map(Vec::len);
    if container.env.is_some() || container.args.as_ref().map(|a| a.len()) != args {
        let spec = serde_json::to_value(&template["spec"]["template"]["spec"]["containers"]).unwrap();
        deploys
            .patch(
                "demo-controller",
                &PatchParams::default(),
                &Patch::Json::<()>(
                    serde_json::from_value(json!([
                        { "op": "replace", "path": "/spec/template/spec/containers", "value": spec }
                    ]))
                    .unwrap(),
                ),
            )
            .await
            .unwrap();
        current = deploys.get("demo-controller").await.unwrap();
    }
    rolled_out(client, current.metadata.generation.unwrap_or(0)).await
}

/// The manifest's replicas: a leader and a standby.
const REPLICAS: i32 = 2;

/// Waits until the Deployment has observed `generation`, its pods are Ready
/// (and the only pods) and one of them holds the Lease; returns that one.
async fn rolled_out(client: &Client, generation: i64) -> Pod {
    Pods::rolled_out(client, generation).await.leader
}

/// The Deployment's pods once rolled out: the leader and the standby.
struct Pods {
    leader: Pod,
    standby: Pod,
}

impl Pods {
    async fn rolled_out(client: &Client, generation: i64) -> Pods {
        let deploys: Api<Deployment> = Api::namespaced(client.clone(), NS);
        let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
        let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
        until("the Deployment to roll out and a pod to lead", Duration::from_secs(120), || async {
            let d = deploys.get("demo-controller").await.ok()?;
            // Rolled out means the status describes the current spec: a
            // manifest applied a moment ago has raised the generation.
            let generation = generation.max(d.metadata.generation.unwrap_or(0));
            let status = d.status?;
            let done = status.observed_generation? >= generation
                && status.updated_replicas == Some(REPLICAS)
                && status.available_replicas == Some(REPLICAS)
                && status.replicas == Some(REPLICAS);
            if !done {
                return None;
            }
            let list = pods.list(&ListParams::default()).await.ok()?;
            let live: Vec<Pod> = list.items.into_iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect();
            if live.len() != REPLICAS as usize || !live.iter().all(is_ready) {
                return None;
            }
            // The holder's identity is its pod's name, `_`, a random suffix.
            let holder = leases.get("demo-controller").await.ok()?.spec?.holder_identity?;
            let leads = |p: &Pod| p.metadata.name.as_ref().is_some_and(|n| holder.starts_with(&format!("{n}_")));
            let leader = live.iter().find(|p| leads(p))?.clone();
            let standby = live.into_iter().find(|p| !leads(p))?;
            Some(Pods { leader, standby })
        })
        .await
    }
}

fn is_ready(p: &Pod) -> bool {
    condition(p, "Ready") == Some("True")
}

fn condition<'a>(p: &'a Pod, kind: &str) -> Option<&'a str> {
    p.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == kind).map(|c| c.status.as_str())
}

/// The pod's log read through the API (pods/log), parsed as JSON lines.
async fn log_of(client: &Client, pod: &str, previous: bool) -> Vec<Value> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let text = pods.logs(pod, &LogParams { previous, ..Default::default() }).await.expect("read the pod's log");
    text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|_| json!({ "raw": l }))).collect()
}

/// The pod's log, or `None` while it cannot be read (its container not
/// started yet, the pod gone): for polling.
async fn try_log_of(client: &Client, pod: &str) -> Option<Vec<Value>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let text = pods.logs(pod, &LogParams::default()).await.ok()?;
    Some(text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|_| json!({ "raw": l }))).collect())
}

/// Runs a command on the host (as root) and returns its stdout.
fn host(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd).args(args).output().unwrap_or_else(|e| panic!("run {cmd}: {e}"));
    assert!(out.status.success(), "{cmd} {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A value from the node's env file (cluster/node/up.sh writes it).
fn node_env(key: &str) -> String {
    let text = std::fs::read_to_string(node_dir().join("env")).expect("the node's env file");
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key} in the node's env file"))
        .to_string()
}

/// A path as the node's own processes see it: the node lives in a mount and
/// pid namespace of its own, so its /var/lib/kubelet (with the pods' volume
/// mounts) and its /proc are reached through its pid 1's root.
fn in_node(path: &str) -> PathBuf {
    let init = std::fs::read_to_string(node_dir().join("init.pid")).expect("the node's init.pid");
    PathBuf::from(format!("/proc/{}/root{path}", init.trim()))
}

/// The pid of a running container as the node sees it (from containerd, by
/// the ID the pod status reports).
fn container_pid(pod: &Pod) -> u32 {
    let id = pod.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0]
        .container_id
        .as_ref()
        .expect("a container ID")
        .trim_start_matches("containerd://")
        .to_string();
    let tasks = host("ctr", &["--address", &node_env("CONTAINERD_SOCK"), "-n", "k8s.io", "task", "ls"]);
    let line = tasks.lines().find(|l| l.starts_with(&id)).unwrap_or_else(|| panic!("no task {id} in\n{tasks}"));
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test]
#[ignore = "needs root and the local node: run `make test` as root"]
async fn node_deployment_rolls_out_locked_down() {
    let _turn = TURN.lock().await;
    let client = admin().await;
    let pod = deployed(&client).await;

    // The namespace enforces restricted: a pod that is not locked down is refused.
    let ns = Api::<Namespace>::all(client.clone()).get(NS).await.unwrap();
    assert_eq!(ns.metadata.labels.unwrap()["pod-security.kubernetes.io/enforce"], "restricted");
    let loose: Pod = serde_json::from_value(json!({
        "metadata": { "name": "loose" },
        "spec": { "containers": [{ "name": "c", "image": "docker.io/library/busybox:local" }] }
    }))
    .unwrap();
    let err = Api::<Pod>::namespaced(client.clone(), NS)
        .create(&PostParams { dry_run: true, ..Default::default() }, &loose)
        .await
        .expect_err("restricted refuses a pod that is not locked down");
    assert!(err.to_string().contains("violates PodSecurity \"restricted:latest\""), "{err}");

    // The running container, seen from the node: what the kernel enforces.
    let pid = container_pid(&pod);
    let status = std::fs::read_to_string(in_node(&format!("/proc/{pid}/status"))).unwrap();
    let field =
        |name: &str| status.lines().find(|l| l.starts_with(name)).map(|l| l[name.len()..].trim().to_string()).unwrap();
    assert_eq!(field("Uid:"), "65532\t65532\t65532\t65532", "{status}");
    assert_eq!(field("Gid:"), "65532\t65532\t65532\t65532", "{status}");
    assert_eq!(field("CapEff:"), "0000000000000000", "no capabilities");
    assert_eq!(field("CapPrm:"), "0000000000000000", "no capabilities");
    assert_eq!(field("CapBnd:"), "0000000000000000", "no capabilities, not even to regain");
    assert_eq!(field("NoNewPrivs:"), "1");
    assert_eq!(field("Seccomp:"), "2", "a seccomp filter (RuntimeDefault)");
    let mounts = std::fs::read_to_string(in_node(&format!("/proc/{pid}/mountinfo"))).unwrap();
    let root = mounts.lines().find(|l| l.split(' ').nth(4) == Some("/")).expect("a root mount");
    assert!(root.split(' ').nth(5).unwrap().split(',').any(|o| o == "ro"), "read-only root: {root}");
    let exe = std::fs::read_link(in_node(&format!("/proc/{pid}/exe"))).unwrap();
    assert_eq!(exe, PathBuf::from("/usr/local/bin/demo-controller"));

    // And the pod spec says the same (RuntimeDefault by name).
    let spec = serde_json::to_value(pod.spec.unwrap()).unwrap();
    assert_eq!(spec["securityContext"]["seccompProfile"]["type"], "RuntimeDefault");
    assert_eq!(spec["containers"][0]["image"], "demo-controller:dev");
}

#[tokio::test]
#[ignore = "needs root and the local node: run `make test` as root"]
async fn node_pod_is_ready_only_after_its_cache_synced() {
    let _turn = TURN.lock().await;
    let client = admin().await;
    deployed(&client).await;
    let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);

    // Without its RBAC binding the new pod cannot list pods: it runs, but its
    // cache cannot sync, so /readyz fails and the kubelet keeps it not Ready.
    bindings.delete("demo-controller", &DeleteParams::default()).await.unwrap();
    let restarted = restart(&deploys).await;
    let waiting = until("a running pod that is not Ready", Duration::from_secs(90), || async {
        let list = pods.list(&ListParams::default()).await.ok()?;
        list.items.into_iter().find(|p| {
            p.metadata.deletion_timestamp.is_none()
                && p.metadata.annotations.as_ref().and_then(|a| a.get("kubectl.kubernetes.io/restartedAt"))
                    == Some(&restarted)
                && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                && condition(p, "Ready") == Some("False")
                && p.status
                    .as_ref()
                    .and_then(|s| s.container_statuses.as_ref())
                    .is_some_and(|c| c[0].started == Some(true))
        })
    })
    .await;
    let name = waiting.metadata.name.clone().unwrap();
    // Several readiness probes later (the kubelet's events count them) it is
    // still not Ready, and its log says why.
    until("three failed readiness probes", Duration::from_secs(90), || async {
        let events = Api::<Event>::namespaced(client.clone(), NS)
            .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
            .await
            .ok()?;
        let failed: i32 = events
            .items
            .iter()
            .filter(|e| {
                e.message
                    .as_deref()
                    .is_some_and(|m| m.starts_with("Readiness probe failed: HTTP probe failed with statuscode: 503"))
            })
            .map(|e| e.count.unwrap_or(1))
            .sum();
        (failed >= 3).then_some(())
    })
    .await;
    let pod = pods.get(&name).await.unwrap();
    assert_eq!(condition(&pod, "Ready"), Some("False"), "not Ready while the cache cannot sync");
    let lines = log_of(&client, &name, false).await;
    assert!(!lines.iter().any(|l| l["message"] == "cache synced"), "{lines:?}");
    assert!(lines.iter().any(|l| l["message"] == "waiting for the first list of pods (cache sync)"), "{lines:?}");

    // The binding back: the list succeeds on its next retry, then the pod is Ready.
    let granted = chrono_now();
    apply_manifest(&client).await;
    let pod = until("the pod to become Ready", Duration::from_secs(90), || async {
        let p = pods.get(&name).await.ok()?;
        is_ready(&p).then_some(p)
    })
    .await;
    let lines = log_of(&client, &name, false).await;
    let synced = lines.iter().find(|l| l["message"] == "cache synced").expect("a cache synced line");
    let ready_at = pod
        .status
        .as_ref()
        .unwrap()
        .conditions
        .as_ref()
        .unwrap()
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap()
        .last_transition_time
        .clone()
        .unwrap();
    // Timestamps in RFC 3339 UTC compare as text; the condition has whole seconds.
    let synced_at = synced["timestamp"].as_str().unwrap_or_default().to_string();
    let ready_text = serde_json::to_value(&ready_at).unwrap().as_str().unwrap().to_string();
    assert!(synced_at[..19] <= ready_text[..19], "Ready at {ready_text}, cache synced at {synced_at}");
    assert!(granted[..19] <= ready_text[..19], "Ready at {ready_text}, before the binding came back at {granted}");
}

/// `kubectl rollout restart`: a new pod template annotation; returns its value.
async fn restart(deploys: &Api<Deployment>) -> String {
    let now = chrono_now();
    let patch = json!({ "spec": { "template": { "metadata": { "annotations": {
        "kubectl.kubernetes.io/restartedAt": now
    }}}}});
    deploys.patch("demo-controller", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    now
}

/// Now as RFC 3339 UTC with microseconds (what the logs print), from `date`.
fn chrono_now() -> String {
    host("date", &["-u", "+%Y-%m-%dT%H:%M:%S.%6NZ"]).trim().to_string()
}

#[tokio::test]
#[ignore = "needs root and the local node: run `make test` as root"]
async fn node_log_shows_a_workload_pod_that_really_runs() {
    let _turn = TURN.lock().await;
    let client = admin().await;
    let controller = deployed(&client).await;
    let controller_name = controller.metadata.name.clone().unwrap();
    let ns = workload_namespace(&client, "workload").await;

    // A workload that really runs: its first run exits 1 (so the kubelet
    // restarts it), the second stays up; sleep as PID 1 ignores SIGTERM, so the
    // pod stays terminating for its whole grace period when deleted.
    let pod: Pod = serde_json::from_value(json!({
        "metadata": { "name": "worker" },
        "spec": {
            "terminationGracePeriodSeconds": 3,
            "volumes": [{ "name": "data", "emptyDir": {} }],
            "containers": [{
                "name": "main",
                "image": "docker.io/library/busybox:local",
                "imagePullPolicy": "Never",
                "command": ["sh", "-c", "if [ -e /data/ran ]; then exec sleep 3600; fi; touch /data/ran; sleep 2; exit 1"],
                "volumeMounts": [{ "name": "data", "mountPath": "/data" }]
            }]
        }
    }))
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    pods.create(&PostParams::default(), &pod).await.unwrap();
    until("the workload to restart once and run", Duration::from_secs(90), || async {
        let p = pods.get("worker").await.ok()?;
        let s = p.status.as_ref()?.container_statuses.as_ref()?.first()?.clone();
        (s.restart_count == 1 && s.ready).then_some(())
    })
    .await;
    pods.delete("worker", &DeleteParams::default()).await.unwrap();
    until("the workload to be gone", Duration::from_secs(60), || async {
        pods.get_opt("worker").await.ok()?.is_none().then_some(())
    })
    .await;

    let lines = until("the onDelete line in the pod's log", Duration::from_secs(30), || {
        let client = client.clone();
        let controller_name = controller_name.clone();
        let ns = ns.clone();
        async move {
            let lines: Vec<Value> =
                log_of(&client, &controller_name, false).await.into_iter().filter(|l| l["namespace"] == ns).collect();
            lines.iter().any(|l| l["message"].as_str().is_some_and(|m| m.starts_with("onDelete"))).then_some(lines)
        }
    })
    .await;
    let key = format!("{ns}/worker");
    let messages: Vec<&str> = lines.iter().filter_map(|l| l["message"].as_str()).collect();
    assert_eq!(messages.first(), Some(&format!("onAdd: {key}").as_str()), "{lines:#?}");
    assert_eq!(messages.last(), Some(&format!("onDelete: {key}").as_str()), "{lines:#?}");
    let updates = updates(&lines, "worker");
    let changes: Vec<&str> = updates.iter().flat_map(|c| c.split(", ")).collect();
    for want in ["node <none> -> demo-node", "phase Pending -> Running", "terminating"] {
        assert!(changes.contains(&want), "no onUpdate with '{want}' in {changes:#?}");
    }
    // Ready 0/1 -> 1/1 at least twice: after the start and after the restart.
    assert!(changes.iter().filter(|c| **c == "ready 0/1 -> 1/1").count() >= 2, "{changes:#?}");
    assert!(changes.contains(&"ready 1/1 -> 0/1"), "the exit shows as not ready: {changes:#?}");
    // The restart says how the first run ended.
    let restart = "restarts 0 -> 1 (last: Error, exit 1)";
    assert!(updates.iter().any(|c| c.contains(restart)), "no onUpdate with '{restart}' in {updates:#?}");
    only_other_fields_never(&updates);
    Api::<Namespace>::all(client.clone()).delete(&ns, &DeleteParams::default()).await.unwrap();
}

#[tokio::test]
#[ignore = "needs root and the local node: run `make test` as root"]
async fn node_a_host_network_pod_reaches_no_host_service() {
    let _turn = TURN.lock().await;
    let client = admin().await;
    // A service of the host's, listening on every address (a developer's
    // database, say): the host's end of the node's link is one of them.
    let listener = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let ns = workload_namespace(&client, "hostnet").await;
    // In the node's own network namespace, as the node's components are: it
    // connects to the host's port, then to the kubelet's health port on the
    // node's loopback (which shows its connects work).
    let script = format!(
        "if busybox nc -w 3 198.18.0.9 {port} </dev/null 2>/dev/null; then echo host reached; else echo host blocked; fi; \
         if busybox nc -w 3 127.0.0.1 10248 </dev/null 2>/dev/null; then echo kubelet reached; fi"
    );
    let pod: Pod = serde_json::from_value(json!({
        "metadata": { "name": "prober" },
        "spec": {
            "hostNetwork": true,
            "restartPolicy": "Never",
            "containers": [{
                "name": "main",
                "image": "docker.io/library/busybox:local",
                "imagePullPolicy": "Never",
                "command": ["sh", "-c", script]
            }]
        }
    }))
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    pods.create(&PostParams::default(), &pod).await.unwrap();
    until("the prober to finish", Duration::from_secs(90), || async {
        let phase = pods.get("prober").await.ok()?.status?.phase?;
        (phase == "Succeeded" || phase == "Failed").then_some(())
    })
    .await;
    // Read through the API server, from the host: that way in still works.
    let log = pods.logs("prober", &LogParams::default()).await.unwrap();
    assert_eq!(log, "host blocked\nkubelet reached\n");
    let accepted = listener.accept();
    assert!(
        accepted.as_ref().is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock),
        "the host's service got a connection from the node: {accepted:?}"
    );
    Api::<Namespace>::all(client.clone()).delete(&ns, &DeleteParams::default()).await.unwrap();
}

/// A namespace for workload pods (the controller-manager gives it its
/// `default` ServiceAccount, as on any cluster).
async fn workload_namespace(client: &Client, prefix: &str) -> String {
    let name = format!("{prefix}-{}", std::process::id());
    let api: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({ "metadata": { "name": name } })).unwrap();
    api.create(&PostParams::default(), &ns).await.unwrap();
    let sas: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(client.clone(), &name);
    until("the namespace's default ServiceAccount", Duration::from_secs(30), || async {
        sas.get_opt("default").await.ok()?.map(|_| ())
    })
    .await;
    name
}

#[tokio::test]
#[ignore = "needs root and the local node: run `make test` as root"]
async fn node_rollout_restart_drains_and_exits_zero_on_sigterm() {
    let _turn = TURN.lock().await;
    let client = admin().await;
    let old = deployed(&client).await;
    let old_name = old.metadata.name.clone().unwrap();
    let old_uid = old.metadata.uid.clone().unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), NS);

    // Follow the old pod's log as `kubectl logs -f` does: the stream ends
    // when its container exits, so it holds the very last line.
    let stream = pods.log_stream(&old_name, &LogParams { follow: true, ..Default::default() }).await.unwrap();
    let follow = tokio::spawn(async move {
        use futures::AsyncBufReadExt;
        stream.lines().filter_map(|l| async move { l.ok() }).collect::<Vec<String>>().await
    });
    // Watch the old pod to catch its terminated container state before the
    // pod object is removed.
    let mut watch =
        pods.watch(&WatchParams::default().fields(&format!("metadata.name={old_name}")), "0").await.unwrap().boxed();
    let started = Instant::now();
    restart(&deploys).await;
    let mut terminated = None;
    while let Some(event) = tokio::time::timeout(Duration::from_secs(60), watch.next()).await.expect("watch event") {
        let (p, gone) = match event.unwrap() {
            WatchEvent::Modified(p) => (p, false),
            WatchEvent::Deleted(p) => (p, true),
            _ => continue,
        };
        if p.metadata.uid.as_deref() != Some(old_uid.as_str()) {
            continue;
        }
        let state = p.status.as_ref().and_then(|s| s.container_statuses.as_ref()).map(|c| c[0].clone());
        if let Some(t) = state.and_then(|s| s.state).and_then(|s| s.terminated) {
            terminated = Some(t);
            break;
        }
        if gone {
            break;
        }
    }
    let last_log = tokio::time::timeout(Duration::from_secs(30), follow).await.expect("the log stream ends").unwrap();
    let took = started.elapsed();
    let terminated = terminated.expect("saw the old container terminated");
    println!("figures: exit_after_rollout_restart={took:?}");
    // Exit code 0, not 137: it drained and exited within the grace period,
    // before the kubelet's SIGKILL (how long it took is printed, not asserted).
    assert_eq!(terminated.exit_code, 0, "exit code after SIGTERM: {terminated:?}");
    let lines: Vec<Value> = last_log.iter().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let messages: Vec<&str> = lines.iter().filter_map(|l| l["message"].as_str()).collect();
    assert!(
        messages.contains(&"received SIGTERM: shutting down (send it again to exit at once)"),
        "the kubelet's SIGTERM: {messages:#?}"
    );
    // The old pod led: it drained, then gave the Lease up for a standby.
    assert_eq!(
        messages[messages.len().saturating_sub(2)..],
        ["shutdown complete", "released the lease"],
        "{messages:#?}"
    );
    rolled_out(&client, deploys.get("demo-controller").await.unwrap().metadata.generation.unwrap()).await;
}

#[tokio::test]
#[ignore = "needs root and the local node: run `make test` as root"]
async fn node_liveness_probe_restarts_a_stuck_container() {
    let _turn = TURN.lock().await;
    let client = admin().await;
    deployed(&client).await;
    let ns = workload_namespace(&client, "stuck").await;
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);

    // The fault seam holds the worker on one key; with --stuck-after=5s the
    // liveness probe fails and the kubelet restarts the container.
    let patch = json!([
        { "op": "add", "path": "/spec/template/spec/containers/0/env", "value": [
            { "name": "DEMO_CONTROLLER_FAULTS", "value": format!("stall={ns}/held@10m") }
        ]},
        { "op": "add", "path": "/spec/template/spec/containers/0/args/-", "value": "--stuck-after=5s" }
    ]);
    let d = deploys
        .patch("demo-controller", &PatchParams::default(), &Patch::Json::<()>(serde_json::from_value(patch).unwrap()))
        .await
        .unwrap();
    let pod = rolled_out(&client, d.metadata.generation.unwrap()).await;
    let name = pod.metadata.name.clone().unwrap();
    let held: Pod = serde_json::from_value(json!({
        "metadata": { "name": "held" },
        "spec": { "containers": [{ "name": "c", "image": "docker.io/library/busybox:local",
                                   "imagePullPolicy": "Never", "command": ["sleep", "3600"] }] }
    }))
    .unwrap();
    Api::<Pod>::namespaced(client.clone(), &ns).create(&PostParams::default(), &held).await.unwrap();

    // The restart count and the killed container's last state can reach the
    // pod's status in two updates: wait for both.
    until("the kubelet to restart the stuck container and report it terminated", Duration::from_secs(150), || async {
        let p = pods.get(&name).await.ok()?;
        let s = p.status?.container_statuses?.first()?.clone();
        (s.restart_count >= 1).then_some(())?;
        s.last_state?.terminated.map(|_| ())
    })
    .await;
    // The kubelet stopped it (SIGTERM) and said why.
    let previous = log_of(&client, &name, true).await;
    assert!(
        previous.iter().any(|l| l["message"].as_str().is_some_and(|m| m.starts_with("received SIGTERM"))),
        "the kubelet stopped it: {previous:#?}"
    );
    let events: Vec<String> = Api::<Event>::namespaced(client.clone(), NS)
        .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|e| format!("{}: {}", e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect();
    let events = events.join("\n");
    assert!(events.contains("Liveness probe failed: HTTP probe failed with statuscode: 503"), "{events}");
    assert!(events.contains("failed liveness probe, will be restarted"), "{events}");
    Api::<Namespace>::all(client.clone()).delete(&ns, &DeleteParams::default()).await.unwrap();
}

#[tokio::test]
#[ignore = "needs root and the local node: run `make test` as root"]
async fn node_service_account_token_reads_pods_only() {
    let _turn = TURN.lock().await;
    let client = admin().await;
    let pod = deployed(&client).await;
    // The very token the kubelet projected into the running pod, read from the
    // pod's volume on this node (the tests run as root on its host).
    let uid = pod.metadata.uid.clone().unwrap();
    let volumes = in_node(&format!("/var/lib/kubelet/pods/{uid}/volumes/kubernetes.io~projected"));
    let dir = std::fs::read_dir(&volumes).unwrap().next().expect("a projected volume").unwrap().path();
    let token = std::fs::read_to_string(dir.join("token")).unwrap();
    let ca = std::fs::read_to_string(dir.join("ca.crt")).unwrap();
    assert!(!token.is_empty());

    let server = {
        let text = std::fs::read_to_string(node_dir().join("plane/env")).unwrap();
        text.lines().find_map(|l| l.strip_prefix("APISERVER_URL=")).unwrap().to_string()
    };
    let mut config = kube::Config::new(server.parse().unwrap());
    config.auth_info.token = Some(token.trim().to_string().into());
    config.root_cert = Some(vec![pem_to_der(&ca)]);
    let sa = Client::try_from(config).unwrap();

    // What the logger needs: list and watch pods in every namespace.
    let all: Api<Pod> = Api::all(sa.clone());
    let list = all.list(&ListParams::default().limit(5)).await.expect("list pods");
    assert!(!list.items.is_empty());
    let rv = list.metadata.resource_version.clone().unwrap();
    let mut watch = all.watch(&WatchParams::default().timeout(1), &rv).await.expect("watch pods").boxed();
    while let Some(e) = watch.next().await {
        e.expect("a watch event, not an error");
    }
    // Nothing else: no secrets, no writes.
    let forbidden = |r: Result<_, kube::Error>| match r {
        Err(kube::Error::Api(s)) => s.code == 403,
        _ => false,
    };
    assert!(forbidden(Api::<Secret>::namespaced(sa.clone(), NS).list(&ListParams::default()).await.map(|_| ())));
    assert!(forbidden(Api::<Secret>::all(sa.clone()).list(&ListParams::default()).await.map(|_| ())));
    let mine: Api<Pod> = Api::namespaced(sa.clone(), NS);
    let name = pod.metadata.name.clone().unwrap();
    assert!(forbidden(mine.delete(&name, &DeleteParams::default()).await.map(|_| ())));
    let patch = json!({ "metadata": { "labels": { "x": "y" } } });
    assert!(forbidden(mine.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await.map(|_| ())));
    let new: Pod = serde_json::from_value(json!({ "metadata": { "name": "x" },
        "spec": { "containers": [{ "name": "c", "image": "x" }] } }))
    .unwrap();
    assert!(forbidden(mine.create(&PostParams::default(), &new).await.map(|_| ())));
}

fn pem_to_der(pem: &str) -> Vec<u8> {
    use base64::Engine;
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    base64::engine::general_purpose::STANDARD.decode(body).unwrap()
}

// --- Why: the reasons the kubelet gives, as onUpdate names them ---------------

/// The `changes` of every onUpdate about the pod `name`, oldest first.
fn updates(lines: &[Value], name: &str) -> Vec<String> {
    lines
        .iter()
        .filter(|l| l["name"] == name && l["message"].as_str().is_some_and(|m| m.starts_with("onUpdate: ")))
        .filter_map(|l| l["changes"].as_str().map(String::from))
        .collect()
}

/// No onUpdate left the reader with "other fields" alone: everything the
/// kubelet did to these pods has words. Once the pod is terminating, the
/// kubelet writes its status several times as it stops the pod, and how the
/// API server receives those writes depends on timing: now and then one of
/// them differs only in fields no line shows, and reads "other fields
/// (status)". One such line after the delete is allowed, nothing else.
fn only_other_fields_never(updates: &[String]) {
    let vague = |c: &&String| c.starts_with("other fields");
    let deleted = updates.iter().position(|c| c.split(", ").any(|c| c == "terminating"));
    let (living, stopping) = updates.split_at(deleted.map_or(updates.len(), |t| t + 1));
    let stopping: Vec<&String> = stopping.iter().filter(vague).collect();
    assert!(
        !living.iter().any(|c| vague(&c))
            && stopping.len() <= 1
            && stopping.iter().all(|c| *c == "other fields (status)"),
        "onUpdate lines that only say 'other fields': {updates:#?}"
    );
}

#[test]
fn other_fields_are_allowed_once_and_only_for_the_status_of_a_terminating_pod() {
    let lines = |l: &[&str]| l.iter().map(|c| c.to_string()).collect::<Vec<_>>();
    // As a run of node_an_image_that_cannot_be_pulled... logged it.
    let seen = ["node <none> -> demo-node", "terminating", "PodReadyToStartContainers True -> False"];
    let with = |extra: &[&str]| lines(&[&seen[..], extra, &["phase Pending -> Failed"]].concat());
    only_other_fields_never(&with(&[]));
    only_other_fields_never(&with(&["other fields (status)"]));
    for bad in [
        with(&["other fields (status)", "other fields (status)"]),
        with(&["other fields (metadata)"]),
        lines(&["other fields (status)", "terminating"]),
        lines(&["other fields (status)"]),
    ] {
        let caught = std::panic::catch_unwind(|| only_other_fields_never(&bad));
        assert!(caught.is_err(), "{bad:?} passed");
    }
}

/// Runs the one-container pod `name` in a fresh namespace and returns
/// demo-controller's log lines about it once `enough` is true of their
/// changes, and again after the pod was deleted (up to its onDelete).
async fn lived(
    name: &str,
    restart_policy: &str,
    container: Value,
    enough: impl Fn(&[String]) -> bool,
) -> (Vec<Value>, Vec<Value>) {
    let client = admin().await;
    let controller = deployed(&client).await.metadata.name.clone().unwrap();
    let ns = workload_namespace(&client, name).await;
    let pod: Pod = serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": { "terminationGracePeriodSeconds": 3, "containers": [container],
                  "restartPolicy": restart_policy }
    }))
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let about = async || -> Vec<Value> {
        log_of(&client, &controller, false).await.into_iter().filter(|l| l["namespace"] == ns).collect()
    };
    let start = Instant::now();
    let living = loop {
        let lines = about().await;
        let told = updates(&lines, name);
        if enough(&told) {
            break lines;
        }
        let status = pods.get_opt(name).await.ok().flatten().and_then(|p| p.status);
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "{name}: not told yet in {told:#?}\nits status: {status:#?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    pods.delete(name, &DeleteParams::default()).await.unwrap();
    let all = until("the onDelete line", Duration::from_secs(60), || async {
        let lines = about().await;
        lines.iter().any(|l| l["message"].as_str().is_some_and(|m| m.starts_with("onDelete: "))).then_some(lines)
    })
    .await;
    Api::<Namespace>::all(client.clone()).delete(&ns, &DeleteParams::default()).await.unwrap();
    // What a reader of the log saw (shown with --nocapture).
    let changes: Vec<String> = all.iter().map(|l| format!("{} {}", l["message"], l["changes"])).collect();
    eprintln!("{name}: {changes:#?}");
    (living, all)
}

/// The line naming `want`, with its fields.
fn line_with<'a>(lines: &'a [Value], want: &str) -> &'a Value {
    let found = lines.iter().find(|l| l["changes"].as_str().is_some_and(|c| c.contains(want)));
    found.unwrap_or_else(|| panic!("no onUpdate with '{want}' in {lines:#?}"))
}

#[tokio::test]
#[ignore = "needs root and the local node: run `make test` as root"]
async fn node_a_container_over_its_memory_limit_is_logged_oomkilled() {
    let _turn = TURN.lock().await;
    // dd's 200 MB buffer, under a 50 MiB limit: the kernel kills it. (The
    // image links only a few applets; busybox itself has them all.)
    let container = json!({
        "name": "hog", "image": "docker.io/library/busybox:local", "imagePullPolicy": "Never",
        "command": ["busybox", "dd", "if=/dev/zero", "of=/dev/null", "bs=200M", "count=1"],
        "resources": { "limits": { "memory": "50Mi" }, "requests": { "memory": "50Mi" } }
    });
    let killed = "hog: terminated OOMKilled (exit 137)";
    let (lines, all) = lived("oom", "Never", container, |u| u.iter().any(|c| c.contains(killed))).await;
    let line = line_with(&lines, killed);
    assert_eq!((line["reasons"].as_str(), line["exit_code"].as_i64()), (Some("OOMKilled"), Some(137)), "{line}");
    // restartPolicy Never: the pod fails with it (from Pending or Running, as
    // the kubelet saw it start or not), in the same update or a later one.
    let failed = |c: &String| c.contains("phase Pending -> Failed") || c.contains("phase Running -> Failed");
    assert!(updates(&all, "oom").iter().any(failed), "{all:#?}");
    only_other_fields_never(&updates(&all, "oom"));
}

#[tokio::test]
#[ignore = "needs root and the local node: run `make test` as root"]
async fn node_a_container_that_exits_3_is_logged_with_its_exit_code_then_crash_loop_back_off() {
    let _turn = TURN.lock().await;
    let container = json!({
        "name": "crash", "image": "docker.io/library/busybox:local", "imagePullPolicy": "Never",
        "command": ["sh", "-c", "exit 3"]
    });
    let back_off = "crash: waiting CrashLoopBackOff (back-off ";
    let (lines, all) = lived("crash", "Always", container, |u| u.iter().any(|c| c.contains(back_off))).await;
    let updates = updates(&lines, "crash");
    // The exit, as the container's state or as what its restart left behind.
    let exit = updates
        .iter()
        .position(|c| c.contains("crash: terminated Error (exit 3)") || c.contains("(last: Error, exit 3)"));
    let looping = updates.iter().position(|c| c.contains(back_off));
    assert!(exit.is_some() && exit <= looping, "exit 3 first, then the back-off: {updates:#?}");
    let exited = updates.iter().find(|c| c.contains("restarts 0 -> 1")).expect("a restart");
    assert!(exited.contains("restarts 0 -> 1 (last: Error, exit 3)"), "{exited}");
    let line = line_with(&lines, back_off);
    assert!(line["reasons"].as_str().is_some_and(|r| r.split(' ').any(|r| r == "CrashLoopBackOff")), "{line}");
    let line = line_with(&lines, "exit 3");
    assert_eq!(line["exit_code"], 3, "{line}");
    only_other_fields_never(&crate::updates(&all, "crash"));
}

#[tokio::test]
#[ignore = "needs root and the local node: run `make test` as root"]
async fn node_an_image_that_cannot_be_pulled_is_logged_err_image_pull_then_back_off() {
    let _turn = TURN.lock().await;
    // A registry on a port nothing listens on: the pull is refused at once.
    let container = json!({
        "name": "app", "image": "127.0.0.1:9/demo-controller/none:1", "imagePullPolicy": "Always"
    });
    let (pull, back_off) = ("app: waiting ErrImagePull (", "app: waiting ImagePullBackOff (");
    let (lines, all) = lived("pull", "Always", container, |u| u.iter().any(|c| c.contains(back_off))).await;
    for want in [pull, back_off] {
        let line = line_with(&lines, want);
        let reason = want.split(' ').nth(2).unwrap();
        assert!(line["reasons"].as_str().is_some_and(|r| r.split(' ').any(|r| r == reason)), "{line}");
    }
    let line = line_with(&lines, pull);
    assert!(
        line["changes"].as_str().unwrap().contains("127.0.0.1:9/demo-controller/none:1"),
        "says which image: {line}"
    );
    only_other_fields_never(&updates(&all, "pull"));
}

/// The sections of cluster/node/hoststate.sh a running node must leave as
/// they were before it started (its link, cgroups and processes are new).
const HOST_WIDE: &[&str] =
    &["sysctls", "iptables", "ip6tables", "nft tables", "mounts", "network namespaces", "directories"];

fn section<'a>(snapshot: &'a str, name: &str) -> &'a str {
    let start = snapshot.find(&format!("## {name}\n")).unwrap_or_else(|| panic!("no section {name}"));
    let rest = &snapshot[start..];
    let end = rest[3..].find("\n## ").map(|i| i + 4).unwrap_or(rest.len());
    &rest[..end]
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[tokio::test]
#[ignore = "needs root and the local node: run `make test` as root"]
async fn node_running_leaves_the_hosts_sysctls_firewall_and_mounts_as_they_were() {
    // cluster/node/test.sh recorded the host before it started the node.
    let before_file = PathBuf::from(format!("{}.host-before", node_dir().display()));
    let before = std::fs::read_to_string(&before_file).expect("the host state recorded before the node started");
    let now = host("bash", &[repo().join("cluster/node/hoststate.sh").to_str().unwrap()]);
    for name in HOST_WIDE {
        assert_eq!(section(&before, name), section(&now, name), "the host's {name} changed while the node runs");
    }
    // On the host's network, exactly one new thing: the host end of the
    // node's link, its address and its routes.
    for name in ["links", "addresses", "routes"] {
        let (was, is) = (section(&before, name), section(&now, name));
        let new: Vec<&str> = is.lines().filter(|l| !was.lines().any(|w| w == *l)).collect();
        let gone: Vec<&str> = was.lines().filter(|l| !is.lines().any(|w| w == *l)).collect();
        assert!(gone.is_empty(), "{name} gone while the node runs: {gone:?}");
        assert!(!new.is_empty() && new.iter().all(|l| l.contains("dcn-host0")), "{name} new on the host: {new:?}");
    }
    // Yet the kubelet did write kernel.panic, into the node's mask (a file
    // of its directory mounted over the sysctl), and the node has firewall
    // rules of its own: its forward guard and kube-proxy's.
    let dir = node_dir();
    let exec = |args: &[&str]| {
        let mut all = vec!["cluster/node/exec.sh", "--dir", dir.to_str().unwrap(), "--"];
        all.extend(args);
        host("bash", &all)
    };
    for sysctl in ["kernel/panic", "kernel/panic_on_oops", "vm/overcommit_memory"] {
        let path = format!("/proc/sys/{sysctl}");
        let mount = exec(&["findmnt", "-n", "-o", "SOURCE", &path]);
        assert!(mount.contains(&format!("/sysctl/{}", sysctl.replace('/', "."))), "{path} not masked: {mount:?}");
    }
    assert_eq!(std::fs::read_to_string(in_node("/proc/sys/kernel/panic")).unwrap().trim(), "10");
    let forward = exec(&["iptables", "-w", "-S", "FORWARD"]);
    assert!(forward.contains("demo-controller node: pods never reach the host"), "{forward}");
    let mangle = exec(&["iptables", "-w", "-t", "mangle", "-S", "POSTROUTING"]);
    assert!(mangle.contains("demo-controller node: only replies to the host"), "{mangle}");
    assert!(exec(&["iptables", "-w", "-t", "nat", "-S"]).contains("KUBE-SERVICES"));
}

#[tokio::test]
#[ignore = "needs root and the local node: run `make test` as root"]
async fn node_scripts_refuse_a_foreign_dir_and_a_second_node() {
    let script = |name: &str, dir: &std::path::Path| {
        Command::new("bash").arg(repo().join("cluster/node").join(name)).arg("--dir").arg(dir).output().unwrap()
    };
    // A directory of someone else's: neither script touches it.
    let foreign = repo().join("target/test-node-foreign");
    let _ = std::fs::remove_dir_all(&foreign);
    std::fs::create_dir_all(&foreign).unwrap();
    std::fs::write(foreign.join("precious.txt"), "mine").unwrap();
    let up = script("up.sh", &foreign);
    assert_eq!(up.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&up.stderr),
        format!(
            "node/up.sh: error: refusing --dir {}: it was not made by this project (no .demo-controller-node in it); \
             not touching it\n",
            foreign.display()
        )
    );
    let down = script("down.sh", &foreign);
    assert_eq!(down.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&down.stderr),
        format!(
            "node/down.sh: error: refusing --dir {}: it was not made by this project (no .demo-controller-node in it); \
             not touching it\n",
            foreign.display()
        )
    );
    assert_eq!(std::fs::read_to_string(foreign.join("precious.txt")).unwrap(), "mine");
    assert_eq!(std::fs::read_dir(&foreign).unwrap().count(), 1, "nothing added");
    std::fs::remove_dir_all(&foreign).unwrap();

    // A second node while this one runs: refused, nothing made.
    let second = repo().join("target/test-node-second");
    let _ = std::fs::remove_dir_all(&second);
    let up = script("up.sh", &second);
    assert_eq!(up.status.code(), Some(1));
    let first = node_dir();
    assert_eq!(
        String::from_utf8_lossy(&up.stderr),
        format!(
            "node/up.sh: error: a local node is already running in {0}: only one can run on a machine; \
             stop it first with cluster/node/down.sh --dir {0}\n",
            first.display()
        )
    );
    assert!(!second.exists(), "the refused start made nothing");
    // ... and the first one still runs, Ready.
    let node = Api::<k8s_openapi::api::core::v1::Node>::all(admin().await).get("demo-node").await.unwrap();
    let ready = node.status.unwrap().conditions.unwrap().into_iter().find(|c| c.type_ == "Ready").unwrap();
    assert_eq!(ready.status, "True");
}

/// Runs a command as the unprivileged user nobody (uid 65534).
fn as_nobody(cmd: &[&str]) -> std::process::Output {
    Command::new("setpriv").args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]).args(cmd).output().unwrap()
}

#[tokio::test]
#[ignore = "needs root and the local node: run `make test` as root"]
async fn node_lets_no_other_local_user_in() {
    let dir = node_dir();
    let plane = dir.join("plane");
    // etcd: a unix socket in a directory only root may enter; no TCP port.
    let socket = plane.join("etcd.sock:0");
    assert!(socket.exists(), "etcd's socket");
    let py = format!(
        "import socket\ns = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect({:?})\n    print('connected')\n\
         except OSError as e:\n    print(type(e).__name__)",
        socket.to_str().unwrap()
    );
    let out = as_nobody(&["/usr/bin/python3", "-c", &py]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "PermissionError", "{out:?}");
    let listening = host("bash", &["cluster/node/exec.sh", "--dir", dir.to_str().unwrap(), "--", "ss", "-Hltnp"]);
    assert!(!listening.contains("\"etcd\""), "etcd listens on no TCP port:\n{listening}");
    // What the host (and so any local user) can reach in the node: only the
    // API server and the kubelet, on the node's address; the rest listens on
    // the node's own loopback.
    for line in listening.lines() {
        let local = line.split_whitespace().nth(3).unwrap_or_default();
        let open = !(local.starts_with("127.") || local.starts_with("[::1]"));
        let allowed = line.contains("\"kube-apiserver\"") || line.contains("\"kubelet\"");
        assert!(!open || (allowed && local.starts_with(&node_env("NODE_IP"))), "reachable from the host: {line}");
    }

    // The API server and the kubelet: no anonymous requests.
    let api = {
        let text = std::fs::read_to_string(plane.join("env")).unwrap();
        text.lines().find_map(|l| l.strip_prefix("APISERVER_URL=")).unwrap().to_string()
    };
    let kubelet = format!("https://{}:10250/pods", node_env("NODE_IP"));
    for url in [format!("{api}/api/v1/pods"), format!("{api}/readyz"), kubelet] {
        let out =
            as_nobody(&["/usr/bin/curl", "-sk", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "5", &url]);
        assert_eq!(String::from_utf8_lossy(&out.stdout), "401", "{url}: {out:?}");
    }

    // Private keys: the owner's only.
    for pki in [dir.join("pki"), plane.join("pki")] {
        for entry in std::fs::read_dir(&pki).unwrap().flatten() {
            if entry.path().extension().is_some_and(|e| e == "key") {
                use std::os::unix::fs::PermissionsExt;
                let mode = entry.metadata().unwrap().permissions().mode() & 0o777;
                assert_eq!(mode, 0o600, "{}", entry.path().display());
            }
        }
    }
}

#[tokio::test]
#[ignore = "needs root and the local node: run `make test` as root"]
async fn node_images_stand_ins_stay_in_the_projects_store_and_are_never_pushed() {
    // Whatever the machine's default store holds under the bases' real names
    // is real: no stand-in of ours is there.
    for base in ["docker.io/library/rust:1.95-bookworm", "gcr.io/distroless/cc-debian12:nonroot"] {
        let out = Command::new("podman")
            .args(["image", "inspect", "--format", "{{index .Config.Labels \"org.demo-controller.stand-in\"}}", base])
            .output()
            .unwrap();
        let label = String::from_utf8_lossy(&out.stdout);
        // (An absent label reads "" or "<no value>".)
        let absent = label.trim().is_empty() || label.trim() == "<no value>";
        assert!(!out.status.success() || absent, "{base} in the default store is a stand-in: {label}");
    }
    // An image only the project's own store holds (as one built on stand-ins
    // is) is refused by `make push`, in one line, before anything is sent.
    let cache = std::env::var("DEMO_CONTROLLER_CACHE").map(PathBuf::from).unwrap_or_else(|_| {
        let base = std::env::var("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|_| PathBuf::from(std::env::var("HOME").unwrap()).join(".cache"));
        base.join("demo-controller")
    });
    let own = |args: &[&str]| {
        let mut cmd = Command::new("podman");
        cmd.arg("--root").arg(cache.join("podman/root")).arg("--runroot").arg(cache.join("podman/runroot"));
        cmd.args(args).output().unwrap()
    };
    let image = "localhost/demo-controller-push-refused:test";
    let scratch_dir = common::fresh_dir_in(std::path::Path::new(env!("CARGO_TARGET_TMPDIR")), "node-empty-image");
    let scratch = scratch_dir.join("empty.tar");
    host("tar", &["-cf", scratch.to_str().unwrap(), "-T", "/dev/null"]);
    let imported = own(&["import", "-q", scratch.to_str().unwrap(), image]);
    let _ = std::fs::remove_dir_all(&scratch_dir);
    assert!(imported.status.success(), "{imported:?}");
    let push = Command::new("make").args(["--no-print-directory", "push", &format!("IMAGE={image}")]).output().unwrap();
    own(&["rmi", "-f", image]);
    assert!(!push.status.success());
    assert!(
        String::from_utf8_lossy(&push.stderr).contains(&format!(
            "image.sh: error: {image} was built on local stand-ins for its base images (no registry was reachable): \
             it is for the local node only and is not pushed; build it where the real bases can be pulled (make image) \
             and push that\n"
        )),
        "{push:?}"
    );
}

#[tokio::test]
#[ignore = "needs root and the local node: run `make test` as root"]
async fn node_two_replicas_one_leads_and_deleting_its_pod_hands_over() {
    let _turn = TURN.lock().await;
    let client = admin().await;
    deployed(&client).await;
    let Pods { leader, standby } = Pods::rolled_out(&client, 0).await;
    let (leader_name, standby_name) = (leader.metadata.name.clone().unwrap(), standby.metadata.name.clone().unwrap());
    let ns = workload_namespace(&client, "handover").await;
    let workload = |name: &str| -> Pod {
        serde_json::from_value(json!({
            "metadata": { "name": name },
            "spec": { "containers": [{ "name": "c", "image": "docker.io/library/busybox:local",
                                       "imagePullPolicy": "Never", "command": ["sleep", "3600"] }] }
        }))
        .unwrap()
    };
    let workloads: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let logged = |lines: &[Value], message: &str| lines.iter().any(|l| l["message"] == message);

    // The leader logs the first pod; the standby, which stands by for it, does not.
    workloads.create(&PostParams::default(), &workload("first")).await.unwrap();
    let first = format!("onAdd: {ns}/first");
    until("the leader's onAdd", Duration::from_secs(60), || async {
        logged(&log_of(&client, &leader_name, false).await, &first).then_some(())
    })
    .await;
    // The standby names the leader once it has seen it lead (at its next
    // try: after a rollout it may first have stood by for an old pod).
    let stands_by = format!("standing by: {leader_name}_");
    until("the standby to stand by for the leader", Duration::from_secs(60), || async {
        let lines = try_log_of(&client, &standby_name).await?;
        lines.iter().any(|l| l["message"].as_str().is_some_and(|m| m.starts_with(&stands_by))).then_some(())
    })
    .await;

    // `kubectl delete pod` of the leader: SIGTERM, drain, release. The
    // Deployment's replacement pod starts meanwhile, and a candidate runs
    // for the lease only once its cache is synced: whichever warm replica
    // tries first after the release leads (the standby, or the replacement
    // if its cache synced before the release), and logs what follows.
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    pods.delete(&leader_name, &DeleteParams::default()).await.unwrap();
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let next = until("another replica to lead after a release", Duration::from_secs(60), || async {
        let holder = leases.get("demo-controller").await.ok()?.spec?.holder_identity?;
        let (pod, _) = holder.rsplit_once('_')?;
        if pod == leader_name {
            return None; // still draining
        }
        let lines = try_log_of(&client, pod).await?;
        lines.iter().any(|l| l["message"] == "became leader" && l["released"] == true).then(|| pod.to_string())
    })
    .await;
    workloads.create(&PostParams::default(), &workload("second")).await.unwrap();
    let second = format!("onAdd: {ns}/second");
    let lines = until("the new leader's onAdd", Duration::from_secs(60), || async {
        let lines = log_of(&client, &next, false).await;
        logged(&lines, &second).then_some(lines)
    })
    .await;
    assert!(!logged(&lines, &first), "the first pod's onAdd was logged twice: {lines:#?}");
    let events_before: Vec<&Value> = lines
        .iter()
        .take_while(|l| l["message"] != "became leader")
        .filter(|l| l["message"].as_str().is_some_and(|m| m.starts_with("on")))
        .collect();
    assert!(events_before.is_empty(), "{next} logged before it led: {events_before:#?}");
    Api::<Namespace>::all(client.clone()).delete(&ns, &DeleteParams::default()).await.unwrap();
    deployed(&client).await;
}
