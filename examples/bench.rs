//! `make bench`: demo-controller against a client-go baseline logger, on the
//! same local control plane, with the same pods, one logger at a time.
//!
//! Normally run by bench/run.sh, which builds both loggers, starts and stops a
//! dedicated control plane and passes its kubeconfig:
//!
//! ```text
//! bash bench/run.sh [--sizes 1000,10000] [--burst 5000] [--idle 60s] [--out bench]
//! ```
//!
//! By hand, against a cluster you can throw away (it creates thousands of pods):
//!
//! ```text
//! cargo run --release --locked --example bench -- --kubeconfig K --go-logger PATH [--sizes ...]
//! ```
//!
//! For each N the harness first makes the cluster hold exactly N pods (fresh
//! namespaces; without a kubelet they stay Pending), then runs each logger in
//! turn, never both at once so that CPU numbers stay clean:
//!
//! ```text
//! spawn ── "cache synced" ── N initial onAdd lines, quiet ── RSS ── idle window ── resync ── burst ── SIGTERM
//!   │          time to sync                                  peak   CPU % of a core  CPU, lines  lag
//!   └─ the resync period R = idle + RESYNC_MARGIN, so the first resync comes after the idle window
//! ```
//!
//! Every stdout/stderr line of a logger is stamped with the harness's clock on
//! arrival; a burst pod's lag is the time from its create's acknowledgement
//! (the API server's response, as the harness sees it) to its `onAdd` line.
//! The results go to a markdown table on stdout, OUT/results.md and
//! OUT/results.svg.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use futures::stream::{self, StreamExt};
use k8s_openapi::api::core::v1::{Container, Namespace, Pod, PodSpec, ServiceAccount};
use kube::api::{DeleteParams, ListParams, ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};

/// Creates in flight at once, for the N pods and for the burst.
const CONCURRENCY: usize = 64;
/// The N pods are spread over namespaces of this many pods.
const PODS_PER_NAMESPACE: usize = 1000;
/// The resync period is the idle window plus this: room for the sync, the
/// initial onAdd lines and reading the memory before the idle window starts.
const RESYNC_MARGIN: Duration = Duration::from_secs(40);
/// Output has "stopped" once no line arrived for this long.
const QUIET: Duration = Duration::from_secs(1);

#[derive(Parser, Debug)]
#[command(about = "Benchmark demo-controller against the client-go baseline logger (see bench/run.sh)")]
struct Opts {
    /// Cluster sizes to measure at, in pods, comma-separated
    #[arg(long, value_delimiter = ',', default_value = "1000,10000")]
    sizes: Vec<usize>,

    /// Pods created as fast as the API server takes them, for the lag
    #[arg(long, default_value_t = 5000)]
    burst: usize,

    /// How long to measure idle CPU for (the resync comes after it)
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    idle: Duration,

    /// Directory for results.md and results.svg
    #[arg(long, default_value = "bench")]
    out: PathBuf,

    /// The cluster to use, admin rights needed [default: $KUBECONFIG]
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: PathBuf,

    /// The demo-controller binary
    #[arg(long, default_value = "target/release/demo-controller")]
    rust_logger: PathBuf,

    /// The client-go baseline logger binary (bench/build-go-logger.sh prints it);
    /// without it the go column stays empty
    #[arg(long, env = "BENCH_GO_LOGGER")]
    go_logger: Option<PathBuf>,
}

#[tokio::main]
async fn main() {
    let mut opts = Opts::parse();
    opts.sizes.sort_unstable();
    opts.sizes.dedup();
    assert!(!opts.sizes.is_empty() && !opts.sizes.contains(&0), "--sizes needs at least one size above 0");
    tokio::spawn(stop_on_signal());

    let client = client_for(&opts.kubeconfig).await;
    let server = client
        .apiserver_version()
        .await
        .expect("cannot reach the API server: is the control plane up and --kubeconfig right?")
        .git_version;
    let facts = Facts::gather(server);
    let mut loggers = vec![Logger::Rust(opts.rust_logger.clone())];
    match &opts.go_logger {
        Some(path) => loggers.push(Logger::Go(path.clone())),
        None => eprintln!("bench: no --go-logger given: measuring demo-controller only"),
    }
    for logger in &loggers {
        assert!(
            logger.binary().is_file(),
            "{} logger {} does not exist: build it first (bench/run.sh does)",
            logger.name(),
            logger.binary().display()
        );
    }

    let mut rows = Vec::new();
    let mut previous: Vec<String> = Vec::new();
    for &n in &opts.sizes {
        // Exactly N pods in the cluster: the last size's go first.
        delete_pods(&client, &previous).await;
        previous = create_pods(&client, n).await;
        let total = count_pods(&client).await;
        assert_eq!(total, n, "the cluster should hold exactly {n} pods, it holds {total}");

        let mut row = Row { n, rust: None, go: None };
        for logger in &loggers {
            eprintln!("bench: N={n}: measuring the {} logger", logger.name());
            let m = measure(&client, logger, n, &opts).await;
            eprintln!("bench: N={n}: {}: {m:?}", logger.name());
            match logger {
                Logger::Rust(_) => row.rust = Some(m),
                Logger::Go(_) => row.go = Some(m),
            }
            let total = count_pods(&client).await;
            assert_eq!(total, n, "after the burst's cleanup the cluster should hold {n} pods again");
        }
        rows.push(row);
    }
    delete_pods(&client, &previous).await;

    let table = table(&rows);
    println!("{table}");
    std::fs::create_dir_all(&opts.out).expect("create the --out directory");
    let md = opts.out.join("results.md");
    let svg = opts.out.join("results.svg");
    std::fs::write(&md, report(&rows, &table, &opts, &facts)).expect("write results.md");
    std::fs::write(&svg, plot(&rows)).expect("write results.svg");
    eprintln!("bench: wrote {} and {}", md.display(), svg.display());
}

// --- The loggers ----------------------------------------------------------------

enum Logger {
    /// demo-controller
    Rust(PathBuf),
    /// The client-go baseline
    Go(PathBuf),
}

impl Logger {
    fn name(&self) -> &'static str {
        match self {
            Logger::Rust(_) => "rust",
            Logger::Go(_) => "go",
        }
    }

    fn binary(&self) -> &Path {
        match self {
            Logger::Rust(path) | Logger::Go(path) => path,
        }
    }

    /// The command line, with the resync period `resync` (whole seconds).
    fn command(&self, kubeconfig: &Path, resync: Duration) -> Command {
        let resync = format!("{}s", resync.as_secs());
        let mut cmd = Command::new(self.binary());
        cmd.arg("--kubeconfig").arg(kubeconfig);
        match self {
            Logger::Rust(_) => cmd.args(["--probe-addr", "0", "--metrics-addr", "0", "--log-format", "text"]),
            Logger::Go(_) => &mut cmd,
        };
        // Both loggers use their default log level and no colours.
        cmd.args(["--resync", &resync]).env_remove("KUBECONFIG").env_remove("RUST_LOG").env("NO_COLOR", "1");
        cmd
    }
}

/// What was measured for one logger at one N.
#[derive(Clone, Debug, Default)]
struct Measurement {
    /// From spawn to the `cache synced` line.
    sync_ms: f64,
    /// VmHWM and VmRSS once the initial onAdd lines are out.
    peak_mib: f64,
    steady_mib: f64,
    /// The burst: from each create's acknowledgement to its onAdd line.
    lag_p50_ms: f64,
    lag_p99_ms: f64,
    lag_max_ms: f64,
    /// The lag of the pod whose create was acknowledged last.
    lag_last_ms: f64,
    /// From the last acknowledgement to the last onAdd line of the burst.
    drained_ms: f64,
    /// CPU time and lines (stdout and stderr) of the first resync.
    resync_cpu_ms: f64,
    resync_lines: usize,
    /// CPU over the idle window, in % of one core.
    idle_cpu_pct: f64,
}

/// Which logger's process the harness runs right now, for [`stop_on_signal`].
static CURRENT: AtomicU32 = AtomicU32::new(0);

/// Ctrl-C or SIGTERM (bench/run.sh forwards its own) must not leave a logger
/// running: kill it, then exit. The control plane is run.sh's to stop.
async fn stop_on_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term)) = (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) else {
        return;
    };
    tokio::select! {
        _ = int.recv() => {}
        _ = term.recv() => {}
    }
    let pid = CURRENT.load(Ordering::SeqCst);
    if pid != 0 {
        send_signal(pid, "KILL");
    }
    eprintln!("bench: interrupted");
    std::process::exit(130);
}

/// One logger process with every line it prints, stamped on arrival.
struct Running {
    child: Child,
    pid: u32,
    spawned: Instant,
    lines: Arc<Mutex<Vec<Line>>>,
}

#[derive(Clone)]
struct Line {
    at: Instant,
    text: String,
}

impl Running {
    fn spawn(mut cmd: Command) -> Running {
        let spawned = Instant::now();
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
        let pid = child.id();
        CURRENT.store(pid, Ordering::SeqCst);
        let lines = Arc::new(Mutex::new(Vec::new()));
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr = child.stderr.take().expect("piped stderr");
        read_lines(stdout, lines.clone());
        read_lines(stderr, lines.clone());
        Running { child, pid, spawned, lines }
    }

    fn len(&self) -> usize {
        self.lines.lock().expect("lines lock").len()
    }

    /// The lines from index `*cursor` on; moves the cursor past them.
    fn take_new(&self, cursor: &mut usize) -> Vec<Line> {
        let lines = self.lines.lock().expect("lines lock");
        let new = lines[(*cursor).min(lines.len())..].to_vec();
        *cursor = lines.len();
        new
    }

    /// When the latest line arrived.
    fn last_at(&self) -> Option<Instant> {
        self.lines.lock().expect("lines lock").last().map(|l| l.at)
    }

    /// Fails the run, with the logger's last lines, if it has exited.
    fn check_alive(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            let lines = self.lines.lock().expect("lines lock");
            let tail: Vec<&str> = lines.iter().rev().take(30).rev().map(|l| l.text.as_str()).collect();
            panic!("the logger exited early ({status}); its last lines:\n{}", tail.join("\n"));
        }
    }

    /// Polls `check` on each batch of new lines until it returns a value.
    async fn wait_for<T>(&mut self, what: &str, timeout: Duration, mut check: impl FnMut(&Line) -> Option<T>) -> T {
        let deadline = Instant::now() + timeout;
        let mut cursor = 0;
        loop {
            for line in self.take_new(&mut cursor) {
                if let Some(found) = check(&line) {
                    return found;
                }
            }
            self.check_alive();
            assert!(Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until no line arrived for `QUIET` and, with `cpu`, the CPU time
    /// grew by at most one clock tick in that time.
    async fn wait_quiet(&mut self, cpu: bool, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            self.check_alive();
            let (lines, ticks) = (self.len(), cpu_ticks(self.pid));
            let quiet_since = self.last_at().is_none_or(|at| at.elapsed() >= QUIET);
            if quiet_since {
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

    /// SIGTERM, then up to 30 s for a graceful exit, then SIGKILL.
    async fn stop(mut self) {
        send_signal(self.pid, "TERM");
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return; // Drop reaps nothing more; CURRENT is cleared there
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        eprintln!("bench: the logger ignored SIGTERM for 30 s; killing it");
    }
}

impl Drop for Running {
    /// Never leaves the process behind, also when the harness panics.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
        CURRENT.store(0, Ordering::SeqCst);
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

/// Removes terminal colour codes (`ESC [ ... letter`), should a logger
/// ignore NO_COLOR.
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

/// The pod key of an `onAdd: ns/name` line, if it is one.
fn on_add(line: &str) -> Option<&str> {
    let rest = &line[line.find("onAdd: ")? + "onAdd: ".len()..];
    let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '/'))).unwrap_or(rest.len());
    Some(&rest[..end])
}

// --- One logger at one N ----------------------------------------------------------

async fn measure(client: &Client, logger: &Logger, n: usize, opts: &Opts) -> Measurement {
    let resync = opts.idle + RESYNC_MARGIN;
    let mut run = Running::spawn(logger.command(&opts.kubeconfig, resync));
    let mut m = Measurement::default();

    // 1. Time to sync: from spawn to the `cache synced` line.
    let synced_at = run
        .wait_for("cache synced", Duration::from_secs(300), |l| {
            l.text.to_ascii_lowercase().contains("cache synced").then_some(l.at)
        })
        .await;
    m.sync_ms = ms(synced_at - run.spawned);

    // 2. Memory once the informer holds every pod and each has been logged.
    let mut adds = 0;
    run.wait_for(&format!("{n} initial onAdd lines"), Duration::from_secs(600), |l| {
        adds += usize::from(on_add(&l.text).is_some());
        (adds >= n).then_some(())
    })
    .await;
    run.wait_quiet(false, Duration::from_secs(120)).await;
    (m.peak_mib, m.steady_mib) = memory_mib(run.pid);

    // 3. Idle CPU. The resync period was chosen to come after this window.
    let idle_start = Instant::now();
    let resync_due = synced_at + resync; // the earliest the first resync can start
    assert!(
        idle_start + opts.idle + Duration::from_secs(3) < resync_due,
        "the logger took {:?} to sync and log its pods: too long for the resync to come after the idle window; \
         raise RESYNC_MARGIN",
        idle_start - run.spawned
    );
    let before = cpu_ticks(run.pid);
    tokio::time::sleep(opts.idle).await;
    run.check_alive();
    let used = ticks_to_secs(cpu_ticks(run.pid) - before);
    m.idle_cpu_pct = 100.0 * used / idle_start.elapsed().as_secs_f64();

    // 4. The first resync, of N unchanged pods: CPU and lines from just
    //    before it is due until the output and the CPU have settled.
    tokio::time::sleep_until((resync_due - Duration::from_secs(2)).into()).await;
    let (before, mut cursor) = (cpu_ticks(run.pid), run.len());
    tokio::time::sleep_until((resync_due + Duration::from_secs(2)).into()).await;
    run.wait_quiet(true, Duration::from_secs(300)).await;
    m.resync_cpu_ms = 1000.0 * ticks_to_secs(cpu_ticks(run.pid) - before);
    m.resync_lines = run.take_new(&mut cursor).len();

    // 5. The burst.
    burst(client, &mut run, opts.burst, &mut m).await;

    run.stop().await;
    m
}

/// Creates `count` pods in a new namespace as fast as the API server takes
/// them, then matches each create's acknowledgement with its onAdd line.
/// Deletes them again afterwards, so the next logger starts from the same N.
async fn burst(client: &Client, run: &mut Running, count: usize, m: &mut Measurement) {
    let ns = namespace(client, "bench-burst").await;
    let api = Api::<Pod>::namespaced(client.clone(), &ns);
    let first_line = run.len();
    let acks: HashMap<String, Instant> = stream::iter(0..count)
        .map(|i| {
            let api = &api;
            async move {
                let name = format!("burst-{i:05}");
                create_pod(api, &name).await;
                (name, Instant::now())
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;

    // Each burst pod's first onAdd line.
    let prefix = format!("{ns}/");
    let mut seen: HashMap<String, Instant> = HashMap::with_capacity(count);
    let mut cursor = first_line;
    let deadline = Instant::now() + Duration::from_secs(300);
    while seen.len() < count {
        for line in run.take_new(&mut cursor) {
            if let Some(name) = on_add(&line.text).and_then(|key| key.strip_prefix(&prefix)) {
                seen.entry(name.to_string()).or_insert(line.at);
            }
        }
        run.check_alive();
        assert!(Instant::now() < deadline, "only {} of {count} burst pods were logged after 300 s", seen.len());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Lags in ms. Slightly negative is possible: the watch event can reach
    // the logger before the create's response reaches the harness.
    let mut lags: Vec<f64> = acks.iter().map(|(name, ack)| signed_ms(seen[name], *ack)).collect();
    lags.sort_by(f64::total_cmp);
    m.lag_p50_ms = percentile(&lags, 50.0);
    m.lag_p99_ms = percentile(&lags, 99.0);
    m.lag_max_ms = lags.last().copied().unwrap_or_default();
    let (last_name, last_ack) = acks.iter().max_by_key(|(_, at)| **at).expect("a burst of at least one pod");
    m.lag_last_ms = signed_ms(seen[last_name], *last_ack);
    let last_line = seen.values().max().expect("a burst of at least one pod");
    m.drained_ms = signed_ms(*last_line, *last_ack);

    // DELETE on the namespace's pods collection: one request for all of them.
    api.delete_collection(&DeleteParams::default(), &ListParams::default()).await.expect("delete the burst pods");
}

// --- The cluster ------------------------------------------------------------------

async fn client_for(kubeconfig: &Path) -> Client {
    let kc = Kubeconfig::read_from(kubeconfig).unwrap_or_else(|e| panic!("cannot read {}: {e}", kubeconfig.display()));
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await.expect("a usable kubeconfig");
    Client::try_from(config).expect("a client")
}

/// Creates N pods in fresh namespaces; returns the namespaces.
async fn create_pods(client: &Client, n: usize) -> Vec<String> {
    let started = Instant::now();
    let mut namespaces = Vec::new();
    for _ in (0..n).step_by(PODS_PER_NAMESPACE) {
        namespaces.push(namespace(client, &format!("bench-n{n}")).await);
    }
    let apis: Vec<Api<Pod>> = namespaces.iter().map(|ns| Api::namespaced(client.clone(), ns)).collect();
    stream::iter(0..n)
        .map(|i| {
            let api = &apis[i / PODS_PER_NAMESPACE];
            async move { create_pod(api, &format!("pod-{i:05}")).await }
        })
        .buffer_unordered(CONCURRENCY)
        .collect::<()>()
        .await;
    let secs = started.elapsed().as_secs_f64();
    eprintln!("bench: created {n} pods in {secs:.1} s ({:.0}/s)", n as f64 / secs);
    namespaces
}

async fn delete_pods(client: &Client, namespaces: &[String]) {
    for ns in namespaces {
        Api::<Pod>::namespaced(client.clone(), ns)
            .delete_collection(&DeleteParams::default(), &ListParams::default())
            .await
            .unwrap_or_else(|e| panic!("delete the pods of {ns}: {e}"));
    }
}

/// How many pods the cluster holds, from one list call of one item.
async fn count_pods(client: &Client) -> usize {
    let list = Api::<Pod>::all(client.clone()).list_metadata(&ListParams::default().limit(1)).await.expect("list pods");
    list.items.len() + usize::try_from(list.metadata.remaining_item_count.unwrap_or(0)).unwrap_or(0)
}

/// A fresh namespace (names are never reused: without a controller-manager a
/// deleted namespace never finishes terminating) with the `default`
/// ServiceAccount that the ServiceAccount admission plugin requires for pods.
async fn namespace(client: &Client, prefix: &str) -> String {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let stamp =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs() % 1_000_000;
    let name = format!("{prefix}-{stamp}-{}", SEQ.fetch_add(1, Ordering::SeqCst));
    let meta = |name: &str| ObjectMeta { name: Some(name.into()), ..Default::default() };
    let ns = Namespace { metadata: meta(&name), ..Default::default() };
    let sa = ServiceAccount { metadata: meta("default"), ..Default::default() };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap_or_else(|e| panic!("create namespace {name}: {e}"));
    Api::<ServiceAccount>::namespaced(client.clone(), &name)
        .create(&PostParams::default(), &sa)
        .await
        .unwrap_or_else(|e| panic!("create the default ServiceAccount in {name}: {e}"));
    name
}

/// Creates one pod like the tests' `pod()`: a pause container that never runs
/// here. Retries a few times, as a loaded API server may refuse one (429)
/// or a connection may drop; a retry that finds the pod created counts.
async fn create_pod(api: &Api<Pod>, name: &str) {
    let pod = Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some([("app".to_string(), "bench".to_string())].into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "c".into(),
                image: Some("registry.k8s.io/pause:3.10".into()),
                ..Default::default()
            }],
            automount_service_account_token: Some(false),
            ..Default::default()
        }),
        ..Default::default()
    };
    for attempt in 1.. {
        match api.create(&PostParams::default(), &pod).await {
            Ok(_) => return,
            Err(kube::Error::Api(status)) if status.is_already_exists() && attempt > 1 => return,
            Err(e) if attempt < 5 => {
                eprintln!("bench: creating pod {name} failed (attempt {attempt}), retrying: {e}");
                tokio::time::sleep(Duration::from_millis(200 * attempt)).await;
            }
            Err(e) => panic!("creating pod {name} failed {attempt} times: {e}"),
        }
    }
}

// --- /proc ------------------------------------------------------------------------

/// utime + stime of the whole process (all threads), in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read /proc/PID/stat of the logger");
    // The fields after the command name, which is in parentheses and may hold
    // spaces: state is field 3, utime 14, stime 15.
    let fields: Vec<&str> = stat[stat.rfind(')').expect("stat has (comm)") + 2..].split(' ').collect();
    let field = |i: usize| fields[i - 3].parse::<u64>().expect("a number in /proc/PID/stat");
    field(14) + field(15)
}

fn ticks_to_secs(ticks: u64) -> f64 {
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
    ticks as f64 / hz
}

/// VmHWM (peak resident memory) and VmRSS (resident now), in MiB.
fn memory_mib(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read /proc/PID/status of the logger");
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no {key} in /proc/{pid}/status"))
    };
    (kib("VmHWM:") / 1024.0, kib("VmRSS:") / 1024.0)
}

fn send_signal(pid: u32, signal: &str) {
    let _ = Command::new("kill").arg(format!("-{signal}")).arg(pid.to_string()).status();
}

// --- Numbers ----------------------------------------------------------------------

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// `later - earlier` in ms, negative when `later` is in fact earlier.
fn signed_ms(later: Instant, earlier: Instant) -> f64 {
    match later.checked_duration_since(earlier) {
        Some(d) => ms(d),
        None => -ms(earlier - later),
    }
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

// --- Results ----------------------------------------------------------------------

struct Row {
    n: usize,
    rust: Option<Measurement>,
    go: Option<Measurement>,
}

/// One line of the table.
struct Metric {
    name: &'static str,
    get: fn(&Measurement) -> f64,
    decimals: usize,
}

const METRICS: &[Metric] = &[
    Metric { name: "time to cache synced (ms)", get: |m| m.sync_ms, decimals: 0 },
    Metric { name: "peak RSS after sync, VmHWM (MiB)", get: |m| m.peak_mib, decimals: 1 },
    Metric { name: "steady RSS after sync, VmRSS (MiB)", get: |m| m.steady_mib, decimals: 1 },
    Metric { name: "burst lag p50 (ms)", get: |m| m.lag_p50_ms, decimals: 1 },
    Metric { name: "burst lag p99 (ms)", get: |m| m.lag_p99_ms, decimals: 1 },
    Metric { name: "burst lag max (ms)", get: |m| m.lag_max_ms, decimals: 1 },
    Metric { name: "burst lag of the last pod (ms)", get: |m| m.lag_last_ms, decimals: 1 },
    Metric { name: "burst: last ack to last onAdd (ms)", get: |m| m.drained_ms, decimals: 1 },
    Metric { name: "resync CPU (ms)", get: |m| m.resync_cpu_ms, decimals: 0 },
    Metric { name: "resync lines printed", get: |m| m.resync_lines as f64, decimals: 0 },
    Metric { name: "idle CPU (% of one core)", get: |m| m.idle_cpu_pct, decimals: 3 },
];

fn table(rows: &[Row]) -> String {
    let mut out = String::from("| N | metric | rust | go | rust/go |\n|---:|---|---:|---:|---:|\n");
    for row in rows {
        for metric in METRICS {
            let value = |m: &Option<Measurement>| m.as_ref().map(metric.get);
            let (rust, go) = (value(&row.rust), value(&row.go));
            let cell = |v: Option<f64>| v.map_or("n/a".to_string(), |v| format!("{v:.*}", metric.decimals));
            let ratio = match (rust, go) {
                // A ratio of a negative lag (see report) or of zero means nothing.
                (Some(r), Some(g)) if g > 0.0 && r >= 0.0 => format!("{:.2}x", r / g),
                _ => "-".to_string(),
            };
            let _ =
                writeln!(out, "| {} | {} | {} | {} | {ratio} |", thousands(row.n), metric.name, cell(rust), cell(go));
        }
    }
    out
}

/// The issue's targets, checked at N = 10,000 (or the largest N measured).
fn targets(rows: &[Row]) -> String {
    let Some(row) = rows.iter().find(|r| r.n == 10_000).or(rows.last()) else {
        return String::new();
    };
    let Some(rust) = &row.rust else {
        return String::new();
    };
    let mut out = format!(
        "Targets from the issue, checked at N = {}{}:\n\n| target | measured | met |\n|---|---:|:---:|\n",
        thousands(row.n),
        if row.n == 10_000 { "" } else { " (the issue sets them at 10,000)" }
    );
    let mut line = |target: &str, measured: String, met: Option<bool>| {
        let met = met.map_or("n/a", |ok| if ok { "yes" } else { "**no**" });
        let _ = writeln!(out, "| {target} | {measured} | {met} |");
    };
    let go = row.go.as_ref();
    let ratio = |get: fn(&Measurement) -> f64| go.map(|g| get(rust) / get(g));
    let show = |r: Option<f64>| r.map_or("n/a".into(), |r| format!("{r:.2}x"));
    let peak = ratio(|m| m.peak_mib);
    line("peak memory after sync <= 0.5x go", show(peak), peak.map(|r| r <= 0.5));
    let steady = ratio(|m| m.steady_mib);
    line("steady memory after sync <= 0.5x go", show(steady), steady.map(|r| r <= 0.5));
    let sync = ratio(|m| m.sync_ms);
    line("time to sync <= 1.0x go", show(sync), sync.map(|r| r <= 1.0));
    let p99 = rust.lag_p99_ms;
    line("p99 burst lag <= 100 ms", format!("{p99:.1} ms"), Some(p99 <= 100.0));
    let last = rust.lag_last_ms;
    line("last pod's lag <= 1 s", format!("{last:.1} ms"), Some(last <= 1000.0));
    let lines = rust.resync_lines;
    line("no-change resync prints 0 info lines", lines.to_string(), Some(lines == 0));
    let cpu = rust.resync_cpu_ms;
    line("no-change resync costs <= 50 ms CPU", format!("{cpu:.0} ms"), Some(cpu <= 50.0));
    let idle = rust.idle_cpu_pct;
    line("idle CPU < 0.5% of one core", format!("{idle:.3} %"), Some(idle < 0.5));
    out
}

/// The facts about a run that results.md records, taken when it starts (the
/// checkout may change while it runs).
struct Facts {
    date: String,
    commit: String,
    machine: String,
    server: String,
    command: String,
}

impl Facts {
    fn gather(server: String) -> Facts {
        let run = |cmd: &str, args: &[&str]| {
            Command::new(cmd)
                .args(args)
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
                .unwrap_or_else(|| "unknown".into())
        };
        let mut commit = run("git", &["rev-parse", "--short", "HEAD"]);
        if !run("git", &["status", "--porcelain", "--untracked-files=no"]).is_empty() {
            commit.push_str(" (with uncommitted changes)");
        }
        let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
        let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
        let kernel = read("/proc/sys/kernel/osrelease").trim().to_string();
        let cpuinfo = read("/proc/cpuinfo");
        let model = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .map_or("unknown CPU", |v| v.trim_start_matches([' ', '\t', ':']));
        let meminfo = read("/proc/meminfo");
        let mem_gib = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map_or("?".to_string(), |kib| format!("{:.1}", kib / 1024.0 / 1024.0));
        let command = std::env::var("BENCH_COMMAND").unwrap_or_else(|_| {
            let args: Vec<String> = std::env::args().skip(1).collect();
            format!("cargo run --release --locked --example bench -- {}", args.join(" "))
        });
        Facts {
            date: run("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
            commit,
            machine: format!("{cpus} CPUs ({model}), {mem_gib} GiB RAM, Linux {kernel}"),
            server,
            command,
        }
    }
}

/// results.md: the table, the targets, the machine and how it was measured.
fn report(rows: &[Row], table: &str, opts: &Opts, facts: &Facts) -> String {
    let Facts { date, commit, machine, server, command } = facts;
    format!(
        "# Benchmark: demo-controller (rust) vs a client-go logger (go)\n\n\
         Written by `examples/bench.rs`; do not edit by hand, run `{command}` again.\n\n\
         - started: {date}\n\
         - commit: {commit}\n\
         - machine: {machine}\n\
         - control plane: kube-apiserver {server} + etcd on 127.0.0.1, no kubelet (pods stay Pending)\n\
         - parameters: sizes {sizes}, burst {burst} pods, idle window {idle}, resync period {resync} \
         (idle + {margin} s, so the first resync comes after the idle window)\n\n\
         ## Results\n\n{table}\n\
         ## Targets\n\n{targets}\n\
         ## How each number is taken\n\n\
         - Both loggers run against the same API server with the same N pods (in namespaces of {per_ns}), one \
         after the other (rust first), never at once; the harness runs on the same machine. Every line a logger prints is stamped with the harness's clock as it arrives on the pipe.\n\
         - **time to cache synced**: from spawning the process to its line containing `cache synced`.\n\
         - **RSS**: `VmHWM` (peak) and `VmRSS` (steady) from `/proc/PID/status`, read once all N initial \
         `onAdd` lines are out and no line came for {quiet} s.\n\
         - **idle CPU**: `utime + stime` from `/proc/PID/stat` over the idle window, as % of one core.\n\
         - **resync**: CPU from 2 s before the first resync is due until no line came and the CPU time grew by \
         at most one tick for {quiet} s (so it includes a few seconds of idle), and every line printed in that \
         window. The go logger logs `onUpdate` for every pod on a resync, as client-go controllers do.\n\
         - **burst**: {burst} pods created in a new namespace, {concurrency} creates in flight; a pod's lag \
         runs from the create's response arriving at the harness to the logger's `onAdd: ns/name` line. \
         \"Last pod\" is the pod whose create was acknowledged last. A lag can be slightly negative: the \
         watch event may reach the logger before the create's response reaches the harness; no ratio is \
         given then. On a small machine the lags mostly measure CPU contention: the API server, etcd and the \
         harness are busy with the creates at the same time. Afterwards the pods are deleted with one DELETE \
         on the namespace's pods collection.\n\
         - CPU times come in clock ticks (10 ms at USER_HZ 100).\n\n\
         ![memory and p99 burst lag by N](results.svg)\n",
        sizes = opts.sizes.iter().map(|&n| thousands(n)).collect::<Vec<_>>().join(", "),
        burst = thousands(opts.burst),
        idle = humantime::format_duration(opts.idle),
        resync = humantime::format_duration(opts.idle + RESYNC_MARGIN),
        margin = RESYNC_MARGIN.as_secs(),
        quiet = QUIET.as_secs(),
        concurrency = CONCURRENCY,
        per_ns = thousands(PODS_PER_NAMESPACE),
        targets = targets(rows),
    )
}

/// 12345 -> "12,345"
fn thousands(n: usize) -> String {
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

// --- The plot ---------------------------------------------------------------------

const RUST_COLOUR: &str = "#ce5a1a";
const GO_COLOUR: &str = "#00a7d0";

/// results.svg: two panels of grouped bars by N, memory after sync and p99
/// burst lag, rust and go side by side. Plain SVG, no plotting crate.
fn plot(rows: &[Row]) -> String {
    let (width, height) = (960.0, 440.0);
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
         viewBox=\"0 0 {width} {height}\" font-family=\"sans-serif\" font-size=\"13\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"26\" text-anchor=\"middle\" font-size=\"17\" font-weight=\"bold\">\
         demo-controller (rust) vs client-go logger (go), by number of pods N</text>\n",
        width / 2.0
    );
    // Legend.
    for (i, (name, colour)) in
        [("rust: demo-controller", RUST_COLOUR), ("go: client-go logger", GO_COLOUR)].iter().enumerate()
    {
        let x = width / 2.0 - 170.0 + 190.0 * i as f64;
        let _ = writeln!(
            svg,
            "<rect x=\"{x}\" y=\"40\" width=\"14\" height=\"14\" fill=\"{colour}\"/>\
             <text x=\"{}\" y=\"52\">{name}</text>",
            x + 20.0
        );
    }
    let values = |get: fn(&Measurement) -> f64| -> Vec<(String, [Option<f64>; 2])> {
        rows.iter()
            .map(|r| (format!("N = {}", thousands(r.n)), [r.rust.as_ref().map(get), r.go.as_ref().map(get)]))
            .collect()
    };
    let panel_width = width / 2.0;
    panel(&mut svg, 0.0, panel_width, height, "Memory after sync, VmRSS (MiB)", &values(|m| m.steady_mib), 1);
    panel(&mut svg, panel_width, panel_width, height, "Burst lag, p99 (ms)", &values(|m| m.lag_p99_ms), 1);
    svg.push_str("</svg>\n");
    svg
}

/// One panel: a y axis with grid lines and groups of two bars with their values.
fn panel(
    svg: &mut String,
    x0: f64,
    w: f64,
    h: f64,
    title: &str,
    groups: &[(String, [Option<f64>; 2])],
    decimals: usize,
) {
    let (left, right, top, bottom) = (x0 + 70.0, x0 + w - 20.0, 100.0, h - 50.0);
    let max = groups.iter().flat_map(|(_, v)| v.iter().flatten()).fold(0.0_f64, |a, &b| a.max(b));
    let top_value = nice_ceiling(max);
    let y = |v: f64| bottom - (v.max(0.0) / top_value) * (bottom - top);
    let _ = writeln!(
        svg,
        "<text x=\"{}\" y=\"84\" text-anchor=\"middle\" font-size=\"15\" font-weight=\"bold\">{title}</text>",
        (left + right) / 2.0
    );
    // Grid lines and y labels: five steps from 0 to the top value.
    for step in 0..=5 {
        let v = top_value * f64::from(step) / 5.0;
        let _ = writeln!(
            svg,
            "<line x1=\"{left}\" y1=\"{y:.1}\" x2=\"{right}\" y2=\"{y:.1}\" stroke=\"#ddd\"/>\
             <text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"#555\">{}</text>",
            left - 6.0,
            y(v) + 4.0,
            trim_number(v),
            y = y(v)
        );
    }
    let _ = writeln!(svg, "<line x1=\"{left}\" y1=\"{bottom}\" x2=\"{right}\" y2=\"{bottom}\" stroke=\"#333\"/>");
    // Groups: two bars each, centred in equal slots.
    let slot = (right - left) / groups.len().max(1) as f64;
    let bar = (slot * 0.3).min(70.0);
    for (i, (label, values)) in groups.iter().enumerate() {
        let centre = left + slot * (i as f64 + 0.5);
        for (j, (value, colour)) in values.iter().zip([RUST_COLOUR, GO_COLOUR]).enumerate() {
            let x = centre - bar - 2.0 + j as f64 * (bar + 4.0);
            match value {
                Some(v) => {
                    let _ = writeln!(
                        svg,
                        "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"{bar:.1}\" height=\"{:.1}\" fill=\"{colour}\"/>\
                         <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{v:.decimals$}</text>",
                        y(*v),
                        bottom - y(*v),
                        x + bar / 2.0,
                        y(*v) - 5.0
                    );
                }
                None => {
                    let _ = writeln!(
                        svg,
                        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#888\">n/a</text>",
                        x + bar / 2.0,
                        bottom - 5.0
                    );
                }
            }
        }
        let _ =
            writeln!(svg, "<text x=\"{centre:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{label}</text>", bottom + 20.0);
    }
}

/// The smallest 1, 2, 2.5 or 5 times a power of ten that is >= `v`.
fn nice_ceiling(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    let power = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0].into_iter().map(|m| m * power).find(|&c| c >= v).unwrap_or(10.0 * power)
}

/// 25 -> "25", 2.5 -> "2.5"
fn trim_number(v: f64) -> String {
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}
