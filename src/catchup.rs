//! Whether a replica's cache is caught up enough to lead. A new leader logs
//! every change past the previous leader's mark, so it needs a cache that saw
//! them: a standby whose watch is down does not take the Lease, and a range
//! the new leader knows only from a list is named in a WARN line.
//!
//! That range is also written on the Lease ([`LISTED_ONLY`]): the leader's
//! marks pass it, but it saw no change in it as an event. A standby that
//! follows those marks does not drop the deletes it kept for that range in
//! silence: it names each in a WARN line, for the leader's list showed no
//! trace of those pods.

use std::sync::Arc;

use tracing::warn;

use crate::informer::{Cache, Listed};
use crate::wire::Position;

/// What the elector knows of this replica's watch of pods.
pub struct Watch {
    cache: Arc<Cache>,
    /// The failure we saw last (its number), and where the stream was then:
    /// a stream that moved since (a bookmark, on protobuf) is up again.
    seen: Option<(u64, Option<String>)>,
}

impl Watch {
    pub fn new(cache: Arc<Cache>) -> Watch {
        Watch { cache, seen: None }
    }

    /// How far the watch stream has come (protobuf only), for the mark.
    pub fn position(&self) -> Position {
        self.cache.position()
    }

    /// Why the watch is down, or None if it is up. Down means it failed (an
    /// error, a broken connection) and has delivered nothing since: no
    /// event, no list, and no bookmark that moved the stream. Changes made
    /// meanwhile are not in the cache, and if the watch cannot resume (the
    /// history it would resume from was compacted), it relists, and a pod
    /// created and deleted meanwhile never shows.
    pub fn down(&mut self) -> Option<String> {
        down(&mut self.seen, crate::probes::watch_failing(), self.cache.position().handled())
    }

    /// Notes where the stream is if the watch has just failed (see
    /// [`Watch::down`]); the elector looks every retry period.
    pub fn look(&mut self) {
        self.down();
    }

    /// The API server answers again (a Lease request got through after
    /// failing): the watch stops waiting out its backoff.
    pub fn server_answered(&self) {
        self.cache.server_answered();
    }

    /// Says which range may be missing deletes, if this replica knows part
    /// of what came after `mark` only from a list (see [`unwatched`]), and
    /// returns it.
    pub fn warn_unwatched(&self, mark: Option<u64>) -> Option<(u64, Option<u64>)> {
        let range = self.cache.last_list().and_then(|list| unwatched(mark, list));
        let (after, through) = range?;
        match through {
            Some(through) => warn!(
                after,
                through,
                "deletes between resourceVersion {after} and {through} may be missing: this replica saw that range only as a list, and a list does not show a pod that was created and deleted"
            ),
            None => warn!(
                after,
                "deletes after resourceVersion {after} may be missing: this replica saw what came after it only as a list, and a list does not show a pod that was created and deleted"
            ),
        }
        range
    }
}

/// The annotation on the Lease that carries the range its holder saw only
/// as a list ([`ListedOnly`]), e.g. `366-369`. Absent when there is none.
pub const LISTED_ONLY: &str = "demo-controller.example.com/listed-only";

/// The resourceVersions past `after` and up to `through` that a leader saw
/// only as a list: it led from the mark `after` with a list taken at
/// `through` (a late joiner, or a standby whose watch relisted). Its marks
/// pass the range, yet it logged no change in it as it happened: the pods
/// still there it logged as its list showed them, a pod deleted there not
/// at all. So a standby that kept a delete in the range names it in a
/// WARN line when the mark passes it, rather than drop it in silence. (It
/// does not log it as an `onDelete`: a standby writes no event line, and
/// another standby may have kept it too.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListedOnly {
    pub after: u64,
    pub through: u64,
}

impl ListedOnly {
    /// The range as the leader writes it; None where the list's
    /// resourceVersion is not known (JSON: see [`unwatched`]).
    pub fn of(range: Option<(u64, Option<u64>)>) -> Option<ListedOnly> {
        let (after, through) = range?;
        Some(ListedOnly { after, through: through? })
    }

    /// Reads the annotation's value (see [`LISTED_ONLY`]); None if it is
    /// not one.
    pub fn parse(text: &str) -> Option<ListedOnly> {
        let (after, through) = text.split_once('-')?;
        let (after, through) = (after.parse().ok()?, through.parse().ok()?);
        (after < through).then_some(ListedOnly { after, through })
    }

    /// Whether a change at resourceVersion `version` lies in the range.
    pub fn holds(self, version: u64) -> bool {
        self.after < version && version <= self.through
    }

    /// Whether a change somewhere past `after` and no later than `by` (None:
    /// unknown) may lie in the range.
    pub fn meets(self, after: Option<u64>, by: Option<u64>) -> bool {
        after.is_none_or(|after| after < self.through) && by.is_none_or(|by| by > self.after)
    }
}

impl std::fmt::Display for ListedOnly {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.after, self.through)
    }
}

/// [`Watch::down`] on what it reads: `seen`, the failure seen last and the
/// stream's position then; `failing`, the watch's failure, if no event came
/// since (its number and reason); `position`, the stream's position now.
fn down(
    seen: &mut Option<(u64, Option<String>)>,
    failing: Option<(u64, String)>,
    position: Option<String>,
) -> Option<String> {
    let Some((number, reason)) = failing else {
        *seen = None;
        return None;
    };
    match seen.as_ref() {
        // The same failure, and the stream has moved since: a bookmark came.
        Some((seen, at)) if *seen == number && *at != position => None,
        Some((seen, _)) if *seen == number => Some(reason),
        _ => {
            *seen = Some((number, position));
            Some(reason)
        }
    }
}

/// The range past the previous leader's `mark` that this replica's last
/// `list` covered, as (after, through): changes in it this replica knows only
/// as the list showed them. None when the list is not past the mark (every
/// change after the mark came to it one by one), or when there is no mark (no
/// leader before). On JSON the list's resourceVersion is not known: its
/// newest pod's past the mark says the list is, and `through` is None. (A
/// range that holds only deletes then goes unseen.)
pub fn unwatched(mark: Option<u64>, list: Listed) -> Option<(u64, Option<u64>)> {
    let mark = mark?;
    let after = mark.max(list.after.unwrap_or(0));
    match list.by {
        Some(by) => (by > after).then_some((after, Some(by))),
        None => list.newest.is_some_and(|newest| newest > after).then_some((after, None)),
    }
}

/// Whether a replica whose first list's newest pod resourceVersion was
/// `joined` has followed a leader whose mark is `mark`: every change it
/// knows only from that list, the leader has logged.
pub fn caught_up(joined: Option<u64>, mark: Option<u64>) -> bool {
    match (joined, mark) {
        (None, _) => true, // the first list was empty
        (Some(joined), Some(mark)) => mark >= joined,
        (Some(_), None) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replica_is_caught_up_once_the_mark_passed_its_first_list() {
        assert!(caught_up(None, None), "an empty first list: nothing known only from it");
        assert!(caught_up(Some(40), Some(40)));
        assert!(caught_up(Some(40), Some(90)));
        assert!(!caught_up(Some(40), Some(39)), "a rollout's new pod listed changes the leader had not logged");
        assert!(!caught_up(Some(40), None));
    }

    #[test]
    fn a_watch_is_down_from_its_failure_until_it_delivers() {
        let mut seen = None;
        let rv = |v: &str| Some(v.to_string());
        assert_eq!(down(&mut seen, None, rv("10")), None, "never failed");
        let failing = Some((1, "connection refused".to_string()));
        assert_eq!(down(&mut seen, failing.clone(), rv("10")).as_deref(), Some("connection refused"));
        assert_eq!(down(&mut seen, failing.clone(), rv("10")).as_deref(), Some("connection refused"));
        assert_eq!(down(&mut seen, failing.clone(), rv("25")), None, "a bookmark moved the stream");
        let again = Some((2, "connection refused".to_string()));
        assert!(down(&mut seen, again.clone(), rv("25")).is_some(), "a new failure, at the same position");
        assert_eq!(down(&mut seen, None, rv("25")), None, "an event came");
        // JSON: no position at all; only an event or a list brings it back.
        assert!(down(&mut seen, again.clone(), None).is_some());
        assert!(down(&mut seen, again, None).is_some());
    }

    #[test]
    fn the_range_seen_only_as_a_list_goes_on_the_lease_and_back() {
        let range = ListedOnly { after: 366, through: 369 };
        assert_eq!(ListedOnly::of(Some((366, Some(369)))), Some(range));
        assert_eq!(ListedOnly::of(Some((366, None))), None, "JSON: the list's end is not known");
        assert_eq!(ListedOnly::of(None), None);
        assert_eq!(range.to_string(), "366-369");
        assert_eq!(ListedOnly::parse("366-369"), Some(range));
        for bad in ["", "366", "369-366", "366-369,x", "a-b", "-369"] {
            assert_eq!(ListedOnly::parse(bad), None, "{bad}");
        }
        assert!(range.holds(367) && range.holds(369) && !range.holds(366) && !range.holds(370));
        // A change at 367, or a delete somewhere in (360, 368]: maybe in it.
        assert!(range.meets(Some(366), Some(367)) && range.meets(Some(360), Some(368)));
        assert!(!range.meets(Some(369), Some(380)), "after it");
        assert!(!range.meets(Some(300), Some(366)), "before it: the mark's");
        assert!(range.meets(Some(300), None), "no upper bound");
    }

    #[test]
    fn the_range_a_new_leader_knows_only_from_a_list_is_what_lies_past_the_mark() {
        let first = |by, newest| Listed { after: None, by, newest };
        assert_eq!(unwatched(Some(204), first(Some(230), Some(228))), Some((204, Some(230))));
        assert_eq!(unwatched(Some(204), first(Some(204), Some(190))), None, "the list is the mark's");
        assert_eq!(unwatched(Some(204), first(Some(150), Some(120))), None, "it watched from before the mark");
        assert_eq!(unwatched(None, first(Some(230), Some(228))), None, "no leader before");
        // A relist: the stream had come to 210, past the mark, before it.
        let relist = Listed { after: Some(210), by: Some(260), newest: Some(240) };
        assert_eq!(unwatched(Some(204), relist), Some((210, Some(260))));
        // JSON: no list resourceVersion; its newest pod says it is past.
        assert_eq!(unwatched(Some(204), first(None, Some(228))), Some((204, None)));
        assert_eq!(unwatched(Some(204), first(None, Some(200))), None);
    }
}
