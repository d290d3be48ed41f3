//! The local node changes nothing on the host it does not own, and its
//! teardown removes only what it made: state that someone else made on the
//! host, before the node started and while it ran (a network namespace, a
//! FORWARD rule, an nft table, an ip_forward change, a process in a cgroup of
//! its own), is still there after `cluster/node/down.sh`, after a failed start
//! and after a run killed with SIGKILL; and everything else on the host is as
//! it was (cluster/node/hoststate.sh, compared before and after).
//!
//! Needs root and no other node on this machine: `make test` as root runs
//! these after the shared node is stopped. They start nodes of their own, one
//! at a time (the `TURN` lock): only one node can run on a machine.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::PostParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use serde_json::json;

static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn snapshot() -> String {
    let out = Command::new("bash").arg(repo().join("cluster/node/hoststate.sh")).output().unwrap();
    assert!(out.status.success(), "hoststate.sh: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn script(name: &str, dir: &Path, env: &[(&str, &str)]) -> Output {
    Command::new("bash")
        .arg(repo().join("cluster/node").join(name))
        .arg("--dir")
        .arg(dir)
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Runs a command as root on the host; panics with its stderr if it fails.
fn run(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd).args(args).output().unwrap_or_else(|e| panic!("run {cmd}: {e}"));
    assert!(out.status.success(), "{cmd} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn section<'a>(snapshot: &'a str, name: &str) -> &'a str {
    let start = snapshot.find(&format!("## {name}\n")).unwrap_or_else(|| panic!("no section {name}"));
    let rest = &snapshot[start..];
    let end = rest[3..].find("\n## ").map(|i| i + 4).unwrap_or(rest.len());
    &rest[..end]
}

/// Whether section `name` of `got` holds nothing the node could have left
/// that `want` lacks. Mostly: the two are the same (the processes section
/// counts only processes in a node's cgroups, so another program's control
/// plane starting meanwhile is not counted). The node's mounts never reach
/// the host, so the mount table may only have lost lines, which another
/// program (a container engine) unmounted meanwhile.
fn unchanged(name: &str, want: &str, got: &str) -> bool {
    let (want, got) = (section(want, name), section(got, name));
    match name {
        "mounts" => got.lines().all(|g| want.lines().any(|w| w == g)),
        _ => want == got,
    }
}

/// Panics with a diff when the two snapshots differ in any of `sections`
/// (as [`unchanged`] judges it).
fn assert_same(what: &str, want: &str, got: &str, sections: &[&str]) {
    let differs: Vec<&&str> = sections.iter().filter(|s| !unchanged(s, want, got)).collect();
    if differs.is_empty() {
        return;
    }
    let scratch = common::fresh_dir_in(Path::new(env!("CARGO_TARGET_TMPDIR")), "node-host-diff");
    let (w, g) = (scratch.join("want.txt"), scratch.join("got.txt"));
    std::fs::write(&w, want).unwrap();
    std::fs::write(&g, got).unwrap();
    let diff = Command::new("diff").arg(&w).arg(&g).output().unwrap();
    panic!("{what}: the host differs in {differs:?}:\n{}", String::from_utf8_lossy(&diff.stdout));
}

const ALL: &[&str] = &[
    "sysctls",
    "links",
    "addresses",
    "routes",
    "iptables",
    "ip6tables",
    "nft tables",
    "mounts",
    "network namespaces",
    "cgroups",
    "directories",
    "processes",
];

/// Writes `command` (shell, safe to run twice) to the undo journal before
/// the change it undoes is made. `Drop` undoes each change when the test
/// ends; the journal is for when it cannot: cluster/node/test.sh runs it in a
/// trap, so a run cut short (Ctrl-C, SIGKILL of the test process) still
/// leaves the host as it found it.
fn undo_later(command: &str) {
    use std::io::Write;
    let journal = std::env::var_os("DEMO_CONTROLLER_TEST_UNDO")
        .expect("DEMO_CONTROLLER_TEST_UNDO is not set: run these tests through cluster/node/test.sh (make test as root), which undoes what an interrupted run left on the host");
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(journal).expect("open the undo journal");
    writeln!(file, "{command}").expect("write the undo journal");
}

/// What other software on the machine owns: a network namespace, a FORWARD
/// rule, an nft table and a process in a cgroup of its own (named
/// `kubepods`, as a real node's would be, where that name is free). Removed
/// again on drop, whatever the test's outcome.
struct Foreign {
    tag: &'static str,
    netns: String,
    rule: Vec<String>,
    table: String,
    cgroup: Option<PathBuf>,
    sleeper: Option<std::process::Child>,
}

impl Foreign {
    fn new(tag: &'static str, with_process: bool) -> Foreign {
        let netns = format!("dcn-foreign-{tag}");
        undo_later(&format!("ip netns del {netns} 2>/dev/null || true"));
        run("ip", &["netns", "add", &netns]);
        let rule: Vec<String> = ["FORWARD", "-s", "192.0.2.77/32", "-m", "comment", "--comment"]
            .iter()
            .map(|s| s.to_string())
            .chain([format!("foreign {tag}"), "-j".into(), "ACCEPT".into()])
            .collect();
        undo_later(&format!(
            "iptables -w -D FORWARD -s 192.0.2.77/32 -m comment --comment 'foreign {tag}' -j ACCEPT 2>/dev/null || true"
        ));
        let mut add = vec!["-w".to_string(), "-A".to_string()];
        add.extend(rule.iter().cloned());
        run("iptables", &add.iter().map(String::as_str).collect::<Vec<_>>());
        let table = format!("dcn_foreign_{tag}");
        undo_later(&format!("nft delete table inet {table} 2>/dev/null || true"));
        run("nft", &["add", "table", "inet", &table]);
        let (mut cgroup, mut sleeper) = (None, None);
        if with_process {
            let pids = ["/sys/fs/cgroup/pids", "/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
                .into_iter()
                .map(Path::new)
                .find(|h| h.join("cgroup.procs").exists())
                .expect("a cgroup hierarchy");
            let name = if pids.join("kubepods").exists() { format!("dcn-foreign-{tag}") } else { "kubepods".into() };
            let dir = pids.join(name);
            // Only the processes in this cgroup, which the test made: kill
            // them, then remove it.
            let d = dir.display();
            undo_later(&format!(
                "if [ -d {d} ]; then for p in $(cat {d}/cgroup.procs); do kill -KILL \"$p\" 2>/dev/null; done; \
                 while [ -s {d}/cgroup.procs ]; do sleep 0.1; done; rmdir {d}; fi"
            ));
            std::fs::create_dir(&dir).unwrap();
            let child = Command::new("sleep").arg("600").stdin(Stdio::null()).spawn().unwrap();
            std::fs::write(dir.join("cgroup.procs"), child.id().to_string()).unwrap();
            (cgroup, sleeper) = (Some(dir), Some(child));
        }
        Foreign { tag, netns, rule, table, cgroup, sleeper }
    }

    /// Still all there, the process still running in its cgroup.
    fn assert_intact(&mut self, when: &str) {
        assert!(run("ip", &["netns", "list"]).contains(&self.netns), "{when}: network namespace {} gone", self.netns);
        assert!(
            run("iptables", &["-w", "-S", "FORWARD"]).contains(&format!("\"foreign {}\"", self.tag)),
            "{when}: the FORWARD rule {} is gone",
            self.tag
        );
        assert!(run("nft", &["list", "tables"]).contains(&self.table), "{when}: nft table {} gone", self.table);
        if let (Some(dir), Some(child)) = (&self.cgroup, &mut self.sleeper) {
            assert!(child.try_wait().unwrap().is_none(), "{when}: the process in {} was killed", dir.display());
            let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap();
            assert!(procs.lines().any(|p| p == child.id().to_string()), "{when}: {} lost its process", dir.display());
        }
    }
}

impl Drop for Foreign {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.netns]).status();
        let _ = Command::new("iptables").args(["-w", "-D"]).args(&self.rule).status();
        let _ = Command::new("nft").args(["delete", "table", "inet", &self.table]).status();
        if let Some(mut child) = self.sleeper.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(dir) = &self.cgroup {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// The host's net.ipv4.ip_forward, flipped by "someone else" while the node
/// runs; put back as it was on drop.
struct IpForward(String);

impl IpForward {
    const PATH: &str = "/proc/sys/net/ipv4/ip_forward";
    fn flip() -> IpForward {
        let was = std::fs::read_to_string(Self::PATH).unwrap().trim().to_string();
        undo_later(&format!("echo {was} > {}", Self::PATH));
        std::fs::write(Self::PATH, if was == "1" { "0" } else { "1" }).unwrap();
        IpForward(was)
    }
}

impl Drop for IpForward {
    fn drop(&mut self) {
        let _ = std::fs::write(Self::PATH, &self.0);
    }
}

fn no_other_node() {
    let lock = Path::new("/run/demo-controller-node.lock");
    assert!(
        !lock.exists() || Command::new("flock").args(["-n"]).arg(lock).arg("true").status().unwrap().success(),
        "another node is running on this machine: stop it first (cluster/node/down.sh --dir ITS_DIR)"
    );
}

async fn client(dir: &Path) -> Client {
    let kc = Kubeconfig::read_from(dir.join("plane/kubeconfig")).unwrap();
    Client::try_from(Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await.unwrap()).unwrap()
}

/// A pod that really runs (so there are veths, container mounts, a pod
/// network namespace, kube-proxy's rules and pod cgroups to leave behind).
async fn run_a_pod(dir: &Path) {
    let pods: Api<Pod> = Api::namespaced(client(dir).await, "default");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": { "name": "sleeper" },
        "spec": { "containers": [{ "name": "c", "image": "docker.io/library/busybox:local",
                                   "imagePullPolicy": "Never", "command": ["sleep", "3600"] }] }
    }))
    .unwrap();
    let start = Instant::now();
    // The default ServiceAccount comes from the controller-manager shortly after the start.
    while pods.create(&PostParams::default(), &pod).await.is_err() {
        assert!(start.elapsed() < Duration::from_secs(30), "could not create the pod");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    while pods.get("sleeper").await.unwrap().status.and_then(|s| s.phase).as_deref() != Some("Running") {
        assert!(start.elapsed() < Duration::from_secs(90), "the pod never ran");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Whether any process still runs with DIR on its command line.
fn processes_of(dir: &Path) -> Vec<String> {
    let needle = format!("{}/", dir.display());
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline"))
            && String::from_utf8_lossy(&cmdline).contains(&needle)
            && !String::from_utf8_lossy(&cmdline).contains("cargo")
        {
            found.push(String::from_utf8_lossy(&cmdline).replace('\0', " "));
        }
    }
    found
}

#[tokio::test]
#[ignore = "needs root and the local node: run `make test` as root"]
async fn node_killed_with_sigkill_leaves_what_others_made_and_down_removes_the_rest() {
    let _turn = TURN.lock().await;
    no_other_node();
    let dir = repo().join("target/test-node-teardown");
    let mut before_start = Foreign::new("a", true);
    let before = snapshot();

    let up = script("up.sh", &dir, &[]);
    assert!(up.status.success(), "node/up.sh failed:\n{}", stderr(&up));
    run_a_pod(&dir).await;

    // While it runs: nothing host-wide changed. Only the node's own link
    // (and its cgroups and processes) are new.
    let running = snapshot();
    assert_same(
        "while the node runs",
        &before,
        &running,
        &["sysctls", "iptables", "ip6tables", "nft tables", "mounts", "network namespaces", "directories"],
    );
    // Its processes are counted (or the comparison after down.sh could not
    // fail) ...
    assert!(section(&running, "processes").contains("kubelet: 1\n"), "{}", section(&running, "processes"));
    // ... and the node did make all of it, in its own namespaces (or this
    // test could not fail): the kubelet's kernel.panic write landed in the
    // node's mask, the pod's network namespace and kube-proxy's chains are
    // the node's.
    let exec = |args: &[&str]| {
        let mut all = vec!["cluster/node/exec.sh", "--dir", dir.to_str().unwrap(), "--"];
        all.extend(args);
        run("bash", &all)
    };
    assert_eq!(exec(&["cat", "/proc/sys/kernel/panic"]).trim(), "10");
    assert!(exec(&["ls", "/run/netns"]).contains("cni-"));
    assert!(exec(&["iptables", "-w", "-t", "nat", "-S"]).contains("KUBE-SERVICES"));

    // Others change the host meanwhile.
    let mut while_running = Foreign::new("b", false);
    let _forward = IpForward::flip();
    let changed = snapshot();

    // SIGKILL to the process holding the node's namespaces, as a killed test
    // run would leave it: the kernel takes every process of the node with it.
    let holder = std::fs::read_to_string(dir.join("node.pid")).unwrap();
    run("kill", &["-KILL", holder.trim()]);
    let start = Instant::now();
    while !processes_of(&dir).is_empty() {
        assert!(start.elapsed() < Duration::from_secs(30), "still running: {:#?}", processes_of(&dir));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let down = script("down.sh", &dir, &[]);
    assert!(down.status.success(), "node/down.sh failed:\n{}", stderr(&down));
    assert!(!dir.exists(), "down.sh removes its directory");
    let after = snapshot();
    // What the others made is still there, and the rest is as before.
    before_start.assert_intact("after down.sh");
    while_running.assert_intact("after down.sh");
    assert_same(
        "after down.sh",
        &changed,
        &after,
        &["sysctls", "iptables", "ip6tables", "nft tables", "mounts", "network namespaces", "directories"],
    );
    assert_same("after down.sh", &before, &after, &["links", "addresses", "routes", "cgroups", "processes"]);
}

#[tokio::test]
#[ignore = "needs root and the local node: run `make test` as root"]
async fn node_a_failed_or_killed_start_leaves_what_others_made_and_down_removes_the_rest() {
    let _turn = TURN.lock().await;
    no_other_node();
    let dir = repo().join("target/test-node-failed");
    let mut foreign = Foreign::new("c", true);
    let before = snapshot();

    // A start that fails: everything launched, the node never Ready in time.
    let up = script("up.sh", &dir, &[("LOCAL_NODE_TIMEOUT", "0")]);
    assert_eq!(up.status.code(), Some(1), "{}", stderr(&up));
    assert!(stderr(&up).contains("node/up.sh: error: no Ready node after 0 s\n"), "{}", stderr(&up));
    assert!(
        stderr(&up).contains(&format!(
            "node/up.sh: start failed; removing the node (its logs stay in {0}/logs; cluster/node/down.sh --dir {0} removes them)",
            dir.display()
        )),
        "{}",
        stderr(&up)
    );
    assert!(dir.join("logs/kubelet.log").exists(), "the logs stay");
    foreign.assert_intact("after a failed start");
    assert_same("after a failed start", &before, &snapshot(), ALL);
    let down = script("down.sh", &dir, &[]);
    assert!(down.status.success(), "{}", stderr(&down));
    assert!(!dir.exists());

    // up.sh itself killed with SIGKILL mid-start: the node it started runs on
    // without it, and down.sh removes it.
    let mut up = Command::new("bash")
        .arg(repo().join("cluster/node/up.sh"))
        .arg("--dir")
        .arg(&dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !dir.join("logs/kubelet.log").exists() {
        assert!(start.elapsed() < Duration::from_secs(60), "the node never got as far as its kubelet");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    up.kill().unwrap();
    up.wait().unwrap();
    assert!(!processes_of(&dir).is_empty(), "the node runs on without up.sh");
    let down = script("down.sh", &dir, &[]);
    assert!(down.status.success(), "{}", stderr(&down));
    assert!(!dir.exists());
    // (up.sh's log follower, `tail --pid`, notices within a second that up.sh is gone.)
    let start = Instant::now();
    while !processes_of(&dir).is_empty() {
        assert!(start.elapsed() < Duration::from_secs(5), "{:#?}", processes_of(&dir));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    foreign.assert_intact("after a killed start");
    assert_same("after a killed start", &before, &snapshot(), ALL);
}
