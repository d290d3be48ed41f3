//! Pods read in protobuf from the real API server: the same pods as JSON and
//! as protobuf give the same cached `Pod`; a real watch stream is
//! length-prefixed frames that k8s-pb and our decoder read alike; and a server
//! that refuses protobuf is read as JSON, with one line saying so.
//!
//! The rest of the end-to-end suite runs on protobuf (the default wire), and
//! `make test` runs the watch and fault tests again with
//! DEMO_CONTROLLER_WIRE=json.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use demo_controller::pod::Pod;
use demo_controller::protobuf::{self, Frames, WatchEvent};
use futures::StreamExt;
use http_body_util::BodyExt;
use k8s_pb::api::core::v1 as pb;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use prost::Message;
use serde_json::json;

const T: Duration = Duration::from_secs(60);

/// GET `path` asking for protobuf: the status, Content-Type and body.
async fn get_protobuf(client: &kube::Client, path: &str) -> (u16, String, kube::client::Body) {
    let request =
        http::Request::get(path).header("Accept", protobuf::watch::PROTOBUF).body(kube::client::Body::empty()).unwrap();
    let response = client.send(request).await.expect("GET in protobuf");
    let content_type = response.headers().get("content-type").map(|v| v.to_str().unwrap().to_string());
    (response.status().as_u16(), content_type.unwrap_or_default(), response.into_body())
}

/// A pod made to carry what the cache keeps: labels, an annotation and a
/// finalizer (fingerprinted), and a status with conditions and container
/// states of every kind (no kubelet here: the test writes the status).
async fn rich_pod(client: &kube::Client, ns: &str, name: &str) {
    create(client, ns, name, &[("app", "web")]).await;
    let api = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), ns);
    let meta = json!({"metadata": {"annotations": {"note": "x"}, "finalizers": ["demo-controller.test/hold"]}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&meta)).await.expect("annotate");
    let status = json!({"status": {
        "phase": "Running", "reason": "Evicted", "message": "The node was low on resource: memory.",
        "conditions": [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Ready", "status": "False", "reason": "ContainersNotReady"},
            {"type": "example.com/gate", "status": "True"}
        ],
        "containerStatuses": [
            {"name": "app", "ready": false, "restartCount": 4, "image": "x", "imageID": "",
             "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 20s"}},
             "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}},
            {"name": "side", "ready": true, "restartCount": 0, "image": "x", "imageID": "",
             "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}
        ]
    }});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status)).await.expect("set status");
}

async fn release(client: &kube::Client, ns: &str, name: &str) {
    let patch = json!({"metadata": {"finalizers": null}});
    Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), ns)
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("remove finalizer");
}

/// The fingerprints hash each wire's own bytes (JSON text, protobuf
/// fields), so they differ between wires by design; the rest must not.
fn without_fingerprints(mut pod: Pod) -> Pod {
    pod.unshown_metadata = 0;
    if let Some(s) = pod.status.as_mut() {
        s.fingerprint = 0;
    }
    pod
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test]
async fn the_same_pods_read_as_json_and_as_protobuf_are_the_same() {
    let c = cluster().await;
    let ns = namespace(&c.client, "pb-list").await;
    rich_pod(&c.client, &ns, "rich").await;
    create(&c.client, &ns, "plain", &[]).await;

    // JSON, through kube and pod.rs's serde types.
    let json = Api::<Pod>::namespaced(c.client.clone(), &ns).list(&ListParams::default()).await.expect("list as JSON");

    // Protobuf, the same LIST.
    let (code, content_type, body) = get_protobuf(&c.client, &format!("/api/v1/namespaces/{ns}/pods")).await;
    assert_eq!((code, content_type.as_str()), (200, "application/vnd.kubernetes.protobuf"));
    let bytes = body.collect().await.unwrap().to_bytes();
    assert_eq!(&bytes[..4], b"k8s\0", "the magic");
    let page = protobuf::pod_list(bytes.clone()).expect("decode the list");
    // A list's resourceVersion is the whole store's revision, and other tests
    // write to this API server between the two LISTs: the two lists' own
    // resourceVersions may differ. The pods in them, each with its own
    // resourceVersion, may not (nothing writes to this namespace).
    assert!(!page.resource_version.is_empty(), "a list carries a resourceVersion");

    let mut ours: Vec<Pod> = page.items.into_iter().map(without_fingerprints).collect();
    let mut theirs: Vec<Pod> = json.items.into_iter().map(without_fingerprints).collect();
    ours.sort_by_key(|p| p.metadata.name.clone());
    theirs.sort_by_key(|p| p.metadata.name.clone());
    assert_eq!(ours, theirs);
    let rich = ours.iter().find(|p| p.metadata.name.as_deref() == Some("rich")).unwrap();
    assert_eq!(rich.status.as_ref().unwrap().container_statuses.len(), 2, "{rich:?}");

    // And k8s-pb, decoding the same bytes, names the same pods and versions.
    let unknown = k8s_pb::apimachinery::pkg::runtime::Unknown::decode(&bytes[4..]).unwrap();
    let list = pb::PodList::decode(unknown.raw.unwrap().as_slice()).unwrap();
    let mut names: Vec<(String, String)> = list
        .items
        .iter()
        .map(|p| {
            let m = p.metadata.as_ref().unwrap();
            (m.name.clone().unwrap(), m.resource_version.clone().unwrap())
        })
        .collect();
    names.sort();
    let ours: Vec<(String, String)> =
        ours.iter().map(|p| (p.metadata.name.clone().unwrap(), p.metadata.resource_version.clone().unwrap())).collect();
    assert_eq!(names, ours);
    release(&c.client, &ns, "rich").await;
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test]
async fn a_real_watch_is_length_prefixed_protobuf_frames() {
    let c = cluster().await;
    let ns = namespace(&c.client, "pb-watch").await;
    let list = Api::<Pod>::namespaced(c.client.clone(), &ns).list(&ListParams::default()).await.unwrap();
    let rv = list.metadata.resource_version.unwrap();
    let path = format!("/api/v1/namespaces/{ns}/pods?watch=1&resourceVersion={rv}&timeoutSeconds=10");
    let (code, content_type, body) = get_protobuf(&c.client, &path).await;
    assert_eq!((code, content_type.as_str()), (200, "application/vnd.kubernetes.protobuf;stream=watch"));
    create(&c.client, &ns, "p", &[]).await;

    // Read until one whole frame is in.
    let mut body = body.into_data_stream();
    let mut raw = Vec::new();
    let start = Instant::now();
    while raw.len() < 4 || raw.len() < 4 + u32::from_be_bytes(raw[..4].try_into().unwrap()) as usize {
        assert!(start.elapsed() < T, "no whole frame: {raw:?}");
        raw.extend_from_slice(&body.next().await.expect("more of the stream").expect("a chunk"));
    }
    let len = u32::from_be_bytes(raw[..4].try_into().unwrap()) as usize;
    let frame = Bytes::copy_from_slice(&raw[4..4 + len]);

    // k8s-pb: a metav1.WatchEvent without magic, its object with it.
    let event = meta::WatchEvent::decode(frame.clone()).expect("a WatchEvent");
    assert_eq!(event.r#type.as_deref(), Some("ADDED"));
    let object = event.object.unwrap().raw.unwrap();
    assert_eq!(&object[..4], b"k8s\0");

    // Ours, through the frame splitter.
    let mut frames = Frames::default();
    frames.push(&raw);
    let (frame, offset) = frames.next_frame().unwrap().expect("a frame");
    assert_eq!(offset, 0);
    match protobuf::watch_event(frame, offset).expect("decode the event") {
        WatchEvent::Added(pod) => assert_eq!(pod.metadata.name.as_deref(), Some("p")),
        other => panic!("{other:?}"),
    }
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test]
async fn a_server_that_refuses_protobuf_is_read_as_json_with_one_line() {
    let c = cluster().await;
    let ns = namespace(&c.client, "pb-refused").await;
    create(&c.client, &ns, "old", &[]).await;
    // The real server answers an unknown media type 406 Not Acceptable.
    let faults = [("DEMO_CONTROLLER_FAULTS", "protobuf-accept=application/x-not-protobuf")];
    let logger = Logger::start_with(&c.kubeconfig, &["-n", &ns, "--wire", "protobuf"], &faults);
    let warning = logger
        .wait_message("the API server refuses pods in protobuf (406 Not Acceptable): reading them as JSON instead", T)
        .await;
    assert_eq!(warning["level"], "WARN");
    logger.synced().await;
    create(&c.client, &ns, "new", &[]).await;
    assert_eq!(logger.wait_events(&ns, 2).await, [format!("onAdd: {ns}/old"), format!("onAdd: {ns}/new")]);
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test]
async fn both_wires_log_the_same_lines_for_the_same_changes() {
    let c = cluster().await;
    let ns = namespace(&c.client, "pb-both").await;
    rich_pod(&c.client, &ns, "rich").await;
    let loggers = [
        Logger::start(&c.kubeconfig, &["-n", &ns, "--wire", "protobuf"]),
        Logger::start(&c.kubeconfig, &["-n", &ns, "--wire", "json"]),
    ];
    // One change at a time, each seen by both before the next: the lines
    // then cannot differ by how changes happened to merge.
    for logger in &loggers {
        logger.wait_count(&ns, 1).await;
    }
    label(&c.client, &ns, "rich", "tier", "front").await;
    for logger in &loggers {
        logger.wait_count(&ns, 2).await;
    }
    set_phase(&c.client, &ns, "rich", "Succeeded").await;
    for logger in &loggers {
        logger.wait_count(&ns, 3).await;
    }
    release(&c.client, &ns, "rich").await;
    for logger in &loggers {
        logger.wait_count(&ns, 4).await;
    }
    delete(&c.client, &ns, "rich").await;
    for logger in &loggers {
        logger.wait_count(&ns, 5).await;
    }
    let lines: Vec<Vec<String>> = loggers
        .iter()
        .map(|logger| {
            logger
                .event_lines(&ns)
                .iter()
                .map(|l| {
                    let field = |k: &str| l[k].as_str().unwrap_or_default().to_string();
                    format!("{} changes={:?} reasons={:?}", field("message"), field("changes"), field("reasons"))
                })
                .collect()
        })
        .collect();
    assert_eq!(lines[0], lines[1], "protobuf vs JSON");
    assert!(lines[0][4].starts_with(&format!("onDelete: {ns}/rich")), "{:#?}", lines[0]);
}
