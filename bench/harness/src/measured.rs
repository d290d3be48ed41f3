//! What a record says about its run: when it started, what code it measured,
//! on what machine and under what load. `make bench` (results.md, and so
//! results.json) and `make soak` (report.json) take them the same way, so
//! tests/figures.rs in demo-controller reads both alike: it tells a record of
//! older code from one of the code as it is now by comparing the trees of
//! `src/` and `crates/` recorded here with today's.

use std::process::Command;

/// `cmd ARGS`'s output, trimmed; `unknown` when it fails or is missing.
fn run(cmd: &str, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

/// The code a run measured: the checkout in the current directory.
pub struct Code {
    /// The short commit, with ` (with uncommitted changes)` when tracked
    /// files differ from it.
    pub commit: String,
    /// `src/ TREE, crates/ TREE`: the trees of what ships, at that commit.
    pub trees: String,
}

pub fn code() -> Code {
    let mut commit = run("git", &["rev-parse", "--short", "HEAD"]);
    if !run("git", &["status", "--porcelain", "--untracked-files=no"]).is_empty() {
        commit.push_str(" (with uncommitted changes)");
    }
    let tree = |dir: &str| run("git", &["rev-parse", &format!("HEAD:{dir}")]);
    Code { commit, trees: format!("src/ {}, crates/ {}", tree("src"), tree("crates")) }
}

/// `2026-11-24 09:19 UTC`: now.
pub fn date() -> String {
    run("date", &["-u", "+%Y-%m-%d %H:%M UTC"])
}

/// `2 CPUs (MODEL), 7.8 GiB RAM, Linux RELEASE`.
pub fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = read("/proc/cpuinfo")
        .lines()
        .find_map(|l| l.strip_prefix("model name").map(|v| v.trim_start_matches([' ', '\t', ':']).to_string()))
        .unwrap_or_else(|| "unknown CPU".into());
    let mem_gib = read("/proc/meminfo")
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or("?".to_string(), |kib| format!("{:.1}", kib / 1024.0 / 1024.0));
    format!("{cpus} CPUs ({model}), {mem_gib} GiB RAM, Linux {}", read("/proc/sys/kernel/osrelease").trim())
}

/// `load average 0.52 0.61 0.70`: now.
pub fn load() -> String {
    format!("load average {}", read("/proc/loadavg").split(' ').take(3).collect::<Vec<_>>().join(" "))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}
