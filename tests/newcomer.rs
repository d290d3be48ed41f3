//! A newcomer's two first commands keep their promises: `make demo` on the
//! cluster a learner already has (cluster/demo.sh, cluster/demo-context.sh:
//! the context it says on its first line, a namespace of its own deleted at
//! the end, one line and exit 1 for a context that is missing or silent) and
//! `make chapter N=1` (cluster/chapter.sh: its first lines are the kubectl
//! command that makes a pod appear in the chapter, and it does; a bad N is
//! one line and exit 2).
//!
//! These run the scripts as `make` does, and need `kubectl` on PATH, as the
//! learner does for the demo on their own cluster.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Api;
use kube::api::DeleteParams;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// bash SCRIPT ARGS with ENV, its stderr and stdout in one stream (as a
/// terminal shows them), run from the repository.
/// SIGINT and SIGTERM start at their defaults, as in a terminal, whatever
/// the test runner inherited: a shell started with a signal ignored cannot
/// trap it, and a CI runner may start its jobs with SIGINT ignored.
fn script(args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new("env");
    cmd.current_dir(repo())
        .args(["--default-signal=INT,TERM", "bash", "-c", "exec bash \"$@\" 2>&1", "bash"])
        .args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

fn run(args: &[&str], env: &[(&str, &str)]) -> (i32, Vec<String>) {
    let Output { status, stdout, .. } = script(args, env).output().expect("run bash");
    let lines = String::from_utf8_lossy(&stdout).lines().map(str::to_owned).collect();
    (status.code().unwrap_or(-1), lines)
}

/// The local control plane's kubeconfig with its context renamed `to`, as
/// kind names its own (kind-NAME), written to a file of its own.
fn renamed_kubeconfig(dir: &Path, file: &str, to: &str) -> PathBuf {
    let kc = std::fs::read_to_string(dir.join("kubeconfig")).expect("the control plane's kubeconfig");
    assert!(kc.contains("- name: local\n  context:") && kc.contains("current-context: local"), "{kc}");
    let kc = kc
        .replace("- name: local\n  context:", &format!("- name: {to}\n  context:"))
        .replace("current-context: local", &format!("current-context: {to}"));
    tmp_file(file, &kc)
}

#[test]
fn the_contexts_make_demo_uses_unasked_are_those_of_local_clusters() {
    for (name, local) in [
        ("kind-learner", true),
        ("k3d-dev", true),
        ("minikube", true),
        ("docker-desktop", true),
        ("rancher-desktop", true),
        ("orbstack", true),
        ("colima", true),
        ("kind-", false),
        ("prod", false),
        ("gke_project_zone_cluster", false),
        ("minikube-2", false),
        ("local", false),
    ] {
        let status = Command::new("bash")
            .current_dir(repo())
            .args(["-c", "source cluster/context.sh && local_context \"$1\"", "bash", name])
            .status()
            .expect("run bash");
        assert_eq!(status.success(), local, "local_context {name}");
    }
}

#[test]
fn a_context_that_does_not_exist_is_one_line_and_exit_1() {
    let kc = kubeconfig("newcomer-nope", "https://127.0.0.1:1", None, "    token: x");
    let (code, lines) = run(&["cluster/demo.sh", "--context", "nope"], &[("KUBECONFIG", kc.to_str().unwrap())]);
    assert_eq!(code, 1, "{lines:?}");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].starts_with("demo.sh: error: no context nope in your kubeconfig"), "{lines:?}");
}

#[test]
fn a_context_that_does_not_answer_is_one_line_and_exit_1() {
    // ctx, on a port nothing listens on.
    let kc = kubeconfig("newcomer-silent", "https://127.0.0.1:1", None, "    token: x");
    let (code, lines) = run(&["cluster/demo.sh", "--context", "ctx"], &[("KUBECONFIG", kc.to_str().unwrap())]);
    assert_eq!(code, 1, "{lines:?}");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].starts_with("demo.sh: error: context ctx does not answer"), "{lines:?}");
}

#[test]
fn a_bad_chapter_number_is_one_line_naming_the_valid_ones_and_exit_2() {
    for n in ["", "0", "6", "10", "x", "1x", "-1"] {
        let (code, lines) = run(&["cluster/chapter.sh"], &[("N", n)]);
        assert_eq!(code, 2, "N={n}: {lines:?}");
        assert_eq!(
            lines,
            [format!("make chapter: N must be one of 1 2 3 4 5 7 8 9 (got '{n}'): e.g. make chapter N=1")]
        );
    }
}

/// The demos and the chapters run what cargo builds, root too: a
/// CARGO_TARGET_DIR that another user could change (here: anyone may write
/// to it, and no sticky bit keeps their entries apart) is one line and exit
/// 1, before anything is built there.
#[test]
fn a_cargo_target_dir_others_can_change_is_one_line_and_exit_1() {
    let open = OpenDir::new("open-target");
    let path = open.path();
    for (script, prefix, env) in [
        ("cluster/demo.sh", "demo.sh", vec![("CARGO_TARGET_DIR", path)]),
        ("cluster/demo-context.sh", "demo.sh", vec![("CARGO_TARGET_DIR", path)]),
        ("cluster/chapter.sh", "chapter.sh", vec![("CARGO_TARGET_DIR", path), ("N", "1")]),
    ] {
        let args: Vec<&str> = if script.ends_with("demo-context.sh") { vec![script, "ctx"] } else { vec![script] };
        let (code, lines) = run(&args, &env);
        assert_eq!(code, 1, "{script}: {lines:?}");
        assert_eq!(
            lines,
            [format!(
                "{prefix}: error: refusing to use {path}: {path} is writable by other users (mode 777), so one of them \
                 could have replaced it; set CARGO_TARGET_DIR to a directory only you (or the repository's owner) \
                 can change, or unset it"
            )],
            "{script}"
        );
    }
    assert!(open.is_empty(), "something was built in {path}");
}

#[tokio::test]
#[ignore = "needs the local control plane: run `make test`"]
async fn the_current_context_is_used_when_it_is_local_and_answers() {
    let dir = cluster_dir();
    let current = |kc: &Path| {
        let out = Command::new("bash")
            .current_dir(repo())
            .env("KUBECONFIG", kc)
            .args(["-c", "source cluster/context.sh && local_current_context"])
            .output()
            .expect("run bash");
        (out.status.success(), String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    let kind = renamed_kubeconfig(&dir, "newcomer-kind", "kind-learner");
    assert_eq!(current(&kind), (true, "kind-learner".to_owned()));
    // The control plane's own context is named `local`: not a name a local
    // cluster tool gives, so not used unasked.
    assert_eq!(current(&dir.join("kubeconfig")), (false, String::new()));
    // Named like kind's, but nothing answers there.
    let silent = kubeconfig("newcomer-kind-silent", "https://127.0.0.1:1", None, "    token: x");
    let silent = tmp_file(
        "newcomer-kind-silent",
        &std::fs::read_to_string(&silent).expect("read").replace("ctx", "kind-silent"),
    );
    assert_eq!(current(&silent), (false, String::new()));
}

#[tokio::test]
#[ignore = "needs the local control plane: run `make test`"]
async fn make_demo_on_a_kind_context_runs_in_a_namespace_of_its_own_and_deletes_it() {
    let cluster = cluster().await;
    let kc = renamed_kubeconfig(&cluster.dir, "newcomer-demo", "kind-learner");
    // CONTEXT names it, so a failed detection could never fall through to
    // the demo that starts a control plane or, as root, a node.
    let (code, lines) = run(&["cluster/demo.sh", "--context", "kind-learner"], &[("KUBECONFIG", kc.to_str().unwrap())]);
    let all = lines.join("\n");
    assert_eq!(code, 0, "{all}");
    assert!(lines[0].starts_with("demo.sh: using your cluster: context kind-learner (https://127.0.0.1:"), "{all}");
    let ns = lines
        .iter()
        .find_map(|l| l.split("kubectl create namespace ").nth(1))
        .map(|rest| rest.trim_end_matches("\u{1b}[0m").to_owned())
        .unwrap_or_else(|| panic!("no namespace created:\n{all}"));
    assert!(ns.starts_with("demo-controller-"), "{ns}");
    for line in [
        format!("onAdd: {ns}/kuard"),
        format!("onUpdate: {ns}/kuard namespace=\"{ns}\" name=\"kuard\""),
        "changes=\"label +tier=web\"".to_owned(),
        format!("onDelete: {ns}/kuard"),
        "shutdown complete left=0".to_owned(),
    ] {
        assert!(all.contains(&line), "missing {line:?} in:\n{all}");
    }
    // Deleted: gone, or terminating (the namespace controller empties a
    // namespace before it goes; a cluster without one never finishes).
    match Api::<Namespace>::all(cluster.client.clone()).get_opt(&ns).await.expect("get namespace") {
        None => {}
        Some(n) => assert!(n.metadata.deletion_timestamp.is_some(), "namespace {ns} was not deleted"),
    }
}

#[tokio::test]
#[ignore = "needs the local control plane: run `make test`"]
async fn make_chapter_1_prints_first_the_command_that_makes_a_pod_appear_in_it() {
    let cluster = cluster().await;
    let dir = cluster.dir.to_str().expect("utf-8 path").to_owned();
    let pods = Api::<Pod>::namespaced(cluster.client.clone(), "play");
    // A kuard left by an earlier run would make the command fail.
    let _ = pods.delete("kuard", &DeleteParams::default()).await;
    let mut child = script(&["cluster/chapter.sh", "--dir", &dir], &[("N", "1")])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start cluster/chapter.sh");
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let out = child.stdout.take().expect("stdout");
    let seen = lines.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            seen.lock().expect("lines").push(line);
        }
    });
    let wait_for = |what: &str| {
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            let now = lines.lock().expect("lines").clone();
            if now.iter().any(|l| l.contains(what)) {
                return now;
            }
            assert!(Instant::now() < deadline, "no {what:?} in:\n{}", now.join("\n"));
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let seen = wait_for("InitDone");
    let command =
        format!("    KUBECONFIG={dir}/kubeconfig kubectl -n play run kuard --image=registry.k8s.io/pause:3.10");
    assert!(seen[0].starts_with("chapter.sh: chapter 1 (examples/ch1_watch.rs)"), "{seen:?}");
    assert_eq!(seen[1], command, "{seen:?}");
    let ran = Command::new("sh")
        .args(["-c", command.trim()])
        .stdout(Stdio::null())
        .status()
        .expect("run the printed command");
    assert!(ran.success(), "{command}");
    let seen = wait_for("Apply: play/kuard");
    let _ = pods.delete("kuard", &DeleteParams::default()).await;
    let _ = child.kill();
    let _ = child.wait();
    assert!(seen.iter().any(|l| l.starts_with("Apply: play/kuard rv=")), "{seen:?}");
}

#[tokio::test]
#[ignore = "needs the local control plane: run `make test`"]
async fn ctrl_c_in_make_demo_on_a_kind_context_deletes_its_namespace() {
    use std::os::unix::process::CommandExt;
    let cluster = cluster().await;
    let kc = renamed_kubeconfig(&cluster.dir, "newcomer-ctrl-c", "kind-learner");
    let mut cmd = script(&["cluster/demo.sh", "--context", "kind-learner"], &[("KUBECONFIG", kc.to_str().unwrap())]);
    // A process group of its own, as a terminal's foreground job is: Ctrl-C
    // sends SIGINT to all of it.
    let mut child = cmd.stdout(Stdio::piped()).process_group(0).spawn().expect("start cluster/demo.sh");
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let out = child.stdout.take().expect("stdout");
    let seen = lines.clone();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            seen.lock().expect("lines").push(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(300);
    while !lines.lock().expect("lines").iter().any(|l| l.contains("onAdd: demo-controller-")) {
        assert!(Instant::now() < deadline, "no onAdd in:\n{}", lines.lock().expect("lines").join("\n"));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let group = format!("-{}", child.id());
    let sent = Command::new("kill").args(["-INT", "--", &group]).status().expect("run kill");
    assert!(sent.success());
    let status = child.wait().expect("wait for cluster/demo.sh");
    reader.join().expect("reader");
    let all = lines.lock().expect("lines").join("\n");
    assert_eq!(status.code(), Some(130), "{all}");
    // One signal for demo-controller: the terminal's SIGINT, then its drain,
    // never a SIGTERM on top that would cut the drain short.
    assert!(all.contains("received SIGINT: shutting down"), "{all}");
    assert!(!all.contains("received SIGTERM") && !all.contains("SIGINT again"), "{all}");
    assert!(all.contains("shutdown complete"), "{all}");
    let ns = all
        .split("kubectl create namespace ")
        .nth(1)
        .and_then(|rest| rest.split('\u{1b}').next())
        .unwrap_or_else(|| panic!("no namespace created:\n{all}"))
        .to_owned();
    match Api::<Namespace>::all(cluster.client.clone()).get_opt(&ns).await.expect("get namespace") {
        None => {}
        Some(n) => assert!(n.metadata.deletion_timestamp.is_some(), "namespace {ns} was not deleted:\n{all}"),
    }
}

/// A kubeconfig of one context, `name`, current, whose server is `server`.
fn one_context(file: &str, name: &str, server: &str) -> PathBuf {
    let kc = kubeconfig(file, server, None, "    token: x");
    let text = std::fs::read_to_string(&kc).expect("read");
    tmp_file(
        file,
        &text
            .replace("- name: ctx\n", &format!("- name: {name}\n"))
            .replace("current-context: ctx", &format!("current-context: {name}")),
    )
}

/// A context is used unasked only when its API server is on this machine
/// (cluster/context.sh): a loopback address, or the address a local tool
/// gives its own (minikube's on a bridge of this machine); a name alone
/// (kind-prod pointing elsewhere) is not enough.
#[test]
fn a_context_is_local_only_when_its_server_is_on_this_machine() {
    for (name, server, bridge, local) in [
        ("kind-dev", "https://127.0.0.1:40123", false, true),
        ("k3d-dev", "https://0.0.0.0:6550", false, true),
        ("k3d-dev", "https://host.docker.internal:6550", false, true),
        ("docker-desktop", "https://kubernetes.docker.internal:6443", false, true),
        ("orbstack", "https://[::1]:26443", false, true),
        ("colima", "https://localhost:6443", false, true),
        ("minikube", "https://192.168.49.2:8443", true, true),
        ("minikube", "https://192.168.49.2:8443", false, false),
        ("kind-prod", "https://10.20.30.40:6443", true, false),
        ("kind-prod", "https://prod.example.com:6443", false, false),
        ("kind-prod", "https://127.0.0.1.example.com:6443", false, false),
        ("docker-desktop", "https://kubernetes.example.com:6443", false, false),
        ("minikube", "https://10.0.0.2:8443", true, false),
        ("kind-dev", "https://[2001:db8::1]:6443", false, false),
    ] {
        let stub = if bridge { "on_local_bridge() { return 0; }" } else { "on_local_bridge() { return 1; }" };
        let status = Command::new("bash")
            .current_dir(repo())
            .args([
                "-c",
                &format!("source cluster/context.sh && {stub} && local_server \"$1\" \"$2\""),
                "bash",
                name,
                server,
            ])
            .status()
            .expect("run bash");
        assert_eq!(status.success(), local, "local_server {name} {server} (on a bridge: {bridge})");
    }
}

/// A current context that is not local is not used, and the demo says so in
/// one line with the command that uses it, without asking its server
/// anything.
#[test]
fn a_current_context_that_is_not_local_is_named_with_how_to_use_it() {
    for (name, server) in [("kind-prod", "https://10.20.30.40:6443"), ("gke_p_z_prod", "https://127.0.0.1:1")] {
        let kc = one_context(&format!("newcomer-remote-{name}"), name, server);
        let out = Command::new("bash")
            .current_dir(repo())
            .env("KUBECONFIG", &kc)
            .args(["-c", "source cluster/context.sh && local_current_context"])
            .output()
            .expect("run bash");
        assert!(!out.status.success());
        assert!(out.stdout.is_empty(), "{out:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            format!(
                "demo.sh: the current context {name} ({server}) is not a local cluster's, so the lesson does not run \
                 there unasked: `make demo CONTEXT={name}` runs it there\n"
            )
        );
    }
}

/// `make demo` takes the context, and the directories that pick a local
/// cluster, from make's command line only: CI systems export CONTEXT.
#[test]
fn make_demo_takes_context_from_the_command_line_only() {
    let dry = |args: &[&str], env: &[(&str, &str)]| {
        let mut cmd = Command::new("make");
        cmd.current_dir(repo()).args(["--no-print-directory", "-n"]).args(args);
        for var in ["MAKEFLAGS", "MFLAGS", "MAKELEVEL", "CONTEXT", "CLUSTER_DIR", "NODE_DIR"] {
            cmd.env_remove(var);
        }
        let out = cmd.envs(env.iter().copied()).output().expect("run make");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    let exported = [("CONTEXT", "production"), ("CLUSTER_DIR", "/srv/theirs"), ("NODE_DIR", "/srv/node")];
    for target in ["demo", "deploy", "undeploy"] {
        let recipe = dry(&[target], &exported);
        assert!(recipe.contains(" --context ''"), "{recipe}");
        assert!(!recipe.contains("production") && !recipe.contains("/srv/"), "{recipe}");
    }
    assert_eq!(
        dry(&["demo"], &exported),
        "NODE_DIR='target/local-node' bash cluster/demo.sh --dir 'target/local-cluster' --context ''"
    );
    assert_eq!(
        dry(&["demo", "CONTEXT=kind-dev", "CLUSTER_DIR=/srv/c", "NODE_DIR=/srv/n"], &exported),
        "NODE_DIR='/srv/n' bash cluster/demo.sh --dir '/srv/c' --context 'kind-dev'"
    );
    // The script itself reads no CONTEXT from its environment either: with
    // one exported, it goes on to the current context (here not a local
    // one, said so) and then to its --dir (here refused: not the project's).
    let kc = one_context("newcomer-env-context", "remote", "https://10.20.30.40:6443");
    let dir = fresh_dir_in(Path::new(env!("CARGO_TARGET_TMPDIR")), "not-a-cluster-dir");
    let (code, lines) = run(
        &["cluster/demo.sh", "--dir", dir.to_str().unwrap()],
        &[("KUBECONFIG", kc.to_str().unwrap()), ("CONTEXT", "nope")],
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code, 1, "{lines:?}");
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[0].starts_with("demo.sh: the current context remote (https://10.20.30.40:6443) is not a local"));
    assert_eq!(
        lines[1],
        format!(
            "demo.sh: error: refusing --dir {}: it was not made by this project (no .demo-controller-cluster in it); \
             not touching it",
            dir.display()
        )
    );
}

/// Through make, bad input is the script's one line, then make's own line
/// with the script's code, and make exits 2: what book/src/appendix/
/// operations.md says.
#[test]
fn bad_input_through_make_is_the_scripts_line_then_makes_and_exit_2() {
    let make = |args: &[&str], env: &[(&str, &str)]| {
        let mut cmd = Command::new("make");
        cmd.current_dir(repo()).arg("--no-print-directory").args(args);
        for var in ["MAKEFLAGS", "MFLAGS", "MAKELEVEL", "CONTEXT", "CLUSTER_DIR", "NODE_DIR"] {
            cmd.env_remove(var);
        }
        let out = cmd.envs(env.iter().copied()).output().expect("run make");
        let lines: Vec<String> = String::from_utf8_lossy(&out.stderr).lines().map(str::to_owned).collect();
        (out.status.code(), lines)
    };
    let make_line = |line: &str, target: &str, code: u8| {
        line.starts_with("make: *** [Makefile:") && line.ends_with(&format!(": {target}] Error {code}"))
    };

    // Chapter 6 runs in two terminals, by hand: make chapter has no N=6.
    let (code, lines) = make(&["chapter", "N=6"], &[]);
    assert_eq!(code, Some(2), "{lines:?}");
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[0], "make chapter: N must be one of 1 2 3 4 5 7 8 9 (got '6'): e.g. make chapter N=1");
    assert!(make_line(&lines[1], "chapter", 2), "{lines:?}");

    let kc = kubeconfig("newcomer-make-nope", "https://127.0.0.1:1", None, "    token: x");
    let (code, lines) = make(&["demo", "CONTEXT=nope"], &[("KUBECONFIG", kc.to_str().unwrap())]);
    assert_eq!(code, Some(2), "{lines:?}");
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[0].starts_with("demo.sh: error: no context nope in your kubeconfig"), "{lines:?}");
    assert!(make_line(&lines[1], "demo", 1), "{lines:?}");

    let docs = std::fs::read_to_string(repo().join("book/src/appendix/operations.md")).expect("operations.md");
    let docs = docs.split_whitespace().collect::<Vec<_>>().join(" ");
    for promise in [
        "is one line on stderr naming the problem and the fix, and the script exits 1 (2 for a bad `N`)",
        "`make: *** [Makefile:LINE: TARGET] Error CODE`, with the script's code in it, and exits 2 whatever that code was",
    ] {
        assert!(docs.contains(promise), "operations.md no longer says: {promise}");
    }
}

/// The demos' logger gets one signal (proc.sh's stop_logger): after Ctrl-C,
/// which the terminal sent to it too, it is only waited for; when the script
/// alone is stopped, it gets SIGTERM. A stand-in logger records every signal
/// it gets and drains for a moment on the first, as demo-controller does.
#[test]
fn the_demos_logger_gets_one_signal() {
    use std::os::unix::process::CommandExt;
    let logger = r#"
import signal, sys, time
got = []
def on(sig, _):
    got.append(signal.Signals(sig).name)
    open(sys.argv[1], "a").write(signal.Signals(sig).name + "\n")
signal.signal(signal.SIGINT, on)
signal.signal(signal.SIGTERM, on)
open(sys.argv[1] + ".ready", "w").close()
while not got:
    time.sleep(0.01)
time.sleep(0.5)  # the drain: a second signal would land here
"#;
    // As a demo runs it: the same traps, stop_logger at the end.
    let demo = r#"
set -euo pipefail
source cluster/proc.sh
say() { echo "$*" >&2; }
log() { say "$@"; }
logger='' interrupted=''
trap stop_logger EXIT
trap 'interrupted=1; exit 130' INT
trap 'exit 143' TERM
python3 -c "$1" "$2" &
logger=$!
while [[ ! -e $2.ready ]]; do sleep 0.01; done
echo ready
while :; do sleep 0.1; done
"#;
    let dir = fresh_dir_in(Path::new(env!("CARGO_TARGET_TMPDIR")), "one-signal");
    for (case, to_group, want_code, want) in [("ctrl-c", true, 130, "SIGINT\n"), ("sigterm", false, 143, "SIGTERM\n")] {
        let record = dir.join(case);
        // Signals at their defaults, as `script` starts them.
        let mut child = Command::new("env")
            .current_dir(repo())
            .args(["--default-signal=INT,TERM", "bash", "-c", demo, "bash", logger, record.to_str().unwrap()])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("start bash");
        let mut ready = String::new();
        BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut ready).expect("read");
        assert_eq!(ready, "ready\n", "{case}");
        // Ctrl-C: SIGINT to the whole foreground process group, as a
        // terminal sends it; otherwise SIGTERM to the script alone.
        let (signal, whom) =
            if to_group { ("-INT", format!("-{}", child.id())) } else { ("-TERM", child.id().to_string()) };
        assert!(Command::new("kill").args([signal, "--", &whom]).status().expect("kill").success());
        let status = child.wait().expect("wait");
        assert_eq!(status.code(), Some(want_code), "{case}");
        assert_eq!(std::fs::read_to_string(&record).unwrap_or_default(), want, "{case}: the signals the logger got");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `make demo` on a control plane that was already running (`make
/// cluster-up`) creates its pod under a name of its own run and deletes
/// only that: a pod someone else named `kuard` is left as it was.
#[tokio::test]
#[ignore = "needs the local control plane: run `make test`"]
async fn make_demo_on_a_running_control_plane_leaves_a_pod_it_did_not_create() {
    use kube::api::PostParams;
    let cluster = cluster().await;
    let pods = Api::<Pod>::namespaced(cluster.client.clone(), "default");
    let theirs: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "kuard", "labels": {"owner": "someone-else"}},
        "spec": {"containers": [{"name": "kuard", "image": "registry.k8s.io/pause:3.10"}]}
    }))
    .expect("a pod");
    // One left by an earlier run of this test.
    let _ = pods.delete("kuard", &DeleteParams::default().grace_period(0)).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let created = loop {
        match pods.create(&PostParams::default(), &theirs).await {
            Ok(p) => break p,
            Err(e) => assert!(Instant::now() < deadline, "creating their kuard: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let dir = cluster.dir.to_str().expect("utf-8 path");
    let (code, lines) = run(&["cluster/demo.sh", "--dir", dir], &[("KUBECONFIG", "/nonexistent/kubeconfig")]);
    let all = lines.join("\n");
    let after = pods.get_opt("kuard").await.expect("get kuard");
    let _ = pods.delete("kuard", &DeleteParams::default().grace_period(0)).await;
    assert_eq!(code, 0, "{all}");
    assert!(all.contains(&format!("using the control plane already running in {dir}")), "{all}");
    assert!(all.contains("onAdd: default/kuard-") && all.contains("onDelete: default/kuard-"), "{all}");
    let after = after.unwrap_or_else(|| panic!("their kuard was deleted:\n{all}"));
    assert_eq!(after.metadata.uid, created.metadata.uid, "{all}");
    assert!(after.metadata.deletion_timestamp.is_none(), "their kuard is being deleted:\n{all}");
}
