//! Root runs only what it checked, and touches only what this project made.
//! `make demo`, `make node-up` and `make test` run as root on someone's own
//! machine, beside other local users; each test here plays one of them, the
//! user nobody (uid 65534, through `setpriv`), making the moves any user can:
//! a directory of their own where root might be pointed, a symlink of theirs
//! on root's cache path that they swap back and forth, a lock they hold. And
//! `make demo` run beside a cluster or node someone already started.
//!
//! Needs root (setpriv, and the node's scripts): `make test` as root runs
//! these (node_*) after the shared node is stopped; without root it reports
//! them as not run. They take turns (`TURN`): some start a node, and only one
//! can run on a machine.

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use kube::Api;

static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const NOBODY: u32 = 65534;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Runs `bash SCRIPT ARGS...` from the repository as root, with `env` added.
fn script(name: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new("bash")
        .arg(repo().join(name))
        .args(args)
        .envs(env.iter().copied())
        .current_dir(repo())
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Runs `make ARGS...` in the repository as root.
fn make(args: &[&str]) -> Output {
    Command::new("make").arg("--no-print-directory").args(args).current_dir(repo()).output().unwrap()
}

fn nobody() -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]);
    cmd
}

/// Runs a command as nobody; panics if it fails.
fn as_nobody(args: &[&str]) {
    let out = nobody().args(args).output().unwrap();
    assert!(out.status.success(), "as nobody: {args:?}: {}", stderr(&out));
}

/// A directory of nobody's in /tmp (anyone may make one there), made afresh
/// by nobody (`mktemp -d`, so never a name prepared by someone else), removed
/// again on drop with everything in it, whatever the test's outcome.
struct Theirs(PathBuf);

impl Theirs {
    fn new(tag: &str) -> Theirs {
        let out = nobody().args(["mktemp", "-d", &format!("/tmp/dcn-theirs-{tag}.XXXXXXXX")]).output().unwrap();
        assert!(out.status.success(), "as nobody: mktemp -d: {}", stderr(&out));
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        as_nobody(&["chmod", "755", dir.to_str().unwrap()]);
        Theirs(dir)
    }
    fn path(&self, rel: &str) -> PathBuf {
        self.0.join(rel)
    }
}

impl Drop for Theirs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Everything under `dir` as a user would list it: path, owner, mode, size
/// and content of each entry; to compare before and after.
fn listing(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(p) = stack.pop() {
        let m = std::fs::symlink_metadata(&p).unwrap();
        let content = if m.is_file() { std::fs::read_to_string(&p).unwrap_or_default() } else { String::new() };
        out.push(format!("{} {} {:o} {} {content:?}", p.display(), m.uid(), m.mode(), m.len()));
        if m.is_dir() {
            stack.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
        }
    }
    out.sort();
    out
}

fn no_other_node() {
    let lock = Path::new("/run/demo-controller-node.lock");
    assert!(
        !lock.exists() || Command::new("flock").args(["-n"]).arg(lock).arg("true").status().unwrap().success(),
        "another node is running on this machine: stop it first (cluster/node/down.sh --dir ITS_DIR)"
    );
}

/// Every script that acts on a DIR, with the prefix of its log lines.
const DIR_SCRIPTS: &[(&str, &str)] = &[
    ("cluster/up.sh", "up.sh"),
    ("cluster/down.sh", "down.sh"),
    ("cluster/node/up.sh", "node/up.sh"),
    ("cluster/node/down.sh", "node/down.sh"),
    ("cluster/node/exec.sh", "node/exec.sh"),
    ("cluster/demo.sh", "demo.sh"),
    ("cluster/node/demo.sh", "node/demo.sh"),
];

fn run_on_dir(name: &str, dir: &Path) -> Output {
    let mut args = vec!["--dir", dir.to_str().unwrap()];
    if name.ends_with("exec.sh") {
        args.extend(["--", "true"]);
    }
    // The demo runs on a local current context when there is one: with no
    // kubeconfig it comes to its --dir.
    let env: &[(&str, &str)] =
        if name.ends_with("demo.sh") { &[("KUBECONFIG", "/nonexistent/kubeconfig")] } else { &[] };
    script(name, &args, env)
}

#[tokio::test]
#[ignore = "needs root and the local node: run `make test` as root"]
async fn node_scripts_refuse_a_dir_another_user_made() {
    let _turn = TURN.lock().await;
    let theirs = Theirs::new("dir");
    // Their empty directory, made before root's run (where a sticky /tmp let
    // them), and one with a forged marker and node.pid of each kind.
    let empty = theirs.path("empty");
    let forged = theirs.path("forged");
    as_nobody(&["mkdir", "-m", "777", empty.to_str().unwrap(), forged.to_str().unwrap()]);
    for f in [".demo-controller-node", ".demo-controller-cluster", "node.pid", "etcd.pid"] {
        as_nobody(&["sh", "-c", &format!("echo 1 >{}", forged.join(f).display())]);
    }
    let before = listing(&theirs.0);
    for dir in [&empty, &forged] {
        for (name, prefix) in DIR_SCRIPTS {
            let out = run_on_dir(name, dir);
            assert_eq!(out.status.code(), Some(1), "{name} --dir {}: {}", dir.display(), stderr(&out));
            assert_eq!(
                stderr(&out),
                format!(
                    "{prefix}: error: refusing --dir {}: it is owned by uid {NOBODY}, not by uid 0, who runs this; \
                     not touching it\n",
                    dir.display()
                ),
                "{name}"
            );
        }
    }
    // A DIR that does not exist yet, below their directory: they could make
    // it, or swap a level of it, between root's check and root's mkdir.
    let below = theirs.path("new");
    for (name, prefix) in DIR_SCRIPTS {
        if !name.ends_with("up.sh") {
            continue;
        }
        let out = run_on_dir(name, &below);
        assert_eq!(out.status.code(), Some(1), "{name}: {}", stderr(&out));
        assert_eq!(
            stderr(&out),
            format!(
                "{prefix}: error: refusing to use {0}: {0} is owned by uid {NOBODY}, so that user could have replaced \
                 it; pick a --dir that only root (or the repository's owner) can change\n",
                theirs.0.display()
            ),
            "{name}"
        );
    }
    assert_eq!(listing(&theirs.0), before, "their directories stay as they were");
}

#[tokio::test]
#[ignore = "needs root and the local node: run `make test` as root"]
async fn node_cluster_down_leaves_a_directory_it_did_not_make() {
    let _turn = TURN.lock().await;
    // Theirs, looking like a control plane's directory (a Python project's
    // env/, say, and a pki/).
    let theirs = Theirs::new("lookalike");
    let look = theirs.path("project");
    as_nobody(&["mkdir", "-p", look.join("pki").to_str().unwrap(), look.join("env").to_str().unwrap()]);
    as_nobody(&["sh", "-c", &format!("echo key >{0}/pki/ca.key; echo x >{0}/etcd.sh", look.display())]);
    let before = listing(&theirs.0);
    let out = script("cluster/down.sh", &["--dir", look.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        format!(
            "down.sh: error: refusing --dir {}: it is owned by uid {NOBODY}, not by uid 0, who runs this; not touching it\n",
            look.display()
        )
    );
    assert_eq!(listing(&theirs.0), before, "their directory survives cluster/down.sh");

    // Root's own, as /etc with its pki/ is on Fedora: not made by up.sh.
    let etc = repo().join("target/test-lookalike-etc");
    let _ = std::fs::remove_dir_all(&etc);
    std::fs::create_dir_all(etc.join("pki")).unwrap();
    std::fs::write(etc.join("env"), "mine").unwrap();
    let before = listing(&etc);
    let out = script("cluster/down.sh", &["--dir", etc.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        format!(
            "down.sh: error: refusing --dir {}: it was not made by this project (no .demo-controller-cluster in it); \
             not touching it\n",
            etc.display()
        )
    );
    assert_eq!(listing(&etc), before);
    std::fs::remove_dir_all(&etc).unwrap();
}

/// The real cache (root's own) as cluster/build.sh resolves it: its
/// control-plane directory, e.g. /root/.cache/demo-controller/control-plane/KEY.
fn real_plane_cache() -> PathBuf {
    let out = script("cluster/build.sh", &[], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    PathBuf::from(String::from_utf8_lossy(&out.stdout).lines().last().unwrap())
}

/// A process of nobody's in a process group of its own: the group is
/// killed (no `ln` or `mv` of it left running) and the child reaped on drop.
struct Reaped(Child);

impl Reaped {
    fn spawn(mut cmd: Command) -> Reaped {
        use std::os::unix::process::CommandExt;
        Reaped(cmd.process_group(0).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap())
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-KILL", "--", &format!("-{}", self.0.id())]).status();
        let _ = self.0.wait();
    }
}

#[tokio::test]
#[ignore = "needs root and the local node: run `make test` as root"]
async fn node_root_runs_no_binary_from_a_cache_another_user_controls() {
    let _turn = TURN.lock().await;
    no_other_node();
    let real = real_plane_cache();
    let key = real.file_name().unwrap().to_str().unwrap().to_string();
    let real_base = real.parent().unwrap().parent().unwrap().to_path_buf();

    // Their directory on root's cache path (`DEMO_CONTROLLER_CACHE` pointed at
    // it to reuse a build): `cache` is their symlink, which they swap, over
    // and over, between root's real cache and a copy of its layout holding
    // binaries of theirs. Run as root, any of those would leave `pwned`.
    let theirs = Theirs::new("cache");
    let fake = theirs.path("fake");
    let pwned = theirs.path("pwned");
    let evil = format!("#!/bin/sh\necho \"ran as uid $(id -u)\" >>{}\nexit 1\n", pwned.display());
    for bin in [
        format!("control-plane/{key}/etcd"),
        format!("control-plane/{key}/kube-apiserver"),
        "node/x/kubelet".to_string(),
    ] {
        let path = fake.join(&bin);
        as_nobody(&["mkdir", "-p", path.parent().unwrap().to_str().unwrap()]);
        std::fs::write(&path, &evil).unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        std::os::unix::fs::chown(&path, Some(NOBODY), Some(NOBODY)).unwrap();
    }
    let link = theirs.path("cache");
    as_nobody(&["ln", "-s", real_base.to_str().unwrap(), link.to_str().unwrap()]);
    let swap = format!(
        "while :; do ln -sfn {fake} {d}/next && mv -T {d}/next {link}; ln -sfn {real} {d}/next && mv -T {d}/next {link}; done",
        fake = fake.display(),
        real = real_base.display(),
        d = theirs.0.display(),
        link = link.display()
    );
    let _swapper = Reaped::spawn({
        let mut cmd = nobody();
        cmd.args(["sh", "-c", &swap]);
        cmd
    });
    let cache = link.to_str().unwrap();
    let plane = repo().join("target/test-theirs-cache-plane");
    let node = repo().join("target/test-theirs-cache-node");
    for (name, args, prefix) in [
        ("cluster/build.sh", vec![], "build.sh"),
        ("cluster/up.sh", vec!["--dir", plane.to_str().unwrap()], "build.sh"),
        ("cluster/node/up.sh", vec!["--dir", node.to_str().unwrap()], "build.sh"),
        ("cluster/node/build.sh", vec![], "node/build.sh"),
        ("cluster/node/images.sh", vec![], "node/images.sh"),
    ] {
        let out = script(name, &args, &[("DEMO_CONTROLLER_CACHE", cache)]);
        assert_eq!(out.status.code(), Some(1), "{name}: {}", stderr(&out));
        // One line, naming the path and whose it is (which level of it
        // depends on where their symlink pointed at that instant).
        let refusal: Vec<String> = stderr(&out).lines().filter(|l| l.contains("error")).map(str::to_string).collect();
        assert_eq!(refusal.len(), 1, "{name}: {}", stderr(&out));
        let line = &refusal[0];
        assert!(line.starts_with(&format!("{prefix}: error: refusing to use {cache}")), "{name}: {line}");
        assert!(line.contains(&format!(" is owned by uid {NOBODY}, so that user could have replaced it; ")), "{line}");
        assert!(!plane.exists() && !node.exists(), "{name}: a refused start made its directory");
    }
    assert!(!pwned.exists(), "their binary ran: {}", std::fs::read_to_string(&pwned).unwrap_or_default());
    assert!(!Path::new("/run/demo-controller-node.lock").exists(), "the refused node start left its lock");
}

#[tokio::test]
#[ignore = "needs root and the local node: run `make test` as root"]
async fn node_root_runs_the_resolved_binaries_it_checked() {
    let _turn = TURN.lock().await;
    let real = real_plane_cache();
    let real_base = real.parent().unwrap().parent().unwrap().to_path_buf();
    // Root's own symlink on the cache path: fine to use, but what the
    // control plane's scripts run is the resolved path that was checked.
    let scratch = common::fresh_dir("dcn-root-cache");
    let link = scratch.join("cache");
    std::os::unix::fs::symlink(&real_base, &link).unwrap();
    let plane = repo().join("target/test-resolved-plane");
    let up = script(
        "cluster/up.sh",
        &["--dir", plane.to_str().unwrap()],
        &[("DEMO_CONTROLLER_CACHE", link.to_str().unwrap())],
    );
    let bins = ["etcd", "kube-apiserver", "kube-controller-manager"];
    let scripts = bins.map(|b| std::fs::read_to_string(plane.join(format!("{b}.sh"))).unwrap_or_default());
    let down = script("cluster/down.sh", &["--dir", plane.to_str().unwrap()], &[]);
    std::fs::remove_dir_all(&scratch).unwrap();
    assert!(up.status.success(), "{}", stderr(&up));
    assert!(down.status.success(), "{}", stderr(&down));
    for (text, bin) in scripts.iter().zip(bins) {
        assert!(text.contains(&format!("exec {} \\", real.join(bin).display())), "{text}");
        assert!(!text.contains(link.to_str().unwrap()), "{text}");
    }
}

#[tokio::test]
#[ignore = "needs root and the local node: run `make test` as root"]
async fn node_another_users_flock_on_the_lock_does_not_stop_a_start() {
    let _turn = TURN.lock().await;
    no_other_node();
    let lock = Path::new("/run/demo-controller-node.lock");
    // As older versions left it: 0644, so nobody can open it and hold it.
    let _stale = Stale(lock);
    std::fs::write(lock, "").unwrap();
    std::fs::set_permissions(lock, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    // One process of theirs, holding it (kill it and the lock is gone).
    let hold = format!("exec 9<{} && flock 9 && exec sleep 600", lock.display());
    let _holder = Reaped::spawn({
        let mut cmd = nobody();
        cmd.args(["sh", "-c", &hold]);
        cmd
    });
    let start = Instant::now();
    while Command::new("flock").arg("-n").arg(lock).arg("true").status().unwrap().success() {
        assert!(start.elapsed() < Duration::from_secs(10), "nobody never got the lock");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let dir = repo().join("target/test-node-lock");
    let up = script("cluster/node/up.sh", &["--dir", dir.to_str().unwrap()], &[]);
    let meta = std::fs::metadata(lock).ok().map(|m| (m.uid(), m.mode() & 0o777));
    // Nor can they take the new one.
    let again = nobody().args(["flock", "-n", lock.to_str().unwrap(), "true"]).output().unwrap();
    let down = script("cluster/node/down.sh", &["--dir", dir.to_str().unwrap()], &[]);
    assert!(up.status.success(), "node/up.sh: {}", stderr(&up));
    assert!(
        stderr(&up).contains(&format!(
            "node/up.sh: replacing {}: it was not root's with mode 0600, so any user could hold it (open by uid {NOBODY})\n",
            lock.display()
        )),
        "{}",
        stderr(&up)
    );
    assert_eq!(meta, Some((0, 0o600)), "the node's lock is root's, 0600");
    assert!(!again.status.success() && stderr(&again).contains("Permission denied"), "{again:?}");
    assert!(down.status.success(), "node/down.sh: {}", stderr(&down));
    assert!(!lock.exists(), "down.sh removes the lock");
}

/// Removes the lock file on drop if it is still the 0644 one the test made
/// (the start failed before replacing it), so later tests find none.
struct Stale<'a>(&'a Path);

impl Drop for Stale<'_> {
    fn drop(&mut self) {
        if std::fs::metadata(self.0).is_ok_and(|m| m.mode() & 0o777 == 0o644) {
            let _ = std::fs::remove_file(self.0);
        }
    }
}

/// `cluster/up.sh` on a running control plane only says so: how a user sees
/// that it still runs.
fn plane_still_running(dir: &Path) {
    let out = script("cluster/up.sh", &["--dir", dir.to_str().unwrap()], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).starts_with(&format!("up.sh: control plane in {} is already running at https://", dir.display())),
        "{}",
        stderr(&out)
    );
}

#[tokio::test]
#[ignore = "needs root and the local node: run `make test` as root"]
async fn node_demo_leaves_a_cluster_and_a_node_it_did_not_start_running() {
    let _turn = TURN.lock().await;
    no_other_node();
    let plane = repo().join("target/test-demo-cluster");
    let node = repo().join("target/test-demo-node");
    let cluster_dir = format!("CLUSTER_DIR={}", plane.display());
    let node_dir = format!("NODE_DIR={}", node.display());

    // `make cluster-up`, then `make demo`: the lesson runs in that control
    // plane and leaves it running.
    let up = make(&["cluster-up", &cluster_dir]);
    assert!(up.status.success(), "{}", stderr(&up));
    let demo = make(&["demo", &cluster_dir, &node_dir]);
    let after = std::panic::catch_unwind(|| plane_still_running(&plane));
    let down = make(&["cluster-down", &cluster_dir]);
    assert!(demo.status.success(), "make demo: {}", stderr(&demo));
    assert!(stderr(&demo).contains("using the control plane already running in"), "{}", stderr(&demo));
    assert!(after.is_ok(), "make demo stopped the control plane it did not start");
    assert!(down.status.success(), "{}", stderr(&down));
    assert!(!node.exists(), "the demo started no node of its own");

    // `make node-up`, then `make demo`: the lesson runs on that node and
    // leaves it running and Ready.
    let up = make(&["node-up", &node_dir]);
    assert!(up.status.success(), "{}", stderr(&up));
    let demo = make(&["demo", &cluster_dir, &node_dir]);
    let again = script("cluster/node/up.sh", &["--dir", node.to_str().unwrap()], &[]);
    let ready = async {
        let nodes: Api<Node> = Api::all(common::client_for(&node.join("plane/kubeconfig")).await);
        let n = nodes.get("demo-node").await.ok()?;
        n.status?.conditions?.into_iter().find(|c| c.type_ == "Ready").map(|c| c.status)
    }
    .await;
    let down = make(&["node-down", &node_dir]);
    assert!(demo.status.success(), "make demo: {}", stderr(&demo));
    assert!(stderr(&demo).contains("the node in"), "{}", stderr(&demo));
    assert_eq!(
        stderr(&again),
        format!("node/up.sh: node in {} is already running\n", node.display()),
        "make demo stopped the node it did not start"
    );
    assert_eq!(ready.as_deref(), Some("True"), "the node is Ready after the demo");
    assert!(down.status.success(), "{}", stderr(&down));
    assert!(!plane.exists(), "the demo started no control plane of its own");
}
