//! Measured figures are never typed by hand. Every figure the README, the
//! book and the manifest quote from a measurement sits in a generated block,
//!
//! ```text
//! <!-- figures: NAME -->            (Markdown)      # figures: NAME     (YAML)
//! ...                                               ...
//! <!-- /figures -->                                 # /figures
//! ```
//!
//! whose text this test renders from its source: bench/results.json (written
//! by `make bench`), bench/soak.json (written by `make soak ARGS=--record`),
//! book/src/appendix/setup-times.json (written by
//! cluster/setup-times.sh), book/src/appendix/reading.json (a timed reading)
//! or the code and the book themselves (the tour's line counts, the
//! chapters' reading times). A
//! block that differs from its rendering fails `make test`, naming the
//! first line that differs; `DEMO_CONTROLLER_BLESS=1 cargo test --test
//! figures` rewrites the blocks after a new benchmark run.
//!
//! The code and output the book's pages show are generated the same way, from
//! the tested files (see "Pages that show their code" below): blessing also
//! turns an author's fenced `{{#include PATH[:ANCHOR]}}` into such a block.
//!
//! It also holds the manifest's memory to the rule computed from the
//! measurements: the limit at least 1.2x the relist peak and the request at
//! least 1.1x the steady RSS, at the manifest's pod count, interpolated
//! between the sizes the benchmark ran.

use std::path::{Path, PathBuf};

use serde_json::Value;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("read {path}: {e}"))
}

fn json(path: &str) -> Value {
    serde_json::from_str(&read(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The pod count demo-controller.yaml's memory is sized for (a choice, not a
/// measurement).
const MANIFEST_PODS: f64 = 20_000.0;
/// The limit's room above the measured relist peak.
const LIMIT_HEADROOM: f64 = 1.2;
/// The request's room above the measured steady RSS.
const REQUEST_HEADROOM: f64 = 1.1;
/// What a standby may keep on top of its cache: the lines past the leader's
/// mark, bounded in bytes (leader::KEPT_BYTES), in MiB. The limit covers a
/// relist with that much kept.
const KEPT_MIB: f64 = demo_controller::leader::KEPT_BYTES as f64 / (1u64 << 20) as f64;

/// bench/results.json, the committed `make bench` run.
struct Bench(Value);

impl Bench {
    fn load() -> Bench {
        Bench(json("bench/results.json"))
    }

    /// The value of `metric` at `n` pods for the column `peer`.
    fn get(&self, n: u64, metric: &str, peer: &str) -> Option<f64> {
        self.row(n, metric)?["values"][peer].as_f64()
    }

    fn row(&self, n: u64, metric: &str) -> Option<&Value> {
        self.0["loggers"].as_array()?.iter().find(|r| r["n"] == n && r["metric"] == metric)
    }

    fn at(&self, n: u64, metric: &str, peer: &str) -> f64 {
        self.get(n, metric, peer).unwrap_or_else(|| panic!("bench/results.json has no {metric} for {peer} at {n}"))
    }

    /// The sizes the run measured, smallest first.
    fn sizes(&self) -> Vec<u64> {
        let mut sizes: Vec<u64> =
            self.0["loggers"].as_array().into_iter().flatten().filter_map(|r| r["n"].as_u64()).collect();
        sizes.dedup();
        sizes
    }

    /// The largest of demo-controller's columns (every list mode and wire a
    /// user may choose) for `metric` at `n` pods.
    fn demo_max(&self, n: u64, metric: &str) -> f64 {
        let row = self.row(n, metric).unwrap_or_else(|| panic!("bench/results.json has no {metric} at {n}"));
        row["values"]
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(peer, _)| peer.starts_with("demo-controller"))
            .filter_map(|(_, v)| v.as_f64())
            .fold(f64::NAN, f64::max)
    }

    fn fact(&self, name: &str) -> &str {
        self.0["facts"][name].as_str().unwrap_or_else(|| panic!("bench/results.json has no fact {name}"))
    }
}

const STEADY: &str = "steady RSS after sync, VmRSS (MiB)";
const RELIST: &str = "relist peak RSS, VmHWM (MiB)";

/// A memory rule: `base` MiB plus `per_1000` MiB per 1,000 pods.
#[derive(Debug, PartialEq)]
struct Rule {
    base: f64,
    per_1000: f64,
}

impl Rule {
    /// The smallest rule, in whole MiB and tenths of a MiB per 1,000 pods,
    /// that stays at or above `headroom` times the measured values at every
    /// size. Being a straight line above each measured point, it stays above
    /// the straight line between two neighbouring points too.
    fn fit(points: &[(f64, f64)], headroom: f64) -> Rule {
        let need: Vec<(f64, f64)> = points.iter().map(|(n, v)| (n / 1000.0, v * headroom)).collect();
        let slope = need.windows(2).map(|w| (w[1].1 - w[0].1) / (w[1].0 - w[0].0)).fold(0.0, f64::max);
        let per_1000 = (slope * 10.0).ceil() / 10.0;
        let base = need.iter().map(|(k, v)| v - per_1000 * k).fold(0.0, f64::max).ceil();
        Rule { base, per_1000 }
    }

    fn mib(&self, pods: f64) -> f64 {
        (self.base + self.per_1000 * pods / 1000.0).ceil()
    }
}

/// "17 MiB + 3.8 MiB per 1,000 pods", as the manifest and the book state it.
impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} MiB + {} MiB per 1,000 pods", self.base, self.per_1000)
    }
}

/// The measured (pods, MiB) points of `metric`, demo-controller's largest column.
fn points(bench: &Bench, metric: &str) -> Vec<(f64, f64)> {
    bench.sizes().into_iter().map(|n| (n as f64, bench.demo_max(n, metric))).collect()
}

/// Linear interpolation of `points` at `pods`; past the largest size
/// measured, the last segment extended: an estimate, which the pages say
/// (`extended_past`), until a run measures that size (`--with-100k`).
fn interpolate(points: &[(f64, f64)], pods: f64) -> f64 {
    let w = points
        .windows(2)
        .find(|w| w[0].0 <= pods && pods <= w[1].0)
        .or_else(|| points.windows(2).last().filter(|w| pods > w[1].0))
        .expect("pods at or above the smallest measured size, and two sizes measured");
    w[0].1 + (w[1].1 - w[0].1) * (pods - w[0].0) / (w[1].0 - w[0].0)
}

/// Where the manifest's pod count lies: within the measured sizes (None),
/// or past the largest, which the rule is then extended beyond.
fn extended_past(bench: &Bench) -> Option<String> {
    let largest = *bench.sizes().last()?;
    ((largest as f64) < MANIFEST_PODS)
        .then(|| format!("the rule extended past {} pods, the largest size this run measured", thousands(largest)))
}

/// The request's rule from the steady RSS; the limit's from the relist peak
/// plus a standby's kept lines at their bound.
fn rules(bench: &Bench) -> (Rule, Rule) {
    let peak_and_kept: Vec<(f64, f64)> = points(bench, RELIST).into_iter().map(|(n, v)| (n, v + KEPT_MIB)).collect();
    (Rule::fit(&points(bench, STEADY), REQUEST_HEADROOM), Rule::fit(&peak_and_kept, LIMIT_HEADROOM))
}

/// 12345 -> "12,345"
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

// --- The blocks -------------------------------------------------------------

/// operations.md: the memory rule, its inputs and the manifest's values.
fn memory_rule() -> String {
    let bench = Bench::load();
    let (request, limit) = rules(&bench);
    let mut out = format!(
        "**Memory for N pods.** The manifest follows one rule, computed from the committed benchmark run\n\
         (`bench/results.json`, started {}; the largest of demo-controller's four columns at each size):\n\n\
         | pods | steady RSS (MiB) | relist peak (MiB) | request (rule) | limit (rule) |\n\
         |---:|---:|---:|---:|---:|\n",
        bench.fact("started")
    );
    for n in bench.sizes() {
        let pods = n as f64;
        out += &format!(
            "| {} | {:.1} | {:.1} | {} MiB | {} MiB |\n",
            thousands(n),
            bench.demo_max(n, STEADY),
            bench.demo_max(n, RELIST),
            request.mib(pods),
            limit.mib(pods)
        );
    }
    let (pods, request_mib, limit_mib) = manifest_sizing(&request, &limit);
    out += &format!(
        "\nrequest = {request} (at least {REQUEST_HEADROOM}x the steady RSS),\n\
         limit = {limit} (at least {LIMIT_HEADROOM}x the peak of a relist, when the new list is read beside the old one,\n\
         plus the {KEPT_MIB} MiB a standby may keep of the lines past the leader's mark). `demo-controller.yaml`\n\
         sets it for {pods} pods{extended}: {request_mib}Mi / {limit_mib}Mi.\n",
        extended = extended_past(&bench).map(|e| format!(", {e}")).unwrap_or_default()
    );
    out
}

/// The manifest's pod count as written, and the request and limit the rules
/// give for it, in whole MiB.
fn manifest_sizing(request: &Rule, limit: &Rule) -> (String, f64, f64) {
    (thousands(MANIFEST_PODS as u64), request.mib(MANIFEST_PODS), limit.mib(MANIFEST_PODS))
}

/// demo-controller.yaml: the container's resources, from the same rule.
fn manifest_memory() -> String {
    let bench = Bench::load();
    let (request, limit) = rules(&bench);
    let (pods, request_mib, limit_mib) = manifest_sizing(&request, &limit);
    let i = "          ";
    format!(
        "{i}# Memory follows one rule, from the committed `make bench` run (the rule,\n\
         {i}# its inputs and how it is computed: book/src/appendix/operations.md):\n\
         {i}#   request = {request}   (>= {REQUEST_HEADROOM}x the steady RSS)\n\
         {i}#   limit   = {limit}   (>= {LIMIT_HEADROOM}x the relist peak + {KEPT_MIB} MiB of\n\
         {i}#             a standby's kept lines)\n\
         {i}# These values are that rule for a cluster of up to {pods} pods{extended}.\n\
         {i}resources:\n\
         {i}  requests:\n\
         {i}    cpu: 10m\n\
         {i}    memory: {request_mib}Mi\n\
         {i}  limits:\n\
         {i}    memory: {limit_mib}Mi\n",
        extended = extended_past(&bench).map(|e| format!("\n{i}# ({e})")).unwrap_or_default()
    )
}

/// benchmarks.md: the committed run's facts and its targets table.
fn bench_targets() -> String {
    let bench = Bench::load();
    let mut out = String::new();
    for fact in ["started", "commit", "load when it started", "conditions", "parameters"] {
        out += &format!("- {fact}: {}\n", bench.fact(fact));
    }
    let at = bench.0["targets_at"].as_u64().expect("targets_at");
    out += &format!("\nChecked at N = {}.\n\n| target | measured | met |\n|---|---:|:---:|\n", thousands(at));
    for t in bench.0["targets"].as_array().expect("targets") {
        let met = t["met"].as_str().unwrap_or_default();
        let met = if met == "missed" { "**missed**".to_string() } else { met.to_string() };
        out += &format!(
            "| {} | {} | {met} |\n",
            t["target"].as_str().unwrap_or_default(),
            t["measured"].as_str().unwrap_or_default()
        );
    }
    out
}

/// The git tree of DIR at REV (a commit, or HEAD), from the checkout.
fn git_tree(rev: &str, dir: &str) -> Option<String> {
    let out = std::process::Command::new("git")
        .args(["rev-parse", "--verify", "--quiet", &format!("{rev}:{dir}")])
        .current_dir(repo())
        .output()
        .ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The trees of src/ and crates/ as the checkout has them now, edits not yet
/// committed included, so that a run before `git commit` already sees that a
/// change to src/ makes the results older than the code. The files go through
/// an index of the test's own; the checkout's index is left as it is.
fn working_trees() -> (String, String) {
    static TREES: std::sync::OnceLock<(String, String)> = std::sync::OnceLock::new();
    TREES
        .get_or_init(|| {
            let index = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("figures-index-{}", std::process::id()));
            let git = |args: &[&str]| {
                let out = std::process::Command::new("git")
                    .args(args)
                    .env("GIT_INDEX_FILE", &index)
                    .current_dir(repo())
                    .output()
                    .expect("the results' age needs git");
                assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
                String::from_utf8_lossy(&out.stdout).trim().to_string()
            };
            let _ = std::fs::remove_file(&index);
            git(&["add", "--all", "--", "src", "crates"]);
            let trees = (git(&["write-tree", "--prefix=src/"]), git(&["write-tree", "--prefix=crates/"]));
            let _ = std::fs::remove_file(&index);
            trees
        })
        .clone()
}

/// The trees of src/ and crates/ a run measured: recorded as `code measured`
/// since the harness writes it, else those of the commit it names.
fn measured_trees(facts: &Value) -> Option<(String, String)> {
    if let Some(code) = facts["code measured"].as_str() {
        let (src, crates) = code.strip_prefix("src/ ")?.split_once(", crates/ ")?;
        return Some((src.to_string(), crates.to_string()));
    }
    let commit = facts["commit"].as_str()?;
    if commit.contains(' ') {
        return None; // measured with uncommitted changes: no tree to compare
    }
    // A directory the commit did not have yet is a tree of its own: none.
    let tree = |dir| git_tree(commit, dir).unwrap_or_else(|| "none".into());
    git_tree(commit, "").map(|_| (tree("src"), tree("crates")))
}

/// benchmarks.md: whether the results are of the code as it is now.
fn bench_age() -> String {
    let b = Bench::load();
    let facts = &b.0["facts"];
    let commit = facts["commit"].as_str().unwrap_or("unknown");
    let now = working_trees();
    match measured_trees(facts) {
        Some(measured) if measured == now => {
            format!("These results measured `src/` and `crates/` as they are now (commit {commit}).\n")
        }
        Some(_) => format!(
            "**These results are older than the code.** They measured `src/` and `crates/` as they were at commit\n\
             {commit}, and both have changed since, so every figure below is of older code until `make bench` runs\n\
             again.\n"
        ),
        None => format!(
            "These results cannot be tied to a tree of `src/` and `crates/` (commit {commit}): treat them as figures of\n\
             older code until `make bench` runs again.\n"
        ),
    }
}

/// bench/soak.json, the committed `make soak ARGS=--record` run: the soak's
/// report.json (bench/harness/src/bin/soak/figures.rs writes it).
const SOAK_RECORD: &str = "bench/soak.json";

struct Soak(Value);

impl Soak {
    fn load() -> Soak {
        let soak = Soak(json(SOAK_RECORD));
        assert_eq!(soak.0["interrupted"], false, "{SOAK_RECORD}: a run that was interrupted is never the record");
        soak
    }

    fn count(&self, pointer: &str) -> u64 {
        self.0
            .pointer(pointer)
            .and_then(Value::as_u64)
            .unwrap_or_else(|| panic!("{SOAK_RECORD} has no count {pointer}"))
    }

    fn number(&self, pointer: &str) -> f64 {
        self.0
            .pointer(pointer)
            .and_then(Value::as_f64)
            .unwrap_or_else(|| panic!("{SOAK_RECORD} has no number {pointer}"))
    }

    fn text(&self, pointer: &str) -> &str {
        self.0.pointer(pointer).and_then(Value::as_str).unwrap_or_else(|| panic!("{SOAK_RECORD} has no text {pointer}"))
    }

    /// "1,200 create, 800 delete": the counts of an object, in its order.
    fn by_kind(&self, pointer: &str, unit: &dyn Fn(&str, u64) -> String) -> String {
        let kinds = self.0.pointer(pointer).and_then(Value::as_object);
        let kinds = kinds.unwrap_or_else(|| panic!("{SOAK_RECORD} has no object {pointer}"));
        let parts: Vec<String> = kinds.iter().map(|(kind, n)| unit(kind, n.as_u64().unwrap_or_default())).collect();
        parts.join(", ")
    }
}

/// "3 min", "1 h", "1 h 5 min", "90 s": a run's length as a sentence says it.
fn spoken_duration(seconds: u64) -> String {
    match (seconds / 3600, seconds % 3600 / 60, seconds % 60) {
        (0, 0, s) => format!("{s} s"),
        (0, m, 0) => format!("{m} min"),
        (0, m, s) => format!("{m} min {s} s"),
        (h, 0, _) => format!("{h} h"),
        (h, m, _) => format!("{h} h {m} min"),
    }
}

/// "3 s", "500 ms": a timing as a sentence says it.
fn spoken_ms(ms: u64) -> String {
    if ms.is_multiple_of(1000) { format!("{} s", ms / 1000) } else { format!("{} ms", thousands(ms)) }
}

/// A figure with one decimal, as the record rounds it: 157.1, 4.0.
fn tenths(x: f64) -> String {
    format!("{x:.1}")
}

/// standby.md: what the committed soak did and what its oracle found.
fn soak() -> String {
    let r = Soak::load();
    let writes = |kind: &str, n: u64| {
        let what = match kind {
            "create" => "creates",
            "relabel" => "relabels",
            "phase" => "phase changes",
            "delete" => "deletes",
            other => other,
        };
        format!("{} {what}", thousands(n))
    };
    let faults = |kind: &str, n: u64| format!("{} {kind}", thousands(n));
    let left_out: Vec<&str> =
        r.0["faults"]["left_out"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    let left_out = match left_out.as_slice() {
        [] => String::new(),
        names => format!("\nLeft out of this run: {}.", names.join(", ")),
    };
    let broken = |kind: &str| r.count(&format!("/violations/by_kind/{kind}"));
    let (lost, unmarked, overlaps) = (broken("lost"), broken("unmarked duplicate"), broken("two leaders"));
    let others = r.count("/violations/total") - lost - unmarked - overlaps;
    let others = if others == 0 { String::new() } else { format!(", and {} other violations", thousands(others)) };
    let verdict = if r.count("/violations/total") == 0 { "It passed" } else { "It failed" };
    format!(
        // One sentence a line: the page's source reads as it renders.
        "The committed soak (`{SOAK_RECORD}`, started {started}, commit {commit}) ran for {ran}.\n\
         Three replicas ran with `--leader-elect`: a lease of {lease}, a renew deadline of {renew}, a retry period of {retry}.\n\
         A writer made {writes_total} changes to pods: {writes_by_kind}.\n\
         {faults_total} faults came on a schedule: {faults_by_kind}.{left_out}\n\
         The lead changed hands {changes} times.\n\
         The leaders logged {events} event lines.\n\
         {verdict}: the oracle counted {lost} lost lines, {unmarked} repeats without `replayed=true` and {overlaps} overlaps of two leaders{others}.\n\
         {replayed} lines said `replayed=true`, {replayed_per} per leader change.\n\
         {repeats} lines repeated one already logged, {repeats_per} per leader change.\n\
         A write showed in its first line after {p50} ms at the median, and {p99} ms at the 99th percentile.\n\
         To run it again: `{command}`.\n\
         With `--record` in `ARGS`, a run becomes the record.\n",
        started = r.text("/facts/started"),
        commit = r.text("/facts/commit"),
        ran = spoken_duration(r.count("/duration_s/ran")),
        lease = spoken_ms(r.count("/lease_ms/duration")),
        renew = spoken_ms(r.count("/lease_ms/renew_deadline")),
        retry = spoken_ms(r.count("/lease_ms/retry_period")),
        writes_total = thousands(r.count("/writes/total")),
        writes_by_kind = r.by_kind("/writes/by_kind", &writes),
        faults_total = thousands(r.count("/faults/total")),
        faults_by_kind = r.by_kind("/faults/by_kind", &faults),
        changes = thousands(r.count("/leader_changes")),
        events = thousands(r.count("/event_lines")),
        lost = thousands(lost),
        unmarked = thousands(unmarked),
        overlaps = thousands(overlaps),
        replayed = thousands(r.count("/replayed_lines/total")),
        replayed_per = tenths(r.number("/replayed_lines/per_leader_change")),
        repeats = thousands(r.count("/repeats/total")),
        repeats_per = tenths(r.number("/repeats/per_leader_change")),
        p50 = thousands(r.number("/lag_ms/p50").round() as u64),
        p99 = thousands(r.number("/lag_ms/p99").round() as u64),
        command = r.text("/facts/command"),
    )
}

/// What `--leader-elect` promises, one sentence per check of the soak's
/// oracle, by the name the record counts its violations under. The README
/// and chapter 6 state the first two in these words
/// (`the_promises_are_stated_in_the_words_the_soak_checks`).
const PROMISES: &[(&str, &str)] = &[
    ("lost", "A failover loses no change."),
    ("unmarked duplicate", "A line that may come twice says `replayed=true`."),
    ("two leaders", "Two replicas never log at once."),
    ("standby not silent", "A standby writes no event line."),
    ("final state", "Each pod's last line shows its last state."),
    ("no reason line", "A replica that exits says why."),
    ("panic", "No replica panics."),
];

/// standby.md: the promises, each with what the committed soak counted
/// against it. Every check the record counts has its sentence here.
fn soak_promises() -> String {
    let r = Soak::load();
    let kinds = r.0.pointer("/violations/by_kind").and_then(Value::as_object).expect("violations by kind");
    for kind in kinds.keys() {
        assert!(PROMISES.iter().any(|(k, _)| k == kind), "the soak checks '{kind}': PROMISES needs its sentence");
    }
    let mut out = String::new();
    for (kind, promise) in PROMISES {
        let count = kinds.get(*kind).and_then(Value::as_u64);
        let count = count
            .unwrap_or_else(|| panic!("{SOAK_RECORD} counts no violations of '{kind}': the soak no longer checks it"));
        let promise = promise.trim_end_matches('.');
        out += &format!("- {promise} ({} violations in the committed soak).\n", thousands(count));
    }
    out
}

#[test]
fn the_promises_are_stated_in_the_words_the_soak_checks() {
    for (kind, page) in [
        ("lost", "README.md"),
        ("unmarked duplicate", "README.md"),
        ("unmarked duplicate", "book/src/ch6-two-replicas.md"),
    ] {
        let promise = PROMISES.iter().find(|(k, _)| *k == kind).map(|(_, p)| *p).expect("a promise");
        // A page may wrap a sentence: compare with the line breaks as spaces.
        let text = read(page).split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(text.contains(promise), "{page} does not state, in these words, what the soak checks: {promise}");
    }
}

/// standby.md: whether the committed soak ran the code as it is now.
fn soak_age() -> String {
    let r = Soak::load();
    let commit = r.text("/facts/commit");
    let now = working_trees();
    match measured_trees(&r.0["facts"]) {
        Some(ran) if ran == now => format!("This soak ran `src/` and `crates/` as they are now (commit {commit}).\n"),
        Some(_) => format!(
            "**This soak is older than the code.** It ran `src/` and `crates/` as they were at commit {commit}, and they\n\
             have changed since, so its figures are of older code until `make soak DURATION=60m ARGS=--record` runs\n\
             again.\n"
        ),
        None => format!(
            "This soak cannot be tied to a tree of `src/` and `crates/` (commit {commit}): treat its figures as of older\n\
             code until `make soak DURATION=60m ARGS=--record` runs again.\n"
        ),
    }
}

/// benchmarks.md: the summary's figures.
fn bench_summary() -> String {
    let b = Bench::load();
    let demo = "demo-controller";
    let json = "demo-controller --wire json";
    let (go_on, go_off) = ("client-go (WatchList on)", "client-go (WatchList off)");
    let sync = "time to cache synced (ms)";
    let better_go = |n| b.at(n, sync, go_on).min(b.at(n, sync, go_off));
    let cpu = "CPU to sync (ms)";
    let mut out = format!(
        "At 10,000 pods demo-controller (protobuf, a streaming list) synced in {} ms against {} ms for JSON and {} ms for\n\
         the better client-go mode, with {:.2}x the client CPU of JSON.",
        thousands(b.at(10_000, sync, demo) as u64),
        thousands(b.at(10_000, sync, json) as u64),
        thousands(better_go(10_000) as u64),
        b.at(10_000, cpu, demo) / b.at(10_000, cpu, json),
    );
    if b.get(100_000, sync, demo).is_some() {
        let rss = |peer| b.at(100_000, STEADY, peer);
        out += &format!(
            " At 100,000 pods it synced in {} ms (client-go's better mode:\n{} ms) and held {} MiB, against {} to {} MiB for client-go and {} MiB for the kube-rs logger.",
            thousands(b.at(100_000, sync, demo) as u64),
            thousands(better_go(100_000) as u64),
            thousands(rss(demo).round() as u64),
            thousands(rss(go_on).min(rss(go_off)).round() as u64),
            thousands(rss(go_on).max(rss(go_off)).round() as u64),
            thousands(rss("kube-rs idiomatic").round() as u64),
        );
    }
    let missed: Vec<&str> = b.0["targets"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| t["met"] == "missed")
        .filter_map(|t| t["target"].as_str())
        .collect();
    out += &format!(
        "\nTargets missed in this run: {}.\n",
        if missed.is_empty() { "none".into() } else { missed.join("; ") }
    );
    out
}

/// Lines of code in `src/` as the tour counts them: up to a file's
/// `#[cfg(test)]` module, neither blank nor a comment; test-only files
/// (`tests.rs`) left out.
fn code_lines(path: &Path) -> usize {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let (code, _tests) = text.split_once("\n#[cfg(test)]").unwrap_or((&text, ""));
    code_line_count(code)
}

/// The lines of `text` that are neither blank nor only a `//` comment (doc
/// comments included).
fn code_line_count(text: &str) -> usize {
    text.lines().filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with("//")).count()
}

/// Every file below `dir` whose name ends in `.{ext}`.
fn files_ending(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files_ending(&path, ext, out);
        } else if path.extension().is_some_and(|e| e == ext) {
            out.push(path);
        }
    }
}

/// tour.md: how big the program is: src/ and the workspace's crates (the
/// protobuf reader is part of what the program runs).
fn tour_count() -> String {
    let mut files = Vec::new();
    files_ending(&repo().join("src"), "rs", &mut files);
    for krate in std::fs::read_dir(repo().join("crates")).into_iter().flatten().flatten() {
        files_ending(&krate.path().join("src"), "rs", &mut files);
    }
    files.retain(|f| f.file_name().is_some_and(|n| n != "tests.rs"));
    let all: usize = files.iter().map(|f| code_lines(f)).sum();
    let core: usize = ["main", "controller", "informer", "queue", "worker"]
        .iter()
        .map(|f| code_lines(&repo().join(format!("src/{f}.rs"))))
        .sum();
    format!(
        "How big it is: {} lines in `src/` and in `crates/*/src/` (the protobuf reader, a crate of its own) that are\n\
         neither blank nor comments, tests left out, and {} of them in the five files below. Counted with\n\n\
         ```sh\n\
         find src crates/*/src -name '*.rs' ! -name tests.rs | while read -r f; do awk '/^#\\[cfg\\(test\\)\\]/{{exit}} !/^[[:space:]]*(\\/\\/|$)/' \"$f\"; done | wc -l\n\
         ```\n\n\
         (each file up to its `#[cfg(test)]` module; use `src/{{main,controller,informer,queue,worker}}.rs` for the five).\n",
        thousands(all as u64),
        thousands(core as u64)
    )
}

/// The tour's count stops at a file's first `#[cfg(test)]`: so that must be
/// its test module, or the count leaves out the code after a test-only item.
#[test]
fn the_tour_counts_each_file_up_to_its_test_module() {
    let mut files = Vec::new();
    files_ending(&repo().join("src"), "rs", &mut files);
    for krate in std::fs::read_dir(repo().join("crates")).into_iter().flatten().flatten() {
        files_ending(&krate.path().join("src"), "rs", &mut files);
    }
    let early: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let text = std::fs::read_to_string(f).ok()?;
            let (_, after) = text.split_once("\n#[cfg(test)]\n")?;
            let next = after.lines().next().unwrap_or_default();
            (!next.contains("mod ")).then(|| format!("{}: `{next}`", f.strip_prefix(repo()).unwrap_or(f).display()))
        })
        .collect();
    assert!(
        early.is_empty(),
        "a #[cfg(test)] item before the test module (move it into the module): {}",
        early.join(", ")
    );
}

// --- introduction.md: each chapter's reading time ----------------------------

/// operations.md: the flags as `demo-controller -h` prints them (the binary
/// this test was built with), its lines wrapped at 110 columns for the page.
/// With no environment: a DEMO_CONTROLLER_WIRE or a forced colour would show.
fn help_flags() -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_demo-controller")).arg("-h").env_clear().output().unwrap();
    assert!(out.status.success(), "demo-controller -h: {out:?}");
    let help = String::from_utf8(out.stdout).unwrap();
    let (_, options) = help.split_once("Options:\n").expect("an Options: section");
    let mut block = String::from("```text\n");
    for line in options.lines() {
        wrap(line, 110, &mut block);
    }
    block.push_str("```\n");
    block
}

/// Appends `line` to `out`, wrapped at `width` columns between words; the
/// lines it adds start under the line's text (a flag's description, where two
/// spaces or more follow the flag).
fn wrap(line: &str, width: usize, out: &mut String) {
    let lead = line.len() - line.trim_start().len();
    let indent = match line[lead..].find("  ") {
        Some(gap) => lead + gap + line[lead + gap..].len() - line[lead + gap..].trim_start().len(),
        None => lead,
    };
    let mut current = line[..indent].to_string();
    for word in line[indent..].split(' ') {
        if current.len() > indent && current.chars().count() + 1 + word.chars().count() > width {
            out.push_str(current.trim_end());
            out.push('\n');
            current = " ".repeat(indent);
        }
        if current.len() > indent {
            current.push(' ');
        }
        current.push_str(word);
    }
    out.push_str(&current);
    out.push('\n');
}

/// The reading rates (a choice, stated once in the block): prose, and the
/// comments in code, in words a minute; code, commands and program output in
/// lines a minute, 12 s a line, for a Go author reading Rust.
const PROSE_WORDS_PER_MINUTE: usize = 200;
const CODE_LINES_PER_MINUTE: usize = 5;

/// The chapters of the first read: their number, page and program.
const CHAPTERS: &[(u32, &str, &str)] = &[
    (1, "book/src/ch1-watch.md", "examples/ch1_watch.rs"),
    (2, "book/src/ch2-cache.md", "examples/ch2_cache.rs"),
    (3, "book/src/ch3-queue.md", "examples/ch3_queue.rs"),
    (4, "book/src/ch4-controller.md", "examples/ch4_controller.rs"),
];

/// The appendix page that shows each chapter's whole program, top to bottom,
/// for a second read; a chapter page shows the parts its lesson is about.
const PROGRAMS_PAGE: &str = "book/src/appendix/programs.md";

/// What a first read of chapters 1 to 4 may take, in minutes: a Go
/// controller author's sitting. Whatever would push the pages past it
/// belongs in the appendix, linked from where it was.
const FIRST_READ_MINUTES: usize = 90;

/// What there is to read: words of prose, lines of code.
#[derive(Clone, Copy, Default)]
struct Reading {
    words: usize,
    lines: usize,
}

impl Reading {
    /// Prose: its words (a Markdown table's pipes and dashes are no words).
    fn prose(&mut self, line: &str) {
        self.words += line.split_whitespace().filter(|w| w.chars().any(char::is_alphanumeric)).count();
    }

    /// A line of code or output: a comment is read as prose, a blank line not at all.
    fn code(&mut self, line: &str) {
        match line.trim() {
            "" => {}
            t if t.starts_with("//") => self.prose(t.trim_start_matches('/')),
            _ => self.lines += 1,
        }
    }

    fn minutes(self) -> usize {
        let seconds = self.words * 60 / PROSE_WORDS_PER_MINUTE + self.lines * 60 / CODE_LINES_PER_MINUTE;
        (seconds + 30) / 60
    }
}

// --- Pages that show their code: generated include blocks --------------------
//
// A page read on the repository's web page shows its code and output, not an
// mdbook `{{#include}}` line: each piece of code sits in a generated block
//
//     <!-- include: ../../examples/ch1_watch.rs:api -->
//     ```rust,ignore
//     (the lines mdbook's include of the same PATH[:ANCHOR] shows)
//     ```
//     <!-- /include -->
//
// whose PATH is relative to the page. `every_page_shows_the_code_it_includes`
// fails when a block's body differs from its file; with
// DEMO_CONTROLLER_BLESS=1 it rewrites the blocks, and turns every fenced block
// whose only line is an include (the way an author writes one) into a block.

const INCLUDE_OPEN: &str = "<!-- include: ";
const INCLUDE_CLOSE: &str = "<!-- /include -->";
const BLESS_HINT: &str = "run DEMO_CONTROLLER_BLESS=1 cargo test --test figures";

/// The lines an include on `page` shows: `spec` is `PATH`, `PATH:ANCHOR` or
/// `PATH:` a line range (`12`, `12:40`, `12:`, `:40`, counted from 1), PATH
/// relative to the page.
fn included(page: &Path, spec: &str) -> Result<Vec<String>, String> {
    let (path, select) = spec.split_once(':').map_or((spec, None), |(p, s)| (p, Some(s)));
    let file = page.parent().unwrap().join(path);
    let text = std::fs::read_to_string(&file).map_err(|e| format!("{path}: {e}"))?;
    select_lines(&text, select).map_err(|e| format!("{path}: {e}"))
}

/// The lines of `text` that mdbook's include shows for `select` (None: the
/// whole file). An anchor shows the lines between `ANCHOR: name` and
/// `ANCHOR_END: name`; no anchor line ever shows. An anchor missing either
/// line is an error (mdbook would show nothing).
fn select_lines(text: &str, select: Option<&str>) -> Result<Vec<String>, String> {
    let is_mark = |line: &str| line.contains("ANCHOR: ") || line.contains("ANCHOR_END: ");
    let anchor = select.filter(|s| !s.chars().all(|c| c.is_ascii_digit() || c == ':'));
    let Some(anchor) = anchor else {
        // A whole file or a range of its lines.
        let number = |s: &str| s.parse::<usize>().ok();
        let (from, to) = match select {
            None | Some("") => (None, None),
            Some(s) => match s.split_once(':') {
                Some((a, b)) => (number(a), number(b)),
                None => (number(s), number(s)),
            },
        };
        let (from, to) = (from.unwrap_or(1), to.unwrap_or(usize::MAX));
        return Ok(text
            .lines()
            .enumerate()
            .filter(|(i, line)| (from..=to).contains(&(i + 1)) && !is_mark(line))
            .map(|(_, line)| line.to_string())
            .collect());
    };
    let (start, end) = (format!("ANCHOR: {anchor}"), format!("ANCHOR_END: {anchor}"));
    let mut on = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.trim_end().ends_with(&start) {
            on = true;
        } else if line.trim_end().ends_with(&end) {
            // mdbook stops at the first end of the anchor.
            return if on { Ok(out) } else { Err(format!("'{end}' comes before '{start}'")) };
        } else if on && !is_mark(line) {
            out.push(line.to_string());
        }
    }
    Err(format!("no line ending in '{}'", if on { end } else { start }))
}

/// The fence's info string for a file: Rust is shown, not compiled by mdbook.
fn fence_info(path: &str) -> &str {
    match Path::new(path).extension().and_then(|e| e.to_str()) {
        Some("rs") => "rust,ignore",
        Some("txt") | None => "text",
        Some(ext) => ext,
    }
}

/// The generated block for `spec`, showing `lines`, each line after `indent`
/// (none on a blank one). The fence is longer than any run of backticks the
/// lines hold, so none of them can close it.
fn include_block(indent: &str, spec: &str, lines: &[String]) -> String {
    let longest = lines.iter().flat_map(|l| l.split(|c| c != '`')).map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest.max(2) + 1);
    let path = spec.split_once(':').map_or(spec, |(p, _)| p);
    let mut out = format!("{indent}{INCLUDE_OPEN}{spec} -->\n{indent}{fence}{}\n", fence_info(path));
    for line in lines {
        if !line.is_empty() {
            out.push_str(indent);
        }
        out.push_str(line);
        out.push('\n');
    }
    out + &format!("{indent}{fence}\n{indent}{INCLUDE_CLOSE}\n")
}

/// The spec of an include line, `{{#include SPEC}}` alone on its line.
fn include_line(line: &str) -> Option<&str> {
    line.trim().strip_prefix("{{#include ")?.strip_suffix("}}").map(str::trim)
}

/// A text with its include blocks rendered again.
#[derive(Debug, PartialEq)]
struct Rendered {
    text: String,
    /// The blocks that differed from their files (blessing rewrites them).
    stale: Vec<String>,
    /// The includes whose file or anchor does not exist, or whose block is
    /// not closed (left as they were).
    broken: Vec<String>,
}

/// Renders every include block of `text` again from `resolve` (spec to
/// lines); with `convert`, also turns each fenced block whose only line is
/// `{{#include SPEC}}` into a block.
fn render_includes(text: &str, convert: bool, resolve: &dyn Fn(&str) -> Result<Vec<String>, String>) -> Rendered {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let (mut out, mut stale, mut broken, mut i) = (String::new(), Vec::new(), Vec::new(), 0);
    while i < lines.len() {
        let line = lines[i].trim_end_matches('\n');
        let indent = &line[..line.len() - line.trim_start().len()];
        let spec = line.trim().strip_prefix(INCLUDE_OPEN).and_then(|s| s.strip_suffix("-->")).map(str::trim);
        // A fence (``` and more, then the info), the include, the same fence.
        let fence = line.trim_start().chars().take_while(|&c| c == '`').count();
        let authored = (convert && fence >= 3)
            .then(|| Some((include_line(lines.get(i + 1)?)?, lines.get(i + 2)?.trim())))
            .flatten()
            .filter(|(_, close)| *close == &line.trim_start()[..fence]);
        let (spec, end) = if let Some(spec) = spec {
            let Some(close) = lines[i + 1..].iter().position(|l| l.trim() == INCLUDE_CLOSE) else {
                broken.push(format!("{INCLUDE_OPEN}{spec} --> has no {INCLUDE_CLOSE} after it"));
                out.push_str(lines[i]);
                i += 1;
                continue;
            };
            (spec, i + 1 + close + 1)
        } else if let Some((spec, _)) = authored {
            (spec, i + 3)
        } else {
            out.push_str(lines[i]);
            i += 1;
            continue;
        };
        let found: String = lines[i..end].concat();
        match resolve(spec) {
            Ok(shown) => {
                let want = include_block(indent, spec, &shown);
                if found != want && authored.is_none() {
                    let first = found.lines().zip(want.lines()).find(|(a, b)| a != b);
                    let detail = match first {
                        Some((got, want)) => format!("found:    {got}\n    rendered: {want}"),
                        None => format!("found {} lines, rendered {}", found.lines().count(), want.lines().count()),
                    };
                    stale.push(format!("include {spec} differs from the file:\n    {detail}"));
                }
                out.push_str(&want);
            }
            Err(e) => {
                broken.push(format!("include {spec}: {e}"));
                out.push_str(&found);
            }
        }
        i = end;
    }
    Rendered { text: out, stale, broken }
}

/// A page's include blocks rendered from the files they name.
fn render_page_includes(page: &Path, text: &str, convert: bool) -> Rendered {
    render_includes(text, convert, &|spec| included(page, spec))
}

/// The `{{#include` lines left in `text` (mdbook's escape, `\{{#include`, is no include).
fn includes_left(text: &str) -> Vec<(usize, &str)> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| l.match_indices("{{#include").any(|(at, _)| !l[..at].ends_with('\\')))
        .map(|(i, l)| (i + 1, l.trim()))
        .collect()
}

/// The pages of the book.
fn pages() -> Vec<PathBuf> {
    let mut pages = Vec::new();
    files_ending(&repo().join("book/src"), "md", &mut pages);
    pages.sort();
    pages
}

/// Held by a test while it reads and rewrites the repository's documents, so
/// two blessing tests never write over each other's change to one file.
static DOCUMENTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn documents_lock() -> std::sync::MutexGuard<'static, ()> {
    DOCUMENTS.lock().unwrap_or_else(|e| e.into_inner())
}

fn blessing() -> bool {
    std::env::var("DEMO_CONTROLLER_BLESS").is_ok_and(|v| v == "1")
}

#[test]
fn every_page_shows_the_code_it_includes() {
    let bless = blessing();
    let (mut problems, mut left) = (Vec::new(), Vec::new());
    for page in pages() {
        let _lock = documents_lock();
        let name = page.strip_prefix(repo()).unwrap_or(&page).display().to_string();
        let text = std::fs::read_to_string(&page).unwrap();
        let rendered = render_page_includes(&page, &text, bless);
        if bless && rendered.text != text {
            std::fs::write(&page, &rendered.text).unwrap();
        }
        // Blessing rewrites what differs; what cannot be resolved stays an error.
        let stale = if bless { Vec::new() } else { rendered.stale };
        problems.extend(stale.into_iter().chain(rendered.broken).map(|p| format!("{name}: {p}")));
        let now = if bless { rendered.text } else { text };
        left.extend(includes_left(&now).into_iter().map(|(n, l)| format!("{name}:{n}: {l}")));
    }
    assert!(
        problems.is_empty(),
        "a page's generated code differs from the file it shows, or names a file or anchor that does not exist \
         (after changing the code, {BLESS_HINT}; else fix the include):\n{}",
        problems.join("\n")
    );
    assert!(
        left.is_empty(),
        "pages still include code with mdbook's {{{{#include}}}}, which the repository's web page shows as that \
         line, not as code: write it alone in a fenced block (```rust,ignore, the include, ```) and {BLESS_HINT} \
         to turn it into a generated block:\n{}",
        left.join("\n")
    );
}

#[test]
fn an_include_block_shows_the_anchor_in_a_fence_of_its_own() {
    let text = "a\n// ANCHOR: x\nb\n\n// ANCHOR_END: x\n";
    let resolve = |spec: &str| match spec.split_once(':') {
        Some(("f.rs", anchor)) => select_lines(text, Some(anchor)),
        _ => Err(format!("{spec}: no such file")),
    };
    let page = "Text.\n\n```rust,ignore\n{{#include f.rs:x}}\n```\n\nMore.\n";
    let block = "<!-- include: f.rs:x -->\n```rust,ignore\nb\n\n```\n<!-- /include -->\n";
    let converted = format!("Text.\n\n{block}\nMore.\n");
    let clean = |text: &str| Rendered { text: text.to_string(), stale: vec![], broken: vec![] };
    assert_eq!(render_includes(page, true, &resolve), clean(&converted));
    // Without converting, an authored include stays; a block is rendered.
    assert_eq!(render_includes(page, false, &resolve), clean(page));
    assert_eq!(render_includes(&converted, false, &resolve), clean(&converted));
    // A changed file shows as the first line that differs.
    let stale = render_includes(&converted.replace("\nb\n", "\nold b\n"), false, &resolve);
    assert_eq!(stale.text, converted);
    assert_eq!(stale.stale, ["include f.rs:x differs from the file:\n    found:    old b\n    rendered: b"]);
    // A missing anchor or file, or a block not closed, is an error, and the
    // text is left as it was.
    let authored = "```text\n{{#include f.rs:y}}\n```\n";
    let broken = render_includes(authored, true, &resolve);
    assert_eq!(
        (broken.text.as_str(), broken.broken),
        (authored, vec!["include f.rs:y: no line ending in 'ANCHOR: y'".into()])
    );
    let open = render_includes("<!-- include: g.rs -->\ntext\n", true, &resolve);
    assert_eq!(open.broken, ["<!-- include: g.rs --> has no <!-- /include --> after it"]);
    // Indented in a list item, and a longer fence around backticks.
    let lines = ["```sh".to_string(), String::new(), "```".to_string()];
    assert_eq!(
        include_block("  ", "doc.md", &lines),
        "  <!-- include: doc.md -->\n  ````md\n  ```sh\n\n  ```\n  ````\n  <!-- /include -->\n"
    );
    assert_eq!(fence_info("output/ch1.txt"), "text");
    assert_eq!(fence_info("a.yaml"), "yaml");
    assert_eq!(includes_left("`\\{{#include x}}`\n{{#include y}}\n"), [(2, "{{#include y}}")]);
}

/// What a page gives to read: its prose, and every line it shows in a code
/// block: its generated blocks' code and output as committed, or as blessing
/// would render them from the files.
fn page_reading(page: &str) -> Reading {
    text_reading(&render_page_includes(&repo().join(page), &read(page), true).text)
}

/// What a Markdown text gives to read: prose outside its fences, code and
/// output inside; a line that is only an HTML comment (a block's marker) is
/// not shown, so not read.
fn text_reading(text: &str) -> Reading {
    let mut reading = Reading::default();
    let mut fence = 0;
    for line in text.lines() {
        let t = line.trim();
        let ticks = t.chars().take_while(|&c| c == '`').count();
        if fence == 0 && ticks >= 3 {
            fence = ticks;
        } else if fence > 0 && ticks >= fence && t.len() == ticks {
            fence = 0;
        } else if fence > 0 {
            reading.code(line);
        } else if !(t.starts_with("<!--") && t.ends_with("-->")) {
            reading.prose(line);
        }
    }
    reading
}

/// A chapter's program as the appendix shows it: the whole file, top to bottom.
fn program_reading(program: &str) -> Reading {
    let mut reading = Reading::default();
    let lines = select_lines(&read(program), None).unwrap_or_else(|e| panic!("{program}: {e}"));
    lines.iter().for_each(|l| reading.code(l));
    reading
}

/// Each chapter's minutes: the page (a first read), its whole program (a second).
fn chapter_minutes() -> Vec<(u32, usize, usize)> {
    CHAPTERS
        .iter()
        .map(|(n, page, program)| (*n, page_reading(page).minutes(), program_reading(program).minutes()))
        .collect()
}

/// introduction.md: each chapter's reading time.
fn reading_times() -> String {
    let minutes = chapter_minutes();
    let rows: String =
        minutes.iter().map(|(n, page, program)| format!("| {n} | {page} min | {program} min |\n")).collect();
    let first: usize = minutes.iter().map(|(_, page, _)| page).sum();
    let second: usize = minutes.iter().map(|(_, _, program)| program).sum();
    format!(
        "How long each chapter takes to read, counted from its words by `tests/figures.rs`: prose, and the\n\
         comments in code, at {PROSE_WORDS_PER_MINUTE} words a minute; code, commands and output at {CODE_LINES_PER_MINUTE} lines a minute (12 s\n\
         a line: a Go author reading Rust); blank lines not at all. A first read is the chapter's page: its\n\
         prose, the parts of its program it shows, its commands, output and exercise. A second read takes the\n\
         program whole, top to bottom, from [the appendix](appendix/programs.md).\n\n\
         | Chapter | First read: the page | Second read: the whole program |\n\
         |---|---|---|\n\
         {rows}\
         | 1 to 4 | {first} min | {second} min |\n"
    )
}

/// The record of a timed reading, written by whoever watched a fresh reader
/// read chapters 1 to 4: who, when, at which commit, each chapter's minutes
/// and notes, the total, and what confused them. Until someone is timed, its
/// `total_minutes` is null.
const READING_RECORD: &str = "book/src/appendix/reading.json";

/// A timed reading, when one is recorded.
struct Measured {
    reader: String,
    /// What the reader's minutes say of a person's, when the reader is not one.
    pace: Option<String>,
    date: String,
    commit: String,
    /// Chapter, minutes, notes.
    chapters: Vec<(u64, u64, Vec<String>)>,
    total: u64,
    confusions: Vec<String>,
}

/// The record's reading, None while it is not yet measured. A record that
/// holds a total must say who read, when and at which commit, and its total
/// must be the sum of its chapters' minutes.
fn measured_reading() -> Option<Measured> {
    parse_reading(&json(READING_RECORD))
}

fn parse_reading(r: &Value) -> Option<Measured> {
    let total = r.get("total_minutes").filter(|t| !t.is_null())?;
    let total = total.as_u64().unwrap_or_else(|| panic!("{READING_RECORD}: total_minutes is whole minutes or null"));
    let text = |v: &Value, what: &str| {
        v.as_str().map(str::to_owned).unwrap_or_else(|| panic!("{READING_RECORD}: a measured reading needs {what}"))
    };
    let texts = |v: &Value| v.as_array().into_iter().flatten().filter_map(|s| s.as_str().map(str::to_owned)).collect();
    let chapters: Vec<(u64, u64, Vec<String>)> = r["chapters"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let number = |key: &str| {
                c[key].as_u64().unwrap_or_else(|| panic!("{READING_RECORD}: each chapter needs a whole number {key}"))
            };
            (number("chapter"), number("minutes"), texts(&c["notes"]))
        })
        .collect();
    let sum: u64 = chapters.iter().map(|(_, m, _)| m).sum();
    assert!(
        chapters.is_empty() || sum == total,
        "{READING_RECORD}: total_minutes {total} is not the sum of the chapters' minutes, {sum}"
    );
    Some(Measured {
        reader: text(&r["reader"], "a reader"),
        pace: r["pace"].as_str().map(str::to_owned),
        date: r["date"]
            .as_str()
            .map(str::to_owned)
            .or_else(|| r["date"].as_u64().map(|d| d.to_string()))
            .unwrap_or_else(|| panic!("{READING_RECORD}: a measured reading needs a date")),
        commit: text(&r["commit"], "a commit"),
        chapters,
        total,
        confusions: texts(&r["confusions"]),
    })
}

/// introduction.md: the timed reading of chapters 1 to 4, or that there is none yet.
fn reading_measured() -> String {
    render_measured(measured_reading())
}

fn render_measured(measured: Option<Measured>) -> String {
    let Some(m) = measured else {
        return format!(
            "Measured: not yet measured. A fresh reader, with only the checkout and setting out to learn, is to read\n\
             chapters 1 to 4, every trip the pages ask for included, and be timed; the record goes in\n\
             `{READING_RECORD}`, and this paragraph is generated from it. The target is {FIRST_READ_MINUTES} minutes.\n"
        );
    };
    let cell = |s: &str| s.replace('|', "\\|");
    let mut out = format!(
        "Measured: {}, with only the checkout and setting out to learn, read chapters 1 to 4 on {} at commit {},\n\
         every trip the pages ask for included, in **{} min** (the target: {FIRST_READ_MINUTES} min; the record:\n\
         `{READING_RECORD}`).\n",
        m.reader, m.date, m.commit, m.total
    );
    if let Some(pace) = &m.pace {
        out += &format!("{pace}\n");
    }
    if !m.chapters.is_empty() {
        out += "\n| Chapter | Minutes | Notes |\n|---|---:|---|\n";
        for (n, minutes, notes) in &m.chapters {
            out += &format!("| {n} | {minutes} | {} |\n", cell(&notes.join("; ")));
        }
        out += &format!("| 1 to 4 | {} | |\n", m.total);
    }
    if !m.confusions.is_empty() {
        out += "\nWhat confused the reader:\n\n";
        for c in &m.confusions {
            out += &format!("- {c}\n");
        }
    }
    out
}

/// README.md: the first read's total, from the same count, and how it is
/// counted. A timed reading is shown only when a person read: a reader whose
/// record says what its minutes are worth (`pace`) is not one.
fn readme_reading() -> String {
    let minutes = chapter_minutes();
    let first: usize = minutes.iter().map(|(_, page, _)| page).sum();
    let second: usize = minutes.iter().map(|(_, _, program)| program).sum();
    let measured = match measured_reading() {
        Some(m) if m.pace.is_none() => format!(
            "Timed: {} took **{} min**, runs and exercises included ({}, `{READING_RECORD}`).\n",
            m.reader, m.total, m.date
        ),
        _ => format!("No person's reading has been timed yet (`{READING_RECORD}`).\n"),
    };
    format!(
        "Chapters 1 to 4 take **{first} min** on a first read, and their whole programs {second} min more,\n\
         counted from their words, not timed: `tests/figures.rs` counts prose and comments at {PROSE_WORDS_PER_MINUTE} words a\n\
         minute, code and output at {CODE_LINES_PER_MINUTE} lines a minute (see [the introduction](book/src/introduction.md)).\n\
         {measured}"
    )
}

#[test]
fn a_timed_reading_renders_its_record_or_says_there_is_none() {
    let none = serde_json::json!({"status": "not yet measured", "total_minutes": null, "chapters": []});
    assert!(render_measured(parse_reading(&none)).starts_with("Measured: not yet measured."));
    let record = serde_json::json!({
        "reader": "R", "date": "2026-01-02", "commit": "abc1234", "total_minutes": 50,
        "chapters": [{"chapter": 1, "minutes": 20, "notes": ["a | b"]}, {"chapter": 2, "minutes": 30}],
        "confusions": ["the mark"]
    });
    let text = render_measured(parse_reading(&record));
    assert!(text.contains("read chapters 1 to 4 on 2026-01-02 at commit abc1234,\n"), "{text}");
    assert!(text.contains("in **50 min**"), "{text}");
    assert!(text.contains("| 1 | 20 | a \\| b |\n| 2 | 30 |  |\n| 1 to 4 | 50 | |\n"), "{text}");
    assert!(text.ends_with("What confused the reader:\n\n- the mark\n"), "{text}");
}

#[test]
#[should_panic(expected = "is not the sum of the chapters' minutes")]
fn a_timed_reading_adds_up() {
    parse_reading(&serde_json::json!({
        "reader": "R", "date": "d", "commit": "c", "total_minutes": 10,
        "chapters": [{"chapter": 1, "minutes": 20}]
    }));
}

#[test]
fn a_reading_time_counts_words_and_lines_at_their_rates() {
    let mut r = Reading::default();
    r.prose("| `never-done` | the worker never calls `done` |");
    r.code("    // A comment is read as prose.");
    r.code("let x = 1;");
    r.code("   ");
    assert_eq!((r.words, r.lines), (12, 1));
    let hour = Reading { words: 30 * PROSE_WORDS_PER_MINUTE, lines: 30 * CODE_LINES_PER_MINUTE };
    assert_eq!(hour.minutes(), 60);
}

#[test]
fn a_page_reads_its_prose_and_the_lines_its_blocks_show() {
    let page = "Two words.\n<!-- include: f.rs:x -->\n````rust,ignore\nlet a = 1;\n```\n\n// one comment\n````\n\
                <!-- /include -->\nThree more words.\n";
    let r = text_reading(page);
    // The markers are not shown; the ``` inside the longer fence is code.
    assert_eq!((r.words, r.lines), (2 + 2 + 3, 2));
}

#[test]
fn an_include_shows_the_lines_of_its_anchor() {
    let text =
        "a\n// ANCHOR: x\nb\n// ANCHOR: y\nc\n// ANCHOR_END: y\n// ANCHOR_END: x\nd\n// ANCHOR: x\ne\n// ANCHOR_END: x";
    let select = |s| select_lines(text, s).unwrap();
    assert_eq!(select(None), ["a", "b", "c", "d", "e"]);
    assert_eq!(select(Some("x")), ["b", "c"]);
    assert_eq!(select(Some("y")), ["c"]);
    assert_eq!(select(Some("3:5")), ["b", "c"]);
    assert_eq!(select(Some("8")), ["d"]);
    assert_eq!(select(Some("10:")), ["e"]);
    assert_eq!(select(Some(":3")), ["a", "b"]);
    assert_eq!(select_lines(text, Some("z")), Err("no line ending in 'ANCHOR: z'".to_string()));
    assert_eq!(select_lines("// ANCHOR: z\n", Some("z")), Err("no line ending in 'ANCHOR_END: z'".to_string()));
}

#[test]
fn the_first_read_of_chapters_1_to_4_fits_a_sitting() {
    let minutes = chapter_minutes();
    let first: usize = minutes.iter().map(|(_, page, _)| page).sum();
    assert!(
        first <= FIRST_READ_MINUTES,
        "chapters 1 to 4 take {first} min on a first read ({minutes:?}: chapter, page, whole program), more than \
         {FIRST_READ_MINUTES}: move what a first read does not need into the appendix, with a one-line pointer"
    );
}

#[test]
fn every_chapter_links_its_whole_program_in_the_appendix() {
    // As blessing renders it, so that blessing and this test may run at once.
    let programs = render_page_includes(&repo().join(PROGRAMS_PAGE), &read(PROGRAMS_PAGE), true).text;
    for (n, page, program) in CHAPTERS {
        // The whole file, or an anchor that spans it.
        let whole = format!("../../../{program}");
        let spec = [format!("{whole}:whole"), whole.clone()]
            .into_iter()
            .find(|spec| programs.contains(&format!("{INCLUDE_OPEN}{spec} -->")))
            .unwrap_or_else(|| panic!("{PROGRAMS_PAGE} does not show {program}: no {INCLUDE_OPEN}{whole} -->"));
        assert_eq!(
            included(&repo().join(PROGRAMS_PAGE), &spec),
            select_lines(&read(program), None),
            "{program}: the anchor 'whole' must span the file, from its first line to its last"
        );
        assert!(programs.contains(&format!("\n## Chapter {n}\n")), "{PROGRAMS_PAGE} has no heading '## Chapter {n}'");
        let link = format!("appendix/programs.md#chapter-{n})");
        assert!(read(page).contains(&link), "{page} does not link its whole program: ({link}");
    }
}

// --- The lesson's limits ------------------------------------------------------

/// The glossary's terms, as chapters link them: heading, anchor.
const GLOSSARY: &[(&str, &str)] = &[
    ("Watch", "watch"),
    ("List", "list"),
    ("resourceVersion", "resourceversion"),
    ("Relist", "relist"),
    ("410 Gone", "410-gone"),
    ("Bookmark", "bookmark"),
    ("Streaming list", "streaming-list"),
    ("Informer", "informer"),
    ("Reflector", "reflector"),
    ("Cache", "cache"),
    ("Lister", "lister"),
    ("Cache sync", "cache-sync"),
    ("Resync", "resync"),
    ("Work queue", "work-queue"),
    ("Dedup", "dedup"),
    ("Level-triggered and edge-triggered", "level-triggered-and-edge-triggered"),
    ("Tombstone", "tombstone"),
    ("Controller", "controller"),
    ("Key", "key"),
    ("Lease", "lease"),
    ("Leader election", "leader-election"),
    ("CRD", "crd"),
    ("Subresource", "subresource"),
    ("Generation", "generation"),
    ("Conflict", "conflict"),
    ("Event", "event"),
    ("Reconcile", "reconcile"),
    ("Owner reference", "owner-reference"),
    ("Garbage collector", "garbage-collector"),
    ("Finalizer", "finalizer"),
    ("Server-side apply", "server-side-apply"),
    ("Field manager", "field-manager"),
    ("Annotation", "annotation"),
    ("Downward API", "downward-api"),
    ("Field selector", "field-selector"),
    ("MaxUnavailable", "maxunavailable"),
];

/// The anchors of a Markdown text's headings, as mdbook makes them: an
/// explicit `{#id}`, else the heading's text in lower case, spaces as `-`,
/// what is not a letter, a digit, `-` or `_` left out.
fn heading_anchors(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| {
            let heading = l.trim_start_matches('#').trim();
            if let Some(id) = heading.strip_suffix('}').and_then(|h| h.rsplit_once("{#")).map(|(_, id)| id) {
                return id.to_string();
            }
            heading
                .chars()
                .filter_map(|c| match c {
                    c if c.is_alphanumeric() || c == '_' || c == '-' => Some(c.to_ascii_lowercase()),
                    c if c.is_whitespace() => Some('-'),
                    _ => None,
                })
                .collect()
        })
        .collect()
}

/// A page's words as `wc -w` counts them, the code its include blocks show
/// from the tested files left out (that code has limits of its own).
fn page_words(text: &str) -> usize {
    let mut inside = false;
    let mut words = 0;
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with(INCLUDE_OPEN) {
            inside = true;
        } else if t == INCLUDE_CLOSE {
            inside = false;
        } else if !inside {
            words += line.split_whitespace().count();
        }
    }
    words
}

#[test]
fn a_page_counts_the_words_it_has_not_the_code_it_shows() {
    let page = "One two.\n<!-- include: f.rs -->\n```rust,ignore\nlet a = b;\n```\n<!-- /include -->\nthree\n";
    assert_eq!(page_words(page), 3);
    assert_eq!(code_line_count("//! doc\n\nfn main() {\n    // note\n}\n"), 2);
    let anchors = heading_anchors(
        "# Glossary\n## Level-triggered and edge-triggered\n## `resourceVersion`\n\
                                   ### 410 Gone\n## Cache (a Store) {#cache}\nnot # a heading\n",
    );
    assert_eq!(anchors, ["glossary", "level-triggered-and-edge-triggered", "resourceversion", "410-gone", "cache"]);
}

/// What the lesson promises a learner, each as a limit on a file: chapters
/// 1 to 4 need nothing from this crate, the programs and pages stay short,
/// the glossary holds every term the pages link, and the first read was
/// timed at most 90 minutes. Code lines are every line of the file that is
/// neither blank nor only a `//` comment; words, `wc -w`'s, the code a page
/// shows from the tested files left out.
#[test]
fn the_lesson_meets_its_limits() {
    let mut missed = Vec::new();
    for (_, _, program) in CHAPTERS {
        let uses: Vec<String> = read(program)
            .lines()
            .enumerate()
            .filter(|(_, l)| l.contains("demo_controller"))
            .map(|(i, l)| format!("line {} `{}`", i + 1, l.trim()))
            .collect();
        if !uses.is_empty() {
            missed.push(format!(
                "{program} names demo_controller (chapters 1 to 4 stand alone, on public crates only): {}",
                uses.join(", ")
            ));
        }
    }
    let code_limits = [
        ("examples/ch4_controller.rs", 252, true),
        // Chapter 6 reads as one idea per function, and makes a deleted Lease again.
        ("examples/ch6_two_replicas.rs", 190, true),
        // Chapter 7 holds a drain on Ctrl-C and SIGTERM as chapter 4 does, and two caches.
        ("examples/ch7_pod_summary.rs", 285, false),
        ("examples/ch8_secret_copier.rs", 300, false),
    ];
    // A program's unit tests (its `#[cfg(test)]` module, chapter 8's) are
    // not counted: they teach testing, not the controller.
    // Chapter 9's two programs, together.
    let ch9 = ["examples/ch9_reboot_agent.rs", "examples/ch9_reboot_controller.rs"];
    let ch9_lines: usize = ch9.iter().map(|p| code_line_count(&read(p))).sum();
    if ch9_lines > 350 {
        missed
            .push(format!("{} have {ch9_lines} code lines together, more than their limit of 350", ch9.join(" and ")));
    }
    for (program, limit, required) in code_limits {
        let code = |text: &str| code_line_count(text.split_once("\n#[cfg(test)]").map_or(text, |(code, _)| code));
        match std::fs::read_to_string(repo().join(program)) {
            Ok(text) if code(&text) > limit => missed.push(format!(
                "{program} has {} code lines, more than its limit of {limit} (blank and comment lines, and its \
                 #[cfg(test)] module, not counted)",
                code(&text)
            )),
            Ok(_) => {}
            Err(e) if required => missed.push(format!("{program}: {e}")),
            Err(_) => {}
        }
    }
    for (page, limit) in [("book/src/ch6-two-replicas.md", 1100), ("README.md", 1100)] {
        let words = page_words(&read(page));
        if words > limit {
            missed.push(format!(
                "{page} has {} words, more than its limit of {} (wc -w, the code its include blocks show not counted)",
                thousands(words as u64),
                thousands(limit as u64)
            ));
        }
    }
    match std::fs::read_to_string(repo().join("book/src/glossary.md")) {
        Ok(text) => {
            let anchors = heading_anchors(&text);
            let absent: Vec<String> = GLOSSARY
                .iter()
                .filter(|(_, anchor)| !anchors.iter().any(|a| a == anchor))
                .map(|(term, anchor)| format!("{term} (#{anchor})"))
                .collect();
            if !absent.is_empty() {
                missed.push(format!("book/src/glossary.md has no heading for {}", absent.join(", ")));
            }
        }
        Err(e) => missed.push(format!("book/src/glossary.md, the glossary the pages link: {e}")),
    }
    match measured_reading() {
        Some(m) if m.total as usize > FIRST_READ_MINUTES => missed.push(format!(
            "{READING_RECORD}: the timed first read of chapters 1 to 4 took {} min, more than {FIRST_READ_MINUTES}",
            m.total
        )),
        Some(_) => {}
        None => missed.push(format!(
            "{READING_RECORD}: no timed reading of chapters 1 to 4 is recorded (total_minutes is null); the limit is \
             {FIRST_READ_MINUTES} min"
        )),
    }
    assert!(missed.is_empty(), "the lesson misses {} of its limits:\n- {}", missed.len(), missed.join("\n- "));
}

/// book/src/appendix/setup-times.json, written by cluster/setup-times.sh.
struct Setup(Value);

/// What each step of the record is, for the table ("{plane}": the binaries
/// the measured control-plane build made, see [`plane_binaries`]).
const SETUP_STEPS: &[(&str, &str)] = &[
    ("control-plane", "{plane} built from Go modules (`cluster/build.sh`)"),
    ("start", "the control plane started to ready and stopped (`cluster/up.sh`, `down.sh`)"),
    ("mdbook", "the pinned mdbook, `cargo install`ed (`book/mdbook.sh`)"),
    ("node-binaries", "kubelet, scheduler, controller-manager, kube-proxy (`cluster/node/build.sh`, Go caches warm)"),
    ("image", "the Dockerfile's image on local stand-in bases (`cluster/image.sh`, as root)"),
];

impl Setup {
    fn load() -> Setup {
        Setup(json("book/src/appendix/setup-times.json"))
    }

    /// The record of the control-plane and start steps: measured apart
    /// (`--control-plane`) when it was, else the whole run's.
    fn plane(&self) -> &Value {
        if self.0["control_plane"].is_object() { &self.0["control_plane"] } else { &self.0 }
    }
}

/// The two steps `cluster/setup-times.sh --control-plane` measures apart.
const PLANE_STEPS: [&str; 2] = ["control-plane", "start"];

/// The binaries a record's control-plane build made. A record without the
/// list predates it, when the build made kube-apiserver and etcd.
fn record_binaries(record: &Value) -> Vec<String> {
    record["binaries"].as_array().map_or_else(
        || vec!["etcd".to_string(), "kube-apiserver".to_string()],
        |list| list.iter().filter_map(Value::as_str).map(str::to_owned).collect(),
    )
}

/// The binaries cluster/build.sh makes today: its `bins=(...)` line.
fn built_now() -> Vec<String> {
    let script = read("cluster/build.sh");
    let line = script.lines().find_map(|l| l.strip_prefix("bins=(")).expect("cluster/build.sh has a bins=(...) line");
    line.trim_end_matches(')').split_whitespace().map(str::to_owned).collect()
}

/// What cluster/build.sh makes today that a record's build did not.
fn not_measured(record: &Value) -> Vec<String> {
    let then = record_binaries(record);
    built_now().into_iter().filter(|b| !then.contains(b)).collect()
}

/// Binaries in words: "kube-apiserver, kube-controller-manager and etcd"
/// (Kubernetes' own first, etcd last, as the pages name them).
fn in_words(mut names: Vec<String>) -> String {
    names.sort_by_key(|n| (n == "etcd", n.clone()));
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => names.join(""),
    }
}

/// The binaries a record's control-plane build made, in words.
fn plane_binaries(record: &Value) -> String {
    in_words(record_binaries(record))
}

/// When a record's build made fewer binaries than cluster/build.sh makes
/// today, a line that says so ("That WHAT compiled ...; NOW also compiles
/// ..."); else nothing.
fn stale_note(record: &Value, what: &str, now: &str) -> String {
    let missing = not_measured(record);
    if missing.is_empty() {
        return String::new();
    }
    format!("That {what} compiled {}; {now} also compiles {}.\n", plane_binaries(record), in_words(missing))
}

/// A record's "Measured ..." line and table rows for `steps`.
fn setup_table(record: &Value, steps: &[&str]) -> String {
    let fact = |name: &str| record[name].as_str().unwrap_or_else(|| panic!("setup-times.json has no {name}"));
    let mut out = format!(
        "Measured {} at commit {} on {}; {}.\n\n| step | cold | warm |\n|---|---:|---:|\n",
        fact("measured"),
        fact("commit"),
        fact("machine"),
        fact("load")
    );
    for (step, what) in SETUP_STEPS.iter().filter(|(s, _)| steps.contains(s)) {
        let (Some(cold), Some(warm)) = (record["cold"][step].as_u64(), record["warm"][step].as_u64()) else { continue };
        let what = what.replace("{plane}", &plane_binaries(record));
        out += &format!("| {what} | {} | {} |\n", duration(cold), duration(warm));
    }
    out
}

/// "412 s (6 min 52 s)"
fn duration(s: u64) -> String {
    if s < 120 { format!("{s} s") } else { format!("{s} s ({} min {} s)", s / 60, s % 60) }
}

/// setup.md: the whole record as a table; the control-plane and start steps
/// in a table of their own when they were measured apart.
fn setup_times() -> String {
    let r = Setup::load();
    let all: Vec<&str> = SETUP_STEPS.iter().map(|(s, _)| *s).collect();
    let note = stale_note(r.plane(), "build", "`cluster/build.sh` now");
    let note = if note.is_empty() { note } else { format!("\n{note}") };
    if !r.0["control_plane"].is_object() {
        return format!("{}{note}", setup_table(&r.0, &all));
    }
    let rest: Vec<&str> = all.into_iter().filter(|s| !PLANE_STEPS.contains(s)).collect();
    format!(
        "{}\nThe control plane's steps, measured again apart later (`cluster/setup-times.sh --control-plane`):\n\n{}{note}",
        setup_table(&r.0, &rest),
        setup_table(r.plane(), &PLANE_STEPS)
    )
}

/// README.md: the first run's wait, from the same record.
fn readme_setup() -> String {
    let r = Setup::load();
    let plane = r.plane();
    let need = |kind: &str, step: &str| {
        plane[kind][step].as_u64().unwrap_or_else(|| panic!("setup-times.json has no {kind} {step}"))
    };
    // Measured before the build grew: say what that build compiled.
    let then = if not_measured(plane).is_empty() {
        String::new()
    } else {
        format!(" when it compiled {} alone", plane_binaries(plane))
    };
    format!(
        "The first run compiles {}:\n\
         **{}** on a machine with {}{then}\n\
         (cold, measured by `cluster/setup-times.sh`: [set-up times](book/src/appendix/setup.md)); the binaries are then\n\
         cached under `~/.cache/demo-controller/control-plane/<hash of what built them>/`, and a start and stop take\n\
         about {} s.\n",
        in_words(built_now()),
        duration(need("cold", "control-plane")),
        plane["machine"].as_str().unwrap_or_default().split(',').next().unwrap_or_default(),
        need("warm", "start").max(1)
    )
}

/// The record's "chapter1": `make chapter N=1` to the chapter's first line.
fn chapter1_fact(r: &Setup, name: &str) -> String {
    let v = &r.0["chapter1"][name];
    v.as_str()
        .map(str::to_owned)
        .or_else(|| v.as_u64().map(|n| n.to_string()))
        .unwrap_or_else(|| panic!("setup-times.json has no chapter1.{name}: run cluster/setup-times.sh --chapter1"))
}

/// When the chapter 1 measurement's control plane was smaller than today's,
/// a line that says so; else nothing.
fn chapter1_note(r: &Setup) -> String {
    stale_note(&r.0["chapter1"], "first run", "a first run now")
}

/// README.md: the time to chapter 1's first line, from the same record.
fn readme_chapter1() -> String {
    let r = Setup::load();
    let secs = |kind| chapter1_fact(&r, kind).parse::<u64>().map(duration).unwrap_or_default();
    format!(
        "`make chapter N=1` reaches the chapter's first line in **{}** on a first\n\
         run ({}, project and chapter compiled from nothing) and in **{}** on a later one,\n\
         on a machine with {} (measured by `cluster/setup-times.sh --chapter1`:\n\
         [set-up times](book/src/appendix/setup.md)). It prints {} lines before it.\n",
        secs("cold"),
        // Measured before the control plane last grew: what it compiled then.
        if chapter1_note(&r).is_empty() {
            "the control plane".to_string()
        } else {
            format!("{} alone", plane_binaries(&r.0["chapter1"]))
        },
        secs("warm"),
        chapter1_fact(&r, "machine").split(',').next().unwrap_or_default(),
        chapter1_fact(&r, "lines_before"),
    )
}

/// setup.md: the chapter 1 measurement with its own date and load.
fn setup_chapter1() -> String {
    let r = Setup::load();
    let secs = |kind| chapter1_fact(&r, kind).parse::<u64>().map(duration).unwrap_or_default();
    format!(
        "Measured {} at commit {} on {}; {}.\n\n\
         | step | cold | warm |\n|---|---:|---:|\n\
         | `make chapter N=1` to chapter 1's first line (`cluster/chapter.sh`; {} lines printed before it) | {} | {} |\n{}",
        chapter1_fact(&r, "measured"),
        chapter1_fact(&r, "commit"),
        chapter1_fact(&r, "machine"),
        chapter1_fact(&r, "load"),
        chapter1_fact(&r, "lines_before"),
        secs("cold"),
        secs("warm"),
        if chapter1_note(&r).is_empty() { String::new() } else { format!("\n{}", chapter1_note(&r)) },
    )
}

/// A block's name, the file it must appear in, and its renderer.
type Block = (&'static str, &'static str, fn() -> String);

/// Every block this test renders.
const BLOCKS: &[Block] = &[
    ("memory-rule", "book/src/appendix/operations.md", memory_rule),
    ("manifest-memory", "demo-controller.yaml", manifest_memory),
    ("bench-targets", "book/src/appendix/benchmarks.md", bench_targets),
    ("bench-summary", "book/src/appendix/benchmarks.md", bench_summary),
    ("bench-age", "book/src/appendix/benchmarks.md", bench_age),
    ("soak", "book/src/appendix/standby.md", soak),
    ("soak-age", "book/src/appendix/standby.md", soak_age),
    ("soak-promises", "book/src/appendix/standby.md", soak_promises),
    ("tour-count", "book/src/tour.md", tour_count),
    ("help-flags", "book/src/appendix/operations.md", help_flags),
    ("setup-times", "book/src/appendix/setup.md", setup_times),
    ("readme-setup", "README.md", readme_setup),
    ("reading-times", "book/src/introduction.md", reading_times),
    ("reading-measured", "book/src/introduction.md", reading_measured),
    ("readme-reading", "README.md", readme_reading),
    ("readme-chapter1", "README.md", readme_chapter1),
    ("setup-chapter1", "book/src/appendix/setup.md", setup_chapter1),
];

/// The files that may hold blocks.
fn documents() -> Vec<PathBuf> {
    let mut files = vec![repo().join("README.md"), repo().join("demo-controller.yaml")];
    files_ending(&repo().join("book/src"), "md", &mut files);
    files
}

/// The begin and end marker of a block in `file`'s syntax.
fn markers(file: &Path, name: &str) -> (String, String) {
    if file.extension().is_some_and(|e| e == "md") {
        (format!("<!-- figures: {name} -->"), "<!-- /figures -->".to_string())
    } else {
        (format!("# figures: {name}"), "# /figures".to_string())
    }
}

/// Renders every block of `text` again; returns the new text and, per block
/// that differed, its name and the first line that differs.
fn render(file: &Path, text: &str) -> (String, Vec<String>) {
    let (mut out, mut rest, mut differs) = (String::new(), text, Vec::new());
    let begin = if file.extension().is_some_and(|e| e == "md") { "<!-- figures: " } else { "# figures: " };
    while let Some(at) = rest.find(begin) {
        let name_end = rest[at..].find('\n').map(|i| at + i).unwrap_or(rest.len());
        // The name is the marker's first word; the rest of its line is free
        // text (a YAML block says where it is generated).
        let name = rest[at + begin.len()..name_end].split_whitespace().next().unwrap_or_default();
        let (_, close) = markers(file, name);
        let Some((_, _, render)) = BLOCKS.iter().find(|(n, _, _)| *n == name) else {
            panic!("{}: no renderer for the block '{name}'", file.display());
        };
        let body_start = (name_end + 1).min(rest.len());
        let close_at = rest[body_start..]
            .find(&close)
            .map(|i| body_start + i)
            .unwrap_or_else(|| panic!("{}: the block '{name}' is not closed with {close}", file.display()));
        // The end marker keeps the indentation of its line.
        let line_start = rest[..close_at].rfind('\n').map_or(0, |i| i + 1);
        let body = &rest[body_start..line_start];
        let want = render();
        if body != want {
            let line = body.lines().zip(want.lines()).find(|(a, b)| a != b);
            let detail = match line {
                Some((got, want)) => format!("found:    {got}\n    rendered: {want}"),
                None => format!("found {} lines, rendered {}", body.lines().count(), want.lines().count()),
            };
            differs.push(format!("{}: block '{name}':\n    {detail}", file.display()));
        }
        out.push_str(&rest[..body_start]);
        out.push_str(&want);
        rest = &rest[line_start..];
    }
    out.push_str(rest);
    (out, differs)
}

#[test]
fn every_quoted_figure_is_the_one_its_measurement_recorded() {
    let bless = blessing();
    let mut differs = Vec::new();
    for file in documents() {
        let _lock = documents_lock();
        let text = std::fs::read_to_string(&file).unwrap();
        let (rendered, diff) = render(&file, &text);
        if bless && rendered != text {
            std::fs::write(&file, rendered).unwrap();
        } else {
            differs.extend(diff);
        }
    }
    assert!(
        differs.is_empty(),
        "a quoted figure differs from what its source recorded (a figure is never typed by hand: run \
         DEMO_CONTROLLER_BLESS=1 cargo test --test figures after a new measurement):\n{}",
        differs.join("\n")
    );
    for (name, file, _) in BLOCKS {
        let (open, _) = markers(Path::new(file), name);
        assert!(read(file).contains(&open), "{file} lost its generated block '{name}'");
    }
}

/// Kubernetes memory quantities as the manifest writes them: 96Mi, 1Gi.
fn mebibytes(quantity: &str) -> f64 {
    if let Some(mi) = quantity.strip_suffix("Mi") {
        mi.parse().unwrap()
    } else if let Some(gi) = quantity.strip_suffix("Gi") {
        gi.parse::<f64>().unwrap() * 1024.0
    } else {
        panic!("a memory quantity in Mi or Gi: {quantity}")
    }
}

#[test]
fn the_manifest_memory_covers_the_measured_relist_peak() {
    let bench = Bench::load();
    let deployment = common_manifest().into_iter().find(|o| o["kind"] == "Deployment").expect("a Deployment");
    let resources = &deployment["spec"]["template"]["spec"]["containers"][0]["resources"];
    let request = mebibytes(resources["requests"]["memory"].as_str().expect("a memory request"));
    let limit = mebibytes(resources["limits"]["memory"].as_str().expect("a memory limit"));
    let peak = interpolate(&points(&bench, RELIST), MANIFEST_PODS) + KEPT_MIB;
    let steady = interpolate(&points(&bench, STEADY), MANIFEST_PODS);
    println!(
        "figures: pods={MANIFEST_PODS} steady={steady:.1}MiB relist_peak_and_kept={peak:.1}MiB request={request}Mi limit={limit}Mi"
    );
    assert!(
        limit >= LIMIT_HEADROOM * peak,
        "limit {limit} MiB < {LIMIT_HEADROOM} x the relist peak plus a standby's kept lines, {peak:.1} MiB"
    );
    assert!(
        request >= REQUEST_HEADROOM * steady,
        "request {request} MiB < {REQUEST_HEADROOM} x the steady RSS {steady:.1} MiB"
    );
    // And the rule itself, at every size the benchmark ran.
    let (request_rule, limit_rule) = rules(&bench);
    for n in bench.sizes() {
        let pods = n as f64;
        let need = LIMIT_HEADROOM * (bench.demo_max(n, RELIST) + KEPT_MIB);
        assert!(limit_rule.mib(pods) >= need, "{limit_rule:?} at {n}");
        assert!(request_rule.mib(pods) >= REQUEST_HEADROOM * bench.demo_max(n, STEADY), "{request_rule:?} at {n}");
    }
}

#[test]
fn a_fitted_rule_stays_above_every_point() {
    let points = [(1000.0, 31.4), (10_000.0, 79.6), (100_000.0, 590.0)];
    let rule = Rule::fit(&points, 1.2);
    for (n, v) in points {
        assert!(rule.mib(n) >= 1.2 * v, "{rule:?} at {n}");
    }
    assert!(rule.mib(20_000.0) >= 1.2 * interpolate(&points, 20_000.0));
    // Past the largest size, along the last segment.
    assert!(rule.mib(200_000.0) >= 1.2 * interpolate(&points, 200_000.0));
    assert_eq!(interpolate(&points[..2], 19_000.0), 79.6 + (79.6 - 31.4) * 9.0 / 9.0);
    assert_eq!(rule, Rule { base: 31.0, per_1000: 6.9 });
}

mod common;

fn common_manifest() -> Vec<Value> {
    common::manifest()
}

#[test]
fn a_soak_says_its_timings_as_a_sentence_does() {
    assert_eq!(spoken_duration(188), "3 min 8 s");
    assert_eq!(spoken_duration(3600), "1 h");
    assert_eq!(spoken_duration(3725), "1 h 2 min");
    assert_eq!(spoken_duration(45), "45 s");
    assert_eq!(spoken_ms(3000), "3 s");
    assert_eq!(spoken_ms(1500), "1,500 ms");
    assert_eq!(tenths(9.0), "9.0");
}

#[test]
fn a_benchmark_names_the_trees_it_measured_or_its_commit_gives_them() {
    let recorded = serde_json::json!({"commit": "abc1234", "code measured": "src/ 1111, crates/ 2222"});
    assert_eq!(measured_trees(&recorded), Some(("1111".into(), "2222".into())));
    let dirty = serde_json::json!({"commit": "abc1234 (with uncommitted changes)"});
    assert_eq!(measured_trees(&dirty), None);
    let unknown = serde_json::json!({"commit": "0000000000000000000000000000000000000000"});
    assert_eq!(measured_trees(&unknown), None);
}
