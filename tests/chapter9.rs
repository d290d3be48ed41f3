//! Chapter 9, the node reboot operator, against the real local control
//! plane: its agent and its controller as the learner runs them, on Node
//! objects the tests make. A bare API server accepts Nodes without a
//! kubelet; the tests write each node's Ready condition as a kubelet would.
//!
//! Every node a test makes carries the label `demo.example.com/ch9-test` with
//! a value of its own, and the controller watches only those (`-l`): tests
//! running at once never see each other's nodes. Each test deletes its nodes
//! at the end.
//!
//! How many nodes are unavailable is checked from a watch of every change of
//! the test's nodes (`Watch` below), never by polling: each event is a state
//! the server really held.

mod common;

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher, watcher::Event};
use kube::{Api, ResourceExt};
use serde_json::json;

const NEEDED: &str = "demo.example.com/reboot-needed";
const NOW: &str = "demo.example.com/reboot-now";
const IN_PROGRESS: &str = "demo.example.com/reboot-in-progress";
const LABEL: &str = "demo.example.com/ch9-test";
const T: Duration = Duration::from_secs(30);

/// Where cargo put the chapters: target/<profile>/examples/.
fn chapter_bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let bin = exe.parent().and_then(|deps| deps.parent()).expect("target/<profile>/deps").join("examples").join(name);
    assert!(bin.exists(), "{} is not built: run `cargo build --examples` first, or `make test`", bin.display());
    bin
}

fn start(name: &str, c: &Cluster, kubeconfig: Option<&std::path::Path>, args: &[&str]) -> Logger {
    let mut cmd = Command::new(chapter_bin(name));
    cmd.args(args).env("KUBECONFIG", kubeconfig.unwrap_or(&c.kubeconfig)).env_remove("RUST_LOG");
    cmd.env_remove("NODE_NAME");
    Logger::spawn(cmd, &[])
}

fn output(program: &Logger) -> Vec<String> {
    program.lines().iter().map(|v| v["raw"].as_str().unwrap_or("<not text>").to_string()).collect()
}

async fn wait_line(program: &Logger, line: &str) {
    let start = Instant::now();
    while !output(program).iter().any(|l| l == line) {
        assert!(start.elapsed() < T, "timed out waiting for {line:?}\n{}", program.dump());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The test's nodes: names `<prefix>-<suffix>`, one label value.
struct Nodes {
    api: Api<Node>,
    prefix: String,
}

impl Nodes {
    async fn new(c: &Cluster, what: &str) -> Nodes {
        let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() % 1_000_000;
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Nodes { api: Api::all(c.client.clone()), prefix: format!("ch9-{what}-{stamp}-{n}") }
    }

    fn name(&self, suffix: &str) -> String {
        format!("{}-{suffix}", self.prefix)
    }

    fn selector(&self) -> String {
        format!("{LABEL}={}", self.prefix)
    }

    /// Creates a node, Ready or not, with these annotations. A Node keeps
    /// the status it is created with (its strategy allows it), so the node
    /// is never seen without its condition.
    async fn make(&self, suffix: &str, ready: bool, annotations: &[&str]) {
        let annotations: serde_json::Map<String, serde_json::Value> =
            annotations.iter().map(|a| (a.to_string(), json!("true"))).collect();
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": self.name(suffix), "labels": {LABEL: self.prefix}, "annotations": annotations},
            "status": {"conditions": [condition(ready)]},
        }))
        .unwrap();
        self.api.create(&PostParams::default(), &node).await.expect("create node");
    }

    /// Writes the Ready condition, as the kubelet does.
    async fn set_ready(&self, suffix: &str, ready: bool) {
        let patch = json!({"status": {"conditions": [condition(ready)]}});
        self.api.patch_status(&self.name(suffix), &PatchParams::default(), &Patch::Merge(&patch)).await.expect("ready");
    }

    async fn annotate(&self, suffix: &str, annotations: serde_json::Value) {
        let patch = json!({"metadata": {"annotations": annotations}});
        self.api.patch(&self.name(suffix), &PatchParams::default(), &Patch::Merge(&patch)).await.expect("annotate");
    }

    /// The reboot annotations the server holds on a node.
    async fn annotations(&self, suffix: &str) -> Vec<String> {
        let node = self.api.get(&self.name(suffix)).await.expect("get node");
        let mut ours: Vec<String> = node.annotations().keys().filter(|k| k.contains("/reboot-")).cloned().collect();
        ours.sort();
        ours
    }

    async fn delete_all(&self) {
        let list = ListParams::default().labels(&self.selector());
        self.api.delete_collection(&DeleteParams::default(), &list).await.expect("delete the test's nodes");
    }
}

fn condition(ready: bool) -> serde_json::Value {
    let (status, reason) = if ready { ("True", "KubeletReady") } else { ("False", "KubeletNotReady") };
    json!({"type": "Ready", "status": status, "reason": reason})
}

/// Unavailable as the chapter defines it: not Ready, rebooting, or told to.
fn unavailable(node: &Node) -> bool {
    let conditions = node.status.as_ref().and_then(|s| s.conditions.as_ref());
    let ready = conditions.into_iter().flatten().any(|c| c.type_ == "Ready" && c.status == "True");
    !ready || node.annotations().contains_key(IN_PROGRESS) || node.annotations().contains_key(NOW)
}

#[derive(Default)]
struct Seen {
    synced: bool,
    nodes: HashMap<String, Node>,
    /// The most nodes unavailable at once, over every state the watch showed.
    most: usize,
    /// The nodes seen with reboot-in-progress: those an agent rebooted.
    rebooted: BTreeSet<String>,
    errors: Vec<String>,
}

/// A watch of the test's nodes that counts the unavailable ones after every
/// change. A watch delivers every change in order, so each count is of a
/// state the server held.
struct Watch(Arc<Mutex<Seen>>, tokio::task::JoinHandle<()>);

impl Watch {
    async fn start(nodes: &Nodes) -> Watch {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let config = watcher::Config::default().labels(&nodes.selector());
        // With a backoff: a watcher without one retries a lasting error at
        // once, in a loop that never yields to the runtime. A run of this
        // file once hung there for good, its memory filling with `buffer's
        // worker closed unexpectedly`, and no test was reported.
        let mut events = Box::pin(watcher(nodes.api.clone(), config).default_backoff());
        let state = seen.clone();
        let task = tokio::spawn(async move {
            while let Some(event) = events.next().await {
                let mut s = state.lock().unwrap();
                match event {
                    Ok(Event::InitApply(node) | Event::Apply(node)) => _ = s.nodes.insert(node.name_any(), node),
                    Ok(Event::Delete(node)) => _ = s.nodes.remove(&node.name_any()),
                    Ok(Event::InitDone) => s.synced = true,
                    Ok(Event::Init) => {}
                    Err(err) => s.errors.push(err.to_string()),
                }
                let count = s.nodes.values().filter(|n| unavailable(n)).count();
                s.most = s.most.max(count);
                let rebooting: Vec<String> = s
                    .nodes
                    .values()
                    .filter(|n| n.annotations().contains_key(IN_PROGRESS))
                    .map(|n| n.name_any())
                    .collect();
                s.rebooted.extend(rebooting);
            }
        });
        let watch = Watch(seen, task);
        watch.until("the test's watch synced", |s| s.synced).await;
        watch
    }

    async fn until(&self, what: &str, done: impl Fn(&Seen) -> bool) {
        let start = Instant::now();
        loop {
            {
                let s = self.0.lock().unwrap();
                assert!(s.errors.is_empty(), "the test's watch failed: {:?}", s.errors);
                if done(&s) {
                    return;
                }
                assert!(start.elapsed() < T, "timed out waiting for {what}: most unavailable {}", s.most);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn most(&self) -> usize {
        self.0.lock().unwrap().most
    }

    /// Every node of the test without a reboot annotation.
    fn clean(s: &Seen) -> bool {
        s.nodes.values().all(|n| !n.annotations().keys().any(|k| k.contains("/reboot-")))
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.1.abort();
    }
}

/// The lines as the book shows them: the test's node prefix written `node`.
fn book_output(name: &str, nodes: &Nodes, lines: &[String]) {
    let path = repo().join("book/src/output").join(format!("{name}.txt"));
    let text: String = lines.iter().map(|l| l.replace(&nodes.prefix, "node") + "\n").collect();
    if std::env::var("DEMO_CONTROLLER_BLESS").is_ok_and(|v| v == "1") {
        std::fs::write(&path, &text).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == text,
        "{} differs from this run's output (DEMO_CONTROLLER_BLESS=1 rewrites it when the change is meant)\n\
         --- committed\n{committed}--- this run\n{text}",
        path.display()
    );
}

const CONTROLLER_START: &str = "chapter 9 controller: reboot-needed -> reboot-now, at most 1 unavailable";

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn a_rolling_reboot_of_five_nodes_never_has_more_than_max_unavailable_down() {
    let c = cluster().await;
    let nodes = Nodes::new(&c, "roll").await;
    let watch = Watch::start(&nodes).await;
    let names = ["1", "2", "3", "4", "5"];
    for n in names {
        nodes.make(n, true, &[NEEDED]).await;
    }
    let agents: Vec<Logger> = names
        .iter()
        .map(|n| {
            let node = nodes.name(n);
            start(
                "ch9_reboot_agent",
                &c,
                None,
                &["--node", &node, "--reboot-command", "echo rebooting $NODE; sleep 0.3"],
            )
        })
        .collect();
    let sel = nodes.selector();
    let controller = start("ch9_reboot_controller", &c, None, &["-l", &sel, "--max-unavailable", "2"]);
    watch.until("every node rebooted and clean", |s| s.rebooted.len() == 5 && Watch::clean(s)).await;
    assert!(watch.most() <= 2, "{} nodes were unavailable at once, more than 2\n{}", watch.most(), controller.dump());
    let told = output(&controller).iter().filter(|l| l.starts_with("reboot-now: ")).count();
    assert_eq!(told, 5, "each node told to reboot once\n{}", controller.dump());
    // No write went out from a count that missed the controller's own last
    // write: such a write picks a node already told, and gets a conflict.
    let stale = output(&controller).iter().filter(|l| l.starts_with("conflict: ")).count();
    assert_eq!(stale, 0, "writes from a stale count\n{}", controller.dump());
    for (n, agent) in names.iter().zip(&agents) {
        assert!(nodes.annotations(n).await.is_empty());
        let ran = output(agent).iter().filter(|l| l.starts_with("rebooting ")).count();
        assert_eq!(ran, 1, "node {n} rebooted once\n{}", agent.dump());
    }
    drop((agents, controller));
    nodes.delete_all().await;
}

const AGENT_TAKES: [&str; 2] = [
    "took reboot-now: set reboot-in-progress",
    "running the reboot command: sh -c 'echo \"first run\"; exec sleep 60'",
];

/// An agent that took reboot-now and runs a command that does not end;
/// then it is killed with SIGKILL, its command too, as a reboot would.
async fn killed_mid_reboot(c: &Cluster, nodes: &Nodes) -> Vec<String> {
    let node = nodes.name("1");
    let args = ["--node", &node, "--reboot-command", "echo \"first run\"; exec sleep 60"];
    let agent = start("ch9_reboot_agent", c, None, &args);
    wait_line(&agent, "first run").await;
    assert_eq!(nodes.annotations("1").await, [IN_PROGRESS], "one write took reboot-now");
    // The agent, then its command's process (sh execs sleep): the agent
    // never sees its command end.
    let pid = agent.pid().to_string();
    let command = Command::new("pgrep").args(["-P", &pid]).output().expect("pgrep");
    let command = String::from_utf8_lossy(&command.stdout).trim().to_string();
    assert!(!command.is_empty() && !command.contains('\n'), "one command process: {command:?}");
    let out = output(&agent);
    drop(agent);
    assert!(Command::new("kill").args(["-KILL", &command]).status().unwrap().success(), "kill the command");
    out
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn an_agent_killed_mid_reboot_runs_the_command_again_when_the_machine_did_not_reboot() {
    let c = cluster().await;
    let nodes = Nodes::new(&c, "killed").await;
    nodes.make("1", true, &[NOW]).await;
    let first = killed_mid_reboot(&c, &nodes).await;
    let node = nodes.name("1");
    let start_line = format!("chapter 9 agent: node {node} reboots when {NOW} appears");
    assert_eq!(first, [start_line.as_str(), AGENT_TAKES[0], AGENT_TAKES[1], "first run"]);

    let agent = start("ch9_reboot_agent", &c, None, &["--node", &node, "--reboot-command", "echo \"second run\""]);
    let done = "the node is Ready and the reboot command finished: removed reboot-in-progress";
    wait_line(&agent, done).await;
    assert!(nodes.annotations("1").await.is_empty());
    let second = output(&agent);
    assert_eq!(
        second,
        [
            start_line.as_str(),
            "resuming: reboot-in-progress is set and the node has not rebooted (same boot ID)",
            "running the reboot command: sh -c 'echo \"second run\"'",
            "second run",
            "the reboot command finished",
            done,
        ]
    );
    book_output("ch9_reboot_agent_killed", &nodes, &first);
    book_output("ch9_reboot_agent", &nodes, &second);
    drop(agent);
    nodes.delete_all().await;
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn an_agent_killed_mid_reboot_waits_for_ready_when_the_machine_rebooted() {
    let c = cluster().await;
    let nodes = Nodes::new(&c, "rebooted").await;
    nodes.make("1", true, &[NOW]).await;
    let boot = |id: &str| json!({"status": {"nodeInfo": {"bootID": id}}});
    let node = nodes.name("1");
    nodes.api.patch_status(&node, &PatchParams::default(), &Patch::Merge(&boot("boot-1"))).await.expect("boot ID");
    killed_mid_reboot(&c, &nodes).await;
    // The machine rebooted: the kubelet comes back with a new boot ID, and
    // Ready only later.
    nodes.api.patch_status(&node, &PatchParams::default(), &Patch::Merge(&boot("boot-2"))).await.expect("boot ID");
    nodes.set_ready("1", false).await;
    let agent = start("ch9_reboot_agent", &c, None, &["--node", &node, "--reboot-command", "echo \"second run\""]);
    wait_line(&agent, "resuming: reboot-in-progress is set and the node has rebooted (new boot ID)").await;
    assert_eq!(nodes.annotations("1").await, [IN_PROGRESS], "kept while the node is not Ready");
    nodes.set_ready("1", true).await;
    wait_line(&agent, "the node is Ready and the reboot command finished: removed reboot-in-progress").await;
    assert!(nodes.annotations("1").await.is_empty());
    assert!(!output(&agent).iter().any(|l| l == "second run"), "the command ran again\n{}", agent.dump());
    drop(agent);
    nodes.delete_all().await;
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn an_agent_started_after_its_machine_rebooted_and_is_ready_again_removes_reboot_in_progress() {
    let c = cluster().await;
    let nodes = Nodes::new(&c, "back").await;
    nodes.make("1", true, &[]).await;
    let node = nodes.name("1");
    // Taken at boot 1; the machine is now at boot 2, and Ready: no change of
    // the node is coming to wake the agent.
    nodes.annotate("1", json!({ IN_PROGRESS: "boot-1" })).await;
    let boot = json!({"status": {"nodeInfo": {"bootID": "boot-2"}}});
    nodes.api.patch_status(&node, &PatchParams::default(), &Patch::Merge(&boot)).await.expect("boot ID");
    let agent = start("ch9_reboot_agent", &c, None, &["--node", &node]);
    let done = "the node is Ready and the reboot command finished: removed reboot-in-progress";
    wait_line(&agent, done).await;
    assert!(nodes.annotations("1").await.is_empty());
    let start_line = format!("chapter 9 agent: node {node} reboots when {NOW} appears");
    let resumed = "resuming: reboot-in-progress is set and the node has rebooted (new boot ID)";
    assert_eq!(output(&agent), [start_line.as_str(), resumed, done]);
    drop(agent);
    nodes.delete_all().await;
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn nodes_not_ready_on_their_own_count_as_unavailable() {
    let c = cluster().await;
    let nodes = Nodes::new(&c, "notready").await;
    let watch = Watch::start(&nodes).await;
    nodes.make("1", true, &[NEEDED]).await;
    nodes.make("2", false, &[]).await;
    let sel = nodes.selector();
    let controller = start("ch9_reboot_controller", &c, None, &["-l", &sel]);
    let (n1, n2) = (nodes.name("1"), nodes.name("2"));
    let waiting = format!("waiting: unavailable {n2} of at most 1");
    wait_line(&controller, &waiting).await;
    assert_eq!(nodes.annotations("1").await, [NEEDED]);
    nodes.set_ready("2", true).await;
    let told = format!("reboot-now: {n1} (unavailable before: 0 of at most 1)");
    // Its own write comes back through the watch: one node unavailable, the most allowed.
    let full = format!("waiting: unavailable {n1} of at most 1");
    wait_line(&controller, &full).await;
    assert_eq!(nodes.annotations("1").await, [NOW]);
    assert_eq!(watch.most(), 1, "at most one node unavailable at once");
    let out = output(&controller);
    assert_eq!(out, [CONTROLLER_START, "cache synced (nodes: 2)", &waiting, &told, &full]);
    book_output("ch9_reboot_controller", &nodes, &out);
    drop(controller);
    nodes.delete_all().await;
}

/// A kubeconfig for a ServiceAccount that may list and watch Nodes, and
/// update them only once `grant_update` ran: a ClusterRole of the test's own.
struct Account {
    kubeconfig: PathBuf,
    role: String,
    client: kube::Client,
}

async fn account(c: &Cluster, nodes: &Nodes) -> Account {
    let ns = namespace(&c.client, "ch9").await;
    service_account(&c.client, &ns, "reboot-controller").await;
    let role = nodes.prefix.clone();
    let cluster_role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": role},
        "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]}]
    });
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": role},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": "reboot-controller", "namespace": ns}]
    });
    apply(&c.client, &cluster_role, false).await.expect("clusterrole");
    apply(&c.client, &binding, false).await.expect("clusterrolebinding");
    let token = token(&c.client, &ns, "reboot-controller").await;
    let kubeconfig = token_kubeconfig(&c.dir, &role, &token);
    let client = client_for(&kubeconfig).await;
    Account { kubeconfig, role, client }
}

impl Account {
    /// Grants update, and waits until the server's authorizer allows it: a
    /// dry-run update of the node as the account succeeds.
    async fn grant_update(&self, c: &Cluster, nodes: &Nodes, suffix: &str) {
        let cluster_role = json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": self.role},
            "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch", "update"]}]
        });
        apply(&c.client, &cluster_role, false).await.expect("clusterrole");
        let api: Api<Node> = Api::all(self.client.clone());
        let start = Instant::now();
        loop {
            let node = nodes.api.get(&nodes.name(suffix)).await.expect("get");
            match api.replace(&node.name_any(), &PostParams { dry_run: true, ..Default::default() }, &node).await {
                Ok(_) => return,
                Err(err) => assert!(start.elapsed() < T, "update never allowed: {err}"),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn remove(&self, c: &Cluster) {
        use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
        let dp = DeleteParams::default();
        Api::<ClusterRole>::all(c.client.clone()).delete(&self.role, &dp).await.expect("delete clusterrole");
        Api::<ClusterRoleBinding>::all(c.client.clone()).delete(&self.role, &dp).await.expect("delete binding");
    }
}

/// Node 1 needs a reboot; the controller may not update Nodes yet, so its
/// write fails. Then it may, and node 2 changes: the controller syncs again.
async fn failed_write_then_allowed(pitfall: &[&str]) -> (Nodes, Vec<String>) {
    let c = cluster().await;
    let nodes = Nodes::new(&c, "mutate").await;
    nodes.make("1", true, &[NEEDED]).await;
    nodes.make("2", true, &[]).await;
    let account = account(&c, &nodes).await;
    let sel = nodes.selector();
    let args: Vec<&str> = ["-l", sel.as_str()].into_iter().chain(pitfall.iter().copied()).collect();
    let controller = start("ch9_reboot_controller", &c, Some(&account.kubeconfig), &args);
    let n1 = nodes.name("1");
    wait_line(&controller, &format!("cannot tell {n1} to reboot: 403 Forbidden")).await;
    account.grant_update(&c, &nodes, "1").await;
    nodes.annotate("2", json!({"example.com/touched": "true"})).await;
    // Node 1 counts as unavailable: told to reboot (right), or only in the
    // cache (the pitfall).
    wait_line(&controller, &format!("waiting: unavailable {n1} of at most 1")).await;
    let out = output(&controller);
    drop(controller);
    account.remove(&c).await;
    (nodes, out)
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn a_failed_write_leaves_the_cache_as_the_server_holds_it_and_the_next_change_retries() {
    let (nodes, out) = failed_write_then_allowed(&[]).await;
    let n1 = nodes.name("1");
    assert_eq!(
        out,
        [
            CONTROLLER_START,
            "cache synced (nodes: 2)",
            &format!("cannot tell {n1} to reboot: 403 Forbidden"),
            &format!("reboot-now: {n1} (unavailable before: 0 of at most 1)"),
            &format!("waiting: unavailable {n1} of at most 1"),
        ]
    );
    assert_eq!(nodes.annotations("1").await, [NOW]);
    nodes.delete_all().await;
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn pitfall_mutate_cache_a_failed_write_leaves_the_cache_saying_what_the_server_never_stored() {
    let (nodes, out) = failed_write_then_allowed(&["--pitfall", "mutate-cache"]).await;
    let n1 = nodes.name("1");
    let expected = [
        CONTROLLER_START,
        "cache synced (nodes: 2)",
        &format!("cannot tell {n1} to reboot: 403 Forbidden"),
        // The cache says node 1 was told to reboot...
        &format!("waiting: unavailable {n1} of at most 1"),
    ];
    assert_eq!(out, expected);
    // ...and the server never stored it: node 1 waits for a reboot no one will start.
    assert_eq!(nodes.annotations("1").await, [NEEDED]);
    book_output("ch9_pitfall_mutate_cache", &nodes, &out);
    nodes.delete_all().await;
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn pitfall_no_sync_wait_tells_more_nodes_to_reboot_than_allowed() {
    let c = cluster().await;
    let nodes = Nodes::new(&c, "nosync").await;
    let watch = Watch::start(&nodes).await;
    // The list comes in name order: node a, which needs a reboot, before
    // node b, which is rebooting.
    nodes.make("a", true, &[NEEDED]).await;
    nodes.make("b", true, &[IN_PROGRESS]).await;
    let sel = nodes.selector();
    let (a, b) = (nodes.name("a"), nodes.name("b"));
    // Waiting for the cache: node b is counted, node a waits.
    let right = start("ch9_reboot_controller", &c, None, &["-l", &sel]);
    let waiting = format!("waiting: unavailable {b} of at most 1");
    wait_line(&right, &waiting).await;
    assert_eq!(output(&right), [CONTROLLER_START, "cache synced (nodes: 2)", &waiting]);
    drop(right);
    let wrong = start("ch9_reboot_controller", &c, None, &["-l", &sel, "--pitfall", "no-sync-wait"]);
    let told = format!("reboot-now: {a} (unavailable before: 0 of at most 1)");
    // Once its write is in its cache, it counts two unavailable nodes.
    let two = format!("waiting: unavailable {a}, {b} of at most 1");
    wait_line(&wrong, &two).await;
    watch.until("two nodes unavailable", |s| s.most == 2).await;
    let out = output(&wrong);
    assert_eq!(out, [CONTROLLER_START, &told, "cache synced (nodes: 2)", &two]);
    assert_eq!(nodes.annotations("a").await, [NOW]);
    book_output("ch9_pitfall_no_sync_wait", &nodes, &out);
    drop(wrong);
    nodes.delete_all().await;
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn two_controllers_without_election_tell_more_nodes_to_reboot_than_allowed() {
    let c = cluster().await;
    let nodes = Nodes::new(&c, "two").await;
    let watch = Watch::start(&nodes).await;
    // Node 0 is rebooting; nodes 1 to 5 wait for their turn.
    nodes.make("0", true, &[IN_PROGRESS]).await;
    let names = ["1", "2", "3", "4", "5"];
    for n in names {
        nodes.make(n, true, &[NEEDED]).await;
    }
    let sel = nodes.selector();
    let waiting = format!("waiting: unavailable {} of at most 1", nodes.name("0"));
    // Each controller walks its cache in an order of its own. Both pick the
    // same node now and then: one then gets a conflict, and the round is
    // played again with two new controllers, up to ten times.
    for _round in 0..10 {
        let both = [(); 2].map(|()| start("ch9_reboot_controller", &c, None, &["-l", &sel]));
        for controller in &both {
            wait_line(controller, &waiting).await;
        }
        // Node 0 is back: one node may reboot.
        nodes.annotate("0", json!({ IN_PROGRESS: null })).await;
        let start = Instant::now();
        let decided = |l: &String| l.starts_with("reboot-now: ") || l.starts_with("conflict: ");
        while !both.iter().all(|c| output(c).iter().any(decided)) {
            assert!(start.elapsed() < T, "no decision\n{}\n{}", both[0].dump(), both[1].dump());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        drop(both);
        if watch.most() > 1 {
            break;
        }
        // The same node for both: put the round's state back.
        for n in names {
            if nodes.annotations(n).await == [NOW] {
                nodes.annotate(n, json!({ NOW: null, NEEDED: "true" })).await;
            }
        }
        nodes.annotate("0", json!({ IN_PROGRESS: "true" })).await;
    }
    assert_eq!(watch.most(), 2, "two controllers told two nodes to reboot at once, with --max-unavailable 1");
    nodes.delete_all().await;
}

/// The objects of examples/ch9_reboot.yaml.
fn ch9_manifest() -> Vec<serde_json::Value> {
    example_manifest("ch9_reboot.yaml")
}

fn object<'a>(objects: &'a [serde_json::Value], kind: &str, name: &str) -> &'a serde_json::Value {
    let found = objects.iter().find(|o| o["kind"] == kind && o["metadata"]["name"] == name);
    found.unwrap_or_else(|| panic!("examples/ch9_reboot.yaml has no {kind} {name}"))
}

#[test]
fn the_manifest_grants_the_least_and_runs_one_controller_and_an_agent_per_node() {
    let objects = ch9_manifest();
    let agent = &object(&objects, "DaemonSet", "reboot-agent")["spec"]["template"]["spec"];
    let env = &agent["containers"][0]["env"];
    assert_eq!(env[0], json!({"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}));
    assert_eq!(agent["serviceAccountName"], "reboot-agent");
    let controller = &object(&objects, "Deployment", "reboot-controller")["spec"];
    assert_eq!(controller["replicas"], 1, "one controller: two reboot too many (see two_controllers_...)");
    assert_eq!(controller["strategy"]["type"], "Recreate", "a rolling update would run two for a while");
    assert_eq!(controller["template"]["spec"]["serviceAccountName"], "reboot-controller");
    let rules = |name: &str| object(&objects, "ClusterRole", name)["rules"].clone();
    let nodes = |verbs: &[&str]| json!([{"apiGroups": [""], "resources": ["nodes"], "verbs": verbs}]);
    assert_eq!(rules("ch9-reboot-agent"), nodes(&["get", "list", "watch", "patch"]));
    assert_eq!(rules("ch9-reboot-controller"), nodes(&["list", "watch", "update"]));
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn the_manifest_is_accepted_by_the_api_server() {
    let c = cluster().await;
    // Into a fresh namespace of the test's, as a dry run: nothing is made.
    let ns = namespace(&c.client, "ch9").await;
    for mut object in ch9_manifest() {
        if object["kind"] == "Namespace" {
            object["metadata"]["name"] = json!(ns);
        }
        if object["metadata"]["namespace"].is_string() {
            object["metadata"]["namespace"] = json!(ns);
        }
        if let Some(subjects) = object.get_mut("subjects").and_then(|s| s.as_array_mut()) {
            subjects.iter_mut().for_each(|s| s["namespace"] = json!(ns));
        }
        let what = format!("{} {}", object["kind"], object["metadata"]["name"]);
        apply(&c.client, &object, true).await.unwrap_or_else(|err| panic!("{what}: {err}"));
    }
}

#[test]
fn one_clear_error_and_exit_2_for_a_maximum_of_zero_or_a_missing_node() {
    let out = Command::new(chapter_bin("ch9_reboot_agent")).env_remove("NODE_NAME").output().expect("run the agent");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with("error: the following required arguments were not provided:\n  --node <NODE>"),
        "{stderr}"
    );
    // A maximum of 0 would never reboot a node.
    let out = Command::new(chapter_bin("ch9_reboot_controller")).args(["--max-unavailable", "0"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = "error: invalid value '0' for '--max-unavailable <MAX_UNAVAILABLE>': 0 is not in 1..=65535";
    assert_eq!(stderr.lines().next(), Some(line), "{stderr}");
}

/// `make chapter N=9` as a learner runs it: cluster/chapter.sh in a process
/// group of its own (a terminal's foreground job), its stderr and stdout in
/// one stream. On a control plane of the test's own: its controller watches
/// every Node, and the shared one holds the other tests' nodes.
#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn make_chapter_9_runs_agents_and_the_controller_and_a_printed_line_reboots_a_node() {
    use std::io::{BufRead, BufReader};
    use std::os::unix::process::CommandExt;
    let plane = Plane::start("ch9-make-chapter").await;
    let c = &plane.cluster;
    let api: Api<Node> = Api::all(c.client.clone());
    let nodes = ["node-1", "node-2", "node-3"];
    let dir = c.dir.to_str().expect("utf-8 path").to_owned();
    let mut child = Command::new("env")
        .current_dir(repo())
        .args(["--default-signal=INT,TERM", "bash", "-c", "exec bash \"$@\" 2>&1", "bash"])
        .args(["cluster/chapter.sh", "--dir", &dir])
        .env("N", "9")
        .process_group(0)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start cluster/chapter.sh");
    // Should the test fail, nothing of the group outlives it.
    struct Group(u32);
    impl Drop for Group {
        fn drop(&mut self) {
            let _ = Command::new("kill").args(["-KILL", "--", &format!("-{}", self.0)]).status();
        }
    }
    let _group = Group(child.id());
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let out = child.stdout.take().expect("stdout");
    let seen = lines.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            seen.lock().unwrap().push(line);
        }
    });
    let wait_for = |what: String| {
        let lines = lines.clone();
        async move {
            let start = Instant::now();
            loop {
                let now = lines.lock().unwrap().clone();
                if now.iter().any(|l| *l == what || (what.ends_with('*') && l.starts_with(what.trim_end_matches('*'))))
                {
                    return now;
                }
                assert!(start.elapsed() < Duration::from_secs(300), "no {what:?} in:\n{}", now.join("\n"));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    for node in nodes {
        wait_for(format!("agent {node}: chapter 9 agent: node {node} reboots when {NOW} appears")).await;
    }
    let seen = wait_for("cache synced (nodes: 3)".into()).await;
    let annotate = format!("    KUBECONFIG={dir}/kubeconfig kubectl annotate node node-1 {NEEDED}=true");
    assert!(seen[0].starts_with("chapter.sh: chapter 9 (examples/ch9_reboot_agent.rs"), "{seen:?}");
    assert_eq!(seen[1], annotate, "{seen:?}");
    let ran = Command::new("sh").args(["-c", annotate.trim()]).stdout(std::process::Stdio::null()).status();
    assert!(ran.expect("run the printed command").success(), "{annotate}");
    wait_for("reboot-now: node-1 (unavailable before: 0 of at most 1)".into()).await;
    wait_for("agent node-1: stand-in: would reboot node-1 now".into()).await;
    let done = "agent node-1: the node is Ready and the reboot command finished: removed reboot-in-progress";
    wait_for(done.into()).await;
    // Ctrl-C: the terminal sends SIGINT to the foreground job's whole group.
    let group = format!("-{}", child.id());
    assert!(Command::new("kill").args(["-INT", "--", &group]).status().unwrap().success());
    let start = Instant::now();
    while child.try_wait().expect("try_wait").is_none() {
        assert!(start.elapsed() < T, "chapter.sh did not exit on SIGINT");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // All four programs stopped: nothing is left in the group.
    let start = Instant::now();
    while Command::new("pgrep").args(["-g", &child.id().to_string()]).status().unwrap().success() {
        assert!(start.elapsed() < T, "programs of make chapter N=9 still run after Ctrl-C");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for node in nodes {
        assert!(api.get(node).await.expect("node").annotations().keys().all(|k| !k.contains("/reboot-")));
    }
}
