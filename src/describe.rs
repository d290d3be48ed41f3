//! Saying *why*: the words for what changed in a pod, as `kubectl describe`
//! would put them.
//!
//! A pod that restarted is news; the reader's next question is what happened:
//! did it exit 3, was it OOMKilled, is it waiting on an image that cannot be
//! pulled, was it evicted? The kubelet writes all of that into the status
//! (pod.rs keeps it), and [`PodState::diff`] turns the difference between two
//! versions into words:
//!
//! ```text
//! hog: terminated OOMKilled (exit 137), PodReadyToStartContainers False -> True
//! restarts 0 -> 1 (last: Error, exit 3)
//! crash: waiting CrashLoopBackOff (back-off 10s restarting failed container=crash pod=...)
//! app: waiting ErrImagePull (failed to pull and unpack image "127.0.0.1:9/none:1": ...)
//! phase Running -> Failed, Evicted: The node was low on resource: memory.
//! ```
//!
//! The words are made of text already made safe when the pod was parsed
//! (text.rs), so no line ever breaks.

use crate::pod::{Condition, ContainerStatus, PodState, State, Status, Terminated, Truth};
use crate::text::{Text, Word};
use std::sync::LazyLock;

/// The words for one update, and the same facts as fields a log pipeline can
/// query (`reasons`, `exit_code`), so that nobody has to parse the words.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Diff {
    /// Each change, in the order the line shows them.
    pub changes: Vec<String>,
    /// Every reason the changes name, each once, in order.
    pub reasons: Vec<Word>,
    /// The exit code of the first termination the changes name.
    pub exit_code: Option<i32>,
}

impl Diff {
    /// The `changes` field: one line, the changes separated by ", ".
    pub fn text(&self) -> String {
        self.changes.join(", ")
    }

    /// The `reasons` field, separated by spaces; None when there is none.
    pub fn reasons(&self) -> Option<String> {
        (!self.reasons.is_empty()).then(|| self.reasons.iter().map(|r| &**r).collect::<Vec<_>>().join(" "))
    }

    fn reason(&mut self, reason: Option<&Word>) {
        if let Some(r) = reason
            && !self.reasons.contains(r)
        {
            self.reasons.push(r.clone());
        }
    }

    fn terminated(&mut self, t: &Terminated) {
        self.reason(t.reason.as_ref());
        self.exit_code.get_or_insert(t.exit_code);
    }

    /// A container's state in words: `waiting CrashLoopBackOff (message)`,
    /// `running`, `terminated OOMKilled (exit 137)`.
    fn state(&mut self, state: &State) -> String {
        match state {
            State::Unknown => "no state".into(),
            State::Running => "running".into(),
            State::Waiting(w) => {
                self.reason(w.reason.as_ref());
                format!("waiting{}{}", prefixed(" ", &w.reason), in_parens(&w.message))
            }
            State::Terminated(t) => {
                self.terminated(t);
                let signal = t.signal.filter(|s| *s != 0).map(|s| format!(", signal {s}")).unwrap_or_default();
                let message =
                    t.message.as_ref().filter(|m| !m.is_empty()).map(|m| format!(": {m}")).unwrap_or_default();
                format!("terminated{} (exit {}{signal}{message})", prefixed(" ", &t.reason), t.exit_code)
            }
        }
    }

    /// What a restart left behind: `Error, exit 3`, from the last state.
    fn last(&mut self, c: &ContainerStatus) -> Option<String> {
        let State::Terminated(t) = &c.last_state else { return None };
        self.terminated(t);
        Some(match &t.reason {
            Some(reason) => format!("{reason}, exit {}", t.exit_code),
            None => format!("exit {}", t.exit_code),
        })
    }
}

fn prefixed(prefix: &str, word: &Option<Word>) -> String {
    word.as_ref().map(|w| format!("{prefix}{w}")).unwrap_or_default()
}

fn in_parens(text: &Option<Text>) -> String {
    text.as_ref().filter(|t| !t.is_empty()).map(|t| format!(" ({t})")).unwrap_or_default()
}

impl PodState {
    /// What changed from `self` to `new`, for the onUpdate line.
    pub fn diff(&self, new: &PodState) -> Diff {
        let mut d = Diff::default();
        let (old_status, new_status) = (status_of(self), status_of(new));
        if new.terminating && !self.terminating {
            d.changes.push("terminating".to_string());
        } else if let (true, Some(old), Some(new)) = (new.terminating, grace_period(self), grace_period(new))
            && old != new
        {
            d.changes.push(format!("grace period {old}s -> {new}s"));
        }
        if self.phase != new.phase {
            d.changes.push(format!("phase {} -> {}", self.phase, new.phase));
        }
        if (&old_status.reason, &old_status.message) != (&new_status.reason, &new_status.message) {
            d.reason(new_status.reason.as_ref());
            // `Evicted: The node was low on resource: memory.`
            let said = match (&new_status.reason, &new_status.message) {
                (None, None) => format!("{} cleared", old_status.reason.as_deref().unwrap_or("message")),
                (Some(reason), None) => reason.to_string(),
                (reason, Some(message)) => format!("{}: {message}", reason.as_deref().unwrap_or("message")),
            };
            d.changes.push(said);
        }
        if self.node != new.node {
            d.changes.push(format!("node {} -> {}", or_empty(&self.node), or_empty(&new.node)));
        }
        containers(&mut d, true, &old_status.init_container_statuses, &new_status.init_container_statuses);
        containers(&mut d, false, &old_status.container_statuses, &new_status.container_statuses);
        if (self.ready, self.containers) != (new.ready, new.containers) {
            d.changes.push(format!("ready {}/{} -> {}/{}", self.ready, self.containers, new.ready, new.containers));
        }
        if self.restarts != new.restarts {
            restarts(
                &mut d,
                self.restarts,
                new.restarts,
                &old_status.container_statuses,
                &new_status.container_statuses,
            );
        }
        for (i, kind) in Condition::ALL.iter().enumerate() {
            match (old_status.conditions.0[i], new_status.conditions.0[i]) {
                (old, new) if old == new => {}
                (None, Some(new)) => d.changes.push(format!("{kind} {new}")),
                (old, new) => d.changes.push(format!("{kind} {} -> {}", or_none(old), or_none(new))),
            }
        }
        if let (Some(old), Some(new)) = (old_status.observed_generation, new_status.observed_generation)
            && old != new
        {
            d.changes.push(format!("observed generation {old} -> {new}"));
        }
        for (k, v) in &new.labels {
            match self.labels.get(k) {
                None => d.changes.push(format!("label +{k}={v}")),
                Some(old) if old != v => d.changes.push(format!("label {k}={old} -> {k}={v}")),
                Some(_) => {}
            }
        }
        for k in self.labels.keys().filter(|k| !new.labels.contains_key(*k)) {
            d.changes.push(format!("label -{k}"));
        }
        if d.changes.is_empty() {
            d.changes.push(format!("other fields ({})", self.unshown_parts(new, old_status, new_status)));
        }
        d
    }

    /// Which part changed when nothing the line shows did: each part is
    /// compared by what we keep of it (see pod.rs). The metadata fingerprint
    /// leaves out `managedFields`, which every write changes, and the spec is
    /// known by `generation` alone; an update that moved neither (a new
    /// `managedFields` entry, or a spec change on a server that does not count
    /// pod generations) is "part unknown".
    fn unshown_parts(&self, new: &PodState, old_status: &Status, new_status: &Status) -> String {
        let mut parts = Vec::new();
        if self.pod.unshown_metadata != new.pod.unshown_metadata {
            parts.push("metadata");
        }
        if self.pod.metadata.generation != new.pod.metadata.generation {
            parts.push("spec");
        }
        if old_status.fingerprint != new_status.fingerprint {
            parts.push("status");
        }
        if parts.is_empty() { "part unknown".into() } else { parts.join(", ") }
    }
}

/// Each container whose state changed, by name: `app: running`, and
/// `init setup: ...` for an init container. A container that restarted
/// between two lines may be running again in both: its restart count says so
/// (see [`restarts`]).
fn containers(d: &mut Diff, init: bool, old: &[ContainerStatus], new: &[ContainerStatus]) {
    let prefix = if init { "init " } else { "" };
    for c in new {
        let before = old.iter().find(|o| o.name == c.name);
        if before.map(|b| &b.state) != Some(&c.state) {
            let state = d.state(&c.state);
            d.changes.push(format!("{prefix}{}: {state}", c.name));
        }
        // The pod's restart count is the containers'; an init container's
        // restarts are its own change.
        if init
            && let Some(b) = before
            && b.restart_count != c.restart_count
        {
            let last = d.last(c).map(|l| format!(" (last: {l})")).unwrap_or_default();
            d.changes.push(format!("{prefix}{}: restarts {} -> {}{last}", c.name, b.restart_count, c.restart_count));
        }
    }
}

/// `restarts 0 -> 1 (last: Error, exit 3)`: the pod's restart count, and what
/// each container that restarted last ended with (named when there are more).
fn restarts(d: &mut Diff, old_count: i64, new_count: i64, old: &[ContainerStatus], new: &[ContainerStatus]) {
    let mut lasts = Vec::new();
    for c in new {
        let before = old.iter().find(|o| o.name == c.name).map_or(0, |o| o.restart_count);
        if c.restart_count > before
            && let Some(last) = d.last(c)
        {
            lasts.push(if new.len() > 1 { format!("{} {last}", c.name) } else { last });
        }
    }
    let lasts = if lasts.is_empty() { String::new() } else { format!(" (last: {})", lasts.join("; ")) };
    d.changes.push(format!("restarts {old_count} -> {new_count}{lasts}"));
}

fn status_of(p: &PodState) -> &Status {
    static NONE: LazyLock<Status> = LazyLock::new(Status::default);
    p.pod.status.as_ref().unwrap_or(&NONE)
}

fn grace_period(p: &PodState) -> Option<i64> {
    p.pod.metadata.deletion_grace_period_seconds
}

fn or_none(t: Option<Truth>) -> String {
    t.map_or("<none>".into(), |t| t.to_string())
}

fn or_empty(s: &str) -> &str {
    if s.is_empty() { "<none>" } else { s }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::Pod;
    use serde_json::{Value, json};
    use std::sync::Arc;

    /// A pod's state from a status as the kubelet writes it.
    fn pod(status: Value) -> PodState {
        let json = json!({"metadata": {"name": "p", "uid": "u", "resourceVersion": "1"}, "status": status});
        PodState::of(&Arc::new(serde_json::from_value::<Pod>(json).unwrap()))
    }

    fn running(phase: &str, containers: Value) -> PodState {
        pod(json!({"phase": phase, "containerStatuses": containers}))
    }

    /// One container `c`: its state, restart count and last state.
    fn c(state: Value, restarts: i32, last: Value) -> Value {
        json!([{"name": "c", "ready": state.get("running").is_some(), "restartCount": restarts, "state": state, "lastState": last}])
    }

    fn diff(old: &PodState, new: &PodState) -> (String, Option<String>, Option<i32>) {
        let d = old.diff(new);
        (d.text(), d.reasons(), d.exit_code)
    }

    #[test]
    fn an_oom_kill_names_its_reason_and_exit_code() {
        let old = running("Running", c(json!({"running": {}}), 0, json!({})));
        let new = running("Running", c(json!({"terminated": {"exitCode": 137, "reason": "OOMKilled"}}), 0, json!({})));
        assert_eq!(
            diff(&old, &new),
            ("c: terminated OOMKilled (exit 137), ready 1/1 -> 0/1".into(), Some("OOMKilled".into()), Some(137))
        );
    }

    #[test]
    fn a_restart_says_how_the_last_run_ended() {
        let error = json!({"terminated": {"exitCode": 3, "reason": "Error"}});
        let exited = running("Running", c(error.clone(), 0, json!({})));
        let back_off = json!({"waiting": {"reason": "CrashLoopBackOff",
            "message": "back-off 20s restarting failed container=c pod=p_ns(u)"}});
        let looping = running("Running", c(back_off, 1, error));
        assert_eq!(
            diff(&exited, &looping),
            (
                "c: waiting CrashLoopBackOff (back-off 20s restarting failed container=c pod=p_ns(u)), \
                 restarts 0 -> 1 (last: Error, exit 3)"
                    .into(),
                Some("CrashLoopBackOff Error".into()),
                Some(3)
            )
        );
        // Restarted and running again between two lines: the count says it.
        let first = running("Running", c(json!({"running": {}}), 0, json!({})));
        let oom = json!({"terminated": {"exitCode": 137, "reason": "OOMKilled", "signal": 9}});
        let again = running("Running", c(json!({"running": {}}), 1, oom));
        assert_eq!(diff(&first, &again).0, "restarts 0 -> 1 (last: OOMKilled, exit 137)");
    }

    #[test]
    fn image_and_config_problems_name_their_reason() {
        let creating = running("Pending", c(json!({"waiting": {"reason": "ContainerCreating"}}), 0, json!({})));
        for (reason, message) in [
            ("ErrImagePull", "failed to pull and unpack image \"127.0.0.1:9/none:tag\": connection refused"),
            ("ImagePullBackOff", "Back-off pulling image \"127.0.0.1:9/none:tag\""),
            ("CreateContainerConfigError", "secret \"db\" not found"),
        ] {
            let waiting =
                running("Pending", c(json!({"waiting": {"reason": reason, "message": message}}), 0, json!({})));
            assert_eq!(
                diff(&creating, &waiting),
                (format!("c: waiting {reason} ({message})"), Some(reason.into()), None)
            );
        }
    }

    #[test]
    fn a_completed_container_and_a_signal() {
        let old = running("Running", c(json!({"running": {}}), 0, json!({})));
        let done = json!({"terminated": {"exitCode": 0, "reason": "Completed", "message": "all done"}});
        let new = running("Succeeded", c(done, 0, json!({})));
        assert_eq!(
            diff(&old, &new).0,
            "phase Running -> Succeeded, c: terminated Completed (exit 0: all done), ready 1/1 -> 0/1"
        );
        let killed = running("Failed", c(json!({"terminated": {"exitCode": 143, "signal": 15}}), 0, json!({})));
        assert_eq!(
            diff(&old, &killed),
            ("phase Running -> Failed, c: terminated (exit 143, signal 15), ready 1/1 -> 0/1".into(), None, Some(143))
        );
    }

    #[test]
    fn an_eviction_says_why() {
        let old = running("Running", json!([]));
        let message = "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi.";
        let new = pod(json!({"phase": "Failed", "reason": "Evicted", "message": message}));
        assert_eq!(
            diff(&old, &new),
            (format!("phase Running -> Failed, Evicted: {message}"), Some("Evicted".into()), None)
        );
    }

    #[test]
    fn conditions_read_as_kubectl_describe_lists_them() {
        let cond = |ready: &str| {
            pod(json!({"phase": "Running", "conditions": [
                {"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": ready},
                {"type": "ContainersReady", "status": ready}]}))
        };
        assert_eq!(diff(&cond("False"), &cond("True")).0, "ContainersReady False -> True, Ready False -> True");
        let scheduled = pod(json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]}));
        assert_eq!(diff(&pod(json!({"phase": "Pending"})), &scheduled).0, "PodScheduled True");
        assert_eq!(diff(&scheduled, &pod(json!({"phase": "Pending"}))).0, "PodScheduled True -> <none>");
    }

    #[test]
    fn init_containers_are_named_as_such() {
        let init = |state: Value, restarts: i32, last: Value| {
            pod(json!({"phase": "Pending", "initContainerStatuses": [
                {"name": "setup", "ready": false, "restartCount": restarts, "state": state, "lastState": last}]}))
        };
        let error = json!({"terminated": {"exitCode": 1, "reason": "Error"}});
        let old = init(json!({"running": {}}), 0, json!({}));
        let new = init(json!({"waiting": {"reason": "CrashLoopBackOff"}}), 1, error);
        assert_eq!(
            diff(&old, &new).0,
            "init setup: waiting CrashLoopBackOff, init setup: restarts 0 -> 1 (last: Error, exit 1)"
        );
    }

    #[test]
    fn a_pod_of_several_containers_names_the_one_that_restarted() {
        let two = |app: Value, restarts: i32, last: Value| {
            running(
                "Running",
                json!([
                {"name": "app", "ready": true, "restartCount": restarts, "state": app, "lastState": last},
                {"name": "sidecar", "ready": true, "restartCount": 0, "state": {"running": {}}}]),
            )
        };
        let old = two(json!({"running": {}}), 0, json!({}));
        let new = two(json!({"running": {}}), 1, json!({"terminated": {"exitCode": 2, "reason": "Error"}}));
        assert_eq!(diff(&old, &new).0, "restarts 0 -> 1 (last: app Error, exit 2)");
    }

    #[test]
    fn other_fields_say_which_part_changed() {
        let parse = |json: Value| PodState::of(&Arc::new(serde_json::from_value::<Pod>(json).unwrap()));
        let base = json!({"metadata": {"name": "p", "generation": 1, "annotations": {"a": "1"}},
                          "status": {"phase": "Running", "podIP": "10.0.0.1"}});
        let old = parse(base.clone());
        let mut v = base.clone();
        v["metadata"]["annotations"]["a"] = "2".into();
        assert_eq!(old.diff(&parse(v)).text(), "other fields (metadata)");
        let mut v = base.clone();
        v["metadata"]["generation"] = 2.into();
        assert_eq!(old.diff(&parse(v)).text(), "other fields (spec)");
        let mut v = base.clone();
        v["status"]["podIP"] = "10.0.0.2".into();
        v["metadata"]["finalizers"] = json!(["x"]);
        assert_eq!(old.diff(&parse(v)).text(), "other fields (metadata, status)");
        let mut v = base.clone();
        v["metadata"]["deletionTimestamp"] = "2026-11-21T15:00:00Z".into();
        v["metadata"]["deletionGracePeriodSeconds"] = 30.into();
        let terminating = parse(v.clone());
        assert_eq!(old.diff(&terminating).text(), "terminating");
        v["metadata"]["deletionGracePeriodSeconds"] = 0.into();
        assert_eq!(terminating.diff(&parse(v)).text(), "grace period 30s -> 0s", "the kubelet's final delete");
        let mut v = base.clone();
        v["status"]["observedGeneration"] = 1.into();
        let observed = parse(v.clone());
        v["status"]["observedGeneration"] = 2.into();
        assert_eq!(observed.diff(&parse(v)).text(), "observed generation 1 -> 2", "the kubelet saw a new generation");
        let mut v = base.clone();
        v["metadata"]["managedFields"] = json!([{"manager": "m"}]);
        assert_eq!(old.diff(&parse(v)).text(), "other fields (part unknown)");
    }

    #[test]
    fn the_summary_still_names_every_change_it_did() {
        let old = PodState {
            phase: "Pending".into(),
            containers: 1,
            labels: [("app".into(), "a".into()), ("gone".into(), "x".into())].into(),
            ..Default::default()
        };
        let new = PodState {
            phase: "Running".into(),
            node: "n1".into(),
            ready: 1,
            containers: 1,
            restarts: 2,
            labels: [("app".into(), "b".into()), ("tier".into(), "web".into())].into(),
            terminating: true,
            ..Default::default()
        };
        assert_eq!(
            old.diff(&new).text(),
            "terminating, phase Pending -> Running, node <none> -> n1, ready 0/1 -> 1/1, restarts 0 -> 2, \
             label app=a -> app=b, label +tier=web, label -gone"
        );
    }

    #[test]
    fn hostile_text_is_escaped_and_cut_at_parse_time() {
        use crate::text::{MESSAGE_CHARS, clean};
        // A 1 MB termination message, with newlines, as a container can write it.
        let huge = format!("line one\nline two\u{1b}[2J{}", "x".repeat(1 << 20));
        let old = running("Running", c(json!({"running": {}}), 0, json!({})));
        let new = running(
            "Running",
            c(json!({"terminated": {"exitCode": 1, "reason": "Error", "message": huge}}), 0, json!({})),
        );
        let State::Terminated(t) = &new.pod.status.as_ref().unwrap().container_statuses[0].state else { panic!() };
        let kept = t.message.as_deref().unwrap();
        assert!(
            kept.starts_with(r"line one\nline two\u{1b}[2Jxxx") && kept.ends_with("…(cut, 1048597 bytes)"),
            "{kept}"
        );
        assert_eq!(kept.chars().count(), MESSAGE_CHARS + "…(cut, 1048597 bytes)".chars().count());
        let text = old.diff(&new).text();
        assert!(clean(&text, text.chars().count()) == text && text.len() < 300, "{text}");
    }
}
