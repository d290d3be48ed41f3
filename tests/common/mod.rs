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
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
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
    Cluster {
        dir,
        kubeconfig,
        client,
    }
}

pub async fn client_for(kubeconfig: &std::path::Path) -> Client {
    let kc = Kubeconfig::read_from(kubeconfig).unwrap_or_else(|e| {
        panic!(
            "cannot read {}: {e}: is the local control plane up?",
            kubeconfig.display()
        )
    });
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("kubeconfig");
    Client::try_from(config).expect("client")
}

/// A fresh namespace per test (namespaces never finish terminating without a
/// controller-manager, so names are never reused), with the `default`
/// ServiceAccount the ServiceAccount admission plugin requires for pods.
pub async fn namespace(client: &Client, prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        % 1_000_000;
    let name = format!("{prefix}-{stamp}-{}", N.fetch_add(1, Ordering::SeqCst));
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("create namespace");
    let sa = ServiceAccount {
        metadata: ObjectMeta {
            name: Some("default".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<ServiceAccount>::namespaced(client.clone(), &name)
        .create(&PostParams::default(), &sa)
        .await
        .expect("create sa");
    name
}

pub fn pod(name: &str, labels: &[(&str, &str)]) -> Pod {
    let labels: BTreeMap<String, String> = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(labels),
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
    }
}

pub async fn create(client: &Client, ns: &str, name: &str, labels: &[(&str, &str)]) -> Pod {
    Api::<Pod>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pod(name, labels))
        .await
        .expect("create pod")
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
    Api::<Pod>::namespaced(client.clone(), ns)
        .delete(name, &DeleteParams::default())
        .await
        .expect("delete pod");
}

/// The demo-controller binary, running, with its log lines collected.
pub struct Logger {
    child: Child,
    lines: Arc<Mutex<Vec<Value>>>,
    stderr: Arc<Mutex<Vec<String>>>,
}

pub const BIN: &str = env!("CARGO_BIN_EXE_demo-controller");

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
        cmd.args(args).env_remove("KUBECONFIG").env_remove("RUST_LOG");
        Logger::spawn(cmd, env)
    }

    pub fn spawn(mut cmd: Command, env: &[(&str, &str)]) -> Logger {
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start demo-controller");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let out = child.stdout.take().expect("stdout");
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let value = serde_json::from_str(&line).unwrap_or_else(|_| json!({ "raw": line }));
                sink.lock().unwrap().push(value);
            }
        });
        let err = child.stderr.take().expect("stderr");
        let sink = stderr.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Logger { child, lines, stderr }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn lines(&self) -> Vec<Value> {
        self.lines.lock().unwrap().clone()
    }

    pub fn dump(&self) -> String {
        let out: Vec<String> = self.lines().iter().map(|v| v.to_string()).collect();
        format!(
            "stdout:\n{}\nstderr:\n{}",
            out.join("\n"),
            self.stderr.lock().unwrap().join("\n")
        )
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
        self.event_lines(ns)
            .iter()
            .map(|v| v["message"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    pub fn event_lines(&self, ns: &str) -> Vec<Value> {
        self.lines()
            .into_iter()
            .filter(|v| v["namespace"] == ns)
            .filter(|v| v["message"].as_str().is_some_and(|m| m.starts_with("on")))
            .filter(|v| v["changes"] != "terminating")
            .collect()
    }

    /// Waits until `ns` has exactly `n` event lines, then a little longer to
    /// prove no extra line follows.
    pub async fn wait_events(&self, ns: &str, n: usize) -> Vec<String> {
        let start = Instant::now();
        while self.events(ns).len() < n {
            if start.elapsed() > Duration::from_secs(30) {
                panic!(
                    "expected {n} event lines for {ns}, got {:?}\n{}",
                    self.events(ns),
                    self.dump()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        self.events(ns)
    }

    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.pid().to_string())
            .status()
            .expect("kill");
        assert!(ok.success(), "kill -{sig} failed");
    }

    pub async fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                // Let the reader threads take the last lines.
                std::thread::sleep(Duration::from_millis(100));
                return status;
            }
            if start.elapsed() > timeout {
                panic!("demo-controller did not exit within {timeout:?}\n{}", self.dump());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
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
