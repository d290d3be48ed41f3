//! The kept fields as a k8s-openapi `Pod`, for a program that has no pod type
//! of its own: `watcher::<k8s_openapi::api::core::v1::Pod>(...)` feeds kube's
//! reflector a `Store<Pod>` as usual, each pod holding only what
//! [`messages`](crate::messages) keeps.
//!
//! What is dropped on the way: annotations, owner references and finalizers
//! (kept by the messages only as raw entries, to fingerprint), a running
//! container's start time, and every field the messages do not declare. A
//! status whose bytes do not decode leaves `status` None (the program's own
//! pod type can do better: say so, keep the last status; see
//! [`PodStatusMsg::from_bytes`]). Empty strings and zeros read as absent,
//! as JSON has them ([`non_empty`], [`non_zero`]), so a pod compares equal
//! to the same pod read as JSON and pruned to the same fields.

use k8s_openapi::api::core::v1 as api;

use crate::messages::{ContainerStatusMsg, PodMsg, PodStatusMsg, StateMsg, non_empty, non_zero};

impl From<PodMsg> for api::Pod {
    fn from(pod: PodMsg) -> api::Pod {
        api::Pod {
            metadata: pod.metadata.unwrap_or_default().into_object_meta(),
            spec: pod.spec.map(|s| api::PodSpec { node_name: non_empty(s.node_name), ..api::PodSpec::default() }),
            status: pod.status.and_then(|raw| PodStatusMsg::from_bytes(raw).ok()).map(status),
        }
    }
}

fn status(s: PodStatusMsg) -> api::PodStatus {
    let conditions = s.conditions.into_iter().map(|c| api::PodCondition {
        type_: c.r#type.unwrap_or_default(),
        status: c.status.unwrap_or_default(),
        ..api::PodCondition::default()
    });
    let containers =
        |list: Vec<ContainerStatusMsg>| (!list.is_empty()).then(|| list.into_iter().map(container).collect::<Vec<_>>());
    api::PodStatus {
        phase: non_empty(s.phase),
        reason: non_empty(s.reason),
        message: non_empty(s.message),
        conditions: Some(conditions.collect::<Vec<_>>()).filter(|c| !c.is_empty()),
        observed_generation: non_zero(s.observed_generation),
        container_statuses: containers(s.container_statuses),
        init_container_statuses: containers(s.init_container_statuses),
        ..api::PodStatus::default()
    }
}

fn container(c: ContainerStatusMsg) -> api::ContainerStatus {
    api::ContainerStatus {
        name: c.name.unwrap_or_default(),
        ready: c.ready.unwrap_or_default(),
        restart_count: c.restart_count.unwrap_or_default(),
        state: c.state.map(state),
        last_state: c.last_state.map(state),
        ..api::ContainerStatus::default()
    }
}

fn state(s: StateMsg) -> api::ContainerState {
    api::ContainerState {
        waiting: s
            .waiting
            .map(|w| api::ContainerStateWaiting { reason: non_empty(w.reason), message: non_empty(w.message) }),
        running: s.running.map(|_| api::ContainerStateRunning::default()),
        terminated: s.terminated.map(|t| api::ContainerStateTerminated {
            exit_code: t.exit_code.unwrap_or_default(),
            signal: non_zero(t.signal),
            reason: non_empty(t.reason),
            message: non_empty(t.message),
            ..api::ContainerStateTerminated::default()
        }),
    }
}
