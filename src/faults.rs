//! A test seam: make the sync of chosen keys fail, hang or slow down, so the
//! end-to-end tests can show retries with backoff, the drop after the last
//! attempt, a liveness probe that notices a stuck worker and a shutdown under
//! backlog, all against a real API server.
//!
//! It is a layer around the sync ([`Faults::around`]), which the controller
//! puts around its sync handler only when the environment variable
//! `DEMO_CONTROLLER_FAULTS` asks for a fault of syncs; the sync itself
//! (worker.rs) knows nothing of it. The variable reads e.g.
//! `fail=default/kuard,stall=default/slow@5s,slow=2ms`:
//! - `fail=NS/NAME`: every sync of that key fails before it runs, so it
//!   takes nothing from the cache and its retry sees everything again, as a
//!   real controller's sync that failed before committing would;
//! - `stall=NS/NAME[@DURATION]`: the first sync of that key hangs for that
//!   long (an hour without `@`) before it runs;
//! - `slow=DURATION`: every sync takes that much longer before it runs (a
//!   backlog builds up);
//! - `watch-timeout=DURATION`: the server closes each watch after this long
//!   instead of informer::WATCH_TIMEOUT_SECS (50 s), so a test can make a
//!   list outlast it without minutes of waiting;
//! - `protobuf-accept=MEDIA_TYPE`: ask for protobuf under this media type
//!   instead of `application/vnd.kubernetes.protobuf`, so a test sees what
//!   the logger does when a server refuses protobuf (406 Not Acceptable);
//! - `lose-take-answer`: with `--leader-elect`, the answer to this replica's
//!   first take of the lease is lost after the server committed the take,
//!   as a timeout would lose it: the elector hears nothing in time;
//! - `kept-bytes=N`: with `--leader-elect`, the lines a standby keeps may
//!   weigh N bytes instead of leader::KEPT_BYTES (32 MiB), so a test sees
//!   a line dropped at the bound without filling memory;
//! - `renew-late=DURATION@N`: with `--leader-elect`, the N-th renew (counted
//!   from 1) succeeds, and the elector takes its answer in DURATION later, as
//!   a busy runtime or a paused process would (no timeout cuts it short).
//!
//! It is a runtime switch rather than a cargo feature so the tests exercise
//! the very binary that ships.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use crate::key::Key;

pub const ENV: &str = "DEMO_CONTROLLER_FAULTS";

/// A failure this seam made on purpose. It is its own type (not the
/// controller's `SyncError`) so that this module depends on nothing but the key,
/// and the controller wraps it like any other reason a sync can fail.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Injected(String);

#[derive(Debug, Default)]
pub struct Faults {
    fail: HashSet<String>,
    /// Keys still to stall once, and for how long.
    stall: Mutex<HashMap<String, Duration>>,
    slow: Option<Duration>,
    /// The server-side watch timeout to ask for, in whole seconds.
    pub watch_timeout: Option<u32>,
    /// The media type to ask protobuf under (see wire.rs).
    pub protobuf_accept: Option<String>,
    /// Faults of the leader election, for the elector (leader.rs).
    pub election: ElectionFaults,
}

/// The seam's faults of the leader election (`lose-take-answer`,
/// `renew-late`); none in normal runs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ElectionFaults {
    /// The answer to the first take of the lease is lost.
    pub lose_take_answer: bool,
    /// The answer to the N-th renew is taken in this much later.
    pub renew_late: Option<(Duration, u32)>,
    /// The bound of the kept lines, in bytes, instead of KEPT_BYTES.
    pub kept_bytes: Option<usize>,
}

impl Faults {
    pub fn from_env() -> Result<Faults, String> {
        match std::env::var(ENV) {
            Ok(spec) => Faults::parse(&spec),
            Err(_) => Ok(Faults::default()),
        }
    }

    pub fn parse(spec: &str) -> Result<Faults, String> {
        let mut faults = Faults::default();
        let duration = |item: &str, text: &str| {
            humantime::parse_duration(text).map_err(|e| format!("{ENV}: cannot parse '{item}': {e}"))
        };
        for item in spec.split(',').filter(|s| !s.is_empty()) {
            match item.split_once('=') {
                Some(("fail", key)) => {
                    faults.fail.insert(key.to_string());
                }
                Some(("stall", spec)) => {
                    let (key, time) = spec.split_once('@').unwrap_or((spec, "1h"));
                    let time = duration(item, time)?;
                    faults.stall.get_mut().unwrap_or_else(|p| p.into_inner()).insert(key.to_string(), time);
                }
                Some(("slow", time)) => faults.slow = Some(duration(item, time)?),
                Some(("protobuf-accept", media_type)) => faults.protobuf_accept = Some(media_type.to_string()),
                Some(("renew-late", spec)) => {
                    let nth = spec.split_once('@').and_then(|(time, n)| Some((time, n.parse::<u32>().ok()?)));
                    let Some((time, n)) = nth.filter(|(_, n)| *n > 0) else {
                        return Err(format!("{ENV}: cannot parse '{item}': expected renew-late=DURATION@N, N from 1"));
                    };
                    faults.election.renew_late = Some((duration(item, time)?, n));
                }
                Some(("kept-bytes", n)) => {
                    let n = n.parse().map_err(|e| format!("{ENV}: cannot parse '{item}': {e}"))?;
                    faults.election.kept_bytes = Some(n);
                }
                None if item == "lose-take-answer" => faults.election.lose_take_answer = true,
                Some(("watch-timeout", time)) => {
                    let secs = duration(item, time)?.as_secs().clamp(1, u64::from(u32::MAX));
                    faults.watch_timeout = u32::try_from(secs).ok();
                }
                _ => {
                    return Err(format!(
                        "{ENV}: cannot parse '{item}': expected fail=NS/NAME, stall=NS/NAME[@DURATION], slow=DURATION, watch-timeout=DURATION, protobuf-accept=MEDIA_TYPE, lose-take-answer, renew-late=DURATION@N or kept-bytes=N"
                    ));
                }
            }
        }
        Ok(faults)
    }

    /// Whether a fault of syncs is asked for (`fail`, `stall`, `slow`): only
    /// then does the controller put [`Faults::around`] around its syncs.
    pub fn wraps_syncs(&self) -> bool {
        let stalls = !self.stall.lock().unwrap_or_else(|p| p.into_inner()).is_empty();
        !self.fail.is_empty() || stalls || self.slow.is_some()
    }

    /// The layer around one sync of `key`: first the delay (`slow`, `stall`),
    /// then the failure (`fail`), which returns before `sync` ever runs.
    pub async fn around<E: From<Injected>>(
        &self,
        key: &Key,
        sync: impl Future<Output = Result<(), E>>,
    ) -> Result<(), E> {
        self.delay(key).await;
        self.fail(key)?;
        sync.await
    }

    /// Time spent before a sync runs (`slow`, `stall`): a busy worker.
    /// Changes that land meanwhile are in what the sync reads.
    async fn delay(&self, key: &Key) {
        if let Some(time) = self.slow {
            tokio::time::sleep(time).await;
        }
        let stall = {
            let mut stall = self.stall.lock().unwrap_or_else(|p| p.into_inner());
            if stall.is_empty() { None } else { stall.remove(&key.to_string()) }
        };
        if let Some(time) = stall {
            tokio::time::sleep(time).await;
        }
    }

    /// A sync of `key` that fails (`fail`).
    fn fail(&self, key: &Key) -> Result<(), Injected> {
        if self.fail.is_empty() {
            return Ok(());
        }
        let key = key.to_string();
        if self.fail.contains(&key) {
            return Err(Injected(format!("injected failure for {key} ({ENV})")));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> Key {
        Key { namespace: "ns".into(), name: name.into() }
    }

    #[tokio::test]
    async fn a_failing_key_fails_and_others_pass() {
        let faults = Faults::parse("fail=ns/bad").unwrap();
        assert_eq!(
            faults.fail(&key("bad")).unwrap_err().to_string(),
            "injected failure for ns/bad (DEMO_CONTROLLER_FAULTS)"
        );
        assert!(faults.fail(&key("good")).is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn a_stall_holds_the_first_sync_only() {
        let faults = Faults::parse("stall=ns/slow@5s").unwrap();
        let start = tokio::time::Instant::now();
        faults.delay(&key("slow")).await;
        assert_eq!(start.elapsed(), Duration::from_secs(5));
        faults.delay(&key("slow")).await;
        assert_eq!(start.elapsed(), Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn slow_delays_every_sync() {
        let faults = Faults::parse("slow=2ms").unwrap();
        let start = tokio::time::Instant::now();
        faults.delay(&key("a")).await;
        faults.delay(&key("b")).await;
        assert_eq!(start.elapsed(), Duration::from_millis(4));
    }

    #[test]
    fn a_malformed_spec_is_refused() {
        assert_eq!(
            Faults::parse("explode=ns/x").unwrap_err(),
            "DEMO_CONTROLLER_FAULTS: cannot parse 'explode=ns/x': expected fail=NS/NAME, stall=NS/NAME[@DURATION], slow=DURATION, watch-timeout=DURATION, protobuf-accept=MEDIA_TYPE, lose-take-answer, renew-late=DURATION@N or kept-bytes=N"
        );
        assert!(
            Faults::parse("slow=fast").unwrap_err().starts_with("DEMO_CONTROLLER_FAULTS: cannot parse 'slow=fast': ")
        );
    }

    #[test]
    fn a_shorter_watch_timeout_is_whole_seconds() {
        assert_eq!(Faults::parse("watch-timeout=4s").unwrap().watch_timeout, Some(4));
        assert_eq!(Faults::parse("watch-timeout=10ms").unwrap().watch_timeout, Some(1), "at least a second");
        assert_eq!(Faults::parse("").unwrap().watch_timeout, None);
    }

    #[test]
    fn election_faults_are_parsed_and_off_by_default() {
        let faults = Faults::parse("lose-take-answer,renew-late=1500ms@3,kept-bytes=10").unwrap();
        let want = ElectionFaults {
            lose_take_answer: true,
            renew_late: Some((Duration::from_millis(1500), 3)),
            kept_bytes: Some(10),
        };
        assert_eq!(faults.election, want);
        assert!(!faults.wraps_syncs());
        assert_eq!(Faults::parse("").unwrap().election, ElectionFaults::default());
        assert_eq!(
            Faults::parse("renew-late=1s").unwrap_err(),
            "DEMO_CONTROLLER_FAULTS: cannot parse 'renew-late=1s': expected renew-late=DURATION@N, N from 1"
        );
    }

    #[test]
    fn no_spec_no_faults() {
        let faults = Faults::parse("").unwrap();
        assert!(faults.fail.is_empty() && faults.slow.is_none());
        assert!(!faults.wraps_syncs() && !Faults::parse("watch-timeout=4s").unwrap().wraps_syncs());
        assert!(Faults::parse("stall=ns/p").unwrap().wraps_syncs() && Faults::parse("slow=1ms").unwrap().wraps_syncs());
    }

    #[tokio::test]
    async fn a_failed_sync_takes_nothing_and_its_retry_still_logs_the_delete() {
        use crate::informer::tests::pod;
        use crate::informer::{Cache, Relist};
        use crate::worker::Worker;
        use kube::runtime::watcher::Event;
        let cache = Cache::new();
        let worker = Worker::new(cache.clone(), false, None);
        for event in [Event::Init, Event::InitDone] {
            cache.apply(event, Relist::default());
        }
        cache.apply(Event::Apply(pod("ns", "p", "u1", "2")), Relist::default());
        cache.apply(Event::Delete(pod("ns", "p", "u1", "3")), Relist::default());
        let failing = Faults::parse("fail=ns/p").unwrap();
        let sync = || async {
            worker.sync(&key("p")).await;
            Ok::<_, Injected>(())
        };
        for _ in 0..2 {
            let err = failing.around(&key("p"), sync()).await.unwrap_err();
            assert_eq!(err.to_string(), "injected failure for ns/p (DEMO_CONTROLLER_FAULTS)");
        }
        // Nothing was taken by the failures: the cache still holds the tombstone.
        assert_eq!(cache.held().0, 1);
        use crate::line::Change::{Add, Delete};
        let lines = worker.sync(&key("p")).await;
        let changes: Vec<_> = lines.into_iter().map(|l| l.change).collect();
        assert!(
            matches!(&changes[..], [Add(a), Delete(d)] if a.uid == "u1" && d.resource_version == "3"),
            "{changes:?}"
        );
        assert_eq!(cache.held(), (0, 0));
    }
}
