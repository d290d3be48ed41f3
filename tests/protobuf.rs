//! Pods read in protobuf from the real API server: the same pods as JSON and
//! as protobuf give the same cached `Pod`; a real watch stream is
//! length-prefixed frames that k8s-pb and our decoder read alike; the
//! watcher's position moves past an event only once the next is asked for
//! (what the leader's mark relies on); and a server that refuses protobuf is
//! read as JSON, with one line saying so.
//!
//! The rest of the end-to-end suite runs on protobuf (the default wire), and
//! `make test` runs the watch and fault tests again with
//! DEMO_CONTROLLER_WIRE=json.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use demo_controller::pod::{ApiPod, Pod};
use futures::StreamExt;
use http_body_util::BodyExt;
use k8s_pb::api::core::v1 as pb;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use kube_pod_protobuf::{self as protobuf, Frames, WatchEvent};
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
    let json =
        Api::<ApiPod>::namespaced(c.client.clone(), &ns).list(&ListParams::default()).await.expect("list as JSON");

    // Protobuf, the same LIST.
    let (code, content_type, body) = get_protobuf(&c.client, &format!("/api/v1/namespaces/{ns}/pods")).await;
    assert_eq!((code, content_type.as_str()), (200, "application/vnd.kubernetes.protobuf"));
    let bytes = body.collect().await.unwrap().to_bytes();
    assert_eq!(&bytes[..4], b"k8s\0", "the magic");
    let page = protobuf::pod_list::<Pod>(bytes.clone()).expect("decode the list");
    // Each list has a resourceVersion of its own: the whole store's revision
    // when it was read, which other tests' writes move on between our two
    // reads. Only the pods' own versions are a promise (compared below).
    assert!(!page.resource_version.is_empty(), "a list carries a resourceVersion");

    let mut ours: Vec<Pod> = page.items.into_iter().map(without_fingerprints).collect();
    let mut theirs: Vec<Pod> = json.items.into_iter().map(ApiPod::into_pod).map(without_fingerprints).collect();
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
        ours.iter().map(|p| (p.name().to_string(), p.resource_version().unwrap_or_default().to_string())).collect();
    assert_eq!(names, ours);
    release(&c.client, &ns, "rich").await;
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test]
async fn a_real_watch_is_length_prefixed_protobuf_frames() {
    let c = cluster().await;
    let ns = namespace(&c.client, "pb-watch").await;
    let list = Api::<ApiPod>::namespaced(c.client.clone(), &ns).list(&ListParams::default()).await.unwrap();
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
    match protobuf::watch_event::<Pod>(frame, offset).expect("decode the event") {
        WatchEvent::Added(pod) => assert_eq!(pod.metadata.name.as_deref(), Some("p")),
        other => panic!("{other:?}"),
    }
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test]
async fn the_watchers_position_moves_past_an_event_once_the_next_is_asked_for_or_it_is_consumed() {
    use futures::FutureExt;
    use kube::runtime::watcher::{Config, Event};
    let c = cluster().await;
    let ns = namespace(&c.client, "pb-position").await;
    create(&c.client, &ns, "before", &[]).await;
    let position = protobuf::watch::Position::default();
    let options = protobuf::watch::Options::default().position(position.clone());
    let mut events = protobuf::watch::watcher::<Pod>(c.client.clone(), Some(&ns), Config::default(), options).boxed();
    let number = |rv: Option<String>| rv.and_then(|rv| rv.parse::<u64>().ok());
    loop {
        match tokio::time::timeout(T, events.next()).await.expect("an event in time").expect("the stream goes on") {
            Ok(Event::InitDone) => break,
            Ok(_) => {}
            Err(e) => panic!("{e}"),
        }
    }
    // The list's InitDone is handed out: its resourceVersion is known, but
    // nothing counts as handled until the consumer asks for more.
    let listed = number(position.listed()).expect("the list's resourceVersion");
    assert_eq!(position.handled(), None);
    let later = create(&c.client, &ns, "later", &[]).await;
    let later = number(later.metadata.resource_version).expect("a resourceVersion");
    match tokio::time::timeout(T, events.next()).await.expect("an event in time").expect("the stream goes on") {
        Ok(Event::Apply(pod)) => assert_eq!(pod.metadata.name.as_deref(), Some("later")),
        other => panic!("{other:?}"),
    }
    // Asked for more: the list is handled; `later`, handed out, is not yet.
    let handled = number(position.handled()).expect("a position");
    assert!(listed <= handled && handled < later, "{listed} <= {handled} < {later}");
    // The consumer says it is done with `later`, without asking for more
    // (as a program does before it stops): now `later` is handled.
    position.consumed();
    assert!(number(position.handled()).expect("a position") >= later);
    // Asked for more (nothing else comes): it stays handled.
    let _ = events.next().now_or_never();
    assert!(number(position.handled()).expect("a position") >= later);
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

// --- Between the logger and the server: a proxy ----------------------------------------

/// What the proxy does to what passes through it.
#[derive(Clone, Copy, PartialEq)]
enum Meddling {
    /// Asks the server for JSON whatever the client asked, as `kubectl
    /// proxy` does (it rewrites Accept).
    AsksForJson,
    /// Forwards as asked, but slips hostile frames into the first watches
    /// that do not carry a list (see [`hostile_frames`]): one before each.
    SlipsFrames,
    /// Answers the first paged LIST of pods itself, with a page the reader
    /// refuses (a million empty pods: too costly to decode), as it refuses
    /// a first LIST at resourceVersion 0 that the watch cache answered whole
    /// past its size cap; forwards everything else.
    SpoilsFirstList,
}

/// A plain-HTTP proxy on loopback in front of the real API server, as
/// `kubectl proxy` is: it forwards every request with the admin credentials
/// of `client` (so the logger's kubeconfig needs none) and logs each
/// request's path and query.
struct Proxy {
    port: u16,
    requests: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Forward {
    client: kube::Client,
    meddling: Meddling,
    requests: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    /// Hostile frames still to slip in, one per watch.
    frames: std::sync::Mutex<Vec<Vec<u8>>>,
    /// Whether a LIST was answered with a spoiled page already.
    spoiled: std::sync::atomic::AtomicBool,
}

impl Proxy {
    async fn start(client: kube::Client, meddling: Meddling) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let frames = if meddling == Meddling::SlipsFrames { hostile_frames() } else { Vec::new() };
        let forward = std::sync::Arc::new(Forward {
            client,
            meddling,
            requests: requests.clone(),
            frames: std::sync::Mutex::new(frames),
            spoiled: std::sync::atomic::AtomicBool::new(false),
        });
        let app = axum::Router::new().fallback(proxy).with_state(forward);
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Proxy { port, requests, task }
    }

    /// A kubeconfig for the logger: the proxy's plain-HTTP address, no user.
    fn kubeconfig(&self, name: &str) -> std::path::PathBuf {
        kubeconfig(name, &format!("http://127.0.0.1:{}", self.port), None, "    {}")
    }

    /// The informer's LIST requests for pods (paged: with a limit), in
    /// order. (The tests' marker pods are created through the proxy too.)
    fn pod_lists(&self) -> Vec<String> {
        let requests = self.requests.lock().unwrap();
        requests
            .iter()
            .filter(|r| r.contains("/pods?") && r.contains("limit=") && !r.contains("watch="))
            .cloned()
            .collect()
    }
}

async fn proxy(
    axum::extract::State(forward): axum::extract::State<std::sync::Arc<Forward>>,
    request: axum::extract::Request,
) -> axum::response::Response {
    let (parts, body) = request.into_parts();
    let target = parts.uri.path_and_query().map_or("/".to_string(), |p| p.to_string());
    forward.requests.lock().unwrap().push(target.clone());
    let is_pod_list = target.contains("/pods?") && target.contains("limit=") && !target.contains("watch=");
    if forward.meddling == Meddling::SpoilsFirstList
        && is_pod_list
        && !forward.spoiled.swap(true, std::sync::atomic::Ordering::SeqCst)
    {
        return http::Response::builder()
            .header(http::header::CONTENT_TYPE, "application/vnd.kubernetes.protobuf")
            .body(axum::body::Body::from(spoiled_page()))
            .unwrap();
    }
    let body = body.collect().await.unwrap().to_bytes().to_vec();
    let mut upstream = http::Request::builder().method(parts.method).uri(&target);
    for (name, value) in &parts.headers {
        if name != http::header::HOST && name != http::header::CONNECTION {
            upstream = upstream.header(name, value);
        }
    }
    let mut upstream = upstream.body(kube::client::Body::from(body)).unwrap();
    if forward.meddling == Meddling::AsksForJson {
        upstream.headers_mut().insert(http::header::ACCEPT, http::HeaderValue::from_static("application/json"));
    }
    let Ok(response) = forward.client.send(upstream).await else {
        return http::Response::builder().status(502).body(axum::body::Body::from("no answer")).unwrap();
    };
    let (mut parts, body) = response.into_parts();
    for hop in [http::header::TRANSFER_ENCODING, http::header::CONNECTION, http::header::CONTENT_LENGTH] {
        parts.headers.remove(hop);
    }
    let is_watch = target.contains("watch=") && !target.contains("sendInitialEvents=true");
    let slipped = if is_watch { forward.frames.lock().unwrap().pop() } else { None };
    let body = match slipped {
        Some(frame) => {
            let first = futures::stream::once(async move { Ok::<_, kube::Error>(Bytes::from(frame)) });
            axum::body::Body::from_stream(first.chain(body.into_data_stream()))
        }
        None => axum::body::Body::new(body),
    };
    http::Response::from_parts(parts, body)
}

/// Two hostile watch frames, each a MODIFIED pod whose status is nothing but
/// empty container statuses (`42 00`, two bytes each, a whole struct each
/// to prost). Slipped in last first: one just under the frame cap (refused
/// by what decoding it would cost), then one of tens of MB (refused by its
/// length).
fn hostile_frames() -> Vec<Vec<u8>> {
    let frame = |entries: usize| {
        let status = [0x42u8, 0x00].repeat(entries);
        let mut pod = Vec::new();
        prost::encoding::encode_key(3, prost::encoding::WireType::LengthDelimited, &mut pod);
        prost::encoding::encode_varint(status.len() as u64, &mut pod);
        pod.extend_from_slice(&status);
        let object = object("Pod", pod);
        let event = meta::WatchEvent {
            r#type: Some("MODIFIED".into()),
            object: Some(k8s_pb::apimachinery::pkg::runtime::RawExtension { raw: Some(object) }),
        };
        let event = event.encode_to_vec();
        let mut out = (event.len() as u32).to_be_bytes().to_vec();
        out.extend(event);
        out
    };
    vec![frame(20 << 20), frame((protobuf::MAX_FRAME - 4096) / 2)]
}

/// A PodList of a million empty pods (`12 00`, two bytes each): a 2 MiB page
/// the reader refuses for what its structs would cost.
fn spoiled_page() -> Vec<u8> {
    object("PodList", [0x12u8, 0x00].repeat(1 << 20))
}

/// `k8s\0` + runtime.Unknown{kind, raw}: an object as the API server sends it.
fn object(kind: &str, raw: Vec<u8>) -> Vec<u8> {
    let unknown = k8s_pb::apimachinery::pkg::runtime::Unknown {
        type_meta: Some(k8s_pb::apimachinery::pkg::runtime::TypeMeta {
            api_version: Some("v1".into()),
            kind: Some(kind.into()),
        }),
        raw: Some(raw),
        ..Default::default()
    };
    let mut object = protobuf::MAGIC.to_vec();
    object.extend(unknown.encode_to_vec());
    object
}

/// The peak resident memory of a process (VmHWM), in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test]
async fn through_a_proxy_that_asks_for_json_the_logger_reads_json_after_one_line() {
    let c = cluster().await;
    let ns = namespace(&c.client, "pb-proxy-json").await;
    create(&c.client, &ns, "old", &[]).await;
    let proxy = Proxy::start(c.client.clone(), Meddling::AsksForJson).await;
    let logger = Logger::start(&proxy.kubeconfig("proxy-json"), &["-n", &ns, "--wire", "protobuf"]);
    logger.synced().await;
    create(&c.client, &ns, "new", &[]).await;
    assert_eq!(logger.wait_events(&ns, 2).await, [format!("onAdd: {ns}/old"), format!("onAdd: {ns}/new")]);
    // One WARN, saying what came back (the streaming list's watch, first).
    let warnings = logger.warnings();
    assert_eq!(
        warnings,
        ["pods were asked for in protobuf, but the answer to a request for protobuf came with Content-Type \
             \"application/json\": reading them as JSON instead"],
        "{}",
        logger.dump()
    );
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test]
async fn hostile_frames_are_refused_with_a_line_each_and_a_relist_in_bounded_memory() {
    let c = cluster().await;
    let ns = namespace(&c.client, "pb-hostile").await;
    create(&c.client, &ns, "old", &[]).await;
    let proxy = Proxy::start(c.client.clone(), Meddling::SlipsFrames).await;
    let logger = Logger::start(&proxy.kubeconfig("proxy-hostile"), &["-n", &ns, "--paged-list", "--wire", "protobuf"]);
    logger.synced().await;
    // Both frames slipped in and refused, each with its reason, each
    // followed by a relist.
    let refused = |what: &str| {
        let what = what.to_string();
        move |l: &serde_json::Value| {
            l["level"] == "WARN"
                && l["message"].as_str().is_some_and(|m| m.starts_with("watch failed: ") && m.contains(&what))
        }
    };
    let costly = logger.wait_for("the costly frame refused", T, refused("bytes of structs to decode")).await;
    let long = logger.wait_for("the long frame refused", T, refused("bytes long, more than the")).await;
    for line in [&costly, &long] {
        assert!(line["message"].as_str().unwrap().ends_with("; relisting"), "{line}");
    }
    create(&c.client, &ns, "new", &[]).await;
    assert_eq!(logger.wait_events(&ns, 2).await, [format!("onAdd: {ns}/old"), format!("onAdd: {ns}/new")]);
    let warnings = logger.warnings();
    println!("hostile frames: {warnings:#?}");
    assert_eq!(warnings.len(), 2, "one line per hostile frame:\n{}", logger.dump());
    let peak = peak_rss_kib(logger.pid());
    println!("hostile frames: peak RSS {} MiB", peak / 1024);
    assert!(peak < 512 * 1024, "peak RSS {peak} KiB");

    // The first LIST asked at resourceVersion 0 (the watch cache); each
    // relist after a refused frame asked for none (a consistent read).
    let lists = proxy.pod_lists();
    assert_eq!(lists.len(), 3, "{lists:?}");
    assert!(lists[0].contains("resourceVersion=0"), "{lists:?}");
    assert!(lists[1..].iter().all(|l| !l.contains("resourceVersion")), "{lists:?}");
}

/// The first paged LIST, at resourceVersion 0, is refused (as the watch
/// cache's whole answer would be past the reader's cap): the next LIST is
/// consistent and paged, not the same request again, and the pods are read.
#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test]
async fn a_refused_first_list_is_followed_by_a_consistent_one() {
    let c = cluster().await;
    let ns = namespace(&c.client, "pb-first-list").await;
    create(&c.client, &ns, "old", &[]).await;
    let proxy = Proxy::start(c.client.clone(), Meddling::SpoilsFirstList).await;
    let logger =
        Logger::start(&proxy.kubeconfig("proxy-first-list"), &["-n", &ns, "--paged-list", "--wire", "protobuf"]);
    logger.synced().await;
    create(&c.client, &ns, "new", &[]).await;
    assert_eq!(logger.wait_events(&ns, 2).await, [format!("onAdd: {ns}/old"), format!("onAdd: {ns}/new")]);
    let warnings = logger.warnings();
    assert_eq!(warnings.len(), 1, "{}", logger.dump());
    assert!(warnings[0].starts_with("watch failed: ") && warnings[0].contains("PodList"), "{warnings:?}");
    assert!(warnings[0].ends_with("; relisting"), "{warnings:?}");
    let lists = proxy.pod_lists();
    assert_eq!(lists.len(), 2, "{lists:?}");
    assert!(lists[0].contains("resourceVersion=0"), "{lists:?}");
    assert!(!lists[1].contains("resourceVersion"), "{lists:?}");
}

/// The API server restarts under a protobuf watch: the broken connection is
/// a `watch interrupted` line as on JSON, and the watch resumes from
/// its resourceVersion, never a `watch failed` for the broken stream itself.
/// (While the server is down, the attempts to resume may fail and back off:
/// those are `watch failed: starting the watch failed`, for the outage.)
#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn an_apiserver_restart_under_a_protobuf_watch_is_an_interrupted_watch() {
    let plane = Plane::start("pb-restart").await;
    let c = &plane.cluster;
    let ns = namespace(&c.client, "pb-restart").await;
    let logger = Logger::start(&c.kubeconfig, &["-n", &ns, "--wire", "protobuf"]);
    logger.synced().await;
    create(&c.client, &ns, "before", &[]).await;
    logger.wait_count(&ns, 1).await; // the watch is open and delivering
    let seen = logger.lines().len();

    plane.kill_apiserver();
    let interrupted = "watch interrupted: the connection to the API server closed in the middle of the watch \
                       (was the server restarted?); resuming from the last resourceVersion";
    logger.wait_message(interrupted, T).await;
    plane.start_apiserver("kube-apiserver", None, &[]).await;
    create(&c.client, &ns, "after", &[]).await;
    assert_eq!(logger.wait_events(&ns, 2).await, [format!("onAdd: {ns}/before"), format!("onAdd: {ns}/after")]);

    let warnings = warnings_in(&logger.lines()[seen..]);
    println!("restart on protobuf: {warnings:#?}");
    assert_eq!(warnings.first().map(String::as_str), Some(interrupted), "{}", logger.dump());
    assert!(
        !warnings.iter().any(|w| w.starts_with("watch failed: watching failed")),
        "the broken stream itself is no failure\n{}",
        logger.dump()
    );
    assert_eq!(warnings.iter().filter(|w| w.starts_with("watch interrupted")).count(), 1, "{}", logger.dump());
}
