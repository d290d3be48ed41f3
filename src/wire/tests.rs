//! The logger's side of the seam: the crate's messages become the same
//! cached `Pod` as the same pod's JSON, text cleaned as on the JSON path; and
//! the lines that say why protobuf was given up. (That the messages decode
//! as k8s-pb decodes the bytes is the crate's own tests.)

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube_pod_protobuf::messages::{ConditionMsg, MetaMsg, SpecMsg, TerminatedMsg, TimeMsg, WaitingMsg};
use prost::Message as _;
use serde_json::json;

use super::*;

/// A frame the protobuf reader refused, as its watcher reports it.
pub(crate) fn refused_frame() -> kube::Error {
    protobuf::read_error(WireError::FrameTooLarge { offset: 0, len: 1 << 30 })
}

fn waiting(reason: &str, message: &str) -> StateMsg {
    StateMsg {
        waiting: Some(WaitingMsg { reason: Some(reason.into()), message: Some(message.into()) }),
        ..StateMsg::default()
    }
}

fn container(name: &str, state: StateMsg, last: Option<StateMsg>, restarts: i32) -> ContainerStatusMsg {
    ContainerStatusMsg {
        name: Some(name.into()),
        state: Some(state),
        last_state: last,
        ready: Some(false),
        restart_count: Some(restarts),
    }
}

/// A pod as the crate hands it over: every kept field set, Go's empty values
/// where JSON has none, text with a newline in it.
fn rich_msg() -> PodMsg {
    let killed = StateMsg {
        terminated: Some(TerminatedMsg {
            exit_code: Some(137),
            signal: Some(9),
            reason: Some("OOMKilled".into()),
            message: Some("out of memory".into()),
        }),
        ..StateMsg::default()
    };
    let running = StateMsg { running: Some(vec![0x0a, 0x00].into()), ..StateMsg::default() };
    let status = PodStatusMsg {
        phase: Some("Running".into()),
        conditions: [("PodScheduled", "True"), ("Ready", "False"), ("example.com/gate", "True"), ("", "")]
            .map(|(t, s)| ConditionMsg { r#type: Some(t.into()), status: Some(s.into()) })
            .into(),
        message: Some("The node was low on resource: memory.".into()),
        reason: Some("Evicted".into()),
        container_statuses: vec![
            container("app", waiting("CrashLoopBackOff", "back-off 20s\n(really)"), Some(killed.clone()), 4),
            container("side", running, None, 0),
        ],
        init_container_statuses: vec![container("init", killed, None, 0)],
        observed_generation: Some(3),
    };
    PodMsg {
        metadata: Some(MetaMsg {
            name: Some("web-1".into()),
            namespace: Some("shop".into()),
            uid: Some("0d6c3d1e-uid".into()),
            resource_version: Some("12345".into()),
            generation: Some(3),
            deletion_timestamp: Some(TimeMsg { seconds: Some(1_700_000_200), nanos: Some(0) }),
            deletion_grace_period_seconds: Some(0),
            labels: [("app".to_string(), "web".to_string())].into(),
            annotations: vec![b"\x0a\x04note\x12\x01x".to_vec().into()],
            owner_references: vec![],
            finalizers: vec![],
        }),
        spec: Some(SpecMsg { node_name: Some(String::new()) }),
        status: Some(status.encode_to_vec().into()),
    }
}

/// The same pod as the API server's JSON would have it.
fn rich_json() -> serde_json::Value {
    let killed =
        json!({"terminated": {"exitCode": 137, "signal": 9, "reason": "OOMKilled", "message": "out of memory"}});
    json!({
        "metadata": {
            "name": "web-1", "namespace": "shop", "uid": "0d6c3d1e-uid", "resourceVersion": "12345", "generation": 3,
            "deletionTimestamp": "2023-11-14T22:16:40Z", "deletionGracePeriodSeconds": 0, "labels": {"app": "web"},
            "annotations": {"note": "x"}
        },
        "spec": {},
        "status": {
            "phase": "Running", "reason": "Evicted", "message": "The node was low on resource: memory.",
            "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "False"},
                           {"type": "example.com/gate", "status": "True"}, {"type": "", "status": ""}],
            "observedGeneration": 3,
            "containerStatuses": [
                {"name": "app", "ready": false, "restartCount": 4, "lastState": killed,
                 "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 20s\n(really)"}}},
                {"name": "side", "ready": false, "restartCount": 0, "state": {"running": {}}}
            ],
            "initContainerStatuses": [{"name": "init", "ready": false, "restartCount": 0, "state": killed}]
        }
    })
}

/// The fingerprints hash each wire's own bytes: compared apart.
fn without_fingerprints(mut pod: Pod) -> Pod {
    pod.unshown_metadata = 0;
    if let Some(s) = pod.status.as_mut() {
        s.fingerprint = 0;
    }
    pod
}

#[test]
fn a_pod_from_protobuf_is_the_pod_from_json() {
    let ours = without_fingerprints(Pod::from(rich_msg()));
    let theirs: Pod = serde_json::from_value(rich_json()).unwrap();
    assert_eq!(ours, without_fingerprints(theirs));
    // Cleaned as JSON's are: the newline escaped, two characters.
    let status = ours.status.unwrap();
    let State::Waiting(w) = &status.container_statuses[0].state else { panic!("{status:?}") };
    assert_eq!(w.message.as_deref(), Some(r"back-off 20s\n(really)"));
    let deleted = ours.metadata.deletion_timestamp.unwrap();
    assert_eq!(deleted, Time(k8s_openapi::jiff::Timestamp::new(1_700_000_200, 0).unwrap()));
}

#[test]
fn an_empty_message_is_an_empty_pod() {
    assert_eq!(without_fingerprints(Pod::from(PodMsg::default())), Pod::default());
}

#[test]
fn what_is_not_shown_is_fingerprinted() {
    let base = Pod::from(rich_msg());
    // An annotation changed: only the unshown-metadata fingerprint moves.
    let mut msg = rich_msg();
    msg.metadata.as_mut().unwrap().annotations.push(b"\x0a\x05other\x12\x011".to_vec().into());
    let annotated = Pod::from(msg);
    assert_ne!(base.unshown_metadata, annotated.unshown_metadata);
    assert_eq!(base.status, annotated.status);
    // A status field not kept changed (podIP, field 6): the status
    // fingerprint moves, and nothing else.
    let mut msg = rich_msg();
    let mut status = msg.status.take().unwrap().to_vec();
    status.extend_from_slice(b"\x32\x0810.1.0.8");
    msg.status = Some(status.into());
    let moved = Pod::from(msg);
    assert_ne!(base.status.as_ref().unwrap().fingerprint, moved.status.as_ref().unwrap().fingerprint);
    assert_eq!(without_fingerprints(base), without_fingerprints(moved));
}

/// A status that does not decode leaves the status out and says why; the
/// informer puts the one it had back (informer.rs's tests).
#[test]
fn a_status_that_does_not_decode_is_marked_not_emptied() {
    let msg = PodMsg { status: Some(vec![0x0a, 0xff, 0x01].into()), ..rich_msg() };
    let pod = Pod::from(msg);
    assert_eq!(pod.status, None);
    assert_eq!(pod.metadata.name.as_deref(), Some("web-1"));
    let why = pod.unreadable_status.as_deref().unwrap();
    assert!(why.starts_with("bad protobuf in the PodStatus at byte 0"), "{why}");
}

/// Text in every field a line shows, made hostile by whatever sent it:
/// escaped and cut before it reaches a line.
#[test]
fn hostile_text_in_every_field_that_reaches_a_line_is_cleaned() {
    let evil = |what: &str| format!("{what}\n\u{1b}[2J\u{202e}\u{061c}\u{200b}\u{feff}{}", "x".repeat(5000));
    let status = PodStatusMsg {
        phase: Some(evil("phase")),
        reason: Some(evil("why")),
        message: Some(evil("said")),
        container_statuses: vec![container(&evil("c"), waiting(&evil("reason"), &evil("message")), None, 1)],
        ..PodStatusMsg::default()
    };
    let hostile = PodMsg {
        metadata: Some(MetaMsg {
            name: Some(evil("name")),
            namespace: Some(evil("ns")),
            uid: Some(evil("uid")),
            resource_version: Some("9".into()),
            labels: [(evil("key"), evil("value"))].into(),
            ..MetaMsg::default()
        }),
        spec: Some(SpecMsg { node_name: Some(evil("node")) }),
        status: Some(status.encode_to_vec().into()),
    };
    let pod = Arc::new(Pod::from(hostile));
    let state = crate::pod::PodState::of(&pod);
    let before = crate::pod::PodState::of(&Arc::new(Pod::default()));
    let diff = before.diff(&state);
    let key = crate::key::Key::of(&pod).to_string();
    let labels: Vec<String> = state.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let fields = [key, state.uid.clone(), state.phase.clone(), state.node.clone(), labels.join(","), diff.text()];
    let bad = |c: char| c.is_control() || matches!(c, '\u{202e}' | '\u{061c}' | '\u{200b}' | '\u{feff}');
    for field in fields.iter().chain(diff.reasons().iter()) {
        assert!(!field.chars().any(bad), "{field}");
        assert!(field.contains(r"\n\u{1b}[2J\u{202e}\u{61c}\u{200b}\u{feff}"), "escaped, not dropped: {field}");
    }
    // Each one cut: a name to the longest a real one can be, a phase or
    // a reason to a word, a message to a line's worth.
    assert!(fields[..5].iter().all(|f| f.chars().count() < 2 * 300), "{fields:?}");
    assert!(diff.changes.iter().all(|c| c.chars().count() < 2 * 300), "{:?}", diff.changes);
}

/// The line that gives up protobuf, for each way a server can say no. What
/// came back is cleaned before it is named.
#[test]
fn a_server_that_will_not_speak_protobuf_is_named_in_one_line() {
    let api = |code| kube::Error::Api(Box::new(kube::core::Status::failure("", "").with_code(code)));
    let line = |e| refuses_protobuf(&watcher::Error::InitialListFailed(e));
    assert_eq!(line(api(406)).as_deref(), Some("the API server refuses pods in protobuf (406 Not Acceptable)"));
    assert_eq!(
        refuses_protobuf(&watcher::Error::WatchStartFailed(api(415))).as_deref(),
        Some("the API server refuses pods in protobuf (415 Unsupported Media Type)")
    );
    assert_eq!(line(api(403)), None, "a refusal of another kind is not about the wire");
    let not_protobuf = |content_type: &str, encoding: Option<&str>| {
        let wire = WireError::NotProtobuf {
            content_type: content_type.into(),
            content_encoding: encoding.map(str::to_string),
        };
        kube::Error::ReadEvents(std::io::Error::new(std::io::ErrorKind::InvalidData, wire))
    };
    let said = |t: &str, e: Option<&str>| {
        let tail = e.map(|e| format!(" and Content-Encoding {e:?}")).unwrap_or_default();
        Some(format!(
            "pods were asked for in protobuf, but the answer to a request for protobuf came with Content-Type {t:?}{tail}"
        ))
    };
    assert_eq!(line(not_protobuf("application/json", None)), said("application/json", None));
    let pb = "application/vnd.kubernetes.protobuf";
    assert_eq!(line(not_protobuf(pb, Some("gzip"))), said(pb, Some("gzip")));
    assert_eq!(line(not_protobuf("text/html\t\u{202e}lmth", None)), said(r"text/html\t\u{202e}lmth", None));
    // A frame refused is not a reason to give up protobuf.
    let frame = kube::Error::ReadEvents(std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        WireError::Truncated { offset: 3 },
    ));
    assert_eq!(refuses_protobuf(&watcher::Error::WatchFailed(frame)), None);
}

#[test]
fn an_interrupted_watch_says_what_comes_next() {
    let closed = "watch interrupted: the connection to the API server closed in the middle of the watch (was the \
                  server restarted?)";
    let line = |then| interrupted(Interruption::ClosedMidStream, then).1;
    assert_eq!(line(Some(protobuf::Then::Resume)), format!("{closed}; resuming from the last resourceVersion"));
    assert_eq!(
        line(Some(protobuf::Then::Relist)),
        format!("{closed}; the streaming list was not complete: listing again")
    );
    // kube's watcher does not say which it does.
    assert_eq!(
        line(None),
        format!("{closed}; resuming from the last resourceVersion, or listing again if the list was not complete")
    );
}
