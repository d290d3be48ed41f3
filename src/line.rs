//! One line of the log: what changed for a pod, and how it is written.
//!
//! Its own module because two writers share it: the worker, which logs the
//! changes it decides, and the leader election, whose new leader logs the
//! lines it kept while it stood by (leader.rs). Neither has to import the
//! other for it.

use tracing::info;

use crate::key::Key;
use crate::pod::PodState;
use crate::text::{NAME_CHARS, cleaned};

/// One line of output, before it is logged.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    Add(PodState),
    Update { old: PodState, new: PodState },
    Delete(PodState),
}

/// The classic line, `onAdd: default/kuard`, with structured fields.
///
/// With `--selector`, `onDelete` means "left the set of pods we watch": the
/// pod was deleted, or its labels stopped matching. The server sends DELETED
/// for both; when the pod still exists (the sync asks, see `sync`), the line
/// says `reason="no longer matches the selector"`, and its return is an
/// `onAdd` with `reason="now matches the selector"`. A pod that left the
/// selector while the watch was down is found missing by the relist, which
/// cannot tell why: a plain `onDelete`.
///
/// `onUpdate` says what changed in `changes`, in words (describe.rs), and
/// repeats the facts a log pipeline counts by as fields of their own, present
/// only when the change names them: `reasons` (`OOMKilled`, `CrashLoopBackOff
/// ImagePullBackOff`...) and `exit_code`.
pub(crate) fn log(key: &Key, change: &Change, initial: bool, reason: Option<&str>, replayed: Option<bool>) {
    // As the key prints them: cleaned (text.rs).
    let (ns, name) = (cleaned(&key.namespace, NAME_CHARS), cleaned(&key.name, NAME_CHARS));
    let (ns, name) = (ns.as_ref(), name.as_ref());
    crate::metrics::event_logged(match change {
        Change::Add(_) => "onAdd",
        Change::Update { .. } => "onUpdate",
        Change::Delete(_) => "onDelete",
    });
    match (change, reason) {
        (Change::Add(p), _) if initial => {
            info!(namespace = ns, name, uid = p.uid, phase = p.phase, replayed, initial_list = true, "onAdd: {key}")
        }
        (Change::Add(p), Some(reason)) => {
            info!(namespace = ns, name, uid = p.uid, phase = p.phase, replayed, reason, "onAdd: {key}")
        }
        (Change::Add(p), None) => info!(namespace = ns, name, uid = p.uid, phase = p.phase, replayed, "onAdd: {key}"),
        (Change::Update { old, new }, _) => {
            let diff = old.diff(new);
            info!(
                namespace = ns,
                name,
                uid = new.uid,
                phase = new.phase,
                replayed,
                changes = diff.text(),
                reasons = diff.reasons().as_deref(),
                exit_code = diff.exit_code,
                "onUpdate: {key}"
            )
        }
        (Change::Delete(p), Some(reason)) => {
            info!(namespace = ns, name, uid = p.uid, phase = p.phase, replayed, reason, "onDelete: {key}")
        }
        (Change::Delete(p), None) => {
            info!(namespace = ns, name, uid = p.uid, phase = p.phase, replayed, "onDelete: {key}")
        }
    }
}
