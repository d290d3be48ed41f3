//! The control plane under the benchmark: the client, the realistic pods, and
//! the kube-apiserver process (its cost, and restarting it to force a relist).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use futures::stream::{self, StreamExt};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, Namespace, Pod, PodSpec, ResourceRequirements, ServiceAccount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config, ResourceExt};
use serde_json::json;

use crate::process::{cpu_ticks, memory_mib};

/// Requests in flight at once, for the N pods and for the burst.
pub const CONCURRENCY: usize = 64;
/// The N pods are spread over namespaces of this many pods.
pub const PODS_PER_NAMESPACE: usize = 1000;

/// Every namespace the harness made and has not cleaned up yet, for Ctrl-C.
pub static NAMESPACES: Mutex<Vec<String>> = Mutex::new(Vec::new());

pub async fn client_for(kubeconfig: &Path) -> Client {
    let kc = Kubeconfig::read_from(kubeconfig).unwrap_or_else(|e| panic!("cannot read {}: {e}", kubeconfig.display()));
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await.expect("a usable kubeconfig");
    Client::try_from(config).expect("a client")
}

/// A fresh namespace (names are never reused: without a controller-manager a
/// deleted namespace never finishes terminating) with the `default`
/// ServiceAccount that the ServiceAccount admission plugin requires for pods.
pub async fn namespace(client: &Client, prefix: &str) -> String {
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
    NAMESPACES.lock().expect("namespaces lock").push(name.clone());
    Api::<ServiceAccount>::namespaced(client.clone(), &name)
        .create(&PostParams::default(), &sa)
        .await
        .unwrap_or_else(|e| panic!("create the default ServiceAccount in {name}: {e}"));
    name
}

/// Creates N realistic pods (create + status patch) in fresh namespaces; returns the namespaces.
pub async fn create_pods(client: &Client, n: usize) -> Vec<String> {
    let started = Instant::now();
    let mut namespaces = Vec::new();
    for _ in (0..n).step_by(PODS_PER_NAMESPACE) {
        namespaces.push(namespace(client, &format!("bench-n{n}")).await);
    }
    let apis: Vec<Api<Pod>> = namespaces.iter().map(|ns| Api::namespaced(client.clone(), ns)).collect();
    stream::iter(0..n)
        .map(|i| {
            let api = &apis[i / PODS_PER_NAMESPACE];
            async move {
                let name = format!("web-{i:06}");
                create_pod(api, &name, i).await;
                patch_status(api, &name, i).await;
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect::<()>()
        .await;
    let secs = started.elapsed().as_secs_f64();
    eprintln!("bench: created {n} pods (create + status) in {secs:.1} s ({:.0} pods/s)", n as f64 / secs);
    namespaces
}

/// Deletes the pods of `namespaces` (one DELETE on each pods collection), then
/// the namespaces. At once (grace period 0): the pods are bound to nodes, and
/// without a kubelet to confirm, a graceful delete would never finish.
pub async fn delete_namespaces(client: &Client, namespaces: &[String]) {
    for ns in namespaces {
        Api::<Pod>::namespaced(client.clone(), ns)
            .delete_collection(&DeleteParams::default().grace_period(0), &ListParams::default())
            .await
            .unwrap_or_else(|e| panic!("delete the pods of {ns}: {e}"));
        // Without a namespace controller it stays Terminating; it is empty, which is what counts.
        let _ = Api::<Namespace>::all(client.clone()).delete(ns, &DeleteParams::default()).await;
        NAMESPACES.lock().expect("namespaces lock").retain(|n| n != ns);
    }
}

/// How many pods the cluster holds, from one list call of one item.
pub async fn count_pods(client: &Client) -> usize {
    let list = Api::<Pod>::all(client.clone()).list_metadata(&ListParams::default().limit(1)).await.expect("list pods");
    list.items.len() + usize::try_from(list.metadata.remaining_item_count.unwrap_or(0)).unwrap_or(0)
}

/// A pod as a Deployment's ReplicaSet makes it: labels, an owner, a node, an
/// app container and a sidecar, both with requests and limits.
fn pod(name: &str, i: usize) -> Pod {
    let label = |k: &str, v: &str| (k.to_string(), v.to_string());
    let resources = |cpu: &str, mem: &str, cpu_max: &str, mem_max: &str| ResourceRequirements {
        requests: Some([("cpu".into(), Quantity(cpu.into())), ("memory".into(), Quantity(mem.into()))].into()),
        limits: Some([("cpu".into(), Quantity(cpu_max.into())), ("memory".into(), Quantity(mem_max.into()))].into()),
        ..Default::default()
    };
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(
                [
                    label("app.kubernetes.io/name", "web"),
                    label("app.kubernetes.io/component", "frontend"),
                    label("pod-template-hash", "5d8f7c9b4d"),
                    label("version", "v1.4.2"),
                ]
                .into(),
            ),
            owner_references: Some(vec![OwnerReference {
                api_version: "apps/v1".into(),
                kind: "ReplicaSet".into(),
                name: "web-5d8f7c9b4d".into(),
                uid: "7f1c2d3e-4b5a-4c6d-8e9f-0a1b2c3d4e5f".into(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some(format!("node-{:02}", i % 50)),
            containers: vec![
                Container {
                    name: "app".into(),
                    image: Some("registry.k8s.io/nginx-slim:0.27".into()),
                    ports: Some(vec![ContainerPort {
                        container_port: 8080,
                        name: Some("http".into()),
                        ..Default::default()
                    }]),
                    resources: Some(resources("100m", "128Mi", "500m", "256Mi")),
                    ..Default::default()
                },
                Container {
                    name: "log-shipper".into(),
                    image: Some("registry.k8s.io/fluent-bit:3.1".into()),
                    args: Some(vec!["--config=/etc/fluent-bit/fluent-bit.conf".into()]),
                    resources: Some(resources("20m", "32Mi", "100m", "64Mi")),
                    ..Default::default()
                },
            ],
            automount_service_account_token: Some(false),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The status a kubelet would write once both containers run, through pods/status.
fn status(i: usize) -> serde_json::Value {
    let t = "2026-11-22T05:00:00Z";
    let (host_ip, pod_ip) = (format!("10.1.0.{}", i % 50 + 1), format!("10.244.{}.{}", (i / 250) % 250, i % 250 + 2));
    let condition =
        |kind: &str| json!({"type": kind, "status": "True", "lastProbeTime": null, "lastTransitionTime": t});
    let container = |name: &str, image: &str, digest: char| {
        json!({
            "name": name, "image": image, "imageID": format!("{image}@sha256:{}", digest.to_string().repeat(64)),
            "containerID": format!("containerd://{:064x}", i * 2 + usize::from(digest == 'b')),
            "ready": true, "restartCount": 0, "started": true,
            "state": {"running": {"startedAt": t}}
        })
    };
    let conditions =
        ["PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"].map(condition);
    json!({"status": {
        "phase": "Running",
        "conditions": conditions,
        "hostIP": host_ip, "hostIPs": [{"ip": host_ip}],
        "podIP": pod_ip, "podIPs": [{"ip": pod_ip}],
        "startTime": t,
        "containerStatuses": [
            container("app", "registry.k8s.io/nginx-slim:0.27", 'a'),
            container("log-shipper", "registry.k8s.io/fluent-bit:3.1", 'b'),
        ],
    }})
}

/// Retries a few times, as a loaded API server may refuse a request (429) or a
/// connection may drop; `done` says whether an error means it already happened.
async fn retry<T, F: Future<Output = Result<T, kube::Error>>>(
    what: &str,
    mut call: impl FnMut() -> F,
    done: impl Fn(&kube::Error) -> bool,
) {
    for attempt in 1u64.. {
        match call().await {
            Ok(_) => return,
            Err(e) if attempt > 1 && done(&e) => return,
            Err(e) if attempt < 5 => {
                eprintln!("bench: {what} failed (attempt {attempt}), retrying: {e}");
                tokio::time::sleep(Duration::from_millis(200 * attempt)).await;
            }
            Err(e) => panic!("{what} failed {attempt} times: {e}"),
        }
    }
}

pub async fn create_pod(api: &Api<Pod>, name: &str, i: usize) {
    let pod = pod(name, i);
    let exists = |e: &kube::Error| matches!(e, kube::Error::Api(s) if s.is_already_exists());
    let params = PostParams::default();
    retry(&format!("creating pod {name}"), || api.create(&params, &pod), exists).await;
}

async fn patch_status(api: &Api<Pod>, name: &str, i: usize) {
    let patch = Patch::Merge(status(i));
    let params = PatchParams::default();
    retry(&format!("patching the status of {name}"), || api.patch_status(name, &params, &patch), |_| false).await;
}

/// What one benchmark pod weighs: its JSON as the server sends it, without
/// `managedFields`, and the bytes of the fields demo-controller keeps.
#[derive(Clone, Copy, Debug, Default)]
pub struct PodSize {
    pub json: usize,
    pub json_without_managed_fields: usize,
    pub kept: usize,
}

pub async fn pod_size(client: &Client, namespace: &str) -> PodSize {
    let api = Api::<Pod>::namespaced(client.clone(), namespace);
    let name = api.list_metadata(&ListParams::default().limit(1)).await.expect("list a pod").items[0].name_any();
    let uri = format!("/api/v1/namespaces/{namespace}/pods/{name}");
    let text =
        client.request_text(http::Request::get(uri).body(Vec::new()).expect("a request")).await.expect("get a pod");
    let mut value: serde_json::Value = serde_json::from_str(&text).expect("a pod's JSON");
    if let Some(meta) = value.get_mut("metadata").and_then(|m| m.as_object_mut()) {
        meta.remove("managedFields");
    }
    let pod: Pod = serde_json::from_str(&text).expect("a pod");
    let len = |s: &Option<String>| s.as_ref().map_or(0, String::len);
    let m = &pod.metadata;
    let labels: usize = m.labels.iter().flatten().map(|(k, v)| k.len() + v.len()).sum();
    let status = pod.status.as_ref();
    let statuses = status.and_then(|s| s.container_statuses.as_ref()).map_or(0, Vec::len);
    let conditions = status.and_then(|s| s.conditions.as_ref()).map_or(0, Vec::len);
    let kept = len(&m.name)
        + len(&m.namespace)
        + len(&m.uid)
        + len(&m.resource_version)
        + labels
        + pod.spec.as_ref().map_or(0, |s| len(&s.node_name))
        + status.map_or(0, |s| len(&s.phase))
        + conditions // one byte each: True, False or Unknown
        // ready (bool) + restartCount (i32) + state and last state (a byte each while running);
        // the container's name is shared between pods, so it is not counted
        + statuses * (1 + 4 + 2);
    PodSize { json: text.len(), json_without_managed_fields: value.to_string().len(), kept }
}

// --- The kube-apiserver process ----------------------------------------------------

/// The cluster directory cluster/up.sh made (pid files, scripts, certificates).
pub struct ControlPlane {
    pub dir: PathBuf,
}

/// CPU (ticks) and RSS (MiB) of kube-apiserver and etcd at one moment.
#[derive(Clone, Copy, Debug, Default)]
pub struct ServerUsage {
    pub apiserver_ticks: u64,
    pub apiserver_rss_mib: f64,
    pub etcd_ticks: u64,
}

impl ControlPlane {
    fn pid(&self, name: &str) -> Option<u32> {
        std::fs::read_to_string(self.dir.join(format!("{name}.pid"))).ok()?.trim().parse().ok()
    }

    /// A live process whose command line names this cluster directory (the
    /// check cluster/down.sh makes before it signals a pid from a pid file).
    fn ours(&self, pid: u32) -> bool {
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else { return false };
        let words = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        // The directory as given, and with its symlinks resolved: a relative
        // --cluster-dir is named absolute on the command line.
        let named = |dir: &Path| words.contains(&format!("{}/", dir.display()));
        (self.dir.is_absolute() && named(&self.dir)) || std::fs::canonicalize(&self.dir).is_ok_and(|d| named(&d))
    }

    pub fn usage(&self) -> ServerUsage {
        let api = self.pid("kube-apiserver").unwrap_or(0);
        ServerUsage {
            apiserver_ticks: cpu_ticks(api),
            apiserver_rss_mib: memory_mib(api).1,
            etcd_ticks: self.pid("etcd").map_or(0, cpu_ticks),
        }
    }

    fn env(&self, key: &str) -> String {
        let env = std::fs::read_to_string(self.dir.join("env")).expect("read the cluster's env file");
        env.lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("no {key} in the cluster's env file"))
            .to_string()
    }

    /// Forces every watcher into a relist: compacts etcd to its latest
    /// revision and restarts kube-apiserver, whose fresh watch cache starts at
    /// that revision, so a client that resumes its watch from the
    /// resourceVersion it had gets 410 Gone and must list again.
    pub fn restart_compacted(&self) {
        // SIGKILL, as in a crash: a graceful stop waits a minute or more for
        // open watches, and how the watches end does not matter here.
        self.restart("KILL", Duration::ZERO, true);
    }

    /// Stops kube-apiserver with `signal` (SIGKILL after `grace` if it still
    /// runs), compacts etcd to its latest revision if `compact`, and starts it
    /// again; returns once it is ready. The soak restarts it both ways.
    ///
    /// The pid file is trusted only for a live process whose command line
    /// names the cluster directory, as cluster/down.sh checks: any other
    /// process (a recycled pid, a pid file written by hand) is refused with a
    /// panic naming it, and never signalled. A pid whose process is gone is
    /// a stopped kube-apiserver: it is started again.
    pub fn restart(&self, signal: &str, grace: Duration, compact: bool) {
        let pid = self.pid("kube-apiserver").expect("kube-apiserver.pid in the cluster directory");
        let alive = || std::path::Path::new(&format!("/proc/{pid}")).exists();
        if alive() && !self.ours(pid) {
            panic!(
                "{}/kube-apiserver.pid holds pid {pid}, which is not a process of this control plane \
                 (its command line does not name {}/): not signalling it; stop the control plane with \
                 cluster/down.sh --dir {0}",
                self.dir.display(),
                self.dir.display()
            );
        }
        crate::process::send_signal(pid, signal);
        let deadline = Instant::now() + grace;
        while alive() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        if alive() {
            if signal != "KILL" {
                eprintln!("kube-apiserver still runs {grace:?} after SIG{signal}: killing it");
            }
            crate::process::send_signal(pid, "KILL");
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while alive() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        if compact {
            self.compact();
        }
        self.start_and_wait();
    }

    /// One write, then a physical compaction of etcd to its latest revision.
    fn compact(&self) {
        // etcd listens on a unix socket in the cluster directory only.
        let etcd = self.env("ETCD_SOCKET");
        let post = |path: &str, body: &str| -> serde_json::Value {
            let out = Command::new("curl")
                .args(["-sS", "--max-time", "30", "--unix-socket", &etcd, "-X", "POST"])
                .arg(format!("http://localhost{path}"))
                .args(["-d", body])
                .output()
                .expect("run curl");
            serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("etcd {path}: {out:?}"))
        };
        // One write first, so the revision the new watch cache starts at is
        // newer than any a client has seen, even in a bookmark.
        post("/v3/kv/put", r#"{"key":"L2JlbmNoL3JlbGlzdA==","value":"MQ=="}"#); // /bench/relist = 1
        let revision = post("/v3/kv/range", r#"{"key":"AA==","limit":"1"}"#)["header"]["revision"]
            .as_str()
            .expect("etcd's revision")
            .to_string();
        post("/v3/kv/compaction", &format!(r#"{{"revision":"{revision}","physical":true}}"#));
    }

    fn start_and_wait(&self) {
        // As cluster/up.sh starts it: detached, appending to its log, pid in the pid file.
        let status = Command::new("bash")
            .args([
                "-c",
                r#"setsid bash "$0/kube-apiserver.sh" >>"$0/logs/kube-apiserver.log" 2>&1 </dev/null 9<&- &
                   echo $! >"$0/kube-apiserver.pid""#,
            ])
            .arg(&self.dir)
            .status()
            .expect("start kube-apiserver");
        assert!(status.success(), "starting kube-apiserver failed");
        let url = self.env("APISERVER_URL");
        let pki = self.dir.join("pki");
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            let out = Command::new("curl")
                .args(["-sS", "--max-time", "3", "--cacert"])
                .arg(pki.join("ca.crt"))
                .arg("--cert")
                .arg(pki.join("admin.crt"))
                .arg("--key")
                .arg(pki.join("admin.key"))
                .arg(format!("{url}/readyz"))
                .output();
            if out.is_ok_and(|o| o.stdout == b"ok") {
                return;
            }
            assert!(Instant::now() < deadline, "kube-apiserver not ready 180 s after its restart");
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pid file that points at an unrelated process (here a `sleep` of the
    /// test's own): the restart refuses, and never signals it.
    #[test]
    fn a_restart_never_signals_a_pid_that_is_not_the_planes() {
        let dir = std::env::temp_dir().join(format!("soak-pid-check-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a directory for the pid file");
        let mut sleep = Command::new("sleep").arg("600").spawn().expect("start sleep");
        std::fs::write(dir.join("kube-apiserver.pid"), sleep.id().to_string()).expect("write the pid file");
        let plane = ControlPlane { dir: dir.clone() };
        let refused = std::panic::catch_unwind(|| plane.restart("KILL", Duration::ZERO, false));
        let alive = sleep.try_wait().expect("look at sleep").is_none();
        let _ = sleep.kill();
        let _ = sleep.wait();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(alive, "the restart killed an unrelated process");
        let message = refused.expect_err("the restart refused");
        let text = message.downcast_ref::<String>().map(String::as_str).unwrap_or_default();
        assert!(text.contains("which is not a process of this control plane"), "{text}");
    }
}
