//! The soak's oracle: what the replicas' logs must show, given every write the
//! API server acknowledged and its final list of pods. Pure: it reads what
//! the run collected and returns the violations and the figures, so each
//! check is unit-tested on small synthetic logs (below).

use std::collections::{BTreeMap, HashMap, HashSet};

/// Microseconds since the Unix epoch: the replicas' JSON timestamps and the
/// writer's acknowledgements, on the same machine's clock.
pub type Micros = i64;

/// One line of one replica's output (stdout and stderr, in one file).
#[derive(Clone, Debug, Default)]
pub struct Line {
    /// None for a line that is not one of the program's JSON lines (a panic,
    /// a start-up error on stderr, a line cut short by SIGKILL).
    pub at: Option<Micros>,
    pub message: String,
    pub uid: Option<String>,
    pub phase: Option<String>,
    pub changes: Option<String>,
    pub replayed: bool,
}

impl Line {
    /// Reads one line as `--log-format json` writes it (the event's fields
    /// flattened beside `timestamp`, `level` and `message`).
    pub fn parse(text: &str) -> Line {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(text) else {
            return Line { message: text.to_string(), ..Line::default() };
        };
        let s = |k: &str| v.get(k).and_then(|x| x.as_str()).map(str::to_string);
        let at = s("timestamp")
            .and_then(|t| humantime::parse_rfc3339(&t).ok())
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_micros() as Micros);
        Line {
            at,
            message: s("message").unwrap_or_else(|| text.to_string()),
            uid: s("uid"),
            phase: s("phase"),
            changes: s("changes"),
            replayed: v.get("replayed").and_then(|x| x.as_bool()).unwrap_or(false),
        }
    }

    /// `onAdd`, `onUpdate` or `onDelete` for an event line; None otherwise.
    pub fn event(&self) -> Option<&'static str> {
        ["onAdd", "onUpdate", "onDelete"]
            .into_iter()
            .find(|k| self.message.strip_prefix(k).is_some_and(|rest| rest.starts_with(": ")))
    }

    /// A line that ends a term of leading (operations.md's table).
    fn stops_leading(&self) -> bool {
        ["lost the lease: ", "released the lease", "not releasing the lease", "cannot release the lease"]
            .iter()
            .any(|m| self.message.starts_with(m))
    }
}

/// How one life of a replica (one process) ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// The soak sent it SIGKILL: no line is owed.
    KilledBySoak,
    /// It exited with this code.
    Code(i32),
    /// A signal the soak did not send ended it.
    Signal(i32),
}

/// One process: replica `slot`, its `life`-th start.
#[derive(Clone, Debug)]
pub struct Life {
    pub slot: usize,
    pub life: usize,
    pub lines: Vec<Line>,
    pub exit: Exit,
}

impl Life {
    fn name(&self) -> String {
        format!("replica {} life {}", self.slot, self.life)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteKind {
    Create,
    /// The label `gen` set to this value.
    Relabel(u32),
    /// status.phase set to this.
    Phase(String),
    Delete,
}

/// A write the API server acknowledged.
#[derive(Clone, Debug)]
pub struct Write {
    pub kind: WriteKind,
    pub uid: String,
    pub acked: Micros,
}

/// A pod of the API server's final list.
#[derive(Clone, Debug)]
pub struct FinalPod {
    pub uid: String,
    pub name: String,
    pub phase: String,
    /// The label `gen`.
    pub gen_label: String,
}

/// Which promise a violation broke: the report counts the violations of each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Broken {
    /// No onAdd for a pod created, or no onDelete for a pod deleted.
    Lost,
    /// A line that repeats an earlier one without `replayed=true`.
    UnmarkedDuplicate,
    /// Two replicas' leading intervals overlap.
    TwoLeaders,
    /// A replica logged an event line while not leading.
    StandbyNotSilent,
    /// A live pod's last line does not show its final state.
    FinalState,
    /// A replica exited without its reason line.
    NoReasonLine,
    Panic,
}

impl Broken {
    pub const ALL: [Broken; 7] = [
        Broken::Lost,
        Broken::UnmarkedDuplicate,
        Broken::TwoLeaders,
        Broken::StandbyNotSilent,
        Broken::FinalState,
        Broken::NoReasonLine,
        Broken::Panic,
    ];

    /// Its name in report.json.
    pub fn name(self) -> &'static str {
        match self {
            Broken::Lost => "lost",
            Broken::UnmarkedDuplicate => "unmarked duplicate",
            Broken::TwoLeaders => "two leaders",
            Broken::StandbyNotSilent => "standby not silent",
            Broken::FinalState => "final state",
            Broken::NoReasonLine => "no reason line",
            Broken::Panic => "panic",
        }
    }
}

/// A broken promise, with when it happened if the lines tell (to find the fault before it).
#[derive(Clone, Debug, PartialEq)]
pub struct Violation {
    pub broken: Broken,
    pub at: Option<Micros>,
    pub text: String,
}

impl Violation {
    fn new(broken: Broken, at: Option<Micros>, text: String) -> Violation {
        Violation { broken, at, text }
    }
}

#[derive(Debug, Default)]
pub struct Verdict {
    pub violations: Vec<Violation>,
    pub event_lines: usize,
    pub replayed_lines: usize,
    /// Event lines that repeat an earlier one (same pod, kind and changes):
    /// what a replay really repeated, where `replayed_lines` also counts the
    /// lines of changes nobody had logged that a successor could not tell apart.
    pub repeats: usize,
    /// Terms of leading (`became leader` lines); leader changes are one fewer.
    pub terms: usize,
    /// Lag from a write's acknowledgement to its first line, in ms, sorted.
    pub lags_ms: Vec<f64>,
}

impl Verdict {
    pub fn leader_changes(&self) -> usize {
        self.terms.saturating_sub(1)
    }
}

/// A term of leading in one life: from `became leader` to the line that ends
/// it (or the life's end); `last_event` is its last event line (the start if
/// none), so it spans what it logged.
#[derive(Debug)]
struct Term {
    who: String,
    start: Micros,
    last_event: Micros,
}

/// An event line with where it came from.
struct Event<'a> {
    who: String,
    at: Micros,
    line: &'a Line,
}

pub fn judge(lives: &[Life], writes: &[Write], finals: &[FinalPod]) -> Verdict {
    let mut v = Verdict::default();
    let mut terms = Vec::new();
    let mut events: Vec<Event> = Vec::new();

    for life in lives {
        let who = life.name();
        let mut leading: Option<Term> = None;
        for line in &life.lines {
            if line.message.contains("panicked at") {
                v.violations.push(Violation::new(Broken::Panic, line.at, format!("panic in {who}: {}", line.message)));
            }
            if line.message == "became leader" {
                terms.extend(leading.take());
                let start = line.at.unwrap_or_default();
                leading = Some(Term { who: who.clone(), start, last_event: start });
                v.terms += 1;
            } else if line.stops_leading() {
                terms.extend(leading.take());
            } else if line.event().is_some() {
                let at = line.at.unwrap_or_default();
                match leading.as_mut() {
                    Some(t) => t.last_event = at,
                    None => v.violations.push(Violation::new(
                        Broken::StandbyNotSilent,
                        Some(at),
                        format!(
                            "standby not silent: {who} logged '{}' (uid {}) at {} while not leading",
                            line.message,
                            line.uid.as_deref().unwrap_or("?"),
                            stamp(at)
                        ),
                    )),
                }
                v.event_lines += 1;
                v.replayed_lines += usize::from(line.replayed);
                events.push(Event { who: who.clone(), at, line });
            }
        }
        terms.extend(leading.take());
        check_exit(life, &mut v.violations);
    }

    // No two terms logged at once: a term starts after the last line of every earlier one.
    terms.sort_by_key(|t| t.start);
    for (i, a) in terms.iter().enumerate() {
        for b in &terms[i + 1..] {
            if b.start <= a.last_event {
                v.violations.push(Violation::new(
                    Broken::TwoLeaders,
                    Some(b.start),
                    format!(
                        "two leaders: {} logged until {}, but {} became leader at {}",
                        a.who,
                        stamp(a.last_event),
                        b.who,
                        stamp(b.start)
                    ),
                ));
            }
        }
    }

    events.sort_by_key(|e| e.at);
    let mut by_uid: HashMap<&str, Vec<&Event>> = HashMap::new();
    for e in &events {
        if let Some(uid) = e.line.uid.as_deref() {
            by_uid.entry(uid).or_default().push(e);
        }
    }

    // Duplicates only where marked: every repeat of a line (same pod, same
    // kind, same changes) after the first says replayed=true.
    let mut seen: HashSet<(&str, &str, &str)> = HashSet::new();
    for e in &events {
        let (Some(uid), Some(kind)) = (e.line.uid.as_deref(), e.line.event()) else { continue };
        let key = (uid, kind, e.line.changes.as_deref().unwrap_or(""));
        let repeat = !seen.insert(key);
        v.repeats += usize::from(repeat);
        if repeat && !e.line.replayed {
            v.violations.push(Violation::new(
                Broken::UnmarkedDuplicate,
                Some(e.at),
                format!(
                    "unmarked duplicate: {} logged '{}' (uid {uid}{}) again at {} without replayed=true",
                    e.who,
                    e.line.message,
                    e.line.changes.as_deref().map(|c| format!(", changes \"{c}\"")).unwrap_or_default(),
                    stamp(e.at)
                ),
            ));
        }
    }

    // Nothing lost: every pod created has an onAdd, every pod gone an onDelete.
    let live: HashMap<&str, &FinalPod> = finals.iter().map(|p| (p.uid.as_str(), p)).collect();
    let mut created: BTreeMap<&str, &str> = BTreeMap::new(); // uid -> why it is expected
    let mut created_at: HashMap<&str, Micros> = HashMap::new();
    for w in writes.iter().filter(|w| w.kind == WriteKind::Create) {
        created.insert(&w.uid, "created");
        created_at.insert(&w.uid, w.acked);
    }
    for p in finals {
        created.entry(&p.uid).or_insert("in the final list");
    }
    let has = |uid: &str, kind: &str| by_uid.get(uid).is_some_and(|es| es.iter().any(|e| e.line.event() == Some(kind)));
    for (&uid, why) in &created {
        if !has(uid, "onAdd") {
            v.violations.push(Violation::new(
                Broken::Lost,
                created_at.get(uid).copied(),
                format!("lost: no onAdd for pod uid {uid} ({why})"),
            ));
        }
        if !live.contains_key(uid) && !has(uid, "onDelete") {
            v.violations.push(Violation::new(
                Broken::Lost,
                None,
                format!("lost: no onDelete for pod uid {uid} (created, gone from the final list)"),
            ));
        }
    }

    // Each live pod's last line shows its final state.
    for p in finals {
        let Some(lines) = by_uid.get(p.uid.as_str()) else { continue };
        let Some(last) = lines.last() else { continue };
        let l = last.line;
        if l.event() == Some("onDelete") {
            v.violations.push(Violation::new(
                Broken::FinalState,
                None,
                format!(
                    "final state: pod {} (uid {}) exists, but its last line is '{}' ({} at {})",
                    p.name,
                    p.uid,
                    l.message,
                    last.who,
                    stamp(last.at)
                ),
            ));
        } else if l.phase.as_deref() != Some(p.phase.as_str()) {
            v.violations.push(Violation::new(
                Broken::FinalState,
                None,
                format!(
                    "final state: pod {} (uid {}) is {}, but its last line says phase {} ({} at {})",
                    p.name,
                    p.uid,
                    p.phase,
                    l.phase.as_deref().unwrap_or("(none)"),
                    last.who,
                    stamp(last.at)
                ),
            ));
        }
        // The label as the lines carry it: an onUpdate's changes name it; an
        // onAdd does not show labels, so after one it is unknown until the next change.
        let mut shown: Option<String> = None;
        for e in lines {
            if e.line.event() == Some("onAdd") {
                shown = None;
            } else if let Some(g) = e.line.changes.as_deref().and_then(gen_set) {
                shown = Some(g);
            }
        }
        if let Some(g) = shown.filter(|g| *g != p.gen_label) {
            v.violations.push(Violation::new(
                Broken::FinalState,
                None,
                format!(
                    "final state: pod {} (uid {}) has gen={}, but its last label change says gen={g}",
                    p.name, p.uid, p.gen_label
                ),
            ));
        }
    }

    // Lag: from each acknowledged write to the first line that shows it.
    for w in writes {
        let Some(es) = by_uid.get(w.uid.as_str()) else { continue };
        let shows = |l: &Line| match &w.kind {
            WriteKind::Create => l.event() == Some("onAdd"),
            WriteKind::Delete => l.event() == Some("onDelete"),
            WriteKind::Relabel(g) => {
                l.event() == Some("onUpdate") && l.changes.as_deref().and_then(gen_set) == Some(g.to_string())
            }
            WriteKind::Phase(p) => {
                let to = format!(" -> {p}");
                l.event() == Some("onUpdate")
                    && l.changes
                        .as_deref()
                        .is_some_and(|c| c.split(", ").any(|c| c.starts_with("phase ") && c.ends_with(&to)))
            }
        };
        if let Some(e) = es.iter().find(|e| shows(e.line)) {
            v.lags_ms.push((e.at - w.acked).max(0) as f64 / 1000.0);
        }
    }
    v.lags_ms.sort_by(f64::total_cmp);
    v
}

/// The value the label `gen` is set to by a line's changes
/// (`label gen=1 -> gen=2` or `label +gen=2`), if they name it.
fn gen_set(changes: &str) -> Option<String> {
    changes
        .split(", ")
        .filter(|c| c.starts_with("label ") && c.contains("gen="))
        .filter_map(|c| c.rsplit_once("gen=").map(|(_, g)| g.to_string()))
        .last()
}

/// Every exit says why (operations.md's exit codes).
fn check_exit(life: &Life, violations: &mut Vec<Violation>) {
    let said = |prefix: &str| life.lines.iter().any(|l| l.message.starts_with(prefix));
    let ok = match life.exit {
        Exit::KilledBySoak => true,
        Exit::Code(0) => said("shutdown complete"),
        // Lost the lease, or it could not run: one line on stderr (the API server was down).
        Exit::Code(1) => said("lost the lease: ") || life.lines.last().is_some_and(|l| l.at.is_none()),
        Exit::Code(3) => said("shutdown complete: "),
        Exit::Code(130 | 143) => {
            said("start-up cut short by ") || life.lines.iter().any(|l| l.message.contains(" again: exiting at once"))
        }
        Exit::Code(_) | Exit::Signal(_) => false,
    };
    if !ok {
        let tail: Vec<&str> = life.lines.iter().rev().take(3).rev().map(|l| l.message.as_str()).collect();
        violations.push(Violation::new(
            Broken::NoReasonLine,
            life.lines.last().and_then(|l| l.at),
            format!("{} exited ({:?}) without its reason line; its last lines: {tail:?}", life.name(), life.exit),
        ));
    }
}

/// A timestamp for a message: RFC 3339, microseconds.
pub fn stamp(at: Micros) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_micros(at.max(0) as u64);
    humantime::format_rfc3339_micros(t).to_string()
}

/// The `p`-th percentile (0-100) of sorted values; 0 for none.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Micros = 1_000_000;

    fn line(at: Micros, message: &str) -> Line {
        Line { at: Some(at), message: message.into(), ..Line::default() }
    }

    fn event(at: Micros, kind: &str, uid: &str, phase: &str, changes: Option<&str>) -> Line {
        Line {
            at: Some(at),
            message: format!("{kind}: ns/{uid}"),
            uid: Some(uid.into()),
            phase: Some(phase.into()),
            changes: changes.map(str::to_string),
            replayed: false,
        }
    }

    fn life(slot: usize, lines: Vec<Line>, exit: Exit) -> Life {
        Life { slot, life: 0, lines, exit }
    }

    fn write(kind: WriteKind, uid: &str, acked: Micros) -> Write {
        Write { kind, uid: uid.into(), acked }
    }

    fn pod(uid: &str, phase: &str, gen_label: &str) -> FinalPod {
        FinalPod { uid: uid.into(), name: format!("p-{uid}"), phase: phase.into(), gen_label: gen_label.into() }
    }

    /// A run with no fault: one leader logs pod a's life and b's start; b stays.
    fn clean() -> (Vec<Life>, Vec<Write>, Vec<FinalPod>) {
        let leader = vec![
            line(S, "became leader"),
            event(2 * S, "onAdd", "a", "Pending", None),
            event(3 * S, "onUpdate", "a", "Pending", Some("label gen=0 -> gen=1")),
            event(4 * S, "onDelete", "a", "Pending", None),
            event(5 * S, "onAdd", "b", "Pending", None),
            event(6 * S, "onUpdate", "b", "Running", Some("phase Pending -> Running")),
            line(9 * S, "released the lease"),
            line(9 * S, "shutdown complete"),
        ];
        let standby = vec![line(S, "standing by: x leads"), line(9 * S, "shutdown complete")];
        let lives = vec![life(0, leader, Exit::Code(0)), life(1, standby, Exit::Code(0))];
        let writes = vec![
            write(WriteKind::Create, "a", 2 * S - 10_000),
            write(WriteKind::Relabel(1), "a", 3 * S - 20_000),
            write(WriteKind::Delete, "a", 4 * S - 30_000),
            write(WriteKind::Create, "b", 5 * S - 40_000),
            write(WriteKind::Phase("Running".into()), "b", 6 * S - 50_000),
        ];
        (lives, writes, vec![pod("b", "Running", "0")])
    }

    fn violations(lives: &[Life], writes: &[Write], finals: &[FinalPod]) -> Vec<String> {
        judge(lives, writes, finals).violations.into_iter().map(|v| v.text).collect()
    }

    /// Which promises the violations broke, as the report counts them.
    fn broken(lives: &[Life], writes: &[Write], finals: &[FinalPod]) -> Vec<Broken> {
        judge(lives, writes, finals).violations.into_iter().map(|v| v.broken).collect()
    }

    #[test]
    fn a_clean_run_passes_with_its_figures() {
        let (lives, writes, finals) = clean();
        let v = judge(&lives, &writes, &finals);
        assert_eq!(v.violations, []);
        assert_eq!((v.event_lines, v.replayed_lines, v.repeats, v.terms), (5, 0, 0, 1));
        assert_eq!(v.lags_ms, vec![10.0, 20.0, 30.0, 40.0, 50.0]);
        assert_eq!(percentile(&v.lags_ms, 50.0), 30.0);
    }

    #[test]
    fn a_json_line_is_read_with_its_fields() {
        let l = Line::parse(
            r#"{"timestamp":"2026-11-26T15:00:00.000001Z","level":"INFO","message":"onUpdate: ns/p","uid":"u","phase":"Running","replayed":true,"changes":"label gen=1 -> gen=2"}"#,
        );
        assert_eq!(l.event(), Some("onUpdate"));
        assert_eq!(l.at.map(stamp).as_deref(), Some("2026-11-26T15:00:00.000001Z"));
        assert!(l.replayed);
        assert_eq!(l.changes.as_deref().and_then(gen_set).as_deref(), Some("2"));
        let raw = Line::parse("thread 'main' panicked at src/main.rs:1:1:");
        assert_eq!((raw.at, raw.event()), (None, None));
    }

    #[test]
    fn a_missing_add_or_delete_is_lost() {
        let (mut lives, writes, finals) = clean();
        lives[0].lines.remove(3); // onDelete a
        assert_eq!(
            violations(&lives, &writes, &finals),
            ["lost: no onDelete for pod uid a (created, gone from the final list)"]
        );
        let (mut lives, writes, finals) = clean();
        lives[0].lines.remove(4); // onAdd b
        assert_eq!(violations(&lives, &writes, &finals), ["lost: no onAdd for pod uid b (created)"]);
        assert_eq!(broken(&lives, &writes, &finals), [Broken::Lost]);
        // A pod the writer never heard of (its create's answer was lost) is expected too.
        let (lives, writes, mut finals) = clean();
        finals.push(pod("c", "Pending", "0"));
        assert_eq!(violations(&lives, &writes, &finals), ["lost: no onAdd for pod uid c (in the final list)"]);
    }

    #[test]
    fn a_repeat_must_say_replayed() {
        let (mut lives, writes, finals) = clean();
        // A second leader logs b's lines again, after the first stopped.
        let mut second = vec![
            line(10 * S, "became leader"),
            event(11 * S, "onAdd", "b", "Pending", None),
            event(12 * S, "onUpdate", "b", "Running", Some("phase Pending -> Running")),
        ];
        lives.push(life(2, second.clone(), Exit::KilledBySoak));
        let v = violations(&lives, &writes, &finals);
        assert_eq!(v.len(), 2, "{v:?}");
        assert!(v[0].starts_with("unmarked duplicate: replica 2 life 0 logged 'onAdd: ns/b' (uid b) again"), "{v:?}");
        assert_eq!(broken(&lives, &writes, &finals), [Broken::UnmarkedDuplicate; 2]);
        for l in &mut second[1..] {
            l.replayed = true;
        }
        lives[2].lines = second;
        let v = judge(&lives, &writes, &finals);
        assert_eq!(v.violations, []);
        assert_eq!((v.replayed_lines, v.repeats, v.leader_changes()), (2, 2, 1));
    }

    #[test]
    fn a_live_pods_last_line_must_show_its_final_state() {
        let (lives, writes, _) = clean();
        let v = violations(&lives, &writes, &[pod("b", "Succeeded", "0")]);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].starts_with("final state: pod p-b (uid b) is Succeeded, but its last line says phase Running"));
        assert_eq!(broken(&lives, &writes, &[pod("b", "Succeeded", "0")]), [Broken::FinalState]);
        let (mut lives, writes, finals) = clean();
        lives[0].lines.insert(6, event(7 * S, "onUpdate", "b", "Running", Some("label gen=0 -> gen=5")));
        let v = violations(&lives, &writes, &finals);
        assert_eq!(v, ["final state: pod p-b (uid b) has gen=0, but its last label change says gen=5"]);
        // A pod that exists, whose last line is its delete.
        let (lives, writes, _) = clean();
        let v = violations(&lives, &writes, &[pod("a", "Pending", "1")]);
        assert!(
            v.iter().any(|v| v.starts_with("final state: pod p-a (uid a) exists, but its last line is 'onDelete")),
            "{v:?}"
        );
    }

    #[test]
    fn two_leaders_logging_at_once_overlap() {
        let (mut lives, writes, finals) = clean();
        // Replica 1 becomes leader while replica 0 still logs.
        lives[1].lines =
            vec![line(S, "standing by: x leads"), line(5 * S + 1, "became leader"), line(9 * S, "shutdown complete")];
        let v = violations(&lives, &writes, &finals);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].starts_with("two leaders: replica 0 life 0 logged until 1970-01-01T00:00:06"), "{v:?}");
        assert_eq!(broken(&lives, &writes, &finals), [Broken::TwoLeaders]);
        // When: the second term's start, for the report to name the fault before it.
        assert_eq!(judge(&lives, &writes, &finals).violations[0].at, Some(5 * S + 1));
        // Taking over after the last line of the first is no overlap, even before its stop line.
        lives[1].lines[1].at = Some(6 * S + 1);
        assert_eq!(violations(&lives, &writes, &finals), Vec::<String>::new());
    }

    #[test]
    fn a_standby_must_stay_silent() {
        let (mut lives, writes, finals) = clean();
        lives[1].lines.insert(1, event(7 * S, "onUpdate", "b", "Running", Some("label gen=0 -> gen=0")));
        let v = violations(&lives, &writes, &finals);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].starts_with("standby not silent: replica 1 life 0 logged 'onUpdate: ns/b' (uid b)"), "{v:?}");
        assert_eq!(broken(&lives, &writes, &finals), [Broken::StandbyNotSilent]);
        // After its stop line a leader is a standby too.
        let (mut lives, writes, finals) = clean();
        lives[0].lines.insert(7, event(9 * S, "onUpdate", "b", "Running", Some("label gen=0 -> gen=0")));
        let v = violations(&lives, &writes, &finals);
        assert!(v.iter().any(|v| v.starts_with("standby not silent: replica 0 life 0")), "{v:?}");
    }

    #[test]
    fn every_exit_has_its_reason_line() {
        let (mut lives, writes, finals) = clean();
        lives[1].lines.pop(); // "shutdown complete"
        let v = violations(&lives, &writes, &finals);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].starts_with("replica 1 life 0 exited (Code(0)) without its reason line"), "{v:?}");
        assert_eq!(broken(&lives, &writes, &finals), [Broken::NoReasonLine]);
        lives[1].exit = Exit::KilledBySoak;
        assert_eq!(violations(&lives, &writes, &finals), Vec::<String>::new());
        lives[1].exit = Exit::Code(1);
        assert_eq!(violations(&lives, &writes, &finals).len(), 1);
        lives[1].lines.push(line(8 * S, "lost the lease: no renew within the renew deadline, exiting (exit code 1)"));
        assert_eq!(violations(&lives, &writes, &finals), Vec::<String>::new());
        lives[1].exit = Exit::Signal(6);
        assert_eq!(violations(&lives, &writes, &finals).len(), 1);
    }

    #[test]
    fn a_panic_is_a_violation() {
        let (mut lives, writes, finals) = clean();
        lives[1].lines.insert(1, Line::parse("thread 'tokio-runtime-worker' panicked at src/leader.rs:1:1:"));
        let v = violations(&lives, &writes, &finals);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].starts_with("panic in replica 1 life 0: thread"), "{v:?}");
        assert_eq!(broken(&lives, &writes, &finals), [Broken::Panic]);
    }
}
