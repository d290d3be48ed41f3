//! `make soak`: three replicas of demo-controller with `--leader-elect` on one
//! local control plane, a writer changing pods as fast as a few dozen writes a
//! second, and faults on a schedule; then an oracle (oracle.rs) checks every
//! replica's log against every acknowledged write and the API server's final
//! list. Prints its figures; exits 1 with the violations listed.
//!
//! Normally run by bench/soak.sh, which builds demo-controller and this
//! harness, starts and stops a control plane of its own and passes its
//! kubeconfig and directory:
//!
//! ```text
//! bash bench/soak.sh [--duration 10m] [--out target/soak]
//! ```
//!
//! The faults, in turn, one every few seconds once three replicas run and one leads:
//! - leader-kill: the leader gets SIGKILL (its lease expires; a standby takes over);
//! - leader-term: the leader gets SIGTERM (it drains, releases the lease and exits 0);
//! - standby-pause: a standby gets SIGSTOP for longer than the lease, then SIGCONT;
//! - leader-pause: the leader gets SIGSTOP for longer than the lease, then SIGCONT (it
//!   cannot renew, as if its link were cut; it must stop logging at its renew deadline);
//! - leader-link-cut: the leader's link to the API server is black-holed for longer than the
//!   lease, then restored (each replica talks to the server through a local proxy of its
//!   own, link.rs: no firewall rule);
//! - lease-delete: the Lease is deleted by hand;
//! - apiserver-term, apiserver-kill: kube-apiserver is stopped with SIGTERM, or SIGKILL and
//!   etcd compacted, and started again. After SIGTERM it stops listening at once, but its
//!   graceful stop waits for the open watches: SIGKILL ends it after 10 s (it says so).
//!
//! A replica that exits is started again, so three run. Every life of a
//! replica writes its stdout and stderr to one file, OUT/replica-S.life-L.log;
//! the faults go to OUT/faults.txt, the acknowledged writes to OUT/writes.tsv,
//! the final list to OUT/final.tsv, the figures and violations to OUT/report.txt,
//! and the same figures, with the code they measured, to OUT/report.json
//! (figures.rs). With `--record`, a run that was not interrupted also copies
//! report.json to bench/soak.json, the record the book's figures come from.
//!
//! It never hangs: every wait has a bound, and a watchdog ends the run (the
//! replicas first) if it still runs [`OVERRUN`] past its duration. A setup
//! failure is one line (`soak: error: ...`), and the replicas are stopped.

#[allow(dead_code)]
#[path = "../../cluster.rs"]
mod cluster;
mod figures;
mod link;
#[path = "../../measured.rs"]
mod measured;
mod oracle;
#[allow(dead_code)]
#[path = "../../process.rs"]
mod process;

use std::fs::File;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use clap::Parser;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use crate::cluster::ControlPlane;
use crate::oracle::{Exit, FinalPod, Life, Line, Micros, Write, WriteKind};

const REPLICAS: usize = 3;
/// The Lease, as demo-controller names it by default.
const LEASE: &str = "demo-controller";
/// Short timings, so leader changes are frequent: the lease (whole seconds,
/// as the Lease carries it), the renew deadline and the retry period.
const LEASE_DURATION: Duration = Duration::from_secs(3);
const RENEW_DEADLINE: &str = "2s";
const RETRY_PERIOD: &str = "500ms";
/// A paused process stays paused, and a cut link cut, this long: longer than the lease.
const PAUSE: Duration = Duration::from_secs(5);
/// The writer's pace: at most one write per tick (about 30 a second).
const WRITE_TICK: Duration = Duration::from_millis(33);
/// A pod is deleted only once this old: a create and a delete both inside one
/// outage of the watch (an API server restart, a relist) would never be seen,
/// and rightly log nothing.
const MIN_AGE_TO_DELETE: Duration = Duration::from_secs(20);
/// How long past its duration the watchdog lets a run go before it ends it:
/// room for the longest fault (an API server restart, up to about 5 min),
/// the settles after it (up to 2 min, then 2 more), and stopping the replicas.
const OVERRUN: Duration = Duration::from_secs(20 * 60);
/// The time between two faults, unless `--gap` says otherwise.
const DEFAULT_GAP: &str = "6s";
/// Where `--record` copies report.json (relative to the repository, where bench/soak.sh runs it).
const RECORD: &str = "bench/soak.json";

#[derive(Parser, Debug)]
#[command(about = "Chaos soak of demo-controller --leader-elect with an oracle (see bench/soak.sh)")]
struct Opts {
    /// How long the writer and the faults run
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    duration: Duration,

    /// Time between the end of one fault (three replicas running, one leading) and the next
    #[arg(long, default_value = DEFAULT_GAP, value_parser = humantime::parse_duration)]
    gap: Duration,

    /// Only these faults, in this order, comma-separated [default: leader-kill,
    /// standby-pause, apiserver-term, lease-delete, leader-term, leader-pause,
    /// leader-link-cut, apiserver-kill]
    #[arg(long, value_delimiter = ',', value_parser = parse_fault)]
    faults: Vec<Fault>,

    /// Where the logs, the writes, the final list and the report go
    #[arg(long, default_value = "target/soak")]
    out: PathBuf,

    /// The cluster to use, admin rights needed [default: $KUBECONFIG]
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: PathBuf,

    /// The cluster/up.sh directory of that cluster (to restart kube-apiserver)
    #[arg(long)]
    cluster_dir: PathBuf,

    /// The demo-controller binary
    #[arg(long, default_value = "target/debug/demo-controller")]
    demo_controller: PathBuf,

    /// Also copy report.json to bench/soak.json, the committed record the
    /// book's figures come from; only for a run that was not interrupted
    #[arg(long)]
    record: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    LeaderKill,
    LeaderTerm,
    StandbyPause,
    LeaderPause,
    LeaderLinkCut,
    LeaseDelete,
    ApiserverTerm,
    ApiserverKill,
}

const FAULTS: [Fault; 8] = [
    Fault::LeaderKill,
    Fault::StandbyPause,
    Fault::ApiserverTerm,
    Fault::LeaseDelete,
    Fault::LeaderTerm,
    Fault::LeaderPause,
    Fault::LeaderLinkCut,
    Fault::ApiserverKill,
];

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Fault::LeaderKill => "leader-kill",
            Fault::LeaderTerm => "leader-term",
            Fault::StandbyPause => "standby-pause",
            Fault::LeaderPause => "leader-pause",
            Fault::LeaderLinkCut => "leader-link-cut",
            Fault::LeaseDelete => "lease-delete",
            Fault::ApiserverTerm => "apiserver-term",
            Fault::ApiserverKill => "apiserver-kill",
        }
    }
}

fn parse_fault(name: &str) -> Result<Fault, String> {
    FAULTS.into_iter().find(|f| f.name() == name).ok_or_else(|| {
        let names: Vec<&str> = FAULTS.iter().map(|f| f.name()).collect();
        format!("no fault '{name}': one of {}", names.join(", "))
    })
}

fn now_micros() -> Micros {
    SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_micros() as Micros
}

fn say(what: impl std::fmt::Display) {
    eprintln!("soak: {what}");
}

// --- The replicas ----------------------------------------------------------------

/// One running process of replica `slot`.
struct Running {
    child: Child,
    life: usize,
    killed: bool,
}

/// The three replicas, their lives, and how each ended.
struct Replicas {
    bin: PathBuf,
    /// Each slot's kubeconfig, which points at its link.
    kubeconfigs: Vec<PathBuf>,
    links: Vec<link::Link>,
    namespace: String,
    out: PathBuf,
    running: Vec<Option<Running>>,
    /// Lives started per slot.
    lives: Vec<usize>,
    /// (slot, life, how it ended), in the order they ended.
    ended: Vec<(usize, usize, Exit)>,
    /// When an exited slot is started again: a second after it exited, so a
    /// replica that cannot reach the API server is not started in a tight loop.
    restart_at: Vec<Option<Instant>>,
}

impl Replicas {
    fn log(&self, slot: usize, life: usize) -> PathBuf {
        self.out.join(format!("replica-{slot}.life-{life}.log"))
    }

    fn start(&mut self, slot: usize) {
        let life = self.lives[slot];
        self.lives[slot] += 1;
        let path = self.log(slot, life);
        let file = File::create(&path).unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
        let err = file.try_clone().expect("a second handle on the log file");
        let child = Command::new(&self.bin)
            .args(["--namespace", &self.namespace, "--log-format", "json", "--resync", "30s"])
            .args(["--probe-addr", "0", "--metrics-addr", "0", "--kubeconfig"])
            .arg(&self.kubeconfigs[slot])
            .args(["--leader-elect", "--leader-elect-resource-namespace", &self.namespace])
            .args(["--leader-elect-lease-duration", &format!("{}s", LEASE_DURATION.as_secs())])
            .args(["--leader-elect-renew-deadline", RENEW_DEADLINE, "--leader-elect-retry-period", RETRY_PERIOD])
            // The holder's identity starts with the slot: soak-0_1a2b3c4d.
            .env("HOSTNAME", format!("soak-{slot}"))
            .env_remove("RUST_LOG")
            .env_remove(process_faults_env())
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.bin.display()));
        process::LIVE.lock().expect("live lock").push(child.id());
        self.running[slot] = Some(Running { child, life, killed: false });
    }

    /// Records the replicas that exited and starts them again (unless `restart` is false).
    fn reap(&mut self, restart: bool) {
        for slot in 0..REPLICAS {
            let Some(run) = self.running[slot].as_mut() else { continue };
            let Ok(Some(status)) = run.child.try_wait() else { continue };
            let exit = match (run.killed, status.code(), status.signal()) {
                (true, _, Some(9)) => Exit::KilledBySoak,
                (_, Some(code), _) => Exit::Code(code),
                (_, None, sig) => Exit::Signal(sig.unwrap_or(0)),
            };
            let pid = run.child.id();
            process::LIVE.lock().expect("live lock").retain(|&p| p != pid);
            self.ended.push((slot, run.life, exit));
            self.running[slot] = None;
            self.restart_at[slot] = Some(Instant::now() + Duration::from_secs(1));
        }
        for slot in 0..REPLICAS {
            if restart && self.running[slot].is_none() && self.restart_at[slot].is_some_and(|at| at <= Instant::now()) {
                self.restart_at[slot] = None;
                self.start(slot);
            }
        }
    }

    fn pid(&self, slot: usize) -> Option<u32> {
        self.running[slot].as_ref().map(|r| r.child.id())
    }

    fn signal(&mut self, slot: usize, signal: &str) {
        if let Some(run) = self.running[slot].as_mut() {
            if signal == "KILL" {
                run.killed = true;
            }
            process::send_signal(run.child.id(), signal);
        }
    }

    fn all_running(&self) -> bool {
        self.running.iter().all(Option::is_some)
    }

    /// SIGTERM to each, standbys first (so none takes over from a leader that
    /// stops), and up to 30 s each to exit; then SIGKILL.
    async fn stop_all(&mut self, leader: Option<usize>) {
        let order: Vec<usize> = (0..REPLICAS).filter(|&s| Some(s) != leader).chain(leader).collect();
        for slot in order {
            self.signal(slot, "TERM");
            let deadline = Instant::now() + Duration::from_secs(30);
            while self.running[slot].is_some() && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(100)).await;
                self.reap(false);
            }
            if self.running[slot].is_some() {
                say(format!("replica {slot} ignored SIGTERM for 30 s; killing it"));
                self.signal(slot, "KILL");
                while self.running[slot].is_some() {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    self.reap(false);
                }
            }
        }
    }
}

impl Drop for Replicas {
    /// Never leaves a replica behind, also when the soak panics.
    fn drop(&mut self) {
        for run in self.running.iter_mut().flatten() {
            process::send_signal(run.child.id(), "CONT");
            let _ = run.child.kill();
            let _ = run.child.wait();
        }
    }
}

fn process_faults_env() -> &'static str {
    "DEMO_CONTROLLER_FAULTS"
}

/// The slot of the Lease's holder, if one holds it (None too when the API
/// server does not answer within 5 s).
async fn leader(leases: &Api<Lease>) -> Option<usize> {
    let lease = tokio::time::timeout(Duration::from_secs(5), leases.get_opt(LEASE)).await.ok()?.ok()??;
    let holder = lease.spec?.holder_identity?;
    holder.strip_prefix("soak-")?.split('_').next()?.parse().ok()
}

// --- The writer ------------------------------------------------------------------

/// A pod the writer made and believes exists.
struct Made {
    name: String,
    uid: String,
    gen_label: u32,
    /// Index into PHASES of the phase it was last set to.
    phase: usize,
    created: Instant,
}

/// The phases a pod moves through, in order (a pod never leaves Succeeded).
const PHASES: [&str; 3] = ["Pending", "Running", "Succeeded"];

/// A small xorshift: the writer's choices, reproducible enough and no crate.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

async fn writer(client: Client, namespace: String, stop: Arc<AtomicBool>, writes: Arc<Mutex<Vec<Write>>>) {
    let api = Api::<Pod>::namespaced(client, &namespace);
    let mut pods: Vec<Made> = Vec::new();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut seq = 0u32;
    let mut tick = tokio::time::interval(WRITE_TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let record = |kind: WriteKind, uid: &str| {
        writes.lock().expect("writes lock").push(Write { kind, uid: uid.to_string(), acked: now_micros() })
    };
    while !stop.load(Ordering::SeqCst) {
        tick.tick().await;
        let choice = if pods.len() < 40 { 0 } else { rng.below(10) };
        let result = match choice {
            0..=2 if pods.len() < 120 => {
                seq += 1;
                let name = format!("p-{seq:06}");
                match api.create(&PostParams::default(), &pod(&name)).await {
                    Ok(p) => {
                        let uid = p.uid().unwrap_or_default();
                        record(WriteKind::Create, &uid);
                        pods.push(Made { name, uid, gen_label: 0, phase: 0, created: Instant::now() });
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            }
            6 | 7 if pods.iter().any(|p| p.phase + 1 < PHASES.len()) => {
                let candidates: Vec<usize> = (0..pods.len()).filter(|&i| pods[i].phase + 1 < PHASES.len()).collect();
                let i = candidates[rng.below(candidates.len())];
                let p = &mut pods[i];
                p.phase += 1; // also on an error: the write may have happened
                let phase = PHASES[p.phase];
                let patch = Patch::Merge(json!({"status": {"phase": phase}}));
                match api.patch_status(&p.name, &PatchParams::default(), &patch).await {
                    Ok(_) => {
                        record(WriteKind::Phase(phase.into()), &p.uid);
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            }
            8 | 9 if pods.iter().any(|p| p.created.elapsed() >= MIN_AGE_TO_DELETE) => {
                let old: Vec<usize> =
                    (0..pods.len()).filter(|&i| pods[i].created.elapsed() >= MIN_AGE_TO_DELETE).collect();
                let p = pods.swap_remove(old[rng.below(old.len())]);
                match api.delete(&p.name, &DeleteParams::default().grace_period(0)).await {
                    Ok(_) => {
                        record(WriteKind::Delete, &p.uid);
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            }
            _ => {
                let i = rng.below(pods.len());
                let p = &mut pods[i];
                p.gen_label += 1; // also on an error: the write may have happened
                let patch = Patch::Merge(json!({"metadata": {"labels": {"gen": p.gen_label.to_string()}}}));
                match api.patch(&p.name, &PatchParams::default(), &patch).await {
                    Ok(_) => {
                        record(WriteKind::Relabel(p.gen_label), &p.uid);
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            }
        };
        match result {
            Ok(()) => {}
            // Gone: not the writer's to change any more (it never deletes a pod twice).
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            // The API server is down or busy: wait a little.
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

fn pod(name: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some([("app".to_string(), "soak".to_string()), ("gen".to_string(), "0".to_string())].into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "app".into(),
                image: Some("registry.k8s.io/pause:3.10".into()),
                ..Default::default()
            }],
            automount_service_account_token: Some(false),
            ..Default::default()
        }),
        ..Default::default()
    }
}

// --- The run ---------------------------------------------------------------------

#[tokio::main]
async fn main() {
    // A failure the soak cannot go on from (no cluster, a file it cannot
    // write) is one line; unwinding then stops the replicas (Replicas::drop).
    std::panic::set_hook(Box::new(|info| {
        let payload = info.payload();
        let what = payload
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
            .unwrap_or("a panic")
            .replace('\n', "; ");
        let at = info.location().map(|l| format!(" (at {}:{})", l.file(), l.line())).unwrap_or_default();
        say(format!("error: {what}{at}"));
    }));
    let opts = Opts::parse();
    watchdog(opts.duration + OVERRUN);
    if let Err(e) = std::fs::create_dir_all(&opts.out) {
        say(format!("error: cannot create {}: {e}", opts.out.display()));
        std::process::exit(1);
    }
    // A fresh directory of logs: none left from an earlier run.
    for entry in std::fs::read_dir(&opts.out).into_iter().flatten().flatten() {
        if entry.file_name().to_string_lossy().starts_with("replica-") {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    let interrupted = Arc::new(AtomicBool::new(false));
    {
        let interrupted = interrupted.clone();
        tokio::spawn(async move {
            let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM");
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            say("interrupted: stopping the replicas");
            interrupted.store(true, Ordering::SeqCst);
        });
    }
    let code = run(&opts, &interrupted).await;
    std::process::exit(code);
}

/// Ends the run, its replicas first, if it still runs `limit` after it
/// started: a soak in `make test` must never hang.
fn watchdog(limit: Duration) {
    std::thread::spawn(move || {
        std::thread::sleep(limit);
        say(format!(
            "error: still running {} after it started, so something hangs: killing the replicas and exiting",
            humantime::format_duration(limit)
        ));
        for pid in process::LIVE.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            process::send_signal(*pid, "KILL");
        }
        std::process::exit(1);
    });
}

/// The command that runs this soak again: `make soak DURATION=... ARGS=...`.
fn command(opts: &Opts) -> String {
    let mut args = Vec::new();
    if !opts.faults.is_empty() {
        let names: Vec<&str> = opts.faults.iter().map(|f| f.name()).collect();
        args.push(format!("--faults={}", names.join(",")));
    }
    if humantime::parse_duration(DEFAULT_GAP).ok() != Some(opts.gap) {
        args.push(format!("--gap={}", humantime::format_duration(opts.gap)));
    }
    let mut command = format!("make soak DURATION={}", humantime::format_duration(opts.duration));
    match args.len() {
        0 => {}
        1 => command += &format!(" ARGS={}", args[0]),
        _ => command += &format!(" ARGS='{}'", args.join(" ")),
    }
    command
}

async fn run(opts: &Opts, interrupted: &AtomicBool) -> i32 {
    // The code it measures: the checkout bench/soak.sh built demo-controller from.
    let code = measured::code();
    let client = cluster::client_for(&opts.kubeconfig).await;
    let control_plane = Arc::new(ControlPlane { dir: opts.cluster_dir.clone() });
    let namespace = cluster::namespace(&client, "soak").await;
    let leases = Api::<Lease>::namespaced(client.clone(), &namespace);
    say(format!(
        "{} in namespace {namespace}: {REPLICAS} replicas (lease {}s, renew deadline {RENEW_DEADLINE}, retry {RETRY_PERIOD}), logs in {}",
        humantime::format_duration(opts.duration),
        LEASE_DURATION.as_secs(),
        opts.out.display()
    ));

    // Each replica reaches the API server through a link of its own, which a fault can cut.
    let admin = std::fs::read_to_string(&opts.kubeconfig)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", opts.kubeconfig.display()));
    let (mut kubeconfigs, mut links) = (Vec::new(), Vec::new());
    for slot in 0..REPLICAS {
        let upstream = link::redirect(&admin, "127.0.0.1:1".parse().expect("an address"))
            .unwrap_or_else(|| panic!("no https://127.0.0.1:PORT server in {}", opts.kubeconfig.display()))
            .1;
        let link = link::Link::open(upstream).expect("a local port for a replica's link");
        let (text, _) = link::redirect(&admin, link.addr).expect("the same kubeconfig");
        let path = opts.out.join(format!("kubeconfig-{slot}"));
        save(&path, text.as_bytes());
        kubeconfigs.push(path);
        links.push(link);
    }
    let mut replicas = Replicas {
        bin: opts.demo_controller.clone(),
        kubeconfigs,
        links,
        namespace: namespace.clone(),
        out: opts.out.clone(),
        running: (0..REPLICAS).map(|_| None).collect(),
        lives: vec![0; REPLICAS],
        ended: Vec::new(),
        restart_at: vec![None; REPLICAS],
    };
    for slot in 0..REPLICAS {
        replicas.start(slot);
    }
    if !settle(&mut replicas, &leases, Duration::from_secs(120), interrupted).await {
        replicas.stop_all(None).await;
        if interrupted.load(Ordering::SeqCst) {
            return 130;
        }
        say("error: no replica became leader within 120 s");
        return 1;
    }

    let stop = Arc::new(AtomicBool::new(false));
    let writes = Arc::new(Mutex::new(Vec::new()));
    let writer = tokio::spawn(writer(client.clone(), namespace.clone(), stop.clone(), writes.clone()));
    let started = Instant::now();
    let setup = figures::Setup {
        started: measured::date(),
        code,
        machine: measured::machine(),
        load: measured::load(),
        command: command(opts),
        // As the repository names it (bench/soak.sh passes an absolute path).
        demo_controller: std::env::current_dir()
            .ok()
            .and_then(|here| opts.demo_controller.strip_prefix(here).ok().map(Path::to_path_buf))
            .unwrap_or_else(|| opts.demo_controller.clone())
            .display()
            .to_string(),
        replicas: REPLICAS,
        lease_duration: LEASE_DURATION,
        renew_deadline: humantime::parse_duration(RENEW_DEADLINE).expect("RENEW_DEADLINE is a duration"),
        retry_period: humantime::parse_duration(RETRY_PERIOD).expect("RETRY_PERIOD is a duration"),
        asked: opts.duration,
        left_out: FAULTS
            .iter()
            .filter(|f| !opts.faults.is_empty() && !opts.faults.contains(f))
            .map(|f| f.name())
            .collect(),
    };
    let mut faults: std::collections::BTreeMap<&str, usize> = Default::default();
    let mut next = 0;
    let mut fault_log = Vec::new();
    while started.elapsed() < opts.duration && !interrupted.load(Ordering::SeqCst) {
        wait(&mut replicas, opts.gap, interrupted).await;
        if started.elapsed() >= opts.duration || interrupted.load(Ordering::SeqCst) {
            break;
        }
        let schedule = if opts.faults.is_empty() { &FAULTS[..] } else { &opts.faults[..] };
        let fault = schedule[next % schedule.len()];
        next += 1;
        let Some(lead) = leader(&leases).await else { continue };
        let standby = (1..REPLICAS).map(|d| (lead + d) % REPLICAS).find(|&s| replicas.pid(s).is_some());
        let line = format!("{:>4}s: {} (leader: replica {lead})", started.elapsed().as_secs(), fault.name());
        say(&line);
        fault_log.push((now_micros(), fault.name(), line));
        match fault {
            Fault::LeaderKill => replicas.signal(lead, "KILL"),
            Fault::LeaderTerm => replicas.signal(lead, "TERM"),
            Fault::StandbyPause | Fault::LeaderPause => {
                let slot = if fault == Fault::LeaderPause { Some(lead) } else { standby };
                let Some(slot) = slot else { continue };
                let Some(pid) = replicas.pid(slot) else { continue };
                process::send_signal(pid, "STOP");
                // The others that exit meanwhile are started again; a Ctrl-C cuts the pause short.
                wait(&mut replicas, PAUSE, interrupted).await;
                process::send_signal(pid, "CONT");
            }
            Fault::LeaderLinkCut => {
                replicas.links[lead].set_cut(true);
                wait(&mut replicas, PAUSE, interrupted).await;
                replicas.links[lead].set_cut(false);
            }
            Fault::LeaseDelete => {
                if let Err(e) = leases.delete(LEASE, &DeleteParams::default()).await {
                    say(format!("could not delete the lease: {e}"));
                    continue;
                }
            }
            Fault::ApiserverTerm | Fault::ApiserverKill => {
                let cp = control_plane.clone();
                let (signal, compact) = if fault == Fault::ApiserverTerm { ("TERM", false) } else { ("KILL", true) };
                let restart = tokio::task::spawn_blocking(move || cp.restart(signal, Duration::from_secs(10), compact));
                // Replicas that exit meanwhile are started again (and may exit again, unable to connect).
                // After a Ctrl-C `wait` returns at once: the restart is still waited for, without a busy loop.
                while !restart.is_finished() {
                    wait(&mut replicas, Duration::from_millis(500), interrupted).await;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                if let Err(e) = restart.await {
                    say(format!("error: restarting kube-apiserver failed: {e}"));
                    stop.store(true, Ordering::SeqCst);
                    let _ = writer.await;
                    replicas.stop_all(None).await;
                    return 1;
                }
            }
        }
        *faults.entry(fault.name()).or_default() += 1;
        if !settle(&mut replicas, &leases, Duration::from_secs(120), interrupted).await {
            say("no leader 120 s after the fault: going on (the oracle judges the logs)");
        }
    }

    stop.store(true, Ordering::SeqCst);
    let _ = writer.await;
    if !interrupted.load(Ordering::SeqCst) {
        say(format!("{}s: writes stopped; waiting for the lines to settle", started.elapsed().as_secs()));
        settle(&mut replicas, &leases, Duration::from_secs(60), interrupted).await;
        quiet(&mut replicas, Duration::from_secs(3), Duration::from_secs(60), interrupted).await;
    }
    // A run cut short is reported too, but never recorded.
    let cut_short = interrupted.load(Ordering::SeqCst);
    let took = started.elapsed();

    let finals = match final_list(&client, &namespace).await {
        Ok(finals) => finals,
        Err(e) => {
            say(format!("error: the final list of pods in {namespace}: {e}"));
            replicas.stop_all(None).await;
            return 1;
        }
    };
    let lead = leader(&leases).await;
    replicas.stop_all(lead).await;
    process::LIVE.lock().expect("live lock").clear();
    let writes = writes.lock().expect("writes lock").clone();

    let lives = read_lives(&replicas);
    let verdict = oracle::judge(&lives, &writes, &finals);
    let figures = figures::Figures::new(setup, took, cut_short, &writes, &faults, &fault_log, &lives, &verdict);
    let report = figures.text();
    print!("{report}");
    save(&opts.out.join("report.txt"), report.as_bytes());
    let record = serde_json::to_string_pretty(&figures.json()).unwrap_or_default() + "\n";
    save(&opts.out.join("report.json"), record.as_bytes());
    if opts.record {
        if cut_short {
            say(format!("not recorded in {RECORD}: the run was interrupted"));
        } else if std::fs::write(RECORD, &record).is_ok() {
            say(format!(
                "recorded in {RECORD}: DEMO_CONTROLLER_BLESS=1 cargo test --test figures renders the book's figures \
                 from it; commit both"
            ));
        } else {
            say(format!("error: cannot write {RECORD} (run from the repository, as bench/soak.sh does)"));
            return 1;
        }
    }
    let faults_txt: String = fault_log.iter().map(|(at, _, line)| format!("{} {line}\n", oracle::stamp(*at))).collect();
    save(&opts.out.join("faults.txt"), faults_txt.as_bytes());
    let writes_tsv: String =
        writes.iter().map(|w| format!("{}\t{:?}\t{}\n", oracle::stamp(w.acked), w.kind, w.uid)).collect();
    save(&opts.out.join("writes.tsv"), writes_tsv.as_bytes());
    let finals_tsv: String =
        finals.iter().map(|p| format!("{}\t{}\t{}\tgen={}\n", p.name, p.uid, p.phase, p.gen_label)).collect();
    save(&opts.out.join("final.tsv"), finals_tsv.as_bytes());
    // Tidiness only (bench/soak.sh removes the control plane): a failure here
    // is said in one line and changes neither the report nor the exit code.
    let tidy = tokio::spawn(async move { cluster::delete_namespaces(&client, std::slice::from_ref(&namespace)).await });
    if !matches!(tokio::time::timeout(Duration::from_secs(30), tidy).await, Ok(Ok(()))) {
        say("could not delete the soak's namespace within 30 s; going on");
    }
    if cut_short { 130 } else { i32::from(!verdict.violations.is_empty()) }
}

fn save(path: &Path, bytes: &[u8]) {
    if let Err(e) = std::fs::write(path, bytes) {
        say(format!("cannot write {}: {e}", path.display()));
    }
}

/// Waits `how_long`, restarting replicas that exit.
async fn wait(replicas: &mut Replicas, how_long: Duration, interrupted: &AtomicBool) {
    let until = Instant::now() + how_long;
    while Instant::now() < until && !interrupted.load(Ordering::SeqCst) {
        replicas.reap(true);
        tokio::time::sleep(Duration::from_millis(100).min(until - Instant::now())).await;
    }
    replicas.reap(true);
}

/// Waits until three replicas run and one of them holds the Lease; false after `timeout`.
async fn settle(replicas: &mut Replicas, leases: &Api<Lease>, timeout: Duration, interrupted: &AtomicBool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline && !interrupted.load(Ordering::SeqCst) {
        wait(replicas, Duration::from_millis(250), interrupted).await;
        if replicas.all_running() && leader(leases).await.is_some_and(|s| replicas.pid(s).is_some()) {
            return true;
        }
    }
    false
}

/// Waits until no replica's log grew for `quiet` (at most `timeout`, and no longer after a Ctrl-C).
async fn quiet(replicas: &mut Replicas, quiet: Duration, timeout: Duration, interrupted: &AtomicBool) {
    let size = |r: &Replicas| -> u64 {
        (0..REPLICAS)
            .filter_map(|s| r.running[s].as_ref().map(|run| r.log(s, run.life)))
            .filter_map(|p| std::fs::metadata(p).ok().map(|m| m.len()))
            .sum()
    };
    let deadline = Instant::now() + timeout;
    let (mut last, mut since) = (size(replicas), Instant::now());
    while Instant::now() < deadline && since.elapsed() < quiet && !interrupted.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(200)).await;
        replicas.reap(true);
        let now = size(replicas);
        if now != last {
            (last, since) = (now, Instant::now());
        }
    }
}

/// The API server's list of the pods, the oracle's final state (tried for up to 30 s).
async fn final_list(client: &Client, namespace: &str) -> Result<Vec<FinalPod>, String> {
    let api = Api::<Pod>::namespaced(client.clone(), namespace);
    let deadline = Instant::now() + Duration::from_secs(30);
    let list = loop {
        let error = match tokio::time::timeout(Duration::from_secs(10), api.list(&ListParams::default())).await {
            Ok(Ok(list)) => break list,
            Ok(Err(e)) => e.to_string(),
            Err(_) => "no answer within 10 s".to_string(),
        };
        if Instant::now() >= deadline {
            return Err(error);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    Ok(list
        .items
        .iter()
        .map(|p| FinalPod {
            uid: p.uid().unwrap_or_default(),
            name: p.name_any(),
            phase: p.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default(),
            gen_label: p.labels().get("gen").cloned().unwrap_or_default(),
        })
        .collect())
}

fn read_lives(replicas: &Replicas) -> Vec<Life> {
    replicas
        .ended
        .iter()
        .map(|&(slot, life, exit)| {
            let path = replicas.log(slot, life);
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
            Life { slot, life, lines: text.lines().map(Line::parse).collect(), exit }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(args: &[&str]) -> Opts {
        let fixed = ["soak", "--kubeconfig", "kc", "--cluster-dir", "dir"];
        Opts::parse_from(fixed.iter().chain(args))
    }

    #[test]
    fn the_record_names_the_command_that_runs_it_again() {
        assert_eq!(command(&opts(&[])), "make soak DURATION=10m");
        assert_eq!(
            command(&opts(&["--duration", "60m", "--faults=leader-kill,apiserver-kill", "--record"])),
            "make soak DURATION=1h ARGS=--faults=leader-kill,apiserver-kill"
        );
        assert_eq!(
            command(&opts(&["--duration", "3m", "--faults", "leader-term", "--gap", "10s", "--out", "x"])),
            "make soak DURATION=3m ARGS='--faults=leader-term --gap=10s'"
        );
    }
}
