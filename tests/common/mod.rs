//! Shared end-to-end test harness: the real demo-controller binary against the
//! real local control plane (kube-apiserver + etcd on 127.0.0.1) that
//! `make test` starts. Nothing here fakes the API server.
#![allow(dead_code)] // each test binary uses a different part of it

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Container, Namespace, Pod, PodSpec, ServiceAccount};
use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams, VersionMatch};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use serde_json::{Value, json};

/// The local control plane the tests run against.
pub struct Cluster {
    pub dir: PathBuf,
    pub kubeconfig: PathBuf,
    pub client: Client,
}

/// Where `make test` (cluster/test.sh) started the control plane.
pub fn cluster_dir() -> PathBuf {
    std::env::var_os("DEMO_CONTROLLER_TEST_CLUSTER").map(PathBuf::from).unwrap_or_else(|| {
        panic!(
            "DEMO_CONTROLLER_TEST_CLUSTER is not set: the end-to-end tests need the local control plane; \
             run them with `make test` (or `cluster/up.sh` and export DEMO_CONTROLLER_TEST_CLUSTER=target/local-cluster)"
        )
    })
}

pub async fn cluster() -> Cluster {
    cluster_at(cluster_dir()).await
}

pub async fn cluster_at(dir: PathBuf) -> Cluster {
    let kubeconfig = dir.join("kubeconfig");
    let client = client_for(&kubeconfig).await;
    Cluster { dir, kubeconfig, client }
}

pub async fn client_for(kubeconfig: &std::path::Path) -> Client {
    let kc = Kubeconfig::read_from(kubeconfig)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}: is the local control plane up?", kubeconfig.display()));
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await.expect("kubeconfig");
    Client::try_from(config).expect("client")
}

/// A fresh namespace per test (names are never reused: a deleted namespace
/// is gone only once the controller-manager has emptied it), with the
/// `default` ServiceAccount the ServiceAccount admission plugin requires for
/// pods. The controller-manager makes that account too, a moment later: made
/// here as well, so the test's first pod is never refused, and one it made
/// first (409 Conflict) is fine.
pub async fn namespace(client: &Client, prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() % 1_000_000;
    let name = format!("{prefix}-{stamp}-{}", N.fetch_add(1, Ordering::SeqCst));
    let ns =
        Namespace { metadata: ObjectMeta { name: Some(name.clone()), ..Default::default() }, ..Default::default() };
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await.expect("create namespace");
    let sa = ServiceAccount {
        metadata: ObjectMeta { name: Some("default".into()), ..Default::default() },
        ..Default::default()
    };
    match Api::<ServiceAccount>::namespaced(client.clone(), &name).create(&PostParams::default(), &sa).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("create the default ServiceAccount in {name}: {e}"),
    }
    name
}

pub fn pod(name: &str, labels: &[(&str, &str)]) -> Pod {
    let labels: BTreeMap<String, String> = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    Pod {
        metadata: ObjectMeta { name: Some(name.into()), labels: Some(labels), ..Default::default() },
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
    }
}

/// Creates a pod and returns once the API server's watch cache holds it.
///
/// demo-controller's first list is a streaming list, which kube asks for at
/// resourceVersion "0": the server answers from its watch cache, which may
/// trail a write by milliseconds. A test that creates pods and then starts a
/// logger expects them in its first list, so it waits here until a list at
/// resourceVersion "0" (served from that same cache) shows the pod.
pub async fn create(client: &Client, ns: &str, name: &str, labels: &[(&str, &str)]) -> Pod {
    let api = Api::<Pod>::namespaced(client.clone(), ns);
    let made = api.create(&PostParams::default(), &pod(name, labels)).await.expect("create pod");
    let cached = kube::api::ListParams::default().match_any().fields(&format!("metadata.name={name}"));
    let start = Instant::now();
    while !api.list_metadata(&cached).await.expect("list").items.iter().any(|p| p.metadata.uid == made.metadata.uid) {
        assert!(start.elapsed() < Duration::from_secs(10), "{ns}/{name} never reached the watch cache");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    made
}

/// Creates `n` pods named PREFIX0, PREFIX1, ... in `ns`, 32 requests at a
/// time, with `labels` and, when `padding` > 0, an annotation of that many
/// bytes (to make them as big as real pods, for measurements). Returns once
/// the API server's watch cache holds them all, as [`create`] does for one:
/// a logger started next finds every one of them in its first list (read at
/// resourceVersion "0" from that cache, which on a busy machine trails the
/// last writes by more than a few pods).
pub async fn create_many(client: &Client, ns: &str, prefix: &str, n: usize, labels: &[(&str, &str)], padding: usize) {
    use futures::StreamExt;
    let api = Api::<Pod>::namespaced(client.clone(), ns);
    futures::stream::iter(0..n)
        .map(|i| {
            let mut p = pod(&format!("{prefix}{i}"), labels);
            if padding > 0 {
                p.metadata.annotations = Some([("padding".to_string(), "x".repeat(padding))].into());
            }
            let api = api.clone();
            async move { api.create(&PostParams::default(), &p).await.expect("create pod") }
        })
        .buffer_unordered(32)
        .for_each(|_| async {})
        .await;
    let cached = kube::api::ListParams::default().match_any();
    let held = |list: kube::api::ObjectList<kube::api::PartialObjectMeta<Pod>>| {
        list.items.iter().filter(|p| p.metadata.name.as_deref().is_some_and(|name| name.starts_with(prefix))).count()
    };
    let start = Instant::now();
    while held(api.list_metadata(&cached).await.expect("list")) < n {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the {n} pods {ns}/{prefix}* never all reached the watch cache"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

pub async fn label(client: &Client, ns: &str, name: &str, key: &str, value: &str) {
    let patch = json!({"metadata": {"labels": {key: value}}});
    Api::<Pod>::namespaced(client.clone(), ns)
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("label pod");
}

pub async fn set_phase(client: &Client, ns: &str, name: &str, phase: &str) {
    let patch = json!({"status": {"phase": phase}});
    Api::<Pod>::namespaced(client.clone(), ns)
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch pod status");
}

pub async fn add_finalizer(client: &Client, ns: &str, name: &str) {
    let patch = json!({"metadata": {"finalizers": ["demo-controller.test/hold"]}});
    Api::<Pod>::namespaced(client.clone(), ns)
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("add finalizer");
}

pub async fn delete(client: &Client, ns: &str, name: &str) {
    Api::<Pod>::namespaced(client.clone(), ns).delete(name, &DeleteParams::default()).await.expect("delete pod");
}

/// The resourceVersion the API server is at now (of a one-item list of
/// `ns`'s pods: a list's resourceVersion is the whole store's revision).
pub async fn current_resource_version(client: &Client, ns: &str) -> String {
    let lp = ListParams { limit: Some(1), ..ListParams::default() };
    let list = Api::<Pod>::namespaced(client.clone(), ns).list(&lp).await.expect("list pods");
    list.metadata.resource_version.expect("a list has a resourceVersion")
}

/// Waits until etcd's history no longer holds `rv`: a LIST at exactly that
/// resourceVersion is answered 410 Gone. From then on a watch resuming from
/// `rv` or anything older cannot resume and must relist. (Needs an API
/// server that compacts, e.g. with `--etcd-compaction-interval=1s`, and a
/// write after `rv`: compaction goes up to a revision it saw written.)
pub async fn wait_compacted(client: &Client, ns: &str, rv: &str) {
    let lp = ListParams {
        limit: Some(1),
        resource_version: Some(rv.to_string()),
        version_match: Some(VersionMatch::Exact),
        ..ListParams::default()
    };
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    let start = Instant::now();
    loop {
        match pods.list(&lp).await {
            Err(kube::Error::Api(s)) if s.code == 410 => return,
            Ok(_) => {}
            Err(e) => panic!("list at resourceVersion {rv}: {e}"),
        }
        assert!(start.elapsed() < Duration::from_secs(60), "resourceVersion {rv} was never compacted away");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The demo-controller binary, running, with its log lines collected.
pub struct Logger {
    child: Child,
    lines: Arc<Mutex<Vec<Value>>>,
    stderr: Arc<Mutex<Vec<String>>>,
    /// The threads reading stdout and stderr: they end at end of file.
    readers: Vec<std::thread::JoinHandle<()>>,
    /// The kubeconfig it was started with, to create marker pods (see
    /// `wait_events`); `None` for a command built by hand.
    kubeconfig: Option<PathBuf>,
    /// Labels a marker pod needs to be seen through a `-l k=v` selector.
    marker_labels: Vec<(String, String)>,
}

pub const BIN: &str = env!("CARGO_BIN_EXE_demo-controller");

/// Set it (e.g. `DEMO_CONTROLLER_TEST_WORKERS=64 make test`) to run every
/// logger the tests start with that many workers, unless a test chooses
/// its own `--workers`.
pub const WORKERS_ENV: &str = "DEMO_CONTROLLER_TEST_WORKERS";

/// Pods named with this prefix are the tests' markers, left out of `events`.
pub const MARKER: &str = "marker-";

impl Logger {
    /// Starts the logger with JSON logs, probes and metrics off, plus `args`.
    pub fn start(kubeconfig: &std::path::Path, args: &[&str]) -> Logger {
        Logger::start_with(kubeconfig, args, &[])
    }

    pub fn start_with(kubeconfig: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> Logger {
        let mut cmd = Command::new(BIN);
        cmd.arg("--kubeconfig").arg(kubeconfig).args(["--log-format", "json"]);
        if !args.contains(&"--probe-addr") {
            cmd.args(["--probe-addr", "0"]);
        }
        if !args.contains(&"--metrics-addr") {
            cmd.args(["--metrics-addr", "0"]);
        }
        if !args.contains(&"--workers")
            && let Ok(workers) = std::env::var(WORKERS_ENV)
        {
            cmd.args(["--workers", &workers]);
        }
        cmd.args(args).env_remove("KUBECONFIG").env_remove("RUST_LOG");
        let mut logger = Logger::spawn(cmd, env);
        logger.kubeconfig = Some(kubeconfig.to_path_buf());
        let selector = args.iter().position(|a| *a == "-l" || *a == "--selector").and_then(|i| args.get(i + 1));
        logger.marker_labels = selector
            .map(|s| s.split(',').filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.into(), v.into())).collect())
            .unwrap_or_default();
        logger
    }

    pub fn spawn(mut cmd: Command, env: &[(&str, &str)]) -> Logger {
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start demo-controller");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let out = child.stdout.take().expect("stdout");
        let sink = lines.clone();
        let out_reader = std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let value = serde_json::from_str(&line).unwrap_or_else(|_| json!({ "raw": line }));
                sink.lock().unwrap().push(value);
            }
        });
        let err = child.stderr.take().expect("stderr");
        let sink = stderr.clone();
        let err_reader = std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Logger {
            child,
            lines,
            stderr,
            readers: vec![out_reader, err_reader],
            kubeconfig: None,
            marker_labels: Vec::new(),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn lines(&self) -> Vec<Value> {
        self.lines.lock().unwrap().clone()
    }

    /// The messages of its WARN lines, in order.
    pub fn warnings(&self) -> Vec<String> {
        warnings_in(&self.lines())
    }

    pub fn dump(&self) -> String {
        let out: Vec<String> = self.lines().iter().map(|v| v.to_string()).collect();
        format!("stdout:\n{}\nstderr:\n{}", out.join("\n"), self.stderr.lock().unwrap().join("\n"))
    }

    /// Waits until a line satisfies `pred`; fails the test with every line
    /// seen so far if none does in time.
    pub async fn wait_for(&self, what: &str, timeout: Duration, pred: impl Fn(&Value) -> bool) -> Value {
        let start = Instant::now();
        loop {
            if let Some(v) = self.lines().into_iter().find(|v| pred(v)) {
                return v;
            }
            if start.elapsed() > timeout {
                panic!("timed out after {timeout:?} waiting for {what}\n{}", self.dump());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn wait_message(&self, message: &str, timeout: Duration) -> Value {
        self.wait_for(message, timeout, |v| v["message"] == message).await
    }

    pub async fn synced(&self) -> Value {
        self.wait_message("cache synced", Duration::from_secs(30)).await
    }

    /// The onAdd/onUpdate/onDelete messages logged for pods of `ns`, in order,
    /// leaving out `onUpdate ... changes=terminating`. The API server marks a
    /// pod terminating and removes it milliseconds apart; a level-driven worker
    /// may see both states or only the last, and either is right. The test
    /// `a_deleted_pod_is_terminating_first` checks that line where it is
    /// deterministic (a finalizer holds the pod).
    pub fn events(&self, ns: &str) -> Vec<String> {
        self.event_lines(ns).iter().map(|v| v["message"].as_str().unwrap_or_default().to_string()).collect()
    }

    pub fn event_lines(&self, ns: &str) -> Vec<Value> {
        self.lines()
            .into_iter()
            .filter(|v| v["namespace"] == ns)
            .filter(|v| !v["name"].as_str().is_some_and(|n| n.starts_with(MARKER)))
            .filter(|v| v["message"].as_str().is_some_and(|m| m.starts_with("on")))
            .filter(|v| v["changes"] != "terminating")
            .collect()
    }

    /// Waits until `ns` has `n` event lines.
    pub async fn wait_count(&self, ns: &str, n: usize) -> Vec<String> {
        let start = Instant::now();
        while self.events(ns).len() < n {
            if start.elapsed() > Duration::from_secs(30) {
                panic!("expected {n} event lines for {ns}, got {:?}\n{}", self.events(ns), self.dump());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.events(ns)
    }

    /// Waits until `ns` has `n` event lines, then proves no further line
    /// follows from the changes made so far: it creates a marker pod and
    /// waits for its onAdd. The marker's event comes after theirs on the
    /// watch, and its key is queued after theirs, so once its line is in,
    /// theirs are too (the queue is FIFO: the keys before it were handed out
    /// first). A condition, not a sleep that hopes it was long enough.
    pub async fn wait_events(&self, ns: &str, n: usize) -> Vec<String> {
        self.wait_count(ns, n).await;
        if let Some(kubeconfig) = &self.kubeconfig {
            let client = client_for(kubeconfig).await;
            // Numbered across the whole test process: two loggers watching one
            // namespace each add markers there.
            static MARKERS: AtomicU32 = AtomicU32::new(0);
            let name = format!("{MARKER}{}", MARKERS.fetch_add(1, Ordering::SeqCst));
            let labels: Vec<(&str, &str)> = self.marker_labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            create(&client, ns, &name, &labels).await;
            self.wait_message(&format!("onAdd: {ns}/{name}"), Duration::from_secs(30)).await;
        }
        self.events(ns)
    }

    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill").arg(format!("-{sig}")).arg(self.pid().to_string()).status().expect("kill");
        assert!(ok.success(), "kill -{sig} failed");
    }

    pub async fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                // The last lines are in once both readers reached end of file.
                while !self.readers.iter().all(|r| r.is_finished()) {
                    assert!(start.elapsed() < timeout + Duration::from_secs(10), "its output never closed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                return status;
            }
            if start.elapsed() > timeout {
                panic!("demo-controller did not exit within {timeout:?}\n{}", self.dump());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The exit status if the process has ended, without waiting.
    pub fn try_exit(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().expect("try_wait")
    }

    pub fn stderr(&self) -> Vec<String> {
        self.stderr.lock().unwrap().clone()
    }
}

impl Drop for Logger {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls /healthz on `port` until it says a worker is stuck on `key`: the
/// proof that the worker holds that key (start the logger with
/// `--stuck-after 100ms` and `--probe-addr 127.0.0.1:PORT`).
pub async fn until_held(logger: &Logger, port: u16, key: &str) {
    let prefix = format!("a worker is stuck on {key} for ");
    let start = Instant::now();
    loop {
        let (status, body) = http_get(port, "/healthz");
        if status == 503 && body.starts_with(&prefix) {
            return;
        }
        if start.elapsed() > Duration::from_secs(30) {
            panic!("no worker was seen holding {key}: /healthz said {status} {body:?}\n{}", logger.dump());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The API server's URL, from the control plane's env file.
pub fn server_url(dir: &std::path::Path) -> String {
    let env = std::fs::read_to_string(dir.join("env")).expect("cluster env file");
    env.lines().find_map(|l| l.strip_prefix("APISERVER_URL=")).expect("APISERVER_URL").trim_matches('"').to_string()
}

pub fn b64(path: &std::path::Path) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(std::fs::read(path).expect("read pki file"))
}

/// A directory made afresh in `parent`, named `prefix` and a random suffix,
/// mode 0700, as mkdtemp(3) makes one: the name is never one another user
/// could have taken first (creating fails if anything is there, a symlink
/// included, and another name is tried), so nothing is written through a
/// path someone else prepared.
pub fn fresh_dir_in(parent: &std::path::Path, prefix: &str) -> PathBuf {
    use std::hash::{BuildHasher, Hasher};
    use std::os::unix::fs::DirBuilderExt;
    for attempt in 0u32..100 {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        h.write_u32(attempt);
        let path = parent.join(format!("{prefix}.{:016x}", h.finish()));
        match std::fs::DirBuilder::new().mode(0o700).create(&path) {
            Ok(()) => return path,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => panic!("creating {}: {e}", path.display()),
        }
    }
    panic!("no fresh name for {prefix} in {}", parent.display())
}

/// A fresh directory (see [`fresh_dir_in`]) in the system's temporary
/// directory.
pub fn fresh_dir(prefix: &str) -> PathBuf {
    fresh_dir_in(&std::env::temp_dir(), prefix)
}

/// A new, empty directory that every user may write to, without the sticky
/// bit that keeps their entries apart: a path the scripts must refuse to
/// build in or run from. Made afresh (see [`fresh_dir`]) and opened only
/// then; removed on drop.
pub struct OpenDir(pub PathBuf);

impl OpenDir {
    pub fn new(name: &str) -> Self {
        use std::os::unix::fs::PermissionsExt;
        // In the system's temporary directory (root's, sticky): a directory
        // above it that the checks refuse first would hide the one made here.
        let path = fresh_dir(&format!("demo-controller-{name}"));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).unwrap();
        OpenDir(path)
    }

    pub fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }

    /// Whether nothing was written in it.
    pub fn is_empty(&self) -> bool {
        std::fs::read_dir(&self.0).map(|mut d| d.next().is_none()).unwrap_or(false)
    }
}

impl Drop for OpenDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn tmp_file(name: &str, content: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("e2e-files").join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, content).unwrap();
    path
}

/// A kubeconfig for `server` with an optional CA and the given user lines.
pub fn kubeconfig(name: &str, server: &str, ca_data: Option<String>, user: &str) -> PathBuf {
    let ca = ca_data.map(|d| format!("\n    certificate-authority-data: {d}")).unwrap_or_default();
    tmp_file(
        name,
        &format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}{ca}\n\
             users:\n- name: u\n  user:\n{user}\ncontexts:\n- name: ctx\n  context:\n    cluster: c\n    user: u\n\
             current-context: ctx\n"
        ),
    )
}

/// A ServiceAccount token minted with the TokenRequest API (what the kubelet
/// mounts into a pod), valid for an hour.
pub async fn token(client: &Client, ns: &str, sa: &str) -> String {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    let request = TokenRequest {
        spec: TokenRequestSpec { audiences: vec![], expiration_seconds: Some(3600), ..Default::default() },
        ..Default::default()
    };
    let made = Api::<ServiceAccount>::namespaced(client.clone(), ns)
        .create_token_request(sa, &PostParams::default(), &request)
        .await
        .expect("token request");
    made.status.expect("token status").token
}

pub async fn service_account(client: &Client, ns: &str, name: &str) {
    let sa =
        ServiceAccount { metadata: ObjectMeta { name: Some(name.into()), ..Default::default() }, ..Default::default() };
    Api::<ServiceAccount>::namespaced(client.clone(), ns).create(&PostParams::default(), &sa).await.expect("create sa");
}

/// A kubeconfig that authenticates with `token` against the cluster in `dir`.
pub fn token_kubeconfig(dir: &std::path::Path, name: &str, token: &str) -> PathBuf {
    kubeconfig(name, &server_url(dir), Some(b64(&dir.join("pki/ca.crt"))), &format!("    token: {token}"))
}

/// Grants list and watch on pods in `ns` to a ServiceAccount, with a Role:
/// the verbs demo-controller.yaml grants.
pub async fn grant_pod_reading(client: &Client, ns: &str, sa: &str) {
    let role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "pod-reader", "namespace": ns},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]}]
    });
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "pod-reader", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ns}]
    });
    apply(client, &role, false).await.expect("role");
    apply(client, &binding, false).await.expect("rolebinding");
}

/// Server-side apply of one object (any kind the server knows).
pub async fn apply(client: &Client, object: &Value, dry_run: bool) -> Result<Value, kube::Error> {
    use kube::api::{DynamicObject, GroupVersionKind};
    let (group, version) = match object["apiVersion"].as_str().unwrap().split_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (String::new(), object["apiVersion"].as_str().unwrap().to_string()),
    };
    let gvk = GroupVersionKind::gvk(&group, &version, object["kind"].as_str().unwrap());
    let (resource, caps) = kube::discovery::pinned_kind(client, &gvk).await?;
    let name = object["metadata"]["name"].as_str().unwrap();
    let api: Api<DynamicObject> = match (caps.scope, object["metadata"]["namespace"].as_str()) {
        (kube::discovery::Scope::Namespaced, Some(ns)) => Api::namespaced_with(client.clone(), ns, &resource),
        _ => Api::all_with(client.clone(), &resource),
    };
    let mut params = PatchParams::apply("demo-controller-tests").force();
    params.dry_run = dry_run;
    api.patch(name, &params, &Patch::Apply(object)).await.map(|o| serde_json::to_value(o).unwrap())
}

/// The objects of demo-controller.yaml.
pub fn manifest() -> Vec<Value> {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/demo-controller.yaml")).unwrap();
    serde_saphyr::from_multiple(&text).expect("demo-controller.yaml parses")
}

/// The local node `make test` started (as root), for the node tests.
pub fn node_dir() -> PathBuf {
    std::env::var_os("DEMO_CONTROLLER_TEST_NODE").map(PathBuf::from).unwrap_or_else(|| {
        panic!(
            "DEMO_CONTROLLER_TEST_NODE is not set: these tests need the local node; needs root and the local node: \
             run `make test` as root"
        )
    })
}

/// A client of the node's control plane, as its admin.
pub async fn node_admin() -> Client {
    client_for(&node_dir().join("plane/kubeconfig")).await
}

/// The objects of a manifest in examples/, as written.
pub fn example_manifest(file: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(repo().join("examples").join(file)).expect("the chapter's manifest");
    serde_saphyr::from_multiple(&text).expect("the chapter's manifest parses")
}

/// Polls `f` until it returns Some, up to `limit`; panics naming `what`.
pub async fn until<T, F, Fut>(what: &str, limit: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(start.elapsed() < limit, "timed out after {limit:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A free port on loopback (bound and released: good enough for tests).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A plain HTTP/1.1 GET on loopback: (status, body); status 0 when nothing answers.
pub fn http_get(port: u16, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return (0, String::new());
    };
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = write!(stream, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    let status = response.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (status, body)
}

/// A control plane of a test's own, for tests that stop or restart the API
/// server (they would disturb every other test on the shared one). Stopped
/// and removed on drop, even when the test fails.
pub struct Plane {
    pub cluster: Cluster,
}

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

impl Plane {
    pub async fn start(name: &str) -> Plane {
        let dir = repo().join("target/test-planes").join(name);
        let out = Command::new("bash")
            .arg(repo().join("cluster/up.sh"))
            .arg("--dir")
            .arg(&dir)
            .output()
            .expect("run cluster/up.sh");
        assert!(out.status.success(), "cluster/up.sh failed:\n{}", String::from_utf8_lossy(&out.stderr));
        Plane { cluster: cluster_at(dir).await }
    }

    pub fn dir(&self) -> &std::path::Path {
        &self.cluster.dir
    }

    fn pid(&self, name: &str) -> Option<u32> {
        std::fs::read_to_string(self.dir().join(format!("{name}.pid"))).ok()?.trim().parse().ok()
    }

    /// CPU time (user + system, ms) that the process `name` of this plane
    /// has used so far.
    pub fn cpu_ms(&self, name: &str) -> u64 {
        let Some(pid) = self.pid(name) else { return 0 };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // The fields after the command name, which may hold spaces: utime
        // and stime are the 14th and 15th of the line, in ticks of 10 ms.
        let fields: Vec<&str> = stat.rsplit_once(") ").map(|(_, rest)| rest.split(' ').collect()).unwrap_or_default();
        let ticks: u64 = fields.get(11..13).map_or(0, |f| f.iter().filter_map(|v| v.parse::<u64>().ok()).sum());
        ticks * 10
    }

    /// Kills the kube-apiserver (SIGKILL: a crash, not a polite stop) and
    /// waits until it is gone.
    pub fn kill_apiserver(&self) {
        self.kill("kube-apiserver");
    }

    pub fn kill(&self, name: &str) {
        let Some(pid) = self.pid(name) else { return };
        let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
        let proc = PathBuf::from(format!("/proc/{pid}"));
        let start = Instant::now();
        while proc.exists() && std::fs::read_to_string(proc.join("stat")).is_ok_and(|s| !s.contains(") Z ")) {
            assert!(start.elapsed() < Duration::from_secs(10), "{name} did not die");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts the cluster's kube-apiserver again (same flags and port), or a
    /// second one on `port` with extra flags, and waits until it is ready.
    pub async fn start_apiserver(&self, name: &str, port: Option<u16>, extra: &[&str]) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir().join(format!("logs/{name}.log")))
            .unwrap();
        let port_arg = port.map(|p| p.to_string()).unwrap_or_default();
        // Detached like cluster/up.sh starts it; `kill` (or cluster/down.sh)
        // ends it, and `kill` waits until it is gone, zombie included.
        #[allow(clippy::zombie_processes)]
        let child = Command::new("setsid")
            .arg("bash")
            .arg(self.dir().join("kube-apiserver.sh"))
            .arg(&port_arg)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start kube-apiserver");
        std::fs::write(self.dir().join(format!("{name}.pid")), child.id().to_string()).unwrap();
        let url = match port {
            Some(p) => format!("https://127.0.0.1:{p}"),
            None => server_url(self.dir()),
        };
        self.wait_ready(&url).await;
    }

    /// An admin client of the API server at `url` (the same certificates).
    pub async fn admin_client(&self, url: &str) -> Client {
        let kc = self.admin_kubeconfig(url);
        client_for(&kc).await
    }

    pub fn admin_kubeconfig(&self, url: &str) -> PathBuf {
        let pki = self.dir().join("pki");
        let user = format!(
            "    client-certificate-data: {}\n    client-key-data: {}",
            b64(&pki.join("admin.crt")),
            b64(&pki.join("admin.key"))
        );
        let name = format!("admin-{}", url.rsplit(':').next().unwrap());
        kubeconfig(&name, url, Some(b64(&pki.join("ca.crt"))), &user)
    }

    async fn wait_ready(&self, url: &str) {
        let client = self.admin_client(url).await;
        let start = Instant::now();
        loop {
            if client.apiserver_version().await.is_ok() {
                let ready = client.request_text(http::Request::get("/readyz").body(vec![]).unwrap()).await;
                if ready.is_ok_and(|t| t.trim() == "ok") {
                    return;
                }
            }
            assert!(start.elapsed() < Duration::from_secs(90), "kube-apiserver at {url} not ready after 90 s");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Drop for Plane {
    fn drop(&mut self) {
        let _ = Command::new("bash").arg(repo().join("cluster/down.sh")).arg("--dir").arg(self.dir()).output();
    }
}

/// Whether `text` names the HTTP status `code` as a number of its own
/// ("410 Gone", "code: 410"), not as digits inside another number: a random
/// backoff such as "retrying in 2.207841011s" holds "410" too, and once
/// failed a test that looked for the substring.
pub fn names_status(text: &str, code: u16) -> bool {
    let code = code.to_string();
    text.match_indices(&code).any(|(i, _)| {
        let mut before = text[..i].chars().rev();
        let mut after = text[i + code.len()..].chars();
        let digit = |c: Option<char>| c.is_some_and(|c| c.is_ascii_digit());
        let joined = |c: Option<char>, next: Option<char>| digit(c) || (c == Some('.') && digit(next));
        let (b, a) = (before.next(), after.next());
        !joined(b, before.next()) && !joined(a, after.next())
    })
}

/// The messages of the WARN lines among `lines`, in order.
pub fn warnings_in(lines: &[Value]) -> Vec<String> {
    lines
        .iter()
        .filter(|l| l["level"] == "WARN")
        .map(|l| l["message"].as_str().unwrap_or_default().to_string())
        .collect()
}
