//! Stopping the local node leaves the host as it was, even when everything
//! was killed mid-run: a node of this test's own is started, runs a pod (so
//! there are veths, mounts, a network namespace, iptables rules, cgroups),
//! then every node process is killed with SIGKILL, as a killed test run would
//! leave them, and cluster/node/down.sh must restore the host from the state
//! recorded before the start. Compared with cluster/node/hoststate.sh.
//!
//! Needs root and no other node on this machine: `make test` as root runs it
//! after the shared node is stopped.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::PostParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use serde_json::json;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn snapshot() -> String {
    let out = Command::new("bash").arg(repo().join("cluster/node/hoststate.sh")).output().unwrap();
    assert!(out.status.success(), "hoststate.sh: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn script(name: &str, dir: &Path) -> std::process::Output {
    Command::new("bash").arg(repo().join("cluster/node").join(name)).arg("--dir").arg(dir).output().unwrap()
}

fn section<'a>(snapshot: &'a str, name: &str) -> &'a str {
    let start = snapshot.find(&format!("## {name}\n")).unwrap_or_else(|| panic!("no section {name}"));
    let rest = &snapshot[start..];
    let end = rest[3..].find("\n## ").map(|i| i + 4).unwrap_or(rest.len());
    &rest[..end]
}

#[tokio::test]
#[ignore = "needs root and the local node: run `make test` as root"]
async fn node_teardown_restores_the_host_after_a_killed_run() {
    assert!(
        !Path::new("/run/containerd/containerd.sock").exists(),
        "another node is running on this machine: stop it first (cluster/node/down.sh --dir ITS_DIR)"
    );
    let dir = repo().join("target/test-node-teardown");
    let before = snapshot();

    let up = script("up.sh", &dir);
    assert!(up.status.success(), "node/up.sh failed:\n{}", String::from_utf8_lossy(&up.stderr));

    // A pod that really runs.
    let kc = Kubeconfig::read_from(dir.join("plane/kubeconfig")).unwrap();
    let client =
        Client::try_from(Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await.unwrap()).unwrap();
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": { "name": "sleeper" },
        "spec": { "containers": [{ "name": "c", "image": "docker.io/library/busybox:local",
                                   "imagePullPolicy": "Never", "command": ["sleep", "3600"] }] }
    }))
    .unwrap();
    let start = Instant::now();
    loop {
        // The default ServiceAccount comes from the controller-manager shortly after the start.
        if pods.create(&PostParams::default(), &pod).await.is_ok() {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "could not create the pod");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    loop {
        let p = pods.get("sleeper").await.unwrap();
        if p.status.and_then(|s| s.phase).as_deref() == Some("Running") {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(90), "the pod never ran");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    // The node did change the host (or this test could not fail).
    let running = snapshot();
    assert!(section(&running, "sysctls").contains("kernel.panic=10"), "{running}");
    assert!(section(&running, "links").contains("dcn-br0"), "{running}");
    assert!(section(&running, "network namespaces").contains("cni-"), "{running}");
    assert!(section(&running, "iptables").contains("KUBE-SERVICES"), "{running}");
    assert_ne!(section(&before, "mounts"), section(&running, "mounts"));

    // A killed run: SIGKILL to every process the node started; the pod's own
    // processes and the containerd shims are left behind as they would be.
    for name in [
        "kubelet",
        "kube-proxy",
        "kube-scheduler",
        "kube-controller-manager",
        "containerd",
        "plane/kube-apiserver",
        "plane/etcd",
    ] {
        let pid = std::fs::read_to_string(dir.join(format!("{name}.pid"))).unwrap();
        Command::new("kill").args(["-KILL", pid.trim()]).status().unwrap();
    }

    let down = script("down.sh", &dir);
    assert!(down.status.success(), "node/down.sh failed:\n{}", String::from_utf8_lossy(&down.stderr));
    assert!(!dir.exists(), "down.sh removes its directory");
    let after = snapshot();
    if before != after {
        let (b, a) = (std::env::temp_dir().join("node-before.txt"), std::env::temp_dir().join("node-after.txt"));
        std::fs::write(&b, &before).unwrap();
        std::fs::write(&a, &after).unwrap();
        let diff = Command::new("diff").arg(&b).arg(&a).output().unwrap();
        panic!("the host differs after down.sh:\n{}", String::from_utf8_lossy(&diff.stdout));
    }
}
