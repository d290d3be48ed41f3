//! One peer's process: spawned with piped output, every line stamped with the
//! harness's clock as it arrives, and its CPU and memory read from /proc.

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Output has "stopped" once no line arrived for this long.
pub const QUIET: Duration = Duration::from_secs(1);

/// Every process the harness runs right now, for the Ctrl-C handler.
pub static LIVE: Mutex<Vec<u32>> = Mutex::new(Vec::new());

pub struct Running {
    child: Child,
    /// Where every line goes when the process ends, for diagnosis.
    log: Option<PathBuf>,
    pub pid: u32,
    pub spawned: Instant,
    lines: Arc<Mutex<Vec<Line>>>,
}

#[derive(Clone)]
pub struct Line {
    pub at: Instant,
    pub text: String,
}

impl Running {
    pub fn spawn(mut cmd: Command, log: Option<PathBuf>) -> Running {
        let spawned = Instant::now();
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
        let pid = child.id();
        LIVE.lock().expect("live lock").push(pid);
        let lines = Arc::new(Mutex::new(Vec::new()));
        read_lines(child.stdout.take().expect("piped stdout"), lines.clone());
        read_lines(child.stderr.take().expect("piped stderr"), lines.clone());
        Running { child, log, pid, spawned, lines }
    }

    pub fn len(&self) -> usize {
        self.lines.lock().expect("lines lock").len()
    }

    /// The lines from index `*cursor` on; moves the cursor past them.
    pub fn take_new(&self, cursor: &mut usize) -> Vec<Line> {
        let lines = self.lines.lock().expect("lines lock");
        let new = lines[(*cursor).min(lines.len())..].to_vec();
        *cursor = lines.len();
        new
    }

    fn last_at(&self) -> Option<Instant> {
        self.lines.lock().expect("lines lock").last().map(|l| l.at)
    }

    /// The last `n` lines, for error messages.
    pub fn tail(&self, n: usize) -> String {
        let lines = self.lines.lock().expect("lines lock");
        let tail: Vec<&str> = lines.iter().rev().take(n).rev().map(|l| l.text.as_str()).collect();
        tail.join("\n")
    }

    /// Fails the run, with the process's last lines, if it has exited.
    pub fn check_alive(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("the process exited early ({status}); its last lines:\n{}", self.tail(30));
        }
    }

    /// Polls `check` on each new line, from line `from` on, until it returns a value.
    pub async fn wait_for<T>(
        &mut self,
        what: &str,
        from: usize,
        timeout: Duration,
        mut check: impl FnMut(&Line) -> Option<T>,
    ) -> T {
        match self.try_wait_for(from, timeout, &mut check).await {
            Some(found) => found,
            None => panic!("timed out after {timeout:?} waiting for {what}; last lines:\n{}", self.tail(20)),
        }
    }

    /// Like [`Running::wait_for`], but `None` when the time is up.
    pub async fn try_wait_for<T>(
        &mut self,
        from: usize,
        timeout: Duration,
        mut check: impl FnMut(&Line) -> Option<T>,
    ) -> Option<T> {
        let deadline = Instant::now() + timeout;
        let mut cursor = from;
        loop {
            for line in self.take_new(&mut cursor) {
                if let Some(found) = check(&line) {
                    return Some(found);
                }
            }
            self.check_alive();
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits until no line arrived for `QUIET` and, with `cpu`, the CPU time
    /// grew by at most one clock tick in that time.
    pub async fn wait_quiet(&mut self, cpu: bool, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            self.check_alive();
            let (lines, ticks) = (self.len(), cpu_ticks(self.pid));
            if self.last_at().is_none_or(|at| at.elapsed() >= QUIET) {
                tokio::time::sleep(QUIET).await;
                if self.len() == lines && (!cpu || cpu_ticks(self.pid) <= ticks + 1) {
                    return;
                }
            } else {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            assert!(Instant::now() < deadline, "output did not stop within {timeout:?}");
        }
    }

    /// SIGTERM, then up to 30 s for a graceful exit, then SIGKILL (in Drop).
    pub async fn stop(mut self) {
        send_signal(self.pid, "TERM");
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        eprintln!("bench: pid {} ignored SIGTERM for 30 s; killing it", self.pid);
    }
}

impl Drop for Running {
    /// Never leaves the process behind, also when the harness panics.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
        if let Some(path) = &self.log {
            let lines = self.lines.lock().unwrap_or_else(|p| p.into_inner());
            let text: String = lines.iter().map(|l| format!("{}\n", l.text)).collect();
            if let Err(e) = std::fs::write(path, text) {
                eprintln!("bench: cannot write {}: {e}", path.display());
            }
        }
        LIVE.lock().unwrap_or_else(|p| p.into_inner()).retain(|&p| p != self.pid);
    }
}

/// Reads `pipe` on a thread of its own, stamping each line as it arrives.
/// The stamp is taken before the lock, so a reader of `sink` cannot delay it.
fn read_lines(pipe: impl Read + Send + 'static, sink: Arc<Mutex<Vec<Line>>>) {
    std::thread::spawn(move || {
        let mut reader = BufReader::with_capacity(1 << 16, pipe);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match reader.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            let at = Instant::now();
            let text = strip_ansi(&String::from_utf8_lossy(&buf));
            sink.lock().expect("lines lock").push(Line { at, text });
        }
    });
}

/// Removes terminal colour codes (`ESC [ ... letter`), should a peer ignore NO_COLOR.
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else if c != '\n' && c != '\r' {
            out.push(c);
        }
    }
    out
}

/// The pod key of a line that reports a new pod: `onAdd: ns/name` (demo-controller,
/// the client-go logger, the bare watch) or `applied: ns/name` (the kube-rs logger,
/// whose first line for a pod is its add).
pub fn added_key(line: &str) -> Option<&str> {
    let start = ["onAdd: ", "applied: "].iter().find_map(|m| line.find(m).map(|i| i + m.len()))?;
    let rest = &line[start..];
    let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '/'))).unwrap_or(rest.len());
    Some(&rest[..end])
}

// --- /proc ------------------------------------------------------------------------

/// utime + stime of the whole process (all threads), in clock ticks; 0 once it is gone.
pub fn cpu_ticks(pid: u32) -> u64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0;
    };
    // After the command name, which is in parentheses and may hold spaces:
    // state is field 3, utime 14, stime 15.
    let Some(close) = stat.rfind(')') else { return 0 };
    let fields: Vec<&str> = stat[close + 2..].split(' ').collect();
    let field = |i: usize| fields.get(i - 3).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    field(14) + field(15)
}

pub fn ticks_to_ms(ticks: u64) -> f64 {
    // USER_HZ; sysconf(_SC_CLK_TCK), read once through getconf.
    static HZ: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    let hz = HZ.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(100.0)
    });
    1000.0 * ticks as f64 / hz
}

/// VmHWM (peak resident memory) and VmRSS (resident now), in MiB; 0 once it is gone.
pub fn memory_mib(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (kib("VmHWM:") / 1024.0, kib("VmRSS:") / 1024.0)
}

/// Resets VmHWM to the current RSS, so the next peak read is this phase's alone.
pub fn reset_peak(pid: u32) {
    if let Err(e) = std::fs::write(format!("/proc/{pid}/clear_refs"), "5") {
        eprintln!("bench: cannot reset the peak RSS of {pid} ({e}); the relist peak includes the start-up peak");
    }
}

pub fn send_signal(pid: u32, signal: &str) {
    let _ = Command::new("kill").arg(format!("-{signal}")).arg(pid.to_string()).status();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn added_key_reads_every_peers_add_line() {
        let demo = r#"2026-11-22T06:08:00.889Z  INFO onAdd: ns-1/web-000001 namespace="ns-1" name="web-000001""#;
        assert_eq!(added_key(demo), Some("ns-1/web-000001"));
        assert_eq!(added_key("2026/11/22 06:08:00.889000 onAdd: ns/p"), Some("ns/p"));
        assert_eq!(added_key("2026-11-22T06:08:00Z  INFO kube_rs_logger: applied: ns/p.x"), Some("ns/p.x"));
        assert_eq!(added_key("onUpdate: ns/p"), None);
    }

    #[test]
    fn strip_ansi_removes_colour_codes_and_the_newline() {
        assert_eq!(strip_ansi("\u{1b}[32m INFO\u{1b}[0m onAdd: a/b\n"), " INFO onAdd: a/b");
    }
}
