//! Leader election on a coordination.k8s.io/v1 Lease, with a warm standby
//! that resumes where the leader stopped.
//!
//! Two replicas of a logger log every event twice; one replica leaves a gap
//! whenever its pod is replaced. So every replica runs the informer and the
//! workers, and one of them, the holder of the Lease, writes the lines. The
//! election is client-go's `tools/leaderelection`, in its rules and its
//! flags (see cli.rs): optimistic concurrency on the Lease's
//! resourceVersion, a renew every retry period, no line after the renew
//! deadline passed without a renew, the lease released after the drain of a
//! graceful shutdown.
//!
//! What client-go has no word for is where the new leader starts. Here the
//! leader writes, with every renew, how far it has logged ([`MARK`]): the
//! resourceVersion up to which its informer's watch stream was delivered
//! (the last event's, a bookmark's, a list's), taken while every key
//! added was synced (none queued, held by a worker, or waiting out a
//! retry), so every change at or below it was synced ([`next_mark`]); under
//! steady churn, when the queue is never idle, a position read earlier
//! once every key that was busy then has been synced since (the low
//! watermark, [`Gate::watermark`]). A standby's worker takes every change in, as the
//! leader's does, and hands its line to the [`Gate`], which keeps it until
//! the mark covers it. Once the standby leads, it logs the lines it kept
//! past the mark. After a graceful handoff the mark is exact: nothing
//! lost, and nothing twice but for two kinds of line, which say so: one a
//! lagging worker merged from changes on both sides of the mark (it repeats
//! the older part: [`placed`]), and the one below. After a crash the mark is up to one retry period
//! old, so the kept lines may have been logged already: they say
//! `replayed=true`. A replica takes the lease only while its watch
//! delivers, and a new leader that knows part of what came after the mark
//! only from a list says which range may be missing deletes, and writes it
//! on the Lease, so that a standby that kept a delete there says so rather
//! than drop it in silence (catchup.rs).
//!
//! One kind of line is not at its pod's resourceVersion: a delete that a
//! relist found (the pod is missing from the new list; its DELETED event
//! was missed). It happened somewhere after the pod's last change, and
//! after the position this replica's own stream had reached when the relist
//! started (the pod was still in its store then), and no later than the
//! list, so only a mark past the *list's* resourceVersion covers it
//! ([`Seen`]); a mark between the two ends leaves open whether the leader
//! logged it, and the line then says `replayed=true`. (A leader's own
//! stream soon passes the mark it took over from, so a delete its own
//! relist finds later is a plain line.) That is why
//! the mark is a stream position and not the newest pod resourceVersion
//! logged: in a quiet namespace the latter never reaches a list's
//! resourceVersion (etcd's revision, which every write anywhere moves, the
//! lease's renewals too), and such deletes would wait in every standby, to
//! be logged again by the next leader. The position moves in a quiet
//! namespace too, with the bookmark the API server sends before it ends
//! each watch (see `informer::WATCH_TIMEOUT_SECS`), so a standby drops such
//! a delete within a watch timeout or two after the leader logged it, on
//! one condition: that the bookmark carries etcd's current revision, not
//! the last pod change's. kube-apiserver's watch cache moves on with etcd's
//! progress notifications (the local v1.35's does: tests/leader.rs shows
//! it in a quiet namespace); a server whose bookmarks do not follow etcd's
//! progress sends none newer than the last pod change it saw, and the
//! standby then keeps such a delete until a later pod change carries the
//! mark past its list, or until it leads and logs it with `replayed=true`.
//! On `--wire json` kube's watcher tells neither the position nor the
//! list's resourceVersion: the mark is then the newest pod resourceVersion
//! taken in, and a standby keeps every delete a relist found until it leads
//! (at most [`PENDING_CAP`] lines): no mark can say it was logged. It logs
//! them then, with `replayed=true` where the mark passed the lower end
//! (short of it, the delete came after the mark for certain).

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Api;
use kube::api::PostParams;
use tokio::time::Instant;
use tracing::{info, warn};

use crate::catchup::{LISTED_ONLY, ListedOnly, Watch, caught_up};
use crate::faults::ElectionFaults;

use crate::informer::Relist;
use crate::key::Key;
use crate::line::Change;
use crate::queue::Queue;
pub use crate::scope::Scope;
use crate::scope::{Compared, SCOPE, Stamp};

/// The annotation on the Lease that carries the leader's progress: every pod
/// change up to this resourceVersion has been logged (or was in the first
/// list of a logger that did not lead). It is the higher of the informer's
/// stream position (protobuf only) and the newest pod resourceVersion taken
/// in, logged or silent (all JSON has): see [`next_mark`].
pub const MARK: &str = "demo-controller.example.com/logged-up-to";

/// The release stamp: the annotation a leader writes, with the holder
/// cleared, when it gives the lease up after a drain that wrote every line
/// (see [`Elector::release`]). Only then is its [`MARK`] exact: a lease
/// that expired, or whose holder was cleared or that was deleted by hand,
/// is a crash to the next leader, whose lines past the mark then say
/// `replayed=true`. Any write by a holder removes it. Its value names the
/// holder that released and the Lease's uid ([`Stamp`]): a stamp that names
/// another Lease (a copy restored from a backup) or another holder than the
/// last one seen, or that names none (typed by hand), is no release.
pub const RELEASED: &str = "demo-controller.example.com/released";

/// How many retry periods more than a standby that saw the last holder a
/// replica that saw none waits for a missing lease ([`Observer`]): the standby
/// may find the deletion a retry period late, and its reads take time too.
pub const GRACE_RETRIES: u32 = 3;

/// client-go's `JitterFactor`: the renew deadline must leave room for one
/// retry period stretched by this much.
pub const JITTER_FACTOR: f64 = 1.2;

/// The timings, as client-go's `LeaderElectionConfig` names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timings {
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

impl Timings {
    /// client-go's `NewLeaderElector` checks, in its order, with the flags'
    /// names: a standby may take the lease `lease_duration` after its last
    /// renew, so the leader must have stopped by then (`renew_deadline`), and
    /// that deadline must leave room for at least one retry.
    ///
    /// The Lease carries its duration in whole seconds
    /// (`leaseDurationSeconds`), and a standby waits what the Lease says: so
    /// the lease duration is rounded up to whole seconds first (1500ms is
    /// 2s), and checked as rounded. Cut down instead, a standby could take
    /// the lease before the leader's renew deadline.
    pub fn check(self) -> Result<Timings, String> {
        let Timings { lease_duration, renew_deadline, retry_period } = self;
        let lease_duration =
            Duration::from_secs(lease_duration.as_secs() + u64::from(lease_duration.subsec_nanos() > 0));
        if lease_duration <= renew_deadline {
            return Err("--leader-elect-lease-duration must be greater than --leader-elect-renew-deadline".into());
        }
        if renew_deadline.as_secs_f64() <= JITTER_FACTOR * retry_period.as_secs_f64() {
            return Err("--leader-elect-renew-deadline must be greater than 1.2 x --leader-elect-retry-period".into());
        }
        if retry_period.is_zero() {
            return Err("--leader-elect-retry-period must be greater than zero".into());
        }
        Ok(Timings { lease_duration, renew_deadline, retry_period })
    }
}

/// The identity written as the holder: the pod's name (HOSTNAME in a pod)
/// and a random suffix, so a restarted container is a new candidate, as in
/// client-go's usual `hostname + "_" + uuid`.
pub fn identity() -> String {
    use std::hash::{BuildHasher, Hasher};
    let host = std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()).unwrap_or_else(|| "demo-controller".into());
    // RandomState is seeded from the OS's randomness: 64 random bits, no crate.
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    format!("{host}_{:08x}", hasher.finish() as u32)
}

/// The part of a Lease the election reads (client-go's LeaderElectionRecord).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Record {
    /// The Lease's resourceVersion: any write changes it, so a record that
    /// kept it has not been renewed (client-go compares the raw record).
    pub version: String,
    pub holder: String,
    pub lease_duration: Duration,
    pub transitions: i32,
    /// The leader's [`MARK`], if it wrote one.
    pub mark: Option<u64>,
    /// What the mark was written for ([`SCOPE`]), as the lease says it.
    pub scope: Option<String>,
    /// The mark was written for another scope, so it was dropped (see
    /// [`Elector::checked`]).
    pub other_scope: bool,
    /// The release stamp ([`RELEASED`]) as the lease says it, if any.
    pub stamp: Option<String>,
    /// The stamp is a release: it names this Lease (and, once
    /// [`Elector::checked`], the last holder seen).
    pub released: bool,
    /// The range its holder saw only as a list ([`LISTED_ONLY`]).
    pub listed_only: Option<ListedOnly>,
}

impl Record {
    pub fn of(lease: &Lease) -> Record {
        let spec = lease.spec.clone().unwrap_or_default();
        let annotation = |name: &str| lease.metadata.annotations.as_ref().and_then(|a| a.get(name)).cloned();
        let stamp = annotation(RELEASED);
        // A stamp counts only on the Lease it was written on.
        let uid = lease.metadata.uid.as_deref();
        let released = stamp.as_deref().and_then(Stamp::read).is_some_and(|s| Some(s.uid.as_str()) == uid);
        Record {
            version: lease.metadata.resource_version.clone().unwrap_or_default(),
            holder: spec.holder_identity.unwrap_or_default(),
            lease_duration: Duration::from_secs(spec.lease_duration_seconds.unwrap_or(0).max(0) as u64),
            transitions: spec.lease_transitions.unwrap_or(0),
            mark: lease.metadata.annotations.as_ref().and_then(|a| a.get(MARK)).and_then(|m| m.parse().ok()),
            scope: annotation(SCOPE),
            other_scope: false,
            stamp,
            released,
            listed_only: annotation(LISTED_ONLY).as_deref().and_then(ListedOnly::parse),
        }
    }
}

/// What to do with the Lease after one read of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// There is none, and we waited it out: create it, held by us.
    Create,
    /// Free or expired: take it (one more leader transition).
    Take { transitions: i32 },
    /// Ours: renew it.
    Renew { transitions: i32 },
    /// Someone else holds it and renewed it within its lease duration.
    Wait { holder: String },
    /// Gone, or its holder cleared, with no release stamp: its last holder
    /// (`holder`, empty if we saw none) may lead until its next renew finds
    /// out, so we wait `left` more.
    Vacated { holder: String, left: Duration },
}

// ANCHOR: decide
/// client-go's `tryAcquireOrRenew`, the decision without the API calls.
///
/// Expiry is measured on *our* clock, from when we first saw the record as
/// it is now (`observed`): clocks of two machines are never compared, and a
/// holder that keeps renewing keeps changing the record, so it never expires.
///
/// Unlike client-go, a Lease that is missing, or has no holder and no
/// release stamp, is not free at once: it may have been deleted or cleared
/// by hand, and its holder logs until its next renew finds out. So it is
/// waited out for that holder's lease duration (at least ours). A replica
/// that never saw a holder waits [`GRACE_RETRIES`] retry periods more
/// (`grace`): a standby that followed the last leader keeps what that
/// leader may not have logged, and so should take the Lease first.
#[derive(Debug, Default)]
pub struct Observer {
    observed: Option<(Record, Instant)>,
    /// Since when the Lease has been missing.
    missing: Option<Instant>,
    /// The lease duration of the last holder we saw, if we saw one.
    last_holder: Option<(String, Duration)>,
    /// Our own lease duration, and the extra wait of a replica that saw no holder.
    floor: Duration,
    grace: Duration,
}

impl Observer {
    pub fn new(floor: Duration, grace: Duration) -> Observer {
        Observer { floor, grace, ..Observer::default() }
    }

    /// Our create of a missing lease lost to another's: if it is missing
    /// again at the next read, it was deleted again, a new wait.
    pub fn created_by_another(&mut self) {
        self.missing = None;
    }

    pub fn step(&mut self, me: &str, lease: Option<&Record>, now: Instant) -> Step {
        let since = match lease {
            None => *self.missing.get_or_insert(now),
            Some(record) => {
                self.missing = None;
                if self.observed.as_ref().is_none_or(|(seen, _)| seen != record) {
                    self.observed = Some((record.clone(), now));
                }
                if !record.holder.is_empty() {
                    self.last_holder = Some((record.holder.clone(), record.lease_duration));
                }
                self.observed.as_ref().map_or(now, |(_, at)| *at)
            }
        };
        let Some(record) = lease.filter(|r| !r.holder.is_empty() || r.released) else {
            // Missing, or cleared without the release stamp.
            let (holder, wait) = match &self.last_holder {
                Some((holder, duration)) => (holder.clone(), (*duration).max(self.floor)),
                None => (String::new(), self.floor + self.grace),
            };
            let wait = wait.max(lease.map_or(Duration::ZERO, |r| r.lease_duration));
            return match (since + wait).checked_duration_since(now) {
                Some(left) if !left.is_zero() => Step::Vacated { holder, left },
                _ if lease.is_none() => Step::Create,
                _ => Step::Take { transitions: lease.map_or(0, |r| r.transitions) + 1 },
            };
        };
        let valid = since + record.lease_duration > now;
        if !record.holder.is_empty() && record.holder != me && valid {
            return Step::Wait { holder: record.holder.clone() };
        }
        if record.holder == me {
            Step::Renew { transitions: record.transitions }
        } else {
            Step::Take { transitions: record.transitions + 1 }
        }
    }
}
// ANCHOR_END: decide

impl Observer {
    /// The last holder we saw on the lease, if we saw one (the release
    /// stamp must name it: see [`from_its_holder`]).
    pub fn last_holder(&self) -> Option<&str> {
        self.last_holder.as_ref().map(|(holder, _)| holder.as_str())
    }
}

impl Pending {
    fn new(key: &Key, change: &Change, initial: bool, reason: Option<&'static str>, version: Version) -> Pending {
        let bytes = weight(key, change);
        Pending { key: key.clone(), change: change.clone(), initial, reason, version, bytes }
    }
}

/// How a line passes the gate (see [`Gate::admit`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Log it.
    Log,
    /// No line now: the leader logged it, or we stand by (then the gate
    /// keeps the line until the leader's mark passes it or we lead).
    Silent,
    /// Log it with `replayed=true`: the previous leader may have logged it.
    Replayed,
}

#[derive(Debug)]
enum Role {
    /// Lines are written, but none up to `mark` (the previous leader's), and
    /// none after `until`: the renew deadline after the last renew. After a
    /// take without a release, a change below `doubt` (the take's own
    /// resourceVersion) may have been logged by the previous leader before
    /// it stopped, past its mark: its line says `replayed=true`, also when
    /// our stream lagged and it reaches us after the take.
    Leading { mark: Option<u64>, until: Option<Instant>, doubt: Option<u64> },
    /// No line, but for those the leader saw only as a list (`listed`: see
    /// [`ListedOnly`]). Those past `mark` wait in `kept`.
    Standby { mark: Option<u64>, listed: Option<ListedOnly> },
}

/// What a line says of *when* its change happened, for the gate to compare
/// with a mark.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    /// By an event or in a list: the change is at the pod's resourceVersion.
    AsItHappened,
    /// An add or an update that merged the pod's events from this
    /// resourceVersion on, up to its own: a worker that lags takes several
    /// at once (a pod that lived and died before its sync is added at its
    /// delete's resourceVersion, though it was created at `first`).
    Merged { first: u64 },
    /// A delete a relist inferred (the new list lacks the pod). Its own
    /// resourceVersion is unknown (the DELETED event was missed): it is past
    /// the pod's last known one and the stream's position when the relist
    /// started, and no later than the list's, when the watcher says it
    /// (protobuf; kube's JSON watcher does not): see [`Relist`].
    Inferred(Relist),
}

// ANCHOR: version
/// Where a line's change stands among resourceVersions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Version {
    /// At this resourceVersion (None: not a number).
    At(Option<u64>),
    /// Changes from `first` to `last`, both included (`first < last`): a
    /// line that merged several.
    Spans { first: u64, last: u64 },
    /// Somewhere after `after`, no later than `by` (None: unknown).
    Between { after: Option<u64>, by: Option<u64> },
}

impl Version {
    fn of(change: &Change, seen: Seen) -> Version {
        let own = resource_version(change);
        match seen {
            Seen::AsItHappened => Version::At(own),
            Seen::Merged { first } => match own {
                Some(last) if first < last => Version::Spans { first, last },
                _ => Version::At(own),
            },
            Seen::Inferred(Relist { after, by }) => {
                // After both the pod's last change and where our own stream
                // was when the relist started: a delete at or below that
                // position would have come as an event.
                let after = own.max(after);
                // A list at or below that is older than what we know (a
                // lagging cache): it bounds nothing.
                let by = by.filter(|by| after.is_none_or(|after| after < *by));
                Version::Between { after, by }
            }
        }
    }

    /// The lower end: the resourceVersion, or what the change is known to
    /// come after.
    #[cfg(test)]
    fn own(self) -> Option<u64> {
        match self {
            Version::At(v) | Version::Between { after: v, .. } => v,
            Version::Spans { first, .. } => Some(first),
        }
    }

    /// The mark says the leader logged it. For an inferred delete only a
    /// mark past the *list* says so: a mark past the pod's last change, but
    /// short of the list, may stop before the delete.
    fn covered_by(self, mark: Option<u64>) -> bool {
        match self {
            Version::At(v) => covers(mark, v),
            Version::Spans { first, last } => placed(first, last, mark) == Placed::Below,
            Version::Between { by, .. } => covers(mark, by),
        }
    }

    /// Whether it may lie below `doubt` (see [`Role::Leading`]): a version
    /// below it, or a delete whose lower end is (a version that is not a
    /// number cannot be placed: it is not said to be replayed).
    fn before(self, doubt: Option<u64>) -> bool {
        let Some(doubt) = doubt else { return false };
        match self {
            Version::At(v) => v.is_some_and(|v| v < doubt),
            Version::Spans { first, .. } => first < doubt,
            Version::Between { after, .. } => after.is_none_or(|after| after < doubt),
        }
    }

    /// Whether some mark can cover it: a version that is a number, or a
    /// delete with an upper bound.
    fn coverable(self) -> bool {
        matches!(self, Version::At(Some(_)) | Version::Spans { .. } | Version::Between { by: Some(_), .. })
    }

    /// Whether `change` is a delete that may lie in the range a leader saw
    /// only as a list: no line of that leader shows it (see [`ListedOnly`]).
    fn unlogged_delete(self, change: &Change, listed: ListedOnly) -> bool {
        let within = match self {
            Version::At(v) => v.is_some_and(|v| listed.holds(v)),
            // An add or an update: not a delete.
            Version::Spans { .. } => false,
            Version::Between { after, by } => listed.meets(after, by),
        };
        within && matches!(change, Change::Delete(_))
    }

    /// The mark does not say it was logged, nor that it was not: a delete
    /// somewhere between its lower end (the pod's last change, or our
    /// stream's position when the relist started: the mark passed both) and
    /// the list; or a merged line that the mark cuts in two. Such a line is
    /// logged with `replayed=true`.
    fn straddled_by(self, mark: Option<u64>) -> bool {
        match self {
            Version::At(_) => false,
            Version::Spans { first, last } => placed(first, last, mark) == Placed::Across,
            Version::Between { after, .. } => covers(mark, after) && !self.covered_by(mark),
        }
    }
}

/// Where a mark falls on a line that spans changes `first..=last`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Placed {
    /// The mark is at or past `last`: the leader logged all of it.
    Below,
    /// The mark is short of `first`: the leader logged none of it.
    Past,
    /// Between: the leader logged a part (an add, or an update up to a
    /// state in between), which the line repeats.
    Across,
}

/// Placed by the whole range, not by its newest change alone: a worker that
/// lags merges a key's changes into one line, and a mark that falls inside
/// them means the leader already logged the older part. Dropping the line
/// would lose the newer part; logging it plain would repeat the older one
/// unmarked. Only a line the mark really cuts says `replayed=true`.
fn placed(first: u64, last: u64, mark: Option<u64>) -> Placed {
    match mark {
        Some(mark) if last <= mark => Placed::Below,
        Some(mark) if first <= mark => Placed::Across,
        _ => Placed::Past,
    }
}
// ANCHOR_END: version

/// A line a standby kept: past the leader's mark when its worker took the
/// change in.
#[derive(Debug)]
pub struct Pending {
    pub key: Key,
    pub change: Change,
    pub initial: bool,
    pub reason: Option<&'static str>,
    version: Version,
    /// Its estimated size (see [`weight`]).
    bytes: usize,
}

/// A kept line's estimated size in memory: its key, and for each pod state
/// it shows, the text of the pod's metadata plus 1 KiB for the rest (the
/// summary's copies, its spec and status as the cache keeps them: a few
/// names and numbers). An old state a line keeps is memory the cache no
/// longer holds.
fn weight(key: &Key, change: &Change) -> usize {
    let of = |p: &crate::pod::PodState| p.pod.metadata.text_len() + 1024;
    let states = match change {
        Change::Add(p) | Change::Delete(p) => of(p),
        Change::Update { old, new } => of(old) + of(new),
    };
    key.namespace.len() + key.name.len() + states
}

#[derive(Debug)]
struct Kept {
    /// A standby's lines past the mark that a later mark can cover, each
    /// numbered in the order its workers took them.
    coverable: VecDeque<(u64, Pending)>,
    /// Lines no mark covers (a version that is not a number, a delete a
    /// relist found with no upper bound: JSON's), kept apart so that
    /// following the mark never walks them.
    uncovered: VecDeque<(u64, Pending)>,
    /// Lines kept so far: the next one's number.
    count: u64,
    /// The estimated size of the lines kept now, and its bound.
    bytes: usize,
    max_bytes: usize,
}

impl Default for Kept {
    fn default() -> Kept {
        let (coverable, uncovered) = Default::default();
        Kept { coverable, uncovered, count: 0, bytes: 0, max_bytes: KEPT_BYTES }
    }
}

impl Kept {
    /// Keeps `line`; returns the oldest lines dropped to make room for it
    /// (past [`PENDING_CAP`] lines or [`KEPT_BYTES`]; a line alone is kept
    /// whatever its size).
    fn keep(&mut self, line: Pending) -> Vec<Pending> {
        let mut dropped = Vec::new();
        while !self.is_empty()
            && (self.coverable.len() + self.uncovered.len() >= PENDING_CAP || self.bytes + line.bytes > self.max_bytes)
        {
            // The oldest of the two goes.
            let oldest = match (self.coverable.front(), self.uncovered.front()) {
                (Some((a, _)), Some((b, _))) if b < a => self.uncovered.pop_front(),
                (Some(_), _) => self.coverable.pop_front(),
                (None, _) => self.uncovered.pop_front(),
            };
            if let Some((_, gone)) = oldest {
                self.bytes -= gone.bytes;
                dropped.push(gone);
            }
        }
        self.bytes += line.bytes;
        let numbered = (self.count, line);
        self.count += 1;
        match numbered.1.version.coverable() {
            true => self.coverable.push_back(numbered),
            false => self.uncovered.push_back(numbered),
        }
        dropped
    }

    fn is_empty(&self) -> bool {
        self.coverable.is_empty() && self.uncovered.is_empty()
    }

    /// A mark was heard: the lines it covers go. The deletes in the range
    /// the leader saw only as a list (`listed`) are returned, in the order
    /// taken.
    fn follow(&mut self, mark: Option<u64>, listed: Option<ListedOnly>) -> Vec<Pending> {
        let mut unseen = Vec::new();
        let mut kept = VecDeque::with_capacity(self.coverable.len());
        for (n, p) in self.coverable.drain(..) {
            if !p.version.covered_by(mark) {
                kept.push_back((n, p));
                continue;
            }
            self.bytes -= p.bytes;
            if listed.is_some_and(|listed| p.version.unlogged_delete(&p.change, listed)) {
                unseen.push(p);
            }
        }
        self.coverable = kept;
        unseen
    }

    /// Every line the mark does not cover, in the order taken.
    fn drain(&mut self, mark: Option<u64>) -> Vec<Pending> {
        self.bytes = 0;
        let mut lines: Vec<(u64, Pending)> = self.coverable.drain(..).chain(self.uncovered.drain(..)).collect();
        lines.sort_by_key(|(n, _)| *n);
        lines.into_iter().map(|(_, p)| p).filter(|p| !p.version.covered_by(mark)).collect()
    }
}

#[derive(Debug)]
struct GateState {
    role: Role,
    /// What a standby keeps.
    kept: Kept,
    /// The highest pod resourceVersion a sync took in (logged or silent).
    taken: Option<u64>,
    /// The drain left keys unsynced (see [`Gate::left_unsynced`]).
    unsynced: bool,
    /// Syncs started so far (see [`Gate::sync_started`]).
    syncs: u64,
    /// The low watermark's candidate (see [`Gate::watermark`]).
    candidate: Option<Candidate>,
}

/// A mark the low watermark may write once every key that was not synced
/// when it was taken has been synced since (or has left the queue).
#[derive(Debug)]
struct Candidate {
    /// The stream's position, read before `keys`.
    position: Option<u64>,
    /// Syncs started before it was taken: a sync numbered above started
    /// after, and took in every change at or below `position`.
    after: u64,
    /// The keys not synced when it was taken, less those synced since.
    keys: HashSet<Key>,
}

/// A kept line a new leader logs (see [`Gate::lead`]).
#[derive(Debug)]
struct Resumed {
    line: Pending,
    /// The mark leaves it open whether the previous leader logged it (see
    /// [`Version::straddled_by`]): it says `replayed=true`, even after a
    /// release.
    open: bool,
}

/// Lines a standby keeps at most. A leader renews its mark every retry
/// period, which drops what it covers, so only a lease whose holder writes
/// no mark (not a demo-controller) fills this, or deletes that relists of
/// kube's JSON watcher inferred (no mark covers them, see [`Seen`]); past
/// it the oldest go.
pub const PENDING_CAP: usize = 100_000;

/// What the lines a standby keeps may weigh at most, estimated (see
/// [`weight`]): 32 MiB, well inside the manifest's memory limit beside the
/// cache. A line dropped at this bound, or at [`PENDING_CAP`], is lost if
/// this replica leads before the leader's mark passes it: each drop is a
/// WARN line and counts in `demo_controller_kept_lines_dropped_total`.
pub const KEPT_BYTES: usize = 32 << 20;

/// The message of the line for `change` of `key`, e.g. `onAdd: ns/p`.
fn said(change: &Change, key: &Key) -> String {
    let kind = match change {
        Change::Add(_) => "onAdd",
        Change::Update { .. } => "onUpdate",
        Change::Delete(_) => "onDelete",
    };
    format!("{kind}: {key}")
}

/// A delete a standby saw, and that the leader may have logged no line of:
/// the leader saw resourceVersions `listed` only as a list (see
/// [`ListedOnly`]). Said in a WARN line, rather than dropped in silence.
fn unlogged(key: &Key, change: &Change, listed: ListedOnly) {
    let Change::Delete(pod) = change else { return };
    warn!(
        namespace = %key.namespace,
        name = %key.name,
        uid = %pod.uid,
        resource_version = %pod.resource_version,
        after = listed.after,
        through = listed.through,
        "the delete of {key} may be missing: the leader saw resourceVersions {} to {} only as a list, and a standby logs no line",
        listed.after,
        listed.through
    );
}

/// The resourceVersion of the pod a change shows (None: not a number).
fn resource_version(change: &Change) -> Option<u64> {
    match change {
        Change::Add(p) | Change::Delete(p) | Change::Update { new: p, .. } => p.resource_version.parse().ok(),
    }
}

/// Whether `mark` covers a change at `version` (a version that is not a
/// number is never covered: logged rather than lost).
fn covers(mark: Option<u64>, version: Option<u64>) -> bool {
    matches!((version, mark), (Some(v), Some(m)) if v <= m)
}

// ANCHOR: gate
/// The one question a worker asks before it logs a line: whose line is it?
///
/// A standby's worker takes every change in as it comes, exactly as the
/// leader's does (so its memory of each pod follows the leader's, and an
/// update is an update, not an add, when it leads); the line goes to the
/// gate instead of the log, and waits there until the leader's mark covers
/// it (dropped: the leader logged it) or we lead (logged).
#[derive(Debug)]
pub struct Gate {
    state: Mutex<GateState>,
    /// Whether the workers may start: we lead or know the leader's mark, or
    /// waited a lease duration for one (at once without `--leader-elect`; see
    /// [`Gate::decided`]).
    decided: tokio::sync::watch::Sender<bool>,
}

impl Gate {
    /// A logger without `--leader-elect`: it always leads, from nothing.
    pub fn leading() -> Arc<Gate> {
        Gate::new(Role::Leading { mark: None, until: None, doubt: None })
    }

    /// A candidate starts as a standby that has heard of no mark yet.
    pub fn standby() -> Arc<Gate> {
        Gate::new(Role::Standby { mark: None, listed: None })
    }

    fn new(role: Role) -> Arc<Gate> {
        let decided = matches!(role, Role::Leading { .. });
        let state = Mutex::new(GateState {
            role,
            kept: Kept::default(),
            taken: None,
            unsynced: false,
            syncs: 0,
            candidate: None,
        });
        Arc::new(Gate { state, decided: tokio::sync::watch::Sender::new(decided) })
    }

    /// Resolves once this replica leads or knows the leader's mark (or the
    /// leader wrote none for a lease duration, or the lease could not be
    /// read for as long). The controller starts its workers after it:
    /// leading, they log the first list's lines themselves; standing by, they
    /// keep only the lines the mark does not cover. Started at once, they
    /// would hold most of the first list as lines at the gate, one copy of
    /// each pod, until a mark came: memory the process keeps.
    pub async fn decided(&self) {
        let mut decided = self.decided.subscribe();
        // The sender lives as long as `self`: wait_for cannot fail here.
        let _ = decided.wait_for(|decided| *decided).await;
    }

    /// The elector has read the lease (or tried to): the workers may start
    /// if we lead or know the leader's mark, or if waiting for one is over
    /// (`give_up`).
    fn decide(&self, give_up: bool) {
        let ready = give_up || matches!(self.lock().role, Role::Leading { .. } | Role::Standby { mark: Some(_), .. });
        if ready {
            self.decided.send_if_modified(|decided| !std::mem::replace(decided, true));
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A worker has a line for `change` of `key`, `seen` as it happened or
    /// inferred by a relist: log it or not?
    pub fn admit(
        &self,
        key: &Key,
        change: &Change,
        seen: Seen,
        initial: bool,
        reason: Option<&'static str>,
    ) -> Verdict {
        let mut state = self.lock();
        let version = Version::of(change, seen);
        state.taken = state.taken.max(resource_version(change));
        match state.role {
            Role::Leading { mark, .. } if version.covered_by(mark) => Verdict::Silent,
            // Past the renew deadline another may lead: checked here, at the
            // line, not only when the elector next wakes up (a process that
            // was paused resumes its workers and its elector in any order).
            // The line is held back, and with it our mark (see
            // [`Gate::holds`]): a late renew logs it ([`Gate::renewed`]),
            // else the next leader does, from our last mark.
            Role::Leading { until: Some(until), .. } if Instant::now() >= until => {
                let dropped = state.kept.keep(Pending::new(key, change, initial, reason, version));
                drop(state);
                self.dropped(dropped);
                Verdict::Silent
            }
            // The previous leader's mark neither covers it nor rules it out.
            Role::Leading { mark, .. } if version.straddled_by(mark) => Verdict::Replayed,
            Role::Leading { doubt, .. } if version.before(doubt) => Verdict::Replayed,
            Role::Leading { .. } => Verdict::Log,
            Role::Standby { mark, listed } => {
                if !version.covered_by(mark) {
                    let dropped = state.kept.keep(Pending::new(key, change, initial, reason, version));
                    drop(state);
                    self.dropped(dropped);
                } else if let Some(listed) = listed.filter(|listed| version.unlogged_delete(change, *listed)) {
                    // The leader's mark passed it, but the leader saw it
                    // only as a list: said, not dropped in silence.
                    drop(state);
                    unlogged(key, change, listed);
                }
                Verdict::Silent
            }
        }
    }
    // ANCHOR_END: gate

    /// Kept lines dropped at the bound: each is said, and counted.
    fn dropped(&self, lines: Vec<Pending>) {
        let max_bytes = self.lock().kept.max_bytes;
        for line in lines {
            crate::metrics::kept_line_dropped();
            warn!(
                key = %line.key,
                max_lines = PENDING_CAP,
                max_bytes,
                "dropped a kept line at the bound: {} is lost if this replica leads before the leader's mark passes it",
                said(&line.change, &line.key)
            );
        }
    }

    /// Lowers the bound of the kept lines (the test seam's `kept-bytes`).
    pub fn bound_kept_bytes(&self, max_bytes: usize) {
        self.lock().kept.max_bytes = max_bytes;
    }

    /// The highest pod resourceVersion taken in so far (logged or silent):
    /// the mark on JSON, when the queue is idle (see [`next_mark`]).
    pub fn taken(&self) -> Option<u64> {
        self.lock().taken
    }

    pub fn is_leading(&self) -> bool {
        matches!(self.lock().role, Role::Leading { .. })
    }

    /// A standby heard of the leader's mark, and of the range the leader
    /// saw only as a list (`listed`): the lines the mark covers go, and the
    /// deletes among them in that range are said (see [`ListedOnly`]).
    fn follow(&self, mark: Option<u64>, listed: Option<ListedOnly>) {
        let mut state = self.lock();
        let Role::Standby { mark: old, .. } = state.role else { return };
        // An older mark changes nothing.
        state.role = Role::Standby { mark: mark.max(old), listed };
        if mark <= old {
            return;
        }
        let unseen = state.kept.follow(mark, listed);
        drop(state);
        if let Some(listed) = listed {
            for line in unseen {
                unlogged(&line.key, &line.change, listed);
            }
        }
    }

    /// A renew succeeded: lines until `until`, the renew deadline after its
    /// start. If that is still ahead, the lines held back since the last
    /// deadline are returned, to log now (nobody else led meanwhile).
    fn renewed(&self, until: Instant) -> Vec<Resumed> {
        let mut state = self.lock();
        let Role::Leading { mark, until: old, doubt } = &mut state.role else { return Vec::new() };
        *old = Some(until);
        let (mark, doubt) = (*mark, *doubt);
        if Instant::now() >= until {
            return Vec::new();
        }
        // Marked as `admit` would have marked them in time: a change from
        // before a take without a release may have been logged already.
        let held = state.kept.drain(mark).into_iter();
        held.map(|line| Resumed { open: line.version.straddled_by(mark) || line.version.before(doubt), line }).collect()
    }

    /// We lead and hold lines back (past the renew deadline): the mark may
    /// not move, for it would say they were logged.
    pub fn holds(&self) -> bool {
        let state = self.lock();
        matches!(state.role, Role::Leading { .. }) && !state.kept.is_empty()
    }

    /// We lead, and the renew deadline has not passed.
    fn within_deadline(&self) -> bool {
        match self.lock().role {
            Role::Leading { until, .. } => until.is_none_or(|until| Instant::now() < until),
            Role::Standby { .. } => false,
        }
    }

    /// A worker starts a sync: its number, for [`Gate::synced`].
    pub fn sync_started(&self) -> u64 {
        let mut state = self.lock();
        state.syncs += 1;
        state.syncs
    }

    /// The sync numbered `started` of `key` succeeded: it took in every
    /// change of the key up to where the stream was when it started.
    pub fn synced(&self, key: &Key, started: u64) {
        if let Some(candidate) = &mut self.lock().candidate
            && started > candidate.after
        {
            candidate.keys.remove(key);
        }
    }

    /// The low watermark, for a queue that is never idle under steady
    /// churn: returns a mark every change at or below which was synced, if
    /// one is known now. It takes a candidate: the stream's `position`
    /// (read first) and the keys not synced then (`pending`, read after).
    /// A change at or below the position was queued before the position
    /// could be read (see [`next_mark`]): its key was synced already, or
    /// is among them. Once each of them was synced by a sync that started
    /// after (or left the queue: dropped after its last attempt), the
    /// candidate's position is the mark, and a new candidate is taken.
    fn watermark(&self, position: Option<u64>, pending: HashSet<Key>) -> Option<u64> {
        let mut state = self.lock();
        let after = state.syncs;
        if let Some(candidate) = &mut state.candidate {
            candidate.keys.retain(|key| pending.contains(key));
            if !candidate.keys.is_empty() {
                return None;
            }
        }
        let new = Candidate { position, after, keys: pending };
        state.candidate.replace(new).and_then(|done| done.position)
    }

    /// The drain left keys unsynced (it timed out, or a last try failed):
    /// the lease is not released (see [`Elector::release`]).
    pub fn left_unsynced(&self) {
        self.lock().unsynced = true;
    }

    /// Every key was synced at the shutdown, as far as we know.
    fn complete(&self) -> bool {
        !self.lock().unsynced
    }

    /// We lead from the lease's `mark`, until `until` unless renewed:
    /// returns the kept lines it does not cover, to log now, before any
    /// other.
    fn lead(&self, mark: Option<u64>, until: Instant) -> Vec<Resumed> {
        let mut state = self.lock();
        state.role = Role::Leading { mark, until: Some(until), doubt: None };
        let kept = state.kept.drain(mark).into_iter();
        kept.map(|line| Resumed { open: line.version.straddled_by(mark), line }).collect()
    }

    /// We took the lease without a release, with a write at `version`:
    /// lines of changes below it say `replayed=true` (see [`Role`]).
    fn doubt_below(&self, version: Option<u64>) {
        if let Role::Leading { doubt, .. } = &mut self.lock().role {
            *doubt = version;
        }
    }

    /// No more lines, from now on.
    fn stop(&self) {
        self.lock().role = Role::Standby { mark: None, listed: None };
    }
}

// ANCHOR: mark
/// The mark after one look at the informer: its `position`, if the workers
/// are `idle`, else the `mark` as it was.
///
/// The position is the resourceVersion up to which the watch stream was
/// delivered: the last event's, a bookmark's, or a list's at its InitDone.
/// On protobuf the watcher moves it past an event only once the informer
/// has queued the event's keys (it says so with `Position::consumed`, or
/// by asking for the next event: kube-pod-protobuf's `Position`); so by the
/// time a position can be read, the keys of every change at or below it
/// are queued, also right before a shutdown. On JSON kube's watcher keeps
/// its resourceVersion and bookmarks to itself: the position is then the
/// highest pod resourceVersion a sync took in ([`Gate::taken`]), lower, so
/// a safe stand-in. (In a quiet namespace it stays far below a list's
/// resourceVersion, which is etcd's revision and moves with every write
/// anywhere, lease renewals too: see [`Seen`].) The elector takes the
/// higher of the two on both wires: a state a sync took in was logged or
/// kept, whether or not the informer had moved its position past it yet.
///
/// Why the position is read FIRST and the idle check made after: read in
/// the other order, the informer could queue a new change and publish its
/// position between the two, and the mark would claim a change no worker
/// has synced yet. Read first, a position published since is simply not
/// used: every change at or below the one read was queued before the read,
/// and an idle queue after it ([`Queue::is_idle`]: no key queued, none held
/// by a worker or added again meanwhile, none waiting out a retry's
/// backoff, all read under one lock) means each was synced (and its line
/// written or kept).
fn next_mark(mark: Option<u64>, position: impl FnOnce() -> Option<u64>, idle: impl FnOnce() -> bool) -> Option<u64> {
    let position = position();
    if idle() { mark.max(position) } else { mark }
}
// ANCHOR_END: mark

/// The elector: one candidate for the Lease `name` in its namespace.
pub struct Elector {
    api: Api<Lease>,
    name: String,
    me: String,
    timings: Timings,
    gate: Arc<Gate>,
    queue: Arc<Queue<Key>>,
    /// This replica's watch of pods: how far its stream has come (protobuf
    /// only), and whether it is down (see catchup.rs).
    watch: Watch,
    /// Why we do not take the lease while our watch is down, once said
    /// (said once per outage).
    waiting_for_watch: Option<String>,
    observer: Observer,
    /// The mark we last wrote (kept while the queue is busy).
    mark: Option<u64>,
    /// The holder we last said we stand by for (said once per holder).
    standing_by: Option<String>,
    /// The wait for a lease deleted or cleared by hand we said we are in:
    /// its last holder and how (said once per such wait).
    waiting_out: Option<(String, &'static str)>,
    /// The last try failed: the next failures say nothing until a try
    /// reaches the lease again (leading or not), so an outage is one line.
    failing: bool,
    /// When the current try started: a renew deadline runs from there.
    attempt: Instant,
    /// The newest pod resourceVersion of our first list. A change up to it
    /// reached us in that list, not as it happened: an `onAdd` for a pod the
    /// leader knew, where the leader logged an `onUpdate`. We are caught up
    /// with a leader once its mark has passed it.
    joined: Option<u64>,
    /// Since when a lease we could take has been waiting for a caught-up
    /// standby, while we are not caught up (see [`Elector::defer`]).
    deferring: Option<Instant>,
    /// A take we wrote (create or replace) and whether it followed a
    /// release, until we lead: if its answer is lost, the next try finds us
    /// the holder and learns from here how the previous leader stopped.
    took: Option<bool>,
    /// We have seen another holder on the lease: a lease gone since was
    /// deleted by hand, not never made.
    heard_of_leader: bool,
    /// The last mark refused (see [`Elector::checked`]), warned about once.
    refused: Option<u64>,
    /// The line of a refusal (401, 403) on the lease, while it lasts.
    forbidden: Option<String>,
    /// `namespace/name` of the lease, for the lines.
    lease_ref: String,
    /// The test seam's faults of the election (faults.rs); none normally.
    faults: ElectionFaults,
    /// Renews that succeeded so far (for the seam's `renew-late`).
    renews: u32,
    /// What this replica watches (`-n`, `-l`): written beside our mark, and
    /// compared with the scope of the marks we read.
    scope: Scope,
    /// The scope of a lease's mark we said we do not follow, or said we
    /// cannot tell (said once per scope).
    scope_said: Option<Option<String>>,
    /// The release stamp we said we do not trust (said once per stamp).
    stamp_doubted: Option<String>,
    /// Leading, the range past the mark we resumed from that we saw only as
    /// a list, written on the lease with every renew (see [`ListedOnly`]).
    listed_only: Option<ListedOnly>,
}

impl Elector {
    pub fn new(
        api: Api<Lease>,
        name: &str,
        timings: Timings,
        gate: Arc<Gate>,
        queue: Arc<Queue<Key>>,
        watch: Watch,
    ) -> Elector {
        // 0 from the start, not absent until the first lead: a standby (or a
        // replica refused the lease) shows as one.
        crate::metrics::leader(name, false);
        Elector {
            api,
            name: name.to_string(),
            me: identity(),
            timings,
            gate,
            queue,
            watch,
            waiting_for_watch: None,
            observer: Observer::new(timings.lease_duration, GRACE_RETRIES * timings.retry_period),
            mark: None,
            standing_by: None,
            waiting_out: None,
            failing: false,
            attempt: Instant::now(),
            joined: None,
            deferring: None,
            took: None,
            heard_of_leader: false,
            refused: None,
            forbidden: None,
            lease_ref: name.to_string(),
            faults: ElectionFaults::default(),
            renews: 0,
            scope: Scope::new(None, None),
            scope_said: None,
            stamp_doubted: None,
            listed_only: None,
        }
    }

    /// Names the lease `namespace/name` in the lines (its name alone by
    /// default).
    pub fn in_namespace(mut self, namespace: &str) -> Elector {
        self.lease_ref = format!("{namespace}/{}", self.name);
        self
    }

    /// Watching `scope` (all pods by default): its marks say so, and marks
    /// written for another scope are not followed (see [`Elector::checked`]).
    pub fn watching(mut self, scope: Scope) -> Elector {
        self.scope = scope;
        self
    }

    /// With the test seam's faults of the election (DEMO_CONTROLLER_FAULTS,
    /// see faults.rs).
    pub fn with_faults(mut self, faults: ElectionFaults) -> Elector {
        self.faults = faults;
        self
    }

    /// The seam's `lose-take-answer`: the first take's answer never comes
    /// (the server committed it), once.
    async fn lose_take_answer(&mut self) {
        if std::mem::take(&mut self.faults.lose_take_answer) {
            warn!(lease = self.name, "{}: the answer to this take of the lease is lost", crate::faults::ENV);
            std::future::pending::<()>().await;
        }
    }

    /// The seam's `renew-late`: the N-th renew's answer is taken in late.
    async fn renew_late(&mut self) {
        self.renews += 1;
        if let Some((late, nth)) = self.faults.renew_late
            && nth == self.renews
        {
            warn!(lease = self.name, "{}: taking in the answer to renew {nth} {late:?} late", crate::faults::ENV);
            tokio::time::sleep(late).await;
            warn!(lease = self.name, "{}: took in the answer to renew {nth}", crate::faults::ENV);
        }
    }

    pub fn identity(&self) -> &str {
        &self.me
    }

    /// The mark to write: how far the informer's watch stream has come (or
    /// the syncs, if further), once the queue is idle and the gate holds no
    /// line back (see [`next_mark`]). While keys wait, the last mark
    /// stands: a mark may lag, never run ahead of the log.
    fn progress(&mut self) -> Option<u64> {
        let (position, gate, queue) = (self.watch.position(), &self.gate, &self.queue);
        let stream = || position.handled().and_then(|rv| rv.parse::<u64>().ok()).max(gate.taken());
        let mut busy = None;
        self.mark = next_mark(self.mark, || *busy.insert(stream()), || queue.is_idle() && !gate.holds());
        // Not idle (under steady churn, rarely is it): the low watermark,
        // which moves once the keys that were busy have been synced.
        if !queue.is_idle() && !gate.holds() {
            let position = busy.flatten();
            self.mark = self.mark.max(gate.watermark(position, queue.pending()));
        }
        self.mark
    }

    // ANCHOR: run
    /// Stands by, leads, renews; returns only when the lease is lost (the
    /// program drops this future at its shutdown, then [`Elector::release`]s).
    /// Started once the cache is synced, with the newest resourceVersion of
    /// that first list (`joined`).
    pub async fn run(&mut self, joined: Option<u64>) {
        self.joined = joined;
        let (mut last_renew, first_read) = (Instant::now(), Instant::now());
        let mut ticker = tokio::time::interval(self.timings.retry_period);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            let leading = self.gate.is_leading();
            let started = Instant::now();
            self.attempt = started;
            // A look at the watch every retry period, so that a failure is
            // placed where the stream was when it came: a bookmark after it
            // says the watch is back, even if no pod changed (catchup.rs).
            self.watch.look();
            // A renew that does not answer must not carry us past the
            // deadline: each try gets what is left of it.
            let left = if leading {
                self.timings.renew_deadline.saturating_sub(last_renew.elapsed())
            } else {
                self.timings.renew_deadline
            };
            match tokio::time::timeout(left, self.try_acquire_or_renew()).await {
                Ok(Ok(Tried::Holding)) => {
                    if leading {
                        self.renew_late().await;
                    }
                    // Measured from before the write: others count the
                    // lease duration from when they saw it, later.
                    last_renew = started;
                    self.renewed(started + self.timings.renew_deadline);
                    self.reached();
                }
                // Reached, and another leads (or the lease is not ours to
                // take yet): the next failure is a new outage.
                Ok(Ok(Tried::NotHolding)) => self.reached(),
                Ok(Ok(Tried::Lost(why))) => {
                    // Past the deadline (a paused process that resumed in
                    // the middle of a try), that is the first reason.
                    let late = last_renew.elapsed() >= self.timings.renew_deadline;
                    return self.lost(if late { "no renew within the renew deadline" } else { &why });
                }
                Ok(Err((verb, err))) => self.failed(verb, &err),
                Err(_) if !self.failing => {
                    self.failing = true;
                    warn!(lease = self.name, "cannot reach the lease (retrying every retry period): no answer in time");
                }
                Err(_) => {}
            }
            // The workers start once we lead or know the leader's mark (see
            // Gate::decided); a lease duration without one is enough waiting,
            // unless we wait out a missing or cleared lease to take it: their
            // lines would only be kept, and dropped past the bound.
            self.gate.decide(first_read.elapsed() >= self.timings.lease_duration && self.waiting_out.is_none());
            if leading && last_renew.elapsed() >= self.timings.renew_deadline {
                // No line after this one: the gate closes before a standby
                // can take the lease (renew deadline < lease duration).
                return self.lost("no renew within the renew deadline");
            }
        }
    }
    // ANCHOR_END: run

    /// A try reached the lease: the next failure is a new outage, and a
    /// refusal is over.
    fn reached(&mut self) {
        if std::mem::take(&mut self.failing) {
            // The API server answers: a watch waiting out its backoff after
            // the same outage need not wait any longer.
            self.watch.server_answered();
        }
        if self.forbidden.take().is_some() {
            crate::probes::lease_refused(None);
            info!(lease = self.lease_ref, "the lease can be read and written again");
        }
    }

    /// A request on the lease failed: one line per outage. A refusal (401,
    /// 403) is no outage that passes by itself: it names the verb and the
    /// lease, and makes the replica not ready until a try gets through.
    fn failed(&mut self, verb: &'static str, err: &kube::Error) {
        if let kube::Error::Api(status) = err
            && (status.code == 401 || status.code == 403)
        {
            let line = format!(
                "cannot {verb} the lease {}: {} ({}, {}): grant get, create and update on leases to this identity (see demo-controller.yaml); retrying every retry period",
                self.lease_ref,
                crate::text::cleaned(status.message.trim(), crate::text::MESSAGE_CHARS),
                crate::text::cleaned(&status.reason, crate::text::WORD_CHARS),
                status.code,
            );
            if self.forbidden.as_ref() != Some(&line) {
                warn!(lease = self.lease_ref, "{line}");
                crate::probes::lease_refused(Some(line.clone()));
                self.forbidden = Some(line);
            }
            self.failing = true;
            return;
        }
        if !self.failing {
            self.failing = true;
            warn!(lease = self.name, "cannot reach the lease (retrying every retry period): {err}");
        }
    }

    /// The lease is not ours any more (`why`): no line from now on, and
    /// the program exits 1. The lines held back since the renew deadline,
    /// if any, stay unlogged, and so does our mark: the next leader logs
    /// them from it.
    fn lost(&mut self, why: &str) {
        self.gate.stop();
        crate::metrics::leader(&self.name, false);
        warn!(lease = self.name, "lost the lease: {why}, exiting (exit code 1)");
    }

    /// A renew that started at `until` minus the renew deadline succeeded.
    /// If it came back after the previous deadline (a busy runtime, a
    /// paused process), the gate held back every line since: the renew
    /// proves that nobody else led meanwhile (no other holder wrote the
    /// lease, or ours would have failed), so they are logged now, before
    /// any later line.
    fn renewed(&mut self, until: Instant) {
        let held = self.gate.renewed(until);
        if !held.is_empty() {
            info!(
                lease = self.name,
                lines = held.len(),
                "a late renew proved that nobody else led: logging the lines held back since the renew deadline"
            );
        }
        for Resumed { line: p, open } in held {
            crate::line::log(&p.key, &p.change, p.initial, p.reason, open.then_some(true));
        }
    }

    /// One read of the lease and the write it calls for.
    async fn try_acquire_or_renew(&mut self) -> Result<Tried, LeaseError> {
        let leading = self.gate.is_leading();
        let Some(lease) = self.api.get_opt(&self.name).await.map_err(|e| ("get", e))? else {
            if leading {
                return Ok(Tried::Lost("the lease was deleted".into()));
            }
            if let Step::Vacated { holder, left } = self.observer.step(&self.me, None, Instant::now()) {
                self.wait_out(holder, left, "deleted");
                return Ok(Tried::NotHolding);
            }
            self.waiting_out = None;
            if self.watch_down() {
                return Ok(Tried::NotHolding);
            }
            // A lease that is gone after we saw one held was deleted by
            // hand: that is no release, and its holder may have logged
            // past its last mark.
            let released = !self.heard_of_leader;
            self.took = Some(released);
            let lease = self.lease(Lease::default(), 0, None);
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(created) => {
                    self.lose_take_answer().await;
                    Ok(self.became_leader(None, released, &created))
                }
                // Another candidate was faster: should the lease be gone
                // again at our next read, that is a new deletion to wait out.
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    self.observer.created_by_another();
                    Ok(Tried::NotHolding)
                }
                Err(e) => Err(("create", e)),
            };
        };
        let record = self.checked(Record::of(&lease));
        if !record.holder.is_empty() && record.holder != self.me {
            self.heard_of_leader = true;
        }
        if leading && record.holder != self.me {
            // Another holder wrote itself in, or the holder was cleared:
            // someone else may log from now on. Stop at once.
            return Ok(Tried::Lost(lost_to(&record.holder)));
        }
        let step = self.observer.step(&self.me, Some(&record), Instant::now());
        if !matches!(step, Step::Vacated { .. }) {
            self.waiting_out = None;
        }
        match step {
            Step::Create => Ok(Tried::NotHolding),
            Step::Vacated { holder, left } => {
                self.doubt_stamp(&record, left);
                self.wait_out(holder, left, "cleared");
                self.gate.follow(record.mark, record.listed_only);
                Ok(Tried::NotHolding)
            }
            Step::Wait { holder } => {
                self.deferring = None;
                if self.standing_by.as_ref() != Some(&holder) {
                    info!(holder, "standing by: {holder} leads");
                    self.standing_by = Some(holder);
                }
                self.gate.follow(record.mark, record.listed_only);
                Ok(Tried::NotHolding)
            }
            Step::Take { .. } if self.watch_down() => {
                self.gate.follow(record.mark, record.listed_only);
                Ok(Tried::NotHolding)
            }
            Step::Take { .. } if self.defer(&record) => Ok(Tried::NotHolding),
            Step::Take { transitions } => {
                // Only a holder that stopped and then cleared itself with
                // the release stamp released the lease; a lease that merely
                // expired, or whose holder was cleared by hand, did not.
                // A mark of another scope says nothing of our pods: what we
                // log past it may repeat the other leader's lines.
                let released = record.released && record.holder.is_empty() && !record.other_scope;
                self.took = Some(released);
                // The take keeps the previous leader's mark: ours goes on
                // the lease only with a renew, after the lines we kept past
                // it are out. If this take's answer is lost, the next try
                // finds us the holder, and still the mark to resume from.
                let lease = self.lease(lease, transitions, record.mark);
                match self.api.replace(&self.name, &PostParams::default(), &lease).await {
                    Ok(taken) => {
                        self.lose_take_answer().await;
                        Ok(self.became_leader(record.mark, released, &taken))
                    }
                    // The resourceVersion moved: someone wrote first.
                    Err(kube::Error::Api(e)) if e.code == 409 => Ok(Tried::NotHolding),
                    Err(e) => Err(("update", e)),
                }
            }
            Step::Renew { transitions } => {
                // Ours but not leading: our take went through and its
                // answer was lost. The mark on the lease is still the
                // previous leader's (see Take above).
                let mark = if leading { self.progress() } else { record.mark };
                let lease = self.lease(lease, transitions, mark);
                match self.api.replace(&self.name, &PostParams::default(), &lease).await {
                    // The renew's version is past the take's: a looser bound.
                    Ok(renewed) if !leading => {
                        let released = self.took.take().unwrap_or(false);
                        Ok(self.became_leader(record.mark, released, &renewed))
                    }
                    Ok(_) => Ok(Tried::Holding),
                    Err(kube::Error::Api(e)) if e.code == 409 && leading => self.after_conflict().await,
                    Err(kube::Error::Api(e)) if e.code == 409 => Ok(Tried::NotHolding),
                    Err(e) => Err(("update", e)),
                }
            }
        }
    }

    /// The lease was `how` (deleted, or its holder cleared) with no release
    /// stamp: said once, while we wait `left` before taking it (see
    /// [`Observer`]).
    fn wait_out(&mut self, holder: String, left: Duration, how: &'static str) {
        let now = Some((holder, how));
        if self.waiting_out == now {
            return;
        }
        self.waiting_out = now;
        let holder = self.waiting_out.as_ref().map_or("", |(h, _)| h.as_str());
        let left = humantime::format_duration(Duration::from_millis(left.as_millis() as u64));
        if holder.is_empty() {
            info!(
                lease = self.lease_ref,
                "no holder of the lease seen yet: waiting {left} before taking it, so that a standby that followed an earlier leader takes it first"
            );
        } else {
            info!(
                lease = self.lease_ref,
                holder,
                "the lease was {how} without a release: waiting {left} before taking it, as {holder} may lead until its next renew"
            );
        }
    }

    /// The record as this replica may act on it: its release stamp only if
    /// the last holder wrote it, its mark only if written for our scope and
    /// by a leader of this lease.
    fn checked(&mut self, record: Record) -> Record {
        let record = self.in_scope(from_its_holder(record, self.observer.last_holder()));
        self.written_here(record)
    }

    /// The record, with its mark dropped if it was written for another
    /// scope: a leader that watched other pods (another `-n` or `-l`, a
    /// rollout that changed them, another Deployment on the same Lease)
    /// marked nothing about the pods we watch that it did not see. Following
    /// it, we would drop the `onAdd` of every pod newly in our scope. So we
    /// follow no mark, as a replica that found none: every pod in our list
    /// is new to us. Said once per scope; a mark with no scope (an older
    /// demo-controller's) is followed, as before, and that is said once too.
    fn in_scope(&mut self, mut record: Record) -> Record {
        let compared = crate::scope::compare(record.scope.as_deref(), &self.scope);
        let said = Some(record.scope.clone());
        match compared {
            Compared::Same => {}
            Compared::Unknown if record.mark.is_none() => {}
            Compared::Unknown => {
                if self.scope_said != said {
                    warn!(
                        lease = self.lease_ref,
                        mark = record.mark,
                        ours = self.scope.flags(),
                        "the lease's mark says no scope (an older demo-controller wrote it): following it as written for this replica's scope ({}); replicas sharing a lease must share -n and -l",
                        self.scope.flags()
                    );
                    self.scope_said = said;
                }
            }
            Compared::Other(theirs) => {
                if self.scope_said != said {
                    warn!(
                        lease = self.lease_ref,
                        mark = record.mark,
                        theirs,
                        ours = self.scope.flags(),
                        "the lease's mark was written for another scope ({theirs}) than this replica's ({}): not following it nor resuming from it; every pod in this replica's list is new to it, and where the scopes overlap its lines may repeat the other leader's, saying replayed=true; replicas sharing a lease must share -n and -l",
                        self.scope.flags()
                    );
                    self.scope_said = said;
                }
                record.mark = None;
                record.listed_only = None;
                record.other_scope = true;
            }
        }
        record
    }

    /// A release stamp we do not trust, said once per stamp, as we wait
    /// `left` before taking the lease (see [`from_its_holder`]).
    fn doubt_stamp(&mut self, record: &Record, left: Duration) {
        let Some(stamp) = record.stamp.as_ref().filter(|_| !record.released) else { return };
        if self.stamp_doubted.as_ref() == Some(stamp) {
            return;
        }
        let left = humantime::format_duration(Duration::from_millis(left.as_millis() as u64));
        warn!(
            lease = self.lease_ref,
            stamp,
            "the lease's release stamp was not written by its last holder on this Lease (a restored backup, a hand edit, or a holder this replica missed?): treating the lease as expired, waiting {left} before taking it"
        );
        self.stamp_doubted = Some(stamp.clone());
    }

    /// The record, with its mark refused if no leader of this lease can have
    /// written it: a mark is a resourceVersion read before the write that
    /// carried it, so it is below the Lease's own. One at or above it comes
    /// from elsewhere (a backup restored from another cluster, a hand
    /// edit) and would silence every line up to it: it is dropped, with a
    /// warning (once per mark).
    fn written_here(&mut self, mut record: Record) -> Record {
        let (Some(mark), Ok(version)) = (record.mark, record.version.parse::<u64>()) else { return record };
        if mark < version {
            return record;
        }
        if self.refused != Some(mark) {
            warn!(
                lease = self.name,
                mark,
                resource_version = version,
                "ignoring the lease's mark: it is at or above the lease's own resourceVersion, so no leader wrote it (a restored backup or a hand edit?); lines past the previous leader's last real mark may repeat, saying replayed=true"
            );
            self.refused = Some(mark);
        }
        record.mark = None;
        record
    }

    /// Our renew met a conflict: someone wrote the lease since we read it.
    /// Lost if it now has another holder or is gone; else (an edit that
    /// left us the holder) the next renew tries again.
    async fn after_conflict(&mut self) -> Result<Tried, LeaseError> {
        match self.api.get_opt(&self.name).await.map_err(|e| ("get", e))? {
            None => Ok(Tried::Lost("the lease was deleted".into())),
            Some(lease) => match Record::of(&lease).holder {
                holder if holder != self.me => Ok(Tried::Lost(lost_to(&holder))),
                _ => Ok(Tried::NotHolding),
            },
        }
    }

    /// Whether our watch of pods is down, so that we may not take the lease
    /// (see [`Watch::down`]): we would lead from a cache that lacks what
    /// changed meanwhile, and if the watch then relisted, a pod created and
    /// deleted meanwhile would have no line at all. Said once per outage. The
    /// lease is taken once the watch delivers again (an event, a list, a
    /// bookmark); the API server's answers to our Lease requests end its
    /// backoff at once ([`Elector::reached`]).
    fn watch_down(&mut self) -> bool {
        let Some(reason) = self.watch.down() else {
            self.waiting_for_watch = None;
            return false;
        };
        if self.waiting_for_watch.is_none() {
            info!(
                lease = self.lease_ref,
                "not taking the lease while this replica's watch of pods is down: waiting until it delivers again ({reason})"
            );
            self.waiting_for_watch = Some(reason);
        }
        true
    }

    /// Whether to leave a lease we could take to another candidate for now.
    /// A replica that started after the leader's last mark (a rollout's new
    /// pod) knows the pods changed since only from its first list: leading,
    /// it would log an `onAdd` for each, where a standby that has followed
    /// the leader knows the change as an update. So it waits two retry
    /// periods, in which such a standby tries at least once and takes the
    /// lease; with none there, it takes the lease itself after them.
    fn defer(&mut self, record: &Record) -> bool {
        // Standing by meanwhile: what the mark covers, a leader logged.
        self.gate.follow(record.mark, record.listed_only);
        if caught_up(self.joined, record.mark) {
            self.deferring = None;
            return false;
        }
        let since = *self.deferring.get_or_insert_with(|| {
            info!(
                joined = self.joined,
                mark = record.mark,
                "the lease is free but this replica started after the leader's mark: leaving it to a standby that followed the leader for two retry periods"
            );
            Instant::now()
        });
        since.elapsed() < 2 * self.timings.retry_period
    }

    /// We lead from `mark`, after a take or create that wrote `written`.
    fn became_leader(&mut self, mark: Option<u64>, released: bool, written: &Lease) -> Tried {
        self.mark = mark;
        self.took = None;
        let kept = self.gate.lead(mark, self.attempt + self.timings.renew_deadline);
        if !released {
            // The previous leader stopped before its lease expired for us,
            // so before this write: it logged no change at or above it.
            let version = written.metadata.resource_version.as_deref().and_then(|v| v.parse().ok());
            self.gate.doubt_below(version.or(Some(u64::MAX)));
        }
        crate::metrics::leader(&self.name, true);
        info!(identity = self.me, resumes_after = mark, released, kept = kept.len(), "became leader");
        // What no line can show: a pod created and deleted where we saw
        // only a list. Said, not silently skipped; and written on the lease,
        // so that a standby that kept such a delete says so.
        self.listed_only = ListedOnly::of(self.watch.warn_unwatched(mark));
        // What we took in past the mark: after a release the leader had
        // stopped watching before it wrote the mark, so none of it was
        // logged; after a crash any of it may have been. A delete a relist
        // inferred may have been logged in either case, if the mark passed
        // its lower end (`open`): the delete may lie below the mark.
        for Resumed { line: p, open } in kept {
            crate::line::log(&p.key, &p.change, p.initial, p.reason, (!released || open).then_some(true));
        }
        Tried::Holding
    }

    /// `lease` held by us, renewed now, with `mark` (None: none).
    /// Whatever release stamp it had goes: it is held again.
    fn lease(&mut self, mut lease: Lease, transitions: i32, mark: Option<u64>) -> Lease {
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(&self.me) {
            spec.acquire_time = Some(now.clone());
        }
        spec.holder_identity = Some(self.me.clone());
        spec.lease_duration_seconds = Some(self.timings.lease_duration.as_secs().max(1) as i32);
        spec.renew_time = Some(now);
        spec.lease_transitions = Some(transitions);
        if lease.metadata.name.is_none() {
            lease.metadata.name = Some(self.name.clone());
        }
        let annotations = lease.metadata.annotations.get_or_insert_with(Default::default);
        annotations.remove(RELEASED);
        // What our mark speaks of, so that a replica of another scope does
        // not follow it.
        annotations.insert(SCOPE.into(), self.scope.record());
        match mark {
            Some(mark) => annotations.insert(MARK.into(), mark.to_string()),
            None => annotations.remove(MARK), // none yet, or one refused
        };
        // Ours only: a take removes the previous leader's.
        match self.listed_only {
            Some(listed) => annotations.insert(LISTED_ONLY.into(), listed.to_string()),
            None => annotations.remove(LISTED_ONLY),
        };
        lease
    }

    /// After the drain: give the lease up with the final mark and the
    /// release stamp, so a standby takes it at its next retry instead of
    /// waiting out the lease duration (client-go's `ReleaseOnCancel`), and
    /// trusts the mark as exact. Only after a drain that ended with every
    /// key synced, the queue idle and no line held back: else the mark is
    /// behind what was logged, and the lease is left to expire, so the next
    /// leader says `replayed=true` on what it logs past the mark. Best
    /// effort: if it fails, the lease expires.
    pub async fn release(&mut self) {
        if !self.gate.is_leading() {
            return;
        }
        if !self.gate.complete() || !self.queue.is_idle() || self.gate.holds() || !self.gate.within_deadline() {
            warn!(
                lease = self.name,
                logged_up_to = self.mark,
                "not releasing the lease: the drain did not end with every line written; it expires, and the next leader marks what it may repeat with replayed=true"
            );
            return;
        }
        let mark = self.progress();
        let deadline = self.timings.renew_deadline;
        let (api, name, me) = (&self.api, &self.name, &self.me);
        let released = async {
            let Some(mut lease) = api.get_opt(name).await? else { return Ok(false) };
            if Record::of(&lease).holder != *me {
                return Ok(false);
            }
            let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
            spec.holder_identity = None;
            spec.lease_duration_seconds = Some(1);
            spec.renew_time = Some(MicroTime(k8s_openapi::jiff::Timestamp::now()));
            let annotations = lease.metadata.annotations.get_or_insert_with(Default::default);
            if let Some(mark) = mark {
                annotations.insert(MARK.into(), mark.to_string());
            }
            // Our name and this Lease's uid: a stamp the next replica can
            // tell from a restored or hand-written one.
            let stamp = Stamp { holder: me.clone(), uid: lease.metadata.uid.clone().unwrap_or_default() };
            annotations.insert(RELEASED.into(), stamp.record());
            api.replace(name, &PostParams::default(), &lease).await.map(|_| true)
        };
        match tokio::time::timeout(deadline, released).await {
            Ok(Ok(true)) => {
                crate::metrics::leader(&self.name, false);
                info!(lease = self.name, logged_up_to = self.mark, "released the lease")
            }
            Ok(Ok(false)) => {}
            Ok(Err(err)) => warn!(lease = self.name, "cannot release the lease, it will expire: {err}"),
            Err(_) => warn!(lease = self.name, "cannot release the lease in time, it will expire"),
        }
    }
}

/// `record`, with its release stamp trusted only if the holder it names is
/// the last one we saw hold the lease (`last`, if we saw one): the stamp
/// lets us take the lease at once, so one that a restore or a hand edit
/// left while its holder may still lead is no release ([`Record::of`]
/// checks that it names this Lease). Without it the lease is waited out as
/// one that expired. A replica that missed a holder that came and went
/// (cut off meanwhile) waits too: slower, never two loggers at once.
fn from_its_holder(mut record: Record, last: Option<&str>) -> Record {
    let named = record.stamp.as_deref().and_then(Stamp::read).map(|s| s.holder);
    if let (Some(named), Some(last)) = (named, last)
        && named != last
    {
        record.released = false;
    }
    record
}

/// A request on the Lease that failed, and its verb (get, create, update).
type LeaseError = (&'static str, kube::Error);

/// What one try of the elector found.
#[derive(Debug)]
enum Tried {
    /// We hold the lease (renewed, taken or created).
    Holding,
    /// Another holds it, or it is not ours to take yet.
    NotHolding,
    /// We led, and the lease says we do not any more: why.
    Lost(String),
}

/// Why a leader that read `holder` on its lease lost it.
fn lost_to(holder: &str) -> String {
    match holder {
        "" => "its holder was cleared".into(),
        holder => format!("{holder} holds it"),
    }
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::pod::PodState;

    // client-go's tools/leaderelection tests, translated: the same cases,
    // on the decision alone ("baz" is us, "bing" another candidate).

    fn held_by(holder: &str) -> Record {
        Record {
            version: "1".into(),
            holder: holder.into(),
            lease_duration: Duration::from_secs(15),
            ..Default::default()
        }
    }

    fn after(observed: Option<(Record, Instant)>, lease: Option<&Record>, now: Instant) -> Step {
        Observer { observed, ..Observer::default() }.step("baz", lease, now)
    }

    #[test]
    fn acquire_from_no_object() {
        assert_eq!(after(None, None, Instant::now()), Step::Create);
    }

    #[test]
    fn acquire_from_object_without_a_record() {
        assert_eq!(after(None, Some(&Record::default()), Instant::now()), Step::Take { transitions: 1 });
    }

    #[test]
    fn acquire_from_led_object_once_its_lease_duration_passed() {
        let now = Instant::now();
        let record = Record { lease_duration: Duration::from_secs(3), ..held_by("bing") };
        let mut observer = Observer::default();
        assert_eq!(observer.step("baz", Some(&record), now), Step::Wait { holder: "bing".into() });
        assert_eq!(observer.step("baz", Some(&record), now + Duration::from_secs(3)), Step::Take { transitions: 1 });
    }

    #[test]
    fn acquire_from_unled_object() {
        // With the release stamp only (see a_holder_cleared_by_hand_is_waited_out).
        let released = Record { released: true, ..held_by("") };
        assert_eq!(after(None, Some(&released), Instant::now()), Step::Take { transitions: 1 });
    }

    #[test]
    fn acquire_from_led_unacked_object() {
        // Seen long ago and not renewed since: expired.
        let now = Instant::now() + Duration::from_secs(3600);
        let past = now - Duration::from_secs(1800);
        assert_eq!(after(Some((held_by("bing"), past)), Some(&held_by("bing")), now), Step::Take { transitions: 1 });
    }

    #[test]
    fn acquire_from_empty_led_acked_object() {
        let now = Instant::now();
        let future = now + Duration::from_secs(3600);
        let released = Record { released: true, ..held_by("") };
        assert_eq!(after(Some((released.clone(), future)), Some(&released), now), Step::Take { transitions: 1 });
    }

    // What client-go has no case for: a Lease deleted, or its holder
    // cleared, by hand, which is no release.

    fn vacated(holder: &str, left: u64) -> Step {
        Step::Vacated { holder: holder.into(), left: Duration::from_secs(left) }
    }

    #[test]
    fn a_lease_deleted_while_another_held_it_is_waited_out() {
        let (s, start) = (Duration::from_secs, Instant::now());
        let mut observer = Observer::new(s(2), s(1));
        let record = Record { lease_duration: s(3), ..held_by("bing") };
        assert_eq!(observer.step("baz", Some(&record), start), Step::Wait { holder: "bing".into() });
        // Gone at 10 s: bing may lead until its next renew finds out.
        assert_eq!(observer.step("baz", None, start + s(10)), vacated("bing", 3));
        assert_eq!(observer.step("baz", None, start + s(12)), vacated("bing", 1));
        assert_eq!(observer.step("baz", None, start + s(13)), Step::Create);
    }

    #[test]
    fn a_holder_cleared_by_hand_is_waited_out_but_a_release_is_taken_at_once() {
        let (s, start) = (Duration::from_secs, Instant::now());
        let record = Record { lease_duration: s(3), ..held_by("bing") };
        let cleared = Record { version: "2".into(), ..held_by("") };
        let released = Record { released: true, ..cleared.clone() };
        let mut observer = Observer::new(s(2), s(1));
        observer.step("baz", Some(&record), start);
        // The cleared record says 15 s, more than bing's 3 s: the longer.
        assert_eq!(observer.step("baz", Some(&cleared), start + s(1)), vacated("bing", 15));
        assert_eq!(observer.step("baz", Some(&cleared), start + s(16)), Step::Take { transitions: 1 });
        let mut observer = Observer::new(s(2), s(1));
        observer.step("baz", Some(&record), start);
        assert_eq!(observer.step("baz", Some(&released), start + s(1)), Step::Take { transitions: 1 });
    }

    #[test]
    fn a_lease_deleted_again_after_another_created_it_is_a_new_wait() {
        let (s, start) = (Duration::from_secs, Instant::now());
        let mut observer = Observer::new(s(2), s(1));
        observer.step("baz", Some(&Record { lease_duration: s(2), ..held_by("bing") }), start);
        assert_eq!(observer.step("baz", None, start), vacated("bing", 2));
        assert_eq!(observer.step("baz", None, start + s(2)), Step::Create);
        // Our create lost to qux's, which was deleted again before our next read.
        observer.created_by_another();
        assert_eq!(observer.step("baz", None, start + s(3)), vacated("bing", 2));
    }

    #[test]
    fn a_replica_that_saw_no_holder_waits_longer_than_one_that_did() {
        // Our lease duration 2 s, two retry periods 1 s: a standby that saw
        // bing waits 2 s from when it found the lease gone, a replica that
        // saw no holder 3 s, so the standby creates it first.
        let (s, start) = (Duration::from_secs, Instant::now());
        let mut fresh = Observer::new(s(2), s(1));
        assert_eq!(fresh.step("baz", None, start), vacated("", 3));
        assert_eq!(fresh.step("baz", None, start + s(2)), vacated("", 1));
        assert_eq!(fresh.step("baz", None, start + s(3)), Step::Create);
        let mut warm = Observer::new(s(2), s(1));
        warm.step("baz", Some(&Record { lease_duration: s(1), ..held_by("bing") }), start);
        assert_eq!(warm.step("baz", None, start), vacated("bing", 2));
        assert_eq!(warm.step("baz", None, start + s(2)), Step::Create);
        // Back again, the lease is judged as it is now; gone again, a new wait.
        assert_eq!(warm.step("baz", Some(&held_by("qux")), start + s(3)), Step::Wait { holder: "qux".into() });
        assert_eq!(warm.step("baz", None, start + s(4)), vacated("qux", 15));
    }

    #[test]
    fn dont_acquire_from_led_acked_object() {
        let now = Instant::now();
        let future = now + Duration::from_secs(3600);
        let step = after(Some((held_by("bing"), future)), Some(&held_by("bing")), now);
        assert_eq!(step, Step::Wait { holder: "bing".into() });
    }

    #[test]
    fn renew_already_acquired_object() {
        let now = Instant::now();
        let ours = Record { transitions: 4, ..held_by("baz") };
        assert_eq!(after(Some((ours.clone(), now)), Some(&ours), now), Step::Renew { transitions: 4 });
    }

    #[test]
    fn a_holder_that_keeps_renewing_never_expires() {
        let start = Instant::now();
        let mut observer = Observer::default();
        for i in 0..20u64 {
            let record = Record { version: i.to_string(), ..held_by("bing") };
            let now = start + Duration::from_secs(10 * i);
            assert_eq!(observer.step("baz", Some(&record), now), Step::Wait { holder: "bing".into() });
        }
    }

    #[test]
    fn config_validation() {
        let s = Duration::from_secs;
        let t = |l, r, p| Timings { lease_duration: l, renew_deadline: r, retry_period: p }.check();
        assert!(t(s(15), s(10), s(2)).is_ok(), "client-go's defaults");
        assert_eq!(
            t(s(10), s(10), s(2)).unwrap_err(),
            "--leader-elect-lease-duration must be greater than --leader-elect-renew-deadline"
        );
        assert_eq!(
            t(s(15), s(12), s(10)).unwrap_err(),
            "--leader-elect-renew-deadline must be greater than 1.2 x --leader-elect-retry-period"
        );
        // The jitter's edge: 1.2 x 5s is 6s, not less than the deadline.
        assert!(t(s(15), s(6), s(5)).is_err());
        // The lease duration goes on the Lease in whole seconds: rounded
        // up, and checked as rounded.
        let ms = Duration::from_millis;
        assert_eq!(t(ms(1500), s(1), ms(200)).unwrap().lease_duration, s(2));
        assert_eq!(t(ms(1500), ms(1800), ms(200)).unwrap().lease_duration, s(2));
        assert_eq!(t(s(15), s(10), s(2)).unwrap().lease_duration, s(15));
        assert_eq!(t(s(15), s(10), s(0)).unwrap_err(), "--leader-elect-retry-period must be greater than zero");
    }

    fn add(rv: &str) -> Change {
        Change::Add(PodState { uid: "u".into(), resource_version: rv.into(), ..Default::default() })
    }

    fn key(name: &str) -> Key {
        Key { namespace: "ns".into(), name: name.into() }
    }

    fn kept(lines: Vec<Resumed>) -> Vec<Option<u64>> {
        lines.into_iter().map(|r| r.line.version.own()).collect()
    }

    fn delete(rv: &str) -> Change {
        Change::Delete(PodState { uid: "u".into(), resource_version: rv.into(), ..Default::default() })
    }

    /// A delete the relist at `listed` inferred (None: kube's JSON watcher),
    /// one that started before our stream had come anywhere.
    fn inferred(listed: Option<u64>) -> Seen {
        Seen::Inferred(Relist { after: None, by: listed })
    }

    /// What a standby logs when it takes the lease from `mark`: each kept
    /// line's pod resourceVersion, and whether it says `replayed=true`
    /// after a lease that expired (`released` false) or was released.
    fn takeover(gate: &Gate, mark: Option<u64>) -> Vec<(Option<u64>, bool)> {
        let lines = gate.lead(mark, Instant::now() + Duration::from_secs(60));
        lines.into_iter().map(|r| (r.line.version.own(), r.open)).collect()
    }

    /// The workers wait until we lead or know the leader's mark; a logger
    /// without `--leader-elect` has nothing to wait for.
    #[test]
    fn the_workers_wait_for_the_lease_or_the_mark_only_with_an_election() {
        use futures::FutureExt;
        assert_eq!(Gate::leading().decided().now_or_never(), Some(()));
        // A standby that has heard of no mark waits for one...
        let gate = Gate::standby();
        gate.decide(false);
        assert_eq!(gate.decided().now_or_never(), None);
        gate.follow(Some(5), None);
        gate.decide(false);
        assert_eq!(gate.decided().now_or_never(), Some(()));
        // ...or until waiting is over; and one that leads, not at all.
        let gate = Gate::standby();
        gate.decide(true);
        assert_eq!(gate.decided().now_or_never(), Some(()));
        let gate = Gate::standby();
        gate.lead(None, Instant::now() + Duration::from_secs(60));
        gate.decide(false);
        assert_eq!(gate.decided().now_or_never(), Some(()));
    }

    #[test]
    fn a_delete_a_relist_inferred_is_kept_until_the_mark_passes_the_list() {
        // The pod was last changed at 10; the relist at 50 lacks it. The
        // leader's mark 30 passed the pod's change, and says nothing of the
        // delete, which lies anywhere in 11..=50.
        let gate = Gate::standby();
        gate.follow(Some(30), None);
        assert_eq!(gate.admit(&key("gone"), &delete("10"), inferred(Some(50)), false, None), Verdict::Silent);
        gate.follow(Some(49), None);
        // Taken over at 49: logged, and `replayed=true` even after a
        // release: the delete may lie below the mark, and then was logged.
        assert_eq!(takeover(&gate, Some(49)), vec![(Some(10), true)]);

        // Once the leader's stream passed the list, it logged the delete.
        let gate = Gate::standby();
        gate.admit(&key("gone"), &delete("10"), inferred(Some(50)), false, None);
        gate.follow(Some(50), None);
        assert_eq!(takeover(&gate, Some(50)), vec![]);
        // The same line seen as it happened (a DELETED event at 10) goes
        // with any mark from 10 on.
        let gate = Gate::standby();
        gate.follow(Some(30), None);
        gate.admit(&key("gone"), &delete("10"), Seen::AsItHappened, false, None);
        assert_eq!(takeover(&gate, Some(30)), vec![]);
    }

    #[test]
    fn a_delete_inferred_past_the_mark_is_not_said_to_be_replayed() {
        // The mark is short of the pod's last change: the delete came after
        // it, so the leader cannot have logged it before its mark.
        let gate = Gate::standby();
        gate.follow(Some(5), None);
        gate.admit(&key("gone"), &delete("10"), inferred(Some(50)), false, None);
        assert_eq!(takeover(&gate, Some(5)), vec![(Some(10), false)]);
    }

    /// A worker that lags merges a pod's changes into one line: the gate
    /// places it by the range it spans, not by its newest change alone.
    #[test]
    fn a_merged_line_the_mark_cuts_says_replayed_and_one_past_it_does_not() {
        // The rule, for a line of the changes at 11 to 20.
        assert_eq!(placed(11, 20, Some(20)), Placed::Below, "the leader logged all of it");
        assert_eq!(placed(11, 20, Some(10)), Placed::Past, "the leader logged none of it");
        assert_eq!(placed(11, 20, None), Placed::Past, "no mark: nothing logged");
        assert_eq!(placed(11, 20, Some(11)), Placed::Across, "the leader logged its first change");
        assert_eq!(placed(11, 20, Some(19)), Placed::Across);

        let state = |rv: &str| PodState { uid: "u".into(), resource_version: rv.into(), ..Default::default() };
        let update = |old: &str, new: &str| Change::Update { old: state(old), new: state(new) };
        // The leader logged up to 15 and released the lease. Our worker
        // lagged: p was created at 12 (the leader logged its onAdd) and
        // deleted at 20; we add it at the delete's version. q was at 10
        // and changed at 13 (logged) and 20. r was created at 16; s was at
        // 5 and changed at 19 only; t changed at 17 and 19: nothing of
        // theirs was logged.
        let gate = Gate::standby();
        gate.follow(Some(15), None);
        for (name, change, seen) in [
            ("p", add("20"), Seen::Merged { first: 12 }),
            ("p", delete("20"), Seen::AsItHappened),
            ("q", update("10", "20"), Seen::Merged { first: 13 }),
            ("r", add("18"), Seen::Merged { first: 16 }),
            ("s", update("5", "19"), Seen::Merged { first: 19 }),
            ("t", update("5", "19"), Seen::Merged { first: 17 }),
        ] {
            assert_eq!(gate.admit(&key(name), &change, seen, false, None), Verdict::Silent);
        }
        let lines = vec![
            (Some(12), true),
            (Some(20), false),
            (Some(13), true),
            (Some(16), false),
            (Some(19), false),
            (Some(17), false),
        ];
        assert_eq!(takeover(&gate, Some(15)), lines, "a graceful handoff: replayed only where the mark cuts");
        // A leader places what its workers bring after the take alike.
        assert_eq!(gate.admit(&key("p"), &add("20"), Seen::Merged { first: 12 }, false, None), Verdict::Replayed);
        assert_eq!(
            gate.admit(&key("q"), &update("10", "20"), Seen::Merged { first: 13 }, false, None),
            Verdict::Replayed
        );
        assert_eq!(
            gate.admit(&key("q"), &update("10", "14"), Seen::Merged { first: 13 }, false, None),
            Verdict::Silent
        );
        assert_eq!(gate.admit(&key("s"), &update("5", "19"), Seen::Merged { first: 19 }, false, None), Verdict::Log);
        assert_eq!(gate.admit(&key("r"), &add("18"), Seen::Merged { first: 16 }, false, None), Verdict::Log);
        assert_eq!(gate.admit(&key("r"), &add("18"), Seen::AsItHappened, false, None), Verdict::Log);
        // A standby drops such a line once the mark passes its last change.
        let gate = Gate::standby();
        gate.admit(&key("q"), &update("10", "20"), Seen::Merged { first: 13 }, false, None);
        gate.follow(Some(19), None);
        gate.follow(Some(20), None);
        assert_eq!(takeover(&gate, Some(20)), vec![]);
    }

    #[test]
    fn a_delete_inferred_without_the_lists_version_is_never_dropped() {
        // kube's JSON watcher does not say the list's resourceVersion: no
        // mark can tell that the leader logged it.
        let gate = Gate::standby();
        gate.admit(&key("gone"), &delete("10"), inferred(None), false, None);
        gate.follow(Some(u64::MAX - 1), None);
        assert_eq!(takeover(&gate, Some(u64::MAX - 1)), vec![(Some(10), true)], "kept, and replayed");
        // A leader that took over from a mark logs it, replayed.
        assert_eq!(gate.admit(&key("b"), &delete("10"), inferred(None), false, None), Verdict::Replayed);
        // Without a mark to doubt (no election), a plain line.
        let alone = Gate::leading();
        assert_eq!(alone.admit(&key("b"), &delete("10"), inferred(None), false, None), Verdict::Log);
    }

    #[test]
    fn a_leader_judges_an_inferred_delete_by_the_list_not_the_pod() {
        let gate = Gate::standby();
        gate.lead(Some(30), Instant::now() + Duration::from_secs(60));
        // The predecessor's mark 30 < the list's 50: it may or may not have
        // logged the delete. Logged, saying so.
        assert_eq!(gate.admit(&key("a"), &delete("10"), inferred(Some(50)), false, None), Verdict::Replayed);
        // A mark past the list: the predecessor logged it.
        assert_eq!(gate.admit(&key("a"), &delete("10"), inferred(Some(25)), false, None), Verdict::Silent);
        // A pod last changed past the mark: the predecessor never saw it go.
        assert_eq!(gate.admit(&key("a"), &delete("40"), inferred(Some(50)), false, None), Verdict::Log);
        // What the pod's own version taken counts for the mark (JSON's).
        assert_eq!(gate.taken(), Some(40));
        // Our own stream had passed the predecessor's mark (35 > 30) when
        // the relist started: the pod was still in our store then, so it
        // went after 35, past anything the predecessor logged.
        let relist = Seen::Inferred(Relist { after: Some(35), by: Some(50) });
        assert_eq!(gate.admit(&key("a"), &delete("10"), relist, false, None), Verdict::Log);
        // A list at or below what we knew (a lagging cache) bounds nothing:
        // a mark past it says nothing of the delete.
        let lagging = Seen::Inferred(Relist { after: Some(35), by: Some(35) });
        let standby = Gate::standby();
        standby.admit(&key("a"), &delete("10"), lagging, false, None);
        standby.follow(Some(40), None);
        assert_eq!(takeover(&standby, Some(40)), vec![(Some(35), true)], "kept, and replayed");
    }

    #[tokio::test]
    async fn a_mark_never_passes_a_change_still_queued_or_in_flight() {
        let queue: Arc<Queue<Key>> = Queue::new("mark-test");
        let idle = || queue.is_idle();
        // The informer queued the key of a change at 7, then moved its
        // position to 7.
        queue.add_all([key("a")]);
        assert_eq!(next_mark(Some(5), || Some(7), idle), Some(5), "queued: not synced yet");
        let a = queue.get().await.expect("a key");
        assert_eq!(next_mark(Some(5), || Some(7), idle), Some(5), "in flight: its line may not be written yet");
        // A newer change of a while a worker holds it: done() queues it again.
        queue.add_all([key("a")]);
        queue.done(&a);
        assert_eq!(next_mark(Some(5), || Some(7), idle), Some(5), "a's newer change is not synced");
        let a = queue.get().await.expect("a key");
        // Its sync failed: it waits out a backoff, still not synced.
        queue.add_rate_limited(a.clone());
        queue.done(&a);
        assert_eq!(next_mark(Some(5), || Some(7), idle), Some(5), "a retry is pending");
        let a = queue.get().await.expect("a key, after its backoff");
        queue.forget(&a);
        queue.done(&a);
        assert_eq!(next_mark(Some(5), || Some(7), idle), Some(7));
        // The informer runs between the read of the position (7) and the
        // idle check: it queues b's change at 9 and moves to 9. The mark
        // read first says 7, which b's sync does not need.
        let position = std::cell::Cell::new(7);
        let informer_meanwhile = || {
            queue.add_all([key("b")]);
            position.set(9);
            true // the check saw the queue before b came
        };
        assert_eq!(next_mark(Some(7), || Some(position.get()), informer_meanwhile), Some(7));
        assert_eq!(position.get(), 9);
        // A position that went back (a relist served lower) never lowers the mark.
        assert_eq!(next_mark(Some(7), || Some(3), || true), Some(7));
    }

    #[test]
    fn a_standby_keeps_what_the_leader_has_not_logged_yet() {
        let gate = Gate::standby();
        assert_eq!(
            gate.admit(&key("a"), &add("5"), Seen::AsItHappened, false, None),
            Verdict::Silent,
            "a standby never logs"
        );
        assert_eq!(gate.admit(&key("b"), &add("7"), Seen::AsItHappened, false, None), Verdict::Silent);
        gate.follow(Some(5), None); // the leader logged up to 5
        gate.follow(Some(4), None); // an older mark changes nothing
        assert_eq!(
            gate.admit(&key("c"), &add("3"), Seen::AsItHappened, false, None),
            Verdict::Silent,
            "a late change the mark covers"
        );
        // A graceful handoff: the released lease's mark is exact.
        let until = Instant::now() + Duration::from_secs(60);
        assert_eq!(kept(gate.lead(Some(6), until)), vec![Some(7)]);
        assert_eq!(
            gate.admit(&key("d"), &add("6"), Seen::AsItHappened, false, None),
            Verdict::Silent,
            "the old leader's"
        );
        assert_eq!(gate.admit(&key("d"), &add("8"), Seen::AsItHappened, false, None), Verdict::Log);
    }

    /// A leader that saw (10, 20] only as a list (a late joiner) marks
    /// past it: the deletes a standby kept in that range are said, not
    /// dropped in silence, for a list does not show a pod that is gone.
    #[test]
    fn a_standby_does_not_drop_in_silence_a_delete_the_leader_saw_only_as_a_list() {
        let gate = Gate::standby();
        gate.follow(Some(10), None);
        for (name, change) in [("a", add("8")), ("b", add("12")), ("b", delete("15")), ("c", add("25"))] {
            assert_eq!(gate.admit(&key(name), &change, Seen::AsItHappened, false, None), Verdict::Silent);
        }
        let listed = ListedOnly { after: 10, through: 20 };
        let unseen = |kept: &mut Kept, mark| -> Vec<Option<u64>> {
            kept.follow(mark, Some(listed)).into_iter().map(|p| p.version.own()).collect()
        };
        // Only the delete: the leader logged b as its list showed it, had
        // b still been there.
        assert_eq!(unseen(&mut gate.lock().kept, Some(22)), [Some(15)]);
        assert_eq!(unseen(&mut gate.lock().kept, Some(24)), Vec::<Option<u64>>::new());
        assert_eq!(kept(gate.lead(Some(24), Instant::now() + Duration::from_secs(60))), [Some(25)]);
        // Where the range meets a delete: at its version, or inferred.
        let (at, inferred_in) = (Version::At(Some(16)), Version::Between { after: Some(18), by: Some(19) });
        assert!(at.unlogged_delete(&delete("16"), listed) && inferred_in.unlogged_delete(&delete("18"), listed));
        assert!(!at.unlogged_delete(&add("16"), listed), "a pod still there was in the leader's list");
        assert!(!Version::At(Some(21)).unlogged_delete(&delete("21"), listed), "seen as it happened");
        assert!(!Version::At(Some(9)).unlogged_delete(&delete("9"), listed), "the mark's");
    }

    #[test]
    fn the_range_a_leader_saw_only_as_a_list_is_read_from_the_lease() {
        let mut lease = Lease::default();
        assert_eq!(Record::of(&lease).listed_only, None);
        lease.metadata.annotations = Some([(LISTED_ONLY.to_string(), "636-639".to_string())].into());
        assert_eq!(Record::of(&lease).listed_only, Some(ListedOnly { after: 636, through: 639 }));
        lease.metadata.annotations = Some([(LISTED_ONLY.to_string(), "639-636".to_string())].into());
        assert_eq!(Record::of(&lease).listed_only, None, "not a range: ignored");
    }

    /// Lines no mark covers are kept apart from the others, so following
    /// the mark never walks them; a new leader still logs all of them in
    /// the order taken, and the cap drops the oldest of either.
    #[test]
    fn a_standby_logs_what_it_kept_in_the_order_taken() {
        let gate = Gate::standby();
        gate.admit(&key("a"), &add("5"), Seen::AsItHappened, false, None);
        gate.admit(&key("b"), &delete("6"), inferred(None), false, None);
        gate.admit(&key("c"), &add("7"), Seen::AsItHappened, false, None);
        gate.follow(Some(5), None);
        assert_eq!(takeover(&gate, Some(5)), vec![(Some(6), false), (Some(7), false)]);

        let gate = Gate::standby();
        gate.bound_kept_bytes(usize::MAX); // the count's bound alone
        gate.admit(&key("b"), &delete("1"), inferred(None), false, None);
        for rv in 2..PENDING_CAP as u64 + 2 {
            gate.admit(&key("a"), &add(&rv.to_string()), Seen::AsItHappened, false, None);
        }
        let kept = kept(gate.lead(None, Instant::now() + Duration::from_secs(60)));
        assert_eq!((kept.len(), kept[0]), (PENDING_CAP, Some(2)), "the oldest went");
    }

    #[test]
    fn a_version_that_is_not_a_number_is_never_covered() {
        let gate = Gate::standby();
        gate.admit(&key("a"), &add("x"), Seen::AsItHappened, false, None);
        gate.follow(Some(u64::MAX), None);
        assert_eq!(kept(gate.lead(Some(u64::MAX), Instant::now() + Duration::from_secs(60))), vec![None]);
        assert_eq!(gate.admit(&key("a"), &add("y"), Seen::AsItHappened, false, None), Verdict::Log);
    }

    #[tokio::test(start_paused = true)]
    async fn a_leader_past_its_renew_deadline_writes_no_line() {
        let gate = Gate::standby();
        gate.lead(None, Instant::now() + Duration::from_secs(2));
        assert_eq!(gate.admit(&key("a"), &add("1"), Seen::AsItHappened, false, None), Verdict::Log);
        tokio::time::advance(Duration::from_secs(1)).await;
        gate.renewed(Instant::now() + Duration::from_secs(2));
        tokio::time::advance(Duration::from_millis(1999)).await;
        assert_eq!(gate.admit(&key("a"), &add("2"), Seen::AsItHappened, false, None), Verdict::Log, "renewed in time");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(
            gate.admit(&key("a"), &add("3"), Seen::AsItHappened, false, None),
            Verdict::Silent,
            "the deadline passed"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_line_past_the_deadline_is_held_until_a_late_renew_logs_it() {
        let gate = Gate::standby();
        gate.lead(Some(1), Instant::now() + Duration::from_secs(2));
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(gate.admit(&key("a"), &add("3"), Seen::AsItHappened, false, None), Verdict::Silent);
        assert!(gate.holds(), "the mark must not pass a line held back");
        // A renew whose own deadline has passed too reopens nothing.
        assert_eq!(kept(gate.renewed(Instant::now())), vec![]);
        assert!(gate.holds() && !gate.within_deadline());
        // One that is late for the last deadline but not for its own: the
        // line comes out, and the gate is open again.
        assert_eq!(kept(gate.renewed(Instant::now() + Duration::from_secs(1))), vec![Some(3)]);
        assert!(!gate.holds());
        assert_eq!(gate.admit(&key("a"), &add("4"), Seen::AsItHappened, false, None), Verdict::Log);
    }

    #[tokio::test(start_paused = true)]
    async fn a_held_line_from_before_a_take_without_a_release_says_replayed_when_a_late_renew_logs_it() {
        let gate = Gate::standby();
        gate.lead(Some(1), Instant::now() + Duration::from_secs(2));
        gate.doubt_below(Some(10));
        tokio::time::advance(Duration::from_secs(2)).await;
        // Past the deadline: held back, one change from before the take and
        // one after it.
        assert_eq!(gate.admit(&key("a"), &add("5"), Seen::AsItHappened, false, None), Verdict::Silent);
        assert_eq!(gate.admit(&key("b"), &add("12"), Seen::AsItHappened, false, None), Verdict::Silent);
        let out: Vec<(Option<u64>, bool)> = gate
            .renewed(Instant::now() + Duration::from_secs(1))
            .iter()
            .map(|r| (resource_version(&r.line.change), r.open))
            .collect();
        assert_eq!(out, vec![(Some(5), true), (Some(12), false)], "as admit in time: 5 replayed, 12 not");
    }

    #[test]
    fn kept_lines_are_bounded_in_bytes_and_the_oldest_go() {
        let gate = Gate::standby();
        let one = weight(&key("a"), &add("1"));
        gate.bound_kept_bytes(2 * one);
        for rv in 1..=3 {
            gate.admit(&key("a"), &add(&rv.to_string()), Seen::AsItHappened, false, None);
        }
        assert_eq!(gate.lock().kept.bytes, 2 * one);
        assert_eq!(kept(gate.lead(None, Instant::now() + Duration::from_secs(60))), vec![Some(2), Some(3)]);
        assert_eq!(gate.lock().kept.bytes, 0);
        // One line alone is kept, whatever its size.
        let gate = Gate::standby();
        gate.bound_kept_bytes(1);
        gate.admit(&key("a"), &add("1"), Seen::AsItHappened, false, None);
        gate.admit(&key("a"), &add("2"), Seen::AsItHappened, false, None);
        assert_eq!(kept(gate.lead(None, Instant::now() + Duration::from_secs(60))), vec![Some(2)]);
    }

    #[test]
    fn the_low_watermark_moves_once_the_busy_keys_were_synced_since() {
        let gate = Gate::leading();
        let early = gate.sync_started(); // a sync of a, started before
        assert_eq!(gate.watermark(Some(10), [key("a"), key("b")].into()), None, "a candidate at 10");
        gate.synced(&key("a"), early);
        assert_eq!(gate.watermark(Some(15), [key("a"), key("b")].into()), None, "a's sync began too early");
        let later = gate.sync_started();
        gate.synced(&key("a"), later);
        // b still waits; c came later, and does not hold the candidate.
        assert_eq!(gate.watermark(Some(20), [key("b"), key("c")].into()), None);
        // b left the queue (dropped after its last attempt): 10 is the
        // mark, and 20 the next candidate, which c holds.
        assert_eq!(gate.watermark(Some(20), [key("c")].into()), Some(10));
        assert_eq!(gate.watermark(Some(25), [key("c")].into()), None);
        let c = gate.sync_started();
        gate.synced(&key("c"), c);
        assert_eq!(gate.watermark(Some(30), [key("c")].into()), Some(20), "c is busy again, synced since all the same");
    }

    #[test]
    fn after_a_crash_a_change_from_before_the_take_says_it_may_be_a_replay() {
        let gate = Gate::standby();
        gate.lead(Some(10), Instant::now() + Duration::from_secs(60));
        gate.doubt_below(Some(50));
        assert_eq!(gate.admit(&key("a"), &add("10"), Seen::AsItHappened, false, None), Verdict::Silent);
        assert_eq!(gate.admit(&key("a"), &add("49"), Seen::AsItHappened, false, None), Verdict::Replayed);
        assert_eq!(gate.admit(&key("a"), &add("50"), Seen::AsItHappened, false, None), Verdict::Log);
        assert_eq!(gate.admit(&key("b"), &delete("20"), inferred(Some(60)), false, None), Verdict::Replayed);
        assert_eq!(gate.admit(&key("c"), &add("x"), Seen::AsItHappened, false, None), Verdict::Log);
    }

    #[test]
    fn a_drain_that_left_keys_unsynced_is_no_complete_one() {
        let gate = Gate::standby();
        assert!(gate.complete());
        gate.left_unsynced();
        assert!(!gate.complete());
    }

    #[test]
    fn a_lease_is_released_only_with_the_stamp() {
        let mut lease = Lease::default();
        assert!(!Record::of(&lease).released);
        lease.metadata.annotations = Some([(RELEASED.to_string(), "true".to_string())].into());
        assert!(!Record::of(&lease).released, "an older demo-controller's stamp, or one typed by hand");
        lease.metadata.uid = Some("uid-1".into());
        let stamp = |holder: &str, uid: &str| Stamp { holder: holder.into(), uid: uid.into() }.record();
        lease.metadata.annotations = Some([(RELEASED.to_string(), stamp("a_1", "uid-0"))].into());
        assert!(!Record::of(&lease).released, "a stamp restored onto a new Lease names the old one");
        lease.metadata.annotations = Some([(RELEASED.to_string(), stamp("a_1", "uid-1"))].into());
        assert!(Record::of(&lease).released);
        assert!(from_its_holder(Record::of(&lease), None).released, "a replica that saw no holder");
        assert!(from_its_holder(Record::of(&lease), Some("a_1")).released);
        assert!(!from_its_holder(Record::of(&lease), Some("b_1")).released, "not by the holder we saw");
        assert_eq!(lost_to(""), "its holder was cleared");
        assert_eq!(lost_to("b_1"), "b_1 holds it");
    }

    #[test]
    fn without_election_every_change_is_logged() {
        let gate = Gate::leading();
        assert_eq!(gate.admit(&key("a"), &add("1"), Seen::AsItHappened, false, None), Verdict::Log);
        gate.stop();
        assert_eq!(
            gate.admit(&key("a"), &add("2"), Seen::AsItHappened, false, None),
            Verdict::Silent,
            "a lost lease: no line"
        );
    }
}
