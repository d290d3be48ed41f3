//! The decoder against k8s-pb (kube-rs's protobuf crate, generated from
//! k8s.io/api's .proto files): the same bytes decoded by both must give the
//! same pod, and the same pod as JSON. And a fuzz test: mutated bytes give
//! errors, never a panic.

use k8s_openapi::api::core::v1::Pod;
use k8s_pb::api::core::v1 as pb;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::runtime as rt;
use serde_json::json;

use super::*;
use crate::messages::cost_of_list;

/// `k8s\0` + runtime.Unknown{kind, raw}, as the API server sends an object.
fn envelope(kind: &str, raw: Vec<u8>) -> Bytes {
    let unknown = rt::Unknown {
        type_meta: Some(rt::TypeMeta { api_version: Some("v1".into()), kind: Some(kind.into()) }),
        raw: Some(raw),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut out = MAGIC.to_vec();
    out.extend(unknown.encode_to_vec());
    Bytes::from(out)
}

fn time(seconds: i64) -> meta::Time {
    meta::Time { seconds: Some(seconds), nanos: Some(0) }
}

fn container(
    name: &str,
    state: pb::ContainerState,
    last: Option<pb::ContainerState>,
    restarts: i32,
) -> pb::ContainerStatus {
    pb::ContainerStatus {
        name: Some(name.into()),
        state: Some(state),
        last_state: last,
        ready: Some(false),
        restart_count: Some(restarts),
        image: Some("registry.example/app:1".into()),
        image_id: Some("sha256:abc".into()),
        container_id: Some("containerd://123".into()),
        started: Some(true),
        ..Default::default()
    }
}

/// A pod with everything a busy one has, most of which the decoder skips.
fn rich_pod(name: &str) -> pb::Pod {
    let running = pb::ContainerState {
        running: Some(pb::ContainerStateRunning { started_at: Some(time(1_700_000_100)) }),
        ..Default::default()
    };
    let waiting = pb::ContainerState {
        waiting: Some(pb::ContainerStateWaiting {
            reason: Some("CrashLoopBackOff".into()),
            message: Some("back-off 20s restarting failed container=app pod=web\n(really)".into()),
        }),
        ..Default::default()
    };
    let killed = pb::ContainerState {
        terminated: Some(pb::ContainerStateTerminated {
            exit_code: Some(137),
            signal: Some(9),
            reason: Some("OOMKilled".into()),
            message: Some("out of memory".into()),
            started_at: Some(time(1_700_000_000)),
            finished_at: Some(time(1_700_000_050)),
            container_id: Some("containerd://456".into()),
        }),
        ..Default::default()
    };
    pb::Pod {
        metadata: Some(meta::ObjectMeta {
            name: Some(name.into()),
            generate_name: Some("web-".into()),
            namespace: Some("shop".into()),
            uid: Some("0d6c3d1e-uid".into()),
            resource_version: Some("12345".into()),
            generation: Some(3),
            creation_timestamp: Some(time(1_699_999_000)),
            deletion_timestamp: Some(meta::Time { seconds: Some(1_700_000_200), nanos: Some(5) }),
            deletion_grace_period_seconds: Some(30),
            labels: [("app".to_string(), "web".to_string()), ("tier".into(), "front".into())].into(),
            annotations: [("note".to_string(), "x".repeat(500))].into(),
            owner_references: vec![meta::OwnerReference {
                api_version: Some("apps/v1".into()),
                kind: Some("ReplicaSet".into()),
                name: Some("web-7d".into()),
                uid: Some("rs-uid".into()),
                controller: Some(true),
                ..Default::default()
            }],
            finalizers: vec!["example.com/keep".into()],
            managed_fields: vec![meta::ManagedFieldsEntry {
                manager: Some("kubelet".into()),
                operation: Some("Update".into()),
                fields_v1: Some(meta::FieldsV1 { raw: Some(vec![b'{'; 2000]) }),
                ..Default::default()
            }],
            ..Default::default()
        }),
        spec: Some(pb::PodSpec {
            node_name: Some("node-1".into()),
            containers: vec![pb::Container {
                name: Some("app".into()),
                image: Some("registry.example/app:1".into()),
                args: vec!["--serve".into(); 20],
                ..Default::default()
            }],
            service_account_name: Some("default".into()),
            ..Default::default()
        }),
        status: Some(pb::PodStatus {
            phase: Some("Running".into()),
            conditions: vec![
                pb::PodCondition {
                    r#type: Some("PodScheduled".into()),
                    status: Some("True".into()),
                    ..Default::default()
                },
                pb::PodCondition {
                    r#type: Some("Ready".into()),
                    status: Some("False".into()),
                    reason: Some("ContainersNotReady".into()),
                    message: Some("containers with unready status: [app]".into()),
                    last_transition_time: Some(time(1_700_000_060)),
                    ..Default::default()
                },
                pb::PodCondition {
                    r#type: Some("example.com/gate".into()),
                    status: Some("True".into()),
                    ..Default::default()
                },
            ],
            message: Some("The node was low on resource: memory.".into()),
            reason: Some("Evicted".into()),
            host_ip: Some("10.0.0.1".into()),
            pod_ip: Some("10.1.0.7".into()),
            start_time: Some(time(1_699_999_100)),
            init_container_statuses: vec![container("init", killed.clone(), None, 0)],
            container_statuses: vec![container("app", waiting, Some(killed), 4), container("side", running, None, 0)],
            qos_class: Some("Burstable".into()),
            observed_generation: Some(3),
            ..Default::default()
        }),
    }
}

/// What the decoder must make of [`rich_pod`], written out by hand from the
/// pod above as the JSON of the kept fields (not computed by any code the
/// decoder shares): the reference is k8s-pb's encoding of that pod, the
/// expected values are these. Annotations, owner references, finalizers,
/// `managedFields`, the containers, images and times are not kept.
fn rich_expected(name: &str) -> Pod {
    let killed =
        json!({"terminated": {"exitCode": 137, "signal": 9, "reason": "OOMKilled", "message": "out of memory"}});
    let status = |name: &str, state, last: Option<serde_json::Value>, restarts: i32| {
        json!({"name": name, "image": "", "imageID": "", "ready": false, "restartCount": restarts,
               "state": state, "lastState": last})
    };
    let waiting = json!({"waiting": {"reason": "CrashLoopBackOff",
                                     "message": "back-off 20s restarting failed container=app pod=web\n(really)"}});
    serde_json::from_value(json!({
        "metadata": {
            "name": name, "namespace": "shop", "uid": "0d6c3d1e-uid", "resourceVersion": "12345", "generation": 3,
            "labels": {"app": "web", "tier": "front"},
            "deletionTimestamp": "2023-11-14T22:16:40.000000005Z", "deletionGracePeriodSeconds": 30
        },
        "spec": {"nodeName": "node-1", "containers": []},
        "status": {
            "phase": "Running", "reason": "Evicted", "message": "The node was low on resource: memory.",
            "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Ready", "status": "False"},
                {"type": "example.com/gate", "status": "True"}
            ],
            "observedGeneration": 3,
            "initContainerStatuses": [status("init", killed.clone(), None, 0)],
            "containerStatuses": [status("app", waiting, Some(killed), 4), status("side", json!({"running": {}}), None, 0)]
        }
    }))
    .unwrap()
}

/// A pod with every kept field set, to its empty value: what Go writes for
/// fields that are not pointers ("" and 0), and the pointers set to zero.
fn empty_pod() -> pb::Pod {
    let empty_state = || Some(pb::ContainerState::default());
    pb::Pod {
        metadata: Some(meta::ObjectMeta {
            name: Some(String::new()),
            namespace: Some(String::new()),
            uid: Some(String::new()),
            resource_version: Some(String::new()),
            generation: Some(0),
            deletion_timestamp: Some(meta::Time { seconds: Some(0), nanos: Some(0) }),
            deletion_grace_period_seconds: Some(0),
            ..Default::default()
        }),
        spec: Some(pb::PodSpec { node_name: Some(String::new()), ..Default::default() }),
        status: Some(pb::PodStatus {
            phase: Some(String::new()),
            conditions: vec![pb::PodCondition {
                r#type: Some(String::new()),
                status: Some(String::new()),
                ..Default::default()
            }],
            message: Some(String::new()),
            reason: Some(String::new()),
            container_statuses: vec![pb::ContainerStatus {
                name: Some(String::new()),
                state: empty_state(),
                last_state: empty_state(),
                ready: Some(false),
                restart_count: Some(0),
                ..Default::default()
            }],
            init_container_statuses: vec![pb::ContainerStatus {
                state: Some(pb::ContainerState {
                    terminated: Some(pb::ContainerStateTerminated {
                        exit_code: Some(0),
                        signal: Some(0),
                        reason: Some(String::new()),
                        message: Some(String::new()),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            observed_generation: Some(0),
            ..Default::default()
        }),
    }
}

/// [`empty_pod`] as JSON gives it: empty strings and zeros are absent (JSON's
/// `omitempty`), pointers set to zero are kept (a grace period of 0, a
/// deletion at the epoch). The two wires agree on what "empty" means.
fn empty_expected() -> Pod {
    let container = |state| {
        json!({"name": "", "image": "", "imageID": "", "ready": false, "restartCount": 0,
                                   "state": state})
    };
    serde_json::from_value(json!({
        "metadata": {"deletionTimestamp": "1970-01-01T00:00:00Z", "deletionGracePeriodSeconds": 0},
        "spec": {"containers": []},
        "status": {
            "conditions": [{"type": "", "status": ""}],
            "containerStatuses": [{"name": "", "image": "", "imageID": "", "ready": false, "restartCount": 0,
                                   "state": {}, "lastState": {}}],
            "initContainerStatuses": [container(json!({"terminated": {"exitCode": 0}}))]
        }
    }))
    .unwrap()
}

#[test]
fn a_pod_list_decodes_as_k8s_pb_decodes_it() {
    let list = pb::PodList {
        metadata: Some(meta::ListMeta {
            resource_version: Some("777".into()),
            r#continue: Some("next-page".into()),
            ..Default::default()
        }),
        items: vec![rich_pod("web-1"), empty_pod(), pb::Pod::default()],
    };
    let ours = pod_list::<Pod>(envelope("PodList", list.encode_to_vec())).unwrap();
    assert_eq!(ours.resource_version, "777");
    assert_eq!(ours.continue_token, "next-page");
    assert_eq!(ours.items, [rich_expected("web-1"), empty_expected(), Pod::default()]);
}

/// The raw entries are there to be fingerprinted: one each, as sent.
#[test]
fn unread_metadata_is_kept_as_raw_entries() {
    let list = pb::PodList { items: vec![rich_pod("a")], metadata: None };
    let page = pod_list::<PodMsg>(envelope("PodList", list.encode_to_vec())).unwrap();
    let meta = page.items[0].metadata.clone().unwrap();
    assert_eq!((meta.annotations.len(), meta.owner_references.len(), meta.finalizers.len()), (1, 1, 1));
    let raw = meta.finalizers[0].to_vec();
    assert_eq!(raw, b"example.com/keep", "a finalizer: the string's bytes");
    let note = [&[0x0a, 4][..], b"note", &[0x12, 0xf4, 0x03], &[b'x'; 500]].concat();
    assert_eq!(meta.annotations[0].to_vec(), note, "an annotation: the map entry {{1: key, 2: value}}");
}

/// A watch frame: the length, then a WatchEvent (no magic) around an object.
fn frame(kind: &str, object_kind: &str, raw: Vec<u8>) -> Vec<u8> {
    let event = meta::WatchEvent {
        r#type: Some(kind.into()),
        object: Some(rt::RawExtension { raw: Some(envelope(object_kind, raw).to_vec()) }),
    };
    let bytes = event.encode_to_vec();
    let mut out = (bytes.len() as u32).to_be_bytes().to_vec();
    out.extend(bytes);
    out
}

fn bookmark(rv: &str, end: bool) -> Vec<u8> {
    let mut metadata = meta::ObjectMeta { resource_version: Some(rv.into()), ..Default::default() };
    if end {
        metadata.annotations.insert("k8s.io/initial-events-end".into(), "true".into());
    }
    frame("BOOKMARK", "Pod", pb::Pod { metadata: Some(metadata), ..Default::default() }.encode_to_vec())
}

fn events_of(stream: &[u8], chunk: usize) -> Vec<Result<WatchEvent<Pod>, WireError>> {
    let mut frames = Frames::default();
    let mut out = Vec::new();
    for piece in stream.chunks(chunk.max(1)) {
        frames.push(piece);
        loop {
            match frames.next_frame() {
                Ok(Some((bytes, offset))) => out.push(watch_event(bytes, offset)),
                Ok(None) => break,
                Err(e) => {
                    out.push(Err(e));
                    return out;
                }
            }
        }
    }
    if let Err(e) = frames.finish() {
        out.push(Err(e));
    }
    out
}

#[test]
fn watch_frames_decode_whatever_the_chunks() {
    let gone = meta::Status {
        code: Some(410),
        reason: Some("Expired".into()),
        message: Some("too old".into()),
        ..Default::default()
    };
    let stream: Vec<u8> = [
        frame("ADDED", "Pod", rich_pod("a").encode_to_vec()),
        bookmark("50", false),
        frame("MODIFIED", "Pod", rich_pod("a").encode_to_vec()),
        bookmark("51", true),
        frame("DELETED", "Pod", rich_pod("a").encode_to_vec()),
        frame("ERROR", "Status", gone.encode_to_vec()),
    ]
    .concat();
    let want = rich_expected("a");
    for chunk in [1, 3, 7, 64, stream.len()] {
        let events = events_of(&stream, chunk);
        assert_eq!(events.len(), 6, "chunks of {chunk}: {events:?}");
        let pods: Vec<Pod> = events
            .iter()
            .filter_map(|e| match e {
                Ok(WatchEvent::Added(p) | WatchEvent::Modified(p) | WatchEvent::Deleted(p)) => Some(p.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(pods.len(), 3);
        assert!(pods.into_iter().all(|p| p == want));
        assert!(matches!(&events[0], Ok(WatchEvent::Added(_))));
        assert_eq!(events[1], Ok(WatchEvent::Bookmark { resource_version: "50".into(), initial_events_end: false }));
        assert_eq!(events[3], Ok(WatchEvent::Bookmark { resource_version: "51".into(), initial_events_end: true }));
        assert!(matches!(&events[4], Ok(WatchEvent::Deleted(_))));
        match &events[5] {
            Ok(WatchEvent::Error(status)) => {
                assert_eq!((status.code, status.reason.as_str(), status.message.as_str()), (410, "Expired", "too old"))
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn a_broken_stream_is_an_error_that_says_where() {
    let good = frame("ADDED", "Pod", rich_pod("a").encode_to_vec());
    // Cut inside the second frame.
    let cut: Vec<u8> = [good.clone(), good[..10].to_vec()].concat();
    let events = events_of(&cut, 5);
    assert!(matches!(events[0], Ok(WatchEvent::Added(_))));
    assert_eq!(events[1], Err(WireError::Truncated { offset: good.len() }));
    // A length no pod has.
    let huge: Vec<u8> = [good.clone(), vec![0x7f, 0xff, 0xff, 0xff, 1, 2]].concat();
    assert_eq!(events_of(&huge, 64)[1], Err(WireError::FrameTooLarge { offset: good.len(), len: 0x7fff_ffff }));
    // An object without the magic.
    let mut bad = good.clone();
    let at = bad.windows(4).position(|w| w == MAGIC).unwrap();
    bad[at] = b'j';
    match &events_of(&bad, 64)[0] {
        Err(WireError::Magic { offset: 0, start }) => assert_eq!(start, b"j8s\0"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        pod_list::<Pod>(Bytes::from_static(b"{\"kind\":\"PodList\"}")).unwrap_err().to_string(),
        "not a Kubernetes protobuf object at byte 0: it starts [7b, 22, 6b, 69], not with \"k8s\\0\""
    );
}

/// A small, seeded generator: the same run every time, no crate needed.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Mutated lists and watch streams, a fixed number of each (the generator is
/// seeded: the same mutations every run): every result is a pod list or an
/// error, never a panic, and an error's offset is inside the bytes it was
/// given.
#[test]
fn mutated_bytes_give_errors_never_a_panic() {
    let list =
        envelope("PodList", pb::PodList { items: vec![rich_pod("a"), rich_pod("b")], metadata: None }.encode_to_vec());
    let stream: Vec<u8> = [frame("ADDED", "Pod", rich_pod("a").encode_to_vec()), bookmark("9", true)].concat();
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    for _ in 0..RUNS {
        for sample in [&list[..], &stream[..]] {
            let mut bytes = sample.to_vec();
            for _ in 0..1 + rng.below(6) {
                let at = rng.below(bytes.len());
                match rng.below(5) {
                    0 => bytes[at] ^= 1 << rng.below(8),
                    1 => bytes[at] = rng.next() as u8,
                    2 => bytes.truncate(at),
                    3 => bytes.insert(at, rng.next() as u8),
                    _ => {
                        let end = (at + rng.below(16)).min(bytes.len());
                        let piece = bytes[at..end].to_vec();
                        bytes.splice(at..at, piece);
                    }
                }
                if bytes.is_empty() {
                    break;
                }
            }
            let len = bytes.len();
            if let Err(e) = pod_list::<Pod>(Bytes::from(bytes.clone())) {
                assert!(offset_of(&e) <= len, "{e} in {len} bytes");
            }
            for event in events_of(&bytes, 1 + rng.below(40)) {
                if let Err(e) = event {
                    assert!(offset_of(&e) <= len, "{e} in {len} bytes");
                }
            }
        }
    }
}

/// How many times [`mutated_bytes_give_errors_never_a_panic`] mutates each
/// sample.
const RUNS: usize = 2_000;

fn offset_of(e: &WireError) -> usize {
    match e {
        WireError::Magic { offset, .. }
        | WireError::Decode { offset, .. }
        | WireError::Kind { offset, .. }
        | WireError::FrameTooLarge { offset, .. }
        | WireError::TooCostly { offset, .. }
        | WireError::Group { offset, .. }
        | WireError::Truncated { offset } => *offset,
        WireError::BodyTooLarge | WireError::NotProtobuf { .. } => 0,
    }
}

/// A pod whose status is `status` as raw bytes, in a watch frame.
fn frame_with_status(status: &[u8]) -> Vec<u8> {
    let mut pod = Vec::new();
    prost::encoding::encode_key(3, prost::encoding::WireType::LengthDelimited, &mut pod);
    prost::encoding::encode_varint(status.len() as u64, &mut pod);
    pod.extend_from_slice(status);
    frame("MODIFIED", "Pod", pod)
}

/// prost would make a whole ContainerStatus of every two bytes `42 00`: a
/// frame just under the cap of them is refused before it is decoded, one
/// over the cap before it is even read, and so is a LIST of empty pods.
#[test]
fn empty_repeated_entries_are_refused_before_prost_allocates_them() {
    let entries = (MAX_FRAME - 4096) / 2;
    let hostile = frame_with_status(&[0x42, 0x00].repeat(entries));
    assert!(hostile.len() - 4 <= MAX_FRAME);
    match &events_of(&hostile, 1 << 16)[..] {
        [Err(WireError::TooCostly { message: "Pod", offset: 0, cost })] => assert!(*cost > MAX_DECODED, "{cost}"),
        other => panic!("{other:?}"),
    }
    let huge = frame_with_status(&[0x42, 0x00].repeat(10 << 20));
    assert!(matches!(events_of(&huge, 1 << 16)[..], [Err(WireError::FrameTooLarge { offset: 0, .. })]));
    let empty_pods = envelope("PodList", [0x12, 0x00].repeat(1 << 20));
    assert!(matches!(pod_list::<PodMsg>(empty_pods), Err(WireError::TooCostly { message: "PodList", .. })));

    // A real page, 500 busy pods, is far inside the bound.
    let page = pb::PodList { items: (0..500).map(|i| rich_pod(&format!("p{i}"))).collect(), metadata: None };
    let bytes = page.encode_to_vec();
    let cost = cost_of_list(&bytes).unwrap();
    assert!(cost < MAX_DECODED / 8, "{cost}");
    assert_eq!(pod_list::<Pod>(envelope("PodList", bytes)).unwrap().items.len(), 500);
}

/// An empty group at a field number no message has (`9b 06 9c 06`: field
/// 99): prost steps over it and decodes on, so the cost count must not stop
/// there. Whatever follows it, the bytes are refused: the pod of a watch
/// frame, a bookmark, a status decoded on its own, a LIST page, the metadata.
#[test]
fn a_protobuf_group_is_refused_before_prost_decodes_past_it() {
    const GROUP: [u8; 4] = [0x9b, 0x06, 0x9c, 0x06];
    let after_group = |entry: [u8; 2], count: usize| [&GROUP[..], &entry.repeat(count)].concat();
    // prost itself reads on past the group: two container statuses here.
    let decoded = <PodStatusMsg as prost::Message>::decode(&after_group([0x42, 0x00], 2)[..]).unwrap();
    assert_eq!(decoded.container_statuses.len(), 2);

    let status = after_group([0x42, 0x00], (MAX_FRAME - 4096) / 2);
    let hostile = frame_with_status(&status);
    assert!(hostile.len() - 4 <= MAX_FRAME);
    assert!(matches!(events_of(&hostile, 1 << 16)[..], [Err(WireError::Group { message: "Pod", offset: 0 })]));
    let error = PodStatusMsg::from_bytes(Bytes::from(status)).unwrap_err();
    assert_eq!(error, WireError::Group { message: "PodStatus", offset: 0 });
    assert_eq!(
        error.to_string(),
        "the PodStatus at byte 0 holds a protobuf group, which Kubernetes never sends: refused"
    );

    let pods = envelope("PodList", after_group([0x12, 0x00], 1 << 20));
    assert!(matches!(pod_list::<PodMsg>(pods), Err(WireError::Group { message: "PodList", .. })));

    // In the metadata (labels, annotations...), in a watch event and a bookmark.
    let mut meta = vec![0x0a];
    let inner = after_group([0x62, 0x00], 8);
    prost::encoding::encode_varint(inner.len() as u64, &mut meta);
    meta.extend(inner);
    for kind in ["ADDED", "BOOKMARK"] {
        let events = events_of(&frame(kind, "Pod", meta.clone()), 64);
        assert!(matches!(events[..], [Err(WireError::Group { .. })]), "{kind}: {events:?}");
    }
}

/// A status that does not decode says where; as a k8s-openapi `Pod` it is
/// left out, and the pod's identity kept.
#[test]
fn a_status_that_does_not_decode_is_left_out_with_a_reason() {
    let events = events_of(&frame_with_status(&[0x0a, 0xff, 0x01]), 64);
    let [Ok(WatchEvent::Modified(pod))] = &events[..] else { panic!("{events:?}") };
    assert_eq!(pod.status, None);
    let why = PodStatusMsg::from_bytes(Bytes::from_static(&[0x0a, 0xff, 0x01])).unwrap_err().to_string();
    assert!(why.starts_with("bad protobuf in the PodStatus at byte 0"), "{why}");
}
