//! Chapters 8 and 9 in a cluster, on the real local node: each chapter's
//! manifest (examples/ch8-secret-copier.yaml, examples/ch9_reboot.yaml)
//! applied as it is, with the image cluster/node/chapter-image.sh built and
//! loaded (the chapters' examples as `make test` builds them, and a shell). The
//! pods run with the manifests' ServiceAccounts and RBAC, and nothing more:
//! what they do here, that RBAC allows. Their logs are read through the
//! API's pods/log endpoint, as `kubectl logs` reads them.
//!
//! These tests need root and the local node: `make test` as root starts it,
//! builds and loads the image, and sets DEMO_CONTROLLER_TEST_NODE; without
//! root they are reported as not run. Each deletes what it made, so the
//! node's teardown checks see a node as the other node tests leave it.

mod common;

use common::{node_admin as admin, node_dir, until};

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Secret};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{DeleteParams, ListParams, LogParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

/// The image cluster/node/chapter-image.sh builds and loads, for the ch8
/// manifest's IMAGE (the ch9 manifest names it ch9-reboot:dev itself).
const IMAGE: &str = "demo-controller-chapters:dev";
const LIMIT: Duration = Duration::from_secs(120);

/// A value from the node's env file (cluster/node/up.sh writes it).
fn node_env(key: &str) -> String {
    let text = std::fs::read_to_string(node_dir().join("env")).expect("the node's env file");
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key} in the node's env file"))
        .to_string()
}

/// The objects of a manifest in examples/, with `image: IMAGE` replaced.
fn manifest(file: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(common::repo().join("examples").join(file)).expect("the chapter's manifest");
    let text = text.replace("image: IMAGE", &format!("image: {IMAGE}"));
    serde_saphyr::from_multiple(&text).expect("the chapter's manifest parses")
}

async fn apply(client: &Client, objects: &[Value]) {
    for object in objects {
        common::apply(client, object, false).await.expect("apply the chapter's manifest");
    }
}

/// Deletes the manifest's cluster-wide objects and its namespaces (the rest
/// goes with them), and any other namespaces named; waits until the
/// namespaces are gone, their pods with them.
async fn delete(client: &Client, objects: &[Value], namespaces: &[&str]) {
    let mut gone: Vec<String> = namespaces.iter().map(|n| n.to_string()).collect();
    for object in objects.iter().filter(|o| o["metadata"]["namespace"].is_null()) {
        let name = object["metadata"]["name"].as_str().expect("a name");
        let kind = object["kind"].as_str().expect("a kind");
        let params = DeleteParams::default();
        match kind {
            "Namespace" => gone.push(name.to_string()),
            "ClusterRole" => drop(Api::<ClusterRole>::all(client.clone()).delete(name, &params).await.expect("delete")),
            "ClusterRoleBinding" => {
                drop(Api::<ClusterRoleBinding>::all(client.clone()).delete(name, &params).await.expect("delete"))
            }
            other => panic!("a cluster-wide {other} in the manifest: delete it here too"),
        }
    }
    let api: Api<Namespace> = Api::all(client.clone());
    for ns in &gone {
        api.delete(ns, &DeleteParams::default()).await.expect("delete a namespace");
    }
    until("the namespaces to be gone", LIMIT, || async {
        for ns in &gone {
            if api.get_opt(ns).await.ok()?.is_some() {
                return None;
            }
        }
        Some(())
    })
    .await;
}

/// The one pod labelled `selector` in `ns`, once Ready. If none is, the
/// panic says what the namespace holds instead: its pods' states and
/// logs, and its Events (a refused pod shows only there).
async fn ready_pod(client: &Client, ns: &str, selector: &str) -> String {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let start = Instant::now();
    loop {
        let list = pods.list(&ListParams::default().labels(selector)).await.map(|l| l.items).unwrap_or_default();
        if let [pod] = list.as_slice() {
            let conditions = pod.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
            if conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True") {
                return pod.metadata.name.clone().expect("a pod's name");
            }
        }
        if start.elapsed() > LIMIT {
            let mut said = Vec::new();
            for pod in &list {
                let name = pod.metadata.name.clone().unwrap_or_default();
                said.push(format!("pod {name}: {:?}", pod.status.as_ref().map(|s| &s.container_statuses)));
                said.push(format!("its log: {:?}", log_of(client, ns, &name).await));
            }
            let events = Api::<k8s_openapi::api::core::v1::Event>::namespaced(client.clone(), ns);
            let events = events.list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default();
            said.extend(events.into_iter().map(|e| format!("event: {:?} {:?}", e.reason, e.message)));
            panic!("timed out after {LIMIT:?} waiting for a Ready pod {selector} in {ns}:\n{}", said.join("\n"));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The pod's log, line by line, through the API; empty while it cannot be
/// read yet.
async fn log_of(client: &Client, ns: &str, pod: &str) -> Vec<String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let text = pods.logs(pod, &LogParams::default()).await.unwrap_or_default();
    text.lines().map(str::to_string).collect()
}

/// Waits until the pod's log holds `line`; returns the whole log.
async fn logged(client: &Client, ns: &str, pod: &str, line: &str) -> Vec<String> {
    until(&format!("{line:?} in the log of {ns}/{pod}"), LIMIT, || async {
        let lines = log_of(client, ns, pod).await;
        lines.iter().any(|l| l == line).then_some(lines)
    })
    .await
}

#[tokio::test]
#[ignore = "needs root and the local node: run `make test` as root"]
async fn node_chapter8_manifest_copies_into_a_labelled_namespace_and_cleans_up_with_its_own_rbac() {
    let client = admin().await;
    let objects = manifest("ch8-secret-copier.yaml");
    apply(&client, &objects).await;
    let copier = ready_pod(&client, "secret-copier", "app.kubernetes.io/name=secret-copier").await;
    let banner = "chapter 8: copies the Secrets of play labelled demo.example.com/copy=true into namespaces \
                  labelled demo.example.com/copies=true";
    logged(&client, "secret-copier", &copier, banner).await;

    // The source namespace the manifest names (-n play), and a namespace
    // that asks for copies.
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for (name, labels) in [("play", json!({})), ("team-a", json!({ "demo.example.com/copies": "true" }))] {
        let ns = serde_json::from_value(json!({ "metadata": { "name": name, "labels": labels } })).unwrap();
        namespaces.create(&PostParams::default(), &ns).await.expect("create a namespace");
    }
    let source: Secret = serde_json::from_value(json!({
        "metadata": { "name": "db", "labels": { "demo.example.com/copy": "true" } },
        "stringData": { "password": "s3cret" }
    }))
    .unwrap();
    let play: Api<Secret> = Api::namespaced(client.clone(), "play");
    let team_a: Api<Secret> = Api::namespaced(client.clone(), "team-a");
    let uid = play.create(&PostParams::default(), &source).await.expect("create the source").metadata.uid.unwrap();

    // The copy: the source's data, labelled with the source's uid.
    let copy = until("the copy in team-a", LIMIT, || async { team_a.get_opt("db").await.ok()? }).await;
    assert_eq!(copy.data.unwrap_or_default()["password"].0, b"s3cret");
    assert_eq!(copy.metadata.labels.unwrap_or_default()["demo.example.com/copy-of"], uid);
    logged(&client, "secret-copier", &copier, "created team-a/db (copy of play/db)").await;

    // The source deleted: its finalizer holds it until the copy is gone.
    play.delete("db", &DeleteParams::default()).await.expect("delete the source");
    until("the source to be gone", LIMIT, || async { play.get_opt("db").await.ok()?.is_none().then_some(()) }).await;
    assert!(team_a.get_opt("db").await.expect("get the copy").is_none(), "the copy outlived its source");
    let last = "deleted team-a/db (its source no longer asks for copies)";
    let lines = logged(&client, "secret-copier", &copier, last).await;
    // Every line, no refusal among them: the manifest's RBAC was enough.
    // (A finalizer patch from a cache that had not yet seen the last write
    // is retried; whether one happens depends on timing.)
    let lines: Vec<&str> = lines.iter().map(String::as_str).filter(|l| !l.starts_with("stale cache: ")).collect();
    assert_eq!(
        lines,
        [banner, "created team-a/db (copy of play/db)", "source play/db is being deleted: deleting its copies", last]
    );
    let pod = Api::<Pod>::namespaced(client.clone(), "secret-copier").get(&copier).await.unwrap();
    assert_eq!(pod.spec.unwrap().service_account_name.as_deref(), Some("secret-copier"));

    delete(&client, &objects, &["play", "team-a"]).await;
}

#[tokio::test]
#[ignore = "needs root and the local node: run `make test` as root"]
async fn node_chapter9_manifest_reboots_the_node_with_the_stand_in_command_and_leaves_it_clean() {
    let client = admin().await;
    let objects = manifest("ch9_reboot.yaml");
    apply(&client, &objects).await;
    let node = node_env("NODE_NAME");
    let ns = "ch9-reboot";
    let agent = ready_pod(&client, ns, "app=reboot-agent").await;
    let controller = ready_pod(&client, ns, "app=reboot-controller").await;
    let banner = format!("chapter 9 agent: node {node} reboots when demo.example.com/reboot-now appears");
    logged(&client, ns, &agent, &banner).await;
    logged(&client, ns, &controller, "cache synced (nodes: 1)").await;
    // The DaemonSet put its one agent on the one node.
    let ds = Api::<DaemonSet>::namespaced(client.clone(), ns).get("reboot-agent").await.unwrap();
    assert_eq!(ds.status.map(|s| s.number_ready), Some(1));
    let deploy = Api::<Deployment>::namespaced(client.clone(), ns).get("reboot-controller").await.unwrap();
    assert_eq!(deploy.status.and_then(|s| s.ready_replicas), Some(1));

    // A person asks for a reboot.
    let nodes: Api<Node> = Api::all(client.clone());
    let ask = json!({ "metadata": { "annotations": { "demo.example.com/reboot-needed": "true" } } });
    nodes.patch(&node, &PatchParams::default(), &Patch::Merge(&ask)).await.expect("annotate the node");

    let done = "the node is Ready and the reboot command finished: removed reboot-in-progress";
    let lines = logged(&client, ns, &agent, done).await;
    // A conflict (the kubelet wrote the node in between) is retried; whether
    // one happens depends on timing.
    let lines: Vec<&str> = lines.iter().map(String::as_str).filter(|l| !l.starts_with("conflict: ")).collect();
    assert_eq!(
        lines,
        [
            banner.as_str(),
            "took reboot-now: set reboot-in-progress",
            "running the reboot command: sh -c 'echo \"stand-in: would reboot $NODE now\"; sleep 3'",
            &format!("stand-in: would reboot {node} now"),
            "the reboot command finished",
            done,
        ]
    );
    let said = format!("reboot-now: {node} (unavailable before: 0 of at most 1)");
    logged(&client, ns, &controller, &said).await;
    // The node's annotations are clean again: none of the three is left.
    let annotations = nodes.get(&node).await.unwrap().metadata.annotations.unwrap_or_default();
    let left: Vec<&String> = annotations.keys().filter(|k| k.starts_with("demo.example.com/reboot-")).collect();
    assert!(left.is_empty(), "annotations left on {node}: {left:?}");

    delete(&client, &objects, &[]).await;
}
