//! The soak's figures, taken once and written twice: report.txt for a reader,
//! report.json for a machine. `--record` copies report.json to
//! bench/soak.json, the committed run that tests/figures.rs in
//! demo-controller renders the book's figures from, so every figure the text
//! prints is in the record too, rounded as the text shows it.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use serde_json::{Value, json};

use crate::measured::Code;
use crate::oracle::{self, Broken, Exit, Life, Micros, Verdict, Write, WriteKind};

/// What the run was: asked for, and what it measured.
pub struct Setup {
    /// When the writer started (UTC, to the minute).
    pub started: String,
    pub code: Code,
    pub machine: String,
    /// The load average when it started.
    pub load: String,
    /// The command that runs it again (`make soak DURATION=... ARGS=...`).
    pub command: String,
    pub demo_controller: String,
    pub replicas: usize,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
    pub asked: Duration,
    /// The faults the schedule left out (`--faults`).
    pub left_out: Vec<&'static str>,
}

/// Every figure the report prints.
pub struct Figures {
    pub setup: Setup,
    /// How long the writer and the faults ran, in whole seconds.
    pub ran: Duration,
    /// Cut short by Ctrl-C or SIGTERM: no record is made of it.
    pub interrupted: bool,
    /// create, relabel, phase, delete.
    pub writes: [(&'static str, usize); 4],
    pub faults: BTreeMap<String, usize>,
    pub lives: usize,
    /// killed by the soak, exit 0, exit 1, any other end.
    pub exits: [(&'static str, usize); 4],
    pub terms: usize,
    pub leader_changes: usize,
    pub event_lines: usize,
    pub replayed_lines: usize,
    pub repeats: usize,
    /// Writes shown by a line of their own, and their lag's p50 and p99 in ms.
    pub lag_lines: usize,
    pub lag_p50_ms: f64,
    pub lag_p99_ms: f64,
    /// Each violation's promise and text, the fault before it named.
    pub violations: Vec<(Broken, String)>,
}

/// `x` rounded to one decimal, as the report prints it.
fn tenth(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

impl Figures {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        setup: Setup,
        ran: Duration,
        interrupted: bool,
        writes: &[Write],
        faults: &BTreeMap<&str, usize>,
        fault_log: &[(Micros, &str, String)],
        lives: &[Life],
        v: &Verdict,
    ) -> Figures {
        let count = |f: fn(&WriteKind) -> bool| writes.iter().filter(|w| f(&w.kind)).count();
        let exits = |f: fn(&Exit) -> bool| lives.iter().filter(|l| f(&l.exit)).count();
        let violations = v
            .violations
            .iter()
            .map(|violation| {
                // The fault before it, if any: where to start reading the logs.
                let after = violation
                    .at
                    .and_then(|at| fault_log.iter().rev().find(|(t, _, _)| *t <= at).map(|f| (at, f)))
                    .map(|(at, (t, name, _))| {
                        format!(" [{:.2} s after {name} at {}]", (at - t) as f64 / 1e6, oracle::stamp(*t))
                    })
                    .unwrap_or_default();
                (violation.broken, format!("{}{after}", violation.text))
            })
            .collect();
        Figures {
            setup,
            ran: Duration::from_secs(ran.as_secs()),
            interrupted,
            writes: [
                ("create", count(|k| *k == WriteKind::Create)),
                ("relabel", count(|k| matches!(k, WriteKind::Relabel(_)))),
                ("phase", count(|k| matches!(k, WriteKind::Phase(_)))),
                ("delete", count(|k| *k == WriteKind::Delete)),
            ],
            faults: faults.iter().map(|(k, n)| (k.to_string(), *n)).collect(),
            lives: lives.len(),
            exits: [
                ("killed by the soak", exits(|e| *e == Exit::KilledBySoak)),
                ("0", exits(|e| *e == Exit::Code(0))),
                ("1", exits(|e| *e == Exit::Code(1))),
                ("other", exits(|e| !matches!(e, Exit::KilledBySoak | Exit::Code(0 | 1)))),
            ],
            terms: v.terms,
            leader_changes: v.leader_changes(),
            event_lines: v.event_lines,
            replayed_lines: v.replayed_lines,
            repeats: v.repeats,
            lag_lines: v.lags_ms.len(),
            lag_p50_ms: oracle::percentile(&v.lags_ms, 50.0).round(),
            lag_p99_ms: oracle::percentile(&v.lags_ms, 99.0).round(),
            violations,
        }
    }

    fn write_count(&self) -> usize {
        self.writes.iter().map(|(_, n)| n).sum()
    }

    fn writes_per_s(&self) -> f64 {
        tenth(self.write_count() as f64 / self.ran.as_secs_f64().max(1.0))
    }

    fn per_leader_change(&self, n: usize) -> f64 {
        tenth(n as f64 / self.leader_changes.max(1) as f64)
    }

    fn replayed_percent(&self) -> f64 {
        tenth(100.0 * self.replayed_lines as f64 / self.event_lines.max(1) as f64)
    }

    fn broken(&self, broken: Broken) -> usize {
        self.violations.iter().filter(|(b, _)| *b == broken).count()
    }

    /// report.txt.
    pub fn text(&self) -> String {
        let s = &self.setup;
        let mut r = String::new();
        if self.interrupted {
            let _ = writeln!(
                r,
                "soak: INTERRUPTED after {}: the figures below are of a run cut short (lines still in flight may \
                 show as lost); it is not recorded",
                humantime::format_duration(self.ran)
            );
        }
        let _ = writeln!(
            r,
            "soak: {} run, {} replicas of {} (lease {}, renew deadline {}, retry period {})",
            humantime::format_duration(self.ran),
            s.replicas,
            s.demo_controller,
            humantime::format_duration(s.lease_duration),
            humantime::format_duration(s.renew_deadline),
            humantime::format_duration(s.retry_period),
        );
        let _ = writeln!(r, "code: commit {} ({}); started {}, {}", s.code.commit, s.code.trees, s.started, s.load);
        let kinds: Vec<String> = self.writes.iter().map(|(k, n)| format!("{k} {n}")).collect();
        let _ = writeln!(r, "writes: {} ({}/s): {}", self.write_count(), self.writes_per_s(), kinds.join(", "));
        let kinds: Vec<String> = self.faults.iter().map(|(k, n)| format!("{k} {n}")).collect();
        let left_out = match s.left_out.as_slice() {
            [] => String::new(),
            names => format!("; left out: {}", names.join(", ")),
        };
        let _ = writeln!(r, "faults: {}: {}{left_out}", self.faults.values().sum::<usize>(), kinds.join(", "));
        let exits: Vec<String> = self.exits.iter().map(|(k, n)| format!("{k} {n}")).collect();
        let _ = writeln!(
            r,
            "replica lives: {} (restarts: {}); exits: {}",
            self.lives,
            self.lives.saturating_sub(s.replicas),
            exits.join(", ")
        );
        let _ = writeln!(r, "leader changes: {} ({} terms)", self.leader_changes, self.terms);
        let _ = writeln!(
            r,
            "event lines: {}, replayed: {} ({}%), replays per leader change: {}",
            self.event_lines,
            self.replayed_lines,
            self.replayed_percent(),
            self.per_leader_change(self.replayed_lines)
        );
        let _ = writeln!(
            r,
            "repeats (lines logged before, each must say replayed=true): {}, per leader change: {}",
            self.repeats,
            self.per_leader_change(self.repeats)
        );
        let _ = writeln!(
            r,
            "lag, write acknowledged to its first line ({} of {} writes shown by a line of their own): p50 {} ms, \
             p99 {} ms",
            self.lag_lines,
            self.write_count(),
            self.lag_p50_ms,
            self.lag_p99_ms
        );
        let _ = writeln!(r, "violations: {}", self.violations.len());
        for (_, text) in &self.violations {
            let _ = writeln!(r, "  {text}");
        }
        r
    }

    /// report.json: the same figures.
    pub fn json(&self) -> Value {
        let s = &self.setup;
        let counts =
            |pairs: &[(&str, usize)]| -> Value { pairs.iter().map(|(k, n)| (k.to_string(), json!(n))).collect() };
        let broken: Value = Broken::ALL.iter().map(|b| (b.name().to_string(), json!(self.broken(*b)))).collect();
        json!({
            "written_by": "bench/harness, its bin soak (make soak); do not edit by hand, run the command again",
            "facts": {
                "started": s.started,
                "commit": s.code.commit,
                "code measured": s.code.trees,
                "machine": s.machine,
                "load when it started": s.load,
                "command": s.command,
                "demo-controller": s.demo_controller,
            },
            "interrupted": self.interrupted,
            "duration_s": { "asked": s.asked.as_secs(), "ran": self.ran.as_secs() },
            "replicas": s.replicas,
            "lease_ms": {
                "duration": s.lease_duration.as_millis() as u64,
                "renew_deadline": s.renew_deadline.as_millis() as u64,
                "retry_period": s.retry_period.as_millis() as u64,
            },
            "writes": { "total": self.write_count(), "per_s": self.writes_per_s(), "by_kind": counts(&self.writes) },
            "faults": {
                "total": self.faults.values().sum::<usize>(),
                "by_kind": self.faults.iter().map(|(k, n)| (k.clone(), json!(n))).collect::<serde_json::Map<_, _>>(),
                "left_out": s.left_out,
            },
            "replica_lives": {
                "total": self.lives,
                "restarts": self.lives.saturating_sub(s.replicas),
                "exits": counts(&self.exits),
            },
            "leader_changes": self.leader_changes,
            "terms": self.terms,
            "event_lines": self.event_lines,
            "replayed_lines": { "total": self.replayed_lines, "percent": self.replayed_percent(),
                                "per_leader_change": self.per_leader_change(self.replayed_lines) },
            "repeats": { "total": self.repeats, "per_leader_change": self.per_leader_change(self.repeats) },
            "lag_ms": { "writes_shown": self.lag_lines, "p50": self.lag_p50_ms, "p99": self.lag_p99_ms },
            "violations": {
                "total": self.violations.len(),
                "by_kind": broken,
                "texts": self.violations.iter().map(|(_, t)| t.clone()).collect::<Vec<_>>(),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oracle::Violation;

    fn figures(interrupted: bool) -> Figures {
        let setup = Setup {
            started: "2026-11-26 17:00 UTC".into(),
            code: Code { commit: "abc1234".into(), trees: "src/ 1111, crates/ 2222".into() },
            machine: "2 CPUs".into(),
            load: "load average 1.00 1.00 1.00".into(),
            command: "make soak DURATION=1m".into(),
            demo_controller: "target/debug/demo-controller".into(),
            replicas: 3,
            lease_duration: Duration::from_secs(3),
            renew_deadline: Duration::from_secs(2),
            retry_period: Duration::from_millis(500),
            asked: Duration::from_secs(60),
            left_out: vec!["lease-delete"],
        };
        let s = 1_000_000;
        let writes = vec![
            Write { kind: WriteKind::Create, uid: "a".into(), acked: s },
            Write { kind: WriteKind::Relabel(1), uid: "a".into(), acked: 2 * s },
            Write { kind: WriteKind::Delete, uid: "a".into(), acked: 3 * s },
        ];
        let faults: BTreeMap<&str, usize> = [("leader-kill", 2), ("apiserver-term", 1)].into();
        let fault_log = vec![(4 * s, "leader-kill", String::new())];
        let lives = vec![
            Life { slot: 0, life: 0, lines: Vec::new(), exit: Exit::KilledBySoak },
            Life { slot: 1, life: 0, lines: Vec::new(), exit: Exit::Code(0) },
            Life { slot: 2, life: 0, lines: Vec::new(), exit: Exit::Code(0) },
            Life { slot: 0, life: 1, lines: Vec::new(), exit: Exit::Code(0) },
        ];
        let v = Verdict {
            violations: vec![Violation {
                broken: Broken::UnmarkedDuplicate,
                at: Some(5 * s),
                text: "unmarked duplicate: x".into(),
            }],
            event_lines: 30,
            replayed_lines: 7,
            repeats: 4,
            terms: 4,
            lags_ms: vec![10.0, 20.0, 900.0],
        };
        Figures::new(setup, Duration::from_millis(60_700), interrupted, &writes, &faults, &fault_log, &lives, &v)
    }

    #[test]
    fn the_record_holds_every_figure_the_report_prints() {
        let f = figures(false);
        let text = f.text();
        assert_eq!(
            text,
            "soak: 1m run, 3 replicas of target/debug/demo-controller (lease 3s, renew deadline 2s, retry period 500ms)\n\
             code: commit abc1234 (src/ 1111, crates/ 2222); started 2026-11-26 17:00 UTC, load average 1.00 1.00 1.00\n\
             writes: 3 (0.1/s): create 1, relabel 1, phase 0, delete 1\n\
             faults: 3: apiserver-term 1, leader-kill 2; left out: lease-delete\n\
             replica lives: 4 (restarts: 1); exits: killed by the soak 1, 0 3, 1 0, other 0\n\
             leader changes: 3 (4 terms)\n\
             event lines: 30, replayed: 7 (23.3%), replays per leader change: 2.3\n\
             repeats (lines logged before, each must say replayed=true): 4, per leader change: 1.3\n\
             lag, write acknowledged to its first line (3 of 3 writes shown by a line of their own): p50 20 ms, p99 900 ms\n\
             violations: 1\n  unmarked duplicate: x [1.00 s after leader-kill at 1970-01-01T00:00:04.000000Z]\n"
        );
        let j = f.json();
        assert_eq!(j["facts"]["code measured"], "src/ 1111, crates/ 2222");
        assert_eq!(j["facts"]["commit"], "abc1234");
        assert_eq!(j["facts"]["command"], "make soak DURATION=1m");
        assert_eq!(j["interrupted"], false);
        assert_eq!(j["duration_s"], json!({ "asked": 60, "ran": 60 }));
        assert_eq!(j["lease_ms"], json!({ "duration": 3000, "renew_deadline": 2000, "retry_period": 500 }));
        assert_eq!(j["writes"]["by_kind"], json!({ "create": 1, "relabel": 1, "phase": 0, "delete": 1 }));
        assert_eq!(j["writes"]["per_s"], 0.1);
        assert_eq!(
            j["faults"],
            json!({ "total": 3, "by_kind": { "apiserver-term": 1, "leader-kill": 2 }, "left_out": ["lease-delete"] })
        );
        assert_eq!(j["replica_lives"]["exits"]["killed by the soak"], 1);
        assert_eq!(
            (j["leader_changes"].clone(), j["terms"].clone(), j["event_lines"].clone()),
            (3.into(), 4.into(), 30.into())
        );
        assert_eq!(j["replayed_lines"], json!({ "total": 7, "percent": 23.3, "per_leader_change": 2.3 }));
        assert_eq!(j["repeats"], json!({ "total": 4, "per_leader_change": 1.3 }));
        assert_eq!(j["lag_ms"], json!({ "writes_shown": 3, "p50": 20.0, "p99": 900.0 }));
        assert_eq!(j["violations"]["total"], 1);
        assert_eq!(j["violations"]["by_kind"]["unmarked duplicate"], 1);
        assert_eq!(j["violations"]["by_kind"]["lost"], 0);
        assert_eq!(j["violations"]["by_kind"]["two leaders"], 0);
        assert_eq!(j["violations"]["texts"][0], text.lines().last().unwrap().trim());
    }

    #[test]
    fn an_interrupted_run_says_so_in_both() {
        let f = figures(true);
        assert!(f.text().starts_with("soak: INTERRUPTED after 1m: "), "{}", f.text());
        assert_eq!(f.json()["interrupted"], true);
    }
}
