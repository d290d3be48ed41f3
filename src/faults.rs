//! A test seam: make the sync of chosen keys fail or hang, so the end-to-end
//! tests can show retries with backoff, the drop after the last attempt, and a
//! liveness probe that notices a stuck worker, all against a real API server.
//!
//! It is inert unless the environment variable `DEMO_CONTROLLER_FAULTS` is
//! set, e.g. `fail=default/kuard,stall=default/slow@5s`: `fail` makes every
//! sync of that key fail, `stall` holds the worker on that key's first sync
//! for the given time (an hour without `@`). It is a
//! runtime switch rather than a cargo feature so the tests exercise the very
//! binary that ships.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use crate::controller::SyncError;
use crate::informer::Key;

pub const ENV: &str = "DEMO_CONTROLLER_FAULTS";

#[derive(Debug, Default)]
pub struct Faults {
    fail: HashSet<String>,
    /// Keys still to stall once, and for how long.
    stall: Mutex<HashMap<String, Duration>>,
}

impl Faults {
    pub fn from_env() -> Result<Faults, String> {
        match std::env::var(ENV) {
            Ok(spec) => Faults::parse(&spec),
            Err(_) => Ok(Faults::default()),
        }
    }

    fn parse(spec: &str) -> Result<Faults, String> {
        let (mut fail, mut stall) = (HashSet::new(), HashMap::new());
        for item in spec.split(',').filter(|s| !s.is_empty()) {
            match item.split_once('=') {
                Some(("fail", key)) => {
                    fail.insert(key.to_string());
                }
                Some(("stall", spec)) => {
                    let (key, time) = spec.split_once('@').unwrap_or((spec, "1h"));
                    let time = humantime::parse_duration(time).map_err(|e| format!("{ENV}: '{item}': {e}"))?;
                    stall.insert(key.to_string(), time);
                }
                _ => {
                    return Err(format!(
                        "{ENV}: cannot parse '{item}': expected fail=NS/NAME or stall=NS/NAME[@DURATION]"
                    ));
                }
            }
        }
        Ok(Faults {
            fail,
            stall: Mutex::new(stall),
        })
    }

    /// Called at the start of every sync.
    pub async fn inject(&self, key: &Key) -> Result<(), SyncError> {
        if self.fail.is_empty() && self.stall.lock().unwrap_or_else(|p| p.into_inner()).is_empty() {
            return Ok(());
        }
        let key = key.to_string();
        let stall = self.stall.lock().unwrap_or_else(|p| p.into_inner()).remove(&key);
        if let Some(time) = stall {
            tokio::time::sleep(time).await;
        }
        if self.fail.contains(&key) {
            return Err(SyncError::Injected(format!("injected failure for {key} ({ENV})")));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_failing_key_fails_and_others_pass() {
        let faults = Faults::parse("fail=ns/bad").unwrap();
        let bad = Key {
            namespace: "ns".into(),
            name: "bad".into(),
        };
        let good = Key {
            namespace: "ns".into(),
            name: "good".into(),
        };
        assert_eq!(
            faults.inject(&bad).await.unwrap_err().to_string(),
            "injected failure for ns/bad (DEMO_CONTROLLER_FAULTS)"
        );
        assert!(faults.inject(&good).await.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn a_stall_holds_the_first_sync_only() {
        let faults = Faults::parse("stall=ns/slow@5s").unwrap();
        let slow = Key {
            namespace: "ns".into(),
            name: "slow".into(),
        };
        let start = tokio::time::Instant::now();
        faults.inject(&slow).await.unwrap();
        assert_eq!(start.elapsed(), Duration::from_secs(5));
        faults.inject(&slow).await.unwrap();
        assert_eq!(start.elapsed(), Duration::from_secs(5));
    }

    #[test]
    fn a_malformed_spec_is_refused() {
        assert_eq!(
            Faults::parse("explode=ns/x").unwrap_err(),
            "DEMO_CONTROLLER_FAULTS: cannot parse 'explode=ns/x': expected fail=NS/NAME or stall=NS/NAME[@DURATION]"
        );
    }
}
