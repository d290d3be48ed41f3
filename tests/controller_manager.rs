//! The local control plane's kube-controller-manager (cluster/up.sh), seen
//! the way a user of the plane sees it: a deleted namespace is emptied and
//! removed, an object whose owner is gone is deleted, a new namespace gets
//! its `default` ServiceAccount, and cluster/down.sh leaves no
//! controller-manager running. Without one, each of these waits forever (the
//! wait fails after its timeout). Also of up.sh, on a plane of its own: a
//! lock its caller ran it under is free once it returns.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DeleteParams, ObjectMeta, PostParams};
use kube::runtime::wait::{Condition, await_condition, conditions::is_deleted};
use kube::{Api, Client, Resource};

/// Long enough for a loaded machine: the garbage collector acts only once it
/// has listed every kind of object, seconds after the plane starts.
const T: Duration = Duration::from_secs(120);

/// Waits (a watch, no polling) until the object `name` meets `cond`.
async fn wait<K>(api: &Api<K>, name: &str, what: &str, cond: impl Condition<K>) -> Option<K>
where
    K: Clone + std::fmt::Debug + Send + serde::de::DeserializeOwned + Resource + 'static,
{
    match tokio::time::timeout(T, await_condition(api.clone(), name, cond)).await {
        Ok(Ok(object)) => object,
        Ok(Err(e)) => panic!("watching {name} until {what}: {e}"),
        Err(_) => panic!("{name}: not {what} after {T:?}: is the control plane's kube-controller-manager running?"),
    }
}

fn config_map(name: &str, owner: Option<&ConfigMap>) -> ConfigMap {
    let owner_references = owner.map(|o| {
        vec![OwnerReference {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: o.metadata.name.clone().unwrap_or_default(),
            uid: o.metadata.uid.clone().unwrap_or_default(),
            ..Default::default()
        }]
    });
    ConfigMap {
        metadata: ObjectMeta { name: Some(name.into()), owner_references, ..Default::default() },
        data: Some([("k".to_string(), "v".to_string())].into()),
        ..Default::default()
    }
}

async fn create_config_map(client: &Client, ns: &str, name: &str, owner: Option<&ConfigMap>) -> ConfigMap {
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &config_map(name, owner))
        .await
        .unwrap_or_else(|e| panic!("create ConfigMap {ns}/{name}: {e}"))
}

fn uid<K: Resource>(object: &K) -> String {
    object.meta().uid.clone().unwrap_or_default()
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn a_deleted_namespace_is_emptied_and_removed() {
    let c = cluster().await;
    let ns = namespace(&c.client, "kcm-ns").await;
    create(&c.client, &ns, "pod", &[]).await;
    let kept = create_config_map(&c.client, &ns, "kept", None).await;
    let namespaces = Api::<Namespace>::all(c.client.clone());
    let ns_uid = uid(&namespaces.get(&ns).await.expect("get the namespace"));

    namespaces.delete(&ns, &DeleteParams::default()).await.expect("delete the namespace");
    wait(&namespaces, &ns, "removed", is_deleted(&ns_uid)).await;

    // The namespace goes only once the namespace controller has deleted
    // everything in it: the ConfigMap is gone, not left behind.
    let maps = Api::<ConfigMap>::namespaced(c.client.clone(), &ns);
    let left = maps.get_opt("kept").await.expect("get the ConfigMap");
    assert!(left.is_none_or(|m| uid(&m) != uid(&kept)), "the ConfigMap outlived its namespace");
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn an_object_whose_owner_is_deleted_is_garbage_collected() {
    let c = cluster().await;
    let ns = namespace(&c.client, "kcm-gc").await;
    let maps = Api::<ConfigMap>::namespaced(c.client.clone(), &ns);
    let owner = create_config_map(&c.client, &ns, "owner", None).await;
    let child = create_config_map(&c.client, &ns, "child", Some(&owner)).await;

    maps.delete("owner", &DeleteParams::default()).await.expect("delete the owner");
    let child_uid = uid(&child);
    wait(&maps, "child", "garbage collected", is_deleted(&child_uid)).await;
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn an_object_created_for_an_owner_already_gone_is_garbage_collected() {
    let c = cluster().await;
    let ns = namespace(&c.client, "kcm-orphan").await;
    let maps = Api::<ConfigMap>::namespaced(c.client.clone(), &ns);
    let owner = create_config_map(&c.client, &ns, "owner", None).await;
    let owner_uid = uid(&owner);
    maps.delete("owner", &DeleteParams::default()).await.expect("delete the owner");
    wait(&maps, "owner", "deleted", is_deleted(&owner_uid)).await;

    // The child names, by uid, an owner that no longer exists.
    let child = create_config_map(&c.client, &ns, "child", Some(&owner)).await;
    let child_uid = uid(&child);
    wait(&maps, "child", "garbage collected", is_deleted(&child_uid)).await;
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn a_new_namespace_gets_its_default_service_account_and_tokens() {
    let c = cluster().await;
    // Made here, not with `namespace()`, which makes the account itself.
    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_millis();
    let ns = format!("kcm-sa-{}", stamp % 1_000_000_000);
    let namespaces = Api::<Namespace>::all(c.client.clone());
    let object =
        Namespace { metadata: ObjectMeta { name: Some(ns.clone()), ..Default::default() }, ..Default::default() };
    namespaces.create(&PostParams::default(), &object).await.expect("create the namespace");

    let accounts = Api::<ServiceAccount>::namespaced(c.client.clone(), &ns);
    wait(&accounts, "default", "made", |sa: Option<&ServiceAccount>| sa.is_some()).await;

    // A Secret of type service-account-token naming the account: the token
    // controller fills in a token for it.
    let secrets = Api::<Secret>::namespaced(c.client.clone(), &ns);
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some("token".into()),
            annotations: Some([("kubernetes.io/service-account.name".to_string(), "default".to_string())].into()),
            ..Default::default()
        },
        type_: Some("kubernetes.io/service-account-token".into()),
        ..Default::default()
    };
    secrets.create(&PostParams::default(), &secret).await.expect("create the token Secret");
    let filled = |s: Option<&Secret>| s.and_then(|s| s.data.as_ref()).is_some_and(|d| d.contains_key("token"));
    let secret = wait(&secrets, "token", "given a token", filled).await.expect("the Secret exists");
    let token = secret.data.and_then(|mut d| d.remove("token")).expect("a token");
    assert_eq!(token.0.split(|b| *b == b'.').count(), 3, "not a JWT: {:?}", String::from_utf8_lossy(&token.0));

    namespaces.delete(&ns, &DeleteParams::default()).await.expect("delete the namespace");
}

/// Pids of the kube-controller-manager processes whose command line names `dir`.
fn controller_managers_of(dir: &Path) -> Vec<u32> {
    let needle = format!("{}/", dir.display());
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else { return false };
            let args: Vec<String> =
                cmdline.split(|b| *b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
            args.first().is_some_and(|a| a.rsplit('/').next() == Some("kube-controller-manager"))
                && args.iter().any(|a| a.contains(&needle))
        })
        .collect()
}

fn script(name: &str, dir: &Path, extra: &[&str]) -> std::process::Output {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    Command::new("bash")
        .arg(repo.join("cluster").join(name))
        .arg("--dir")
        .arg(dir)
        .args(extra)
        .output()
        .unwrap_or_else(|e| panic!("run cluster/{name}: {e}"))
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn down_leaves_no_controller_manager_running() {
    // A plane of its own (cluster/test.sh stops whatever is left in
    // target/test-planes/), as this one is stopped.
    let parent = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/test-planes");
    std::fs::create_dir_all(&parent).expect("make target/test-planes");
    let scratch = fresh_dir_in(&parent, "kcm-down");
    let dir = scratch.join("plane");
    let up = script("up.sh", &dir, &[]);
    let running = controller_managers_of(&dir);
    let down = script("down.sh", &dir, &[]);
    let after = controller_managers_of(&dir);
    std::fs::remove_dir_all(&scratch).ok();
    assert!(up.status.success(), "up.sh: {}", String::from_utf8_lossy(&up.stderr));
    assert_eq!(running.len(), 1, "up.sh started {} kube-controller-manager processes", running.len());
    assert!(down.status.success(), "down.sh: {}", String::from_utf8_lossy(&down.stderr));
    assert!(after.is_empty(), "down.sh left kube-controller-manager running: {after:?}");
    let stderr = String::from_utf8_lossy(&down.stderr);
    assert!(stderr.contains("stopped 1 kube-controller-manager, 1 kube-apiserver and 1 etcd process(es)"), "{stderr}");

    // Started without one, as the benchmarks start it: none runs.
    let bare = fresh_dir_in(&parent, "kcm-bare");
    let dir = bare.join("plane");
    let up = script("up.sh", &dir, &["--no-controller-manager"]);
    let running = controller_managers_of(&dir);
    let down = script("down.sh", &dir, &[]);
    std::fs::remove_dir_all(&bare).ok();
    assert!(up.status.success(), "up.sh --no-controller-manager: {}", String::from_utf8_lossy(&up.stderr));
    assert!(down.status.success(), "down.sh: {}", String::from_utf8_lossy(&down.stderr));
    assert!(running.is_empty(), "up.sh --no-controller-manager started kube-controller-manager: {running:?}");
}

/// `flock LOCK cluster/up.sh` (as scripts that share a machine run it):
/// LOCK is free once up.sh returns, though the servers it started run on.
/// They inherit no descriptor of up.sh's but stdin, stdout and stderr.
#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn a_lock_up_sh_ran_under_is_free_once_it_returns() {
    let parent = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/test-planes");
    std::fs::create_dir_all(&parent).expect("make target/test-planes");
    let scratch = fresh_dir_in(&parent, "kcm-lock");
    let (dir, lock) = (scratch.join("plane"), scratch.join("lock"));
    std::fs::write(&lock, "").expect("make the lock file");
    let up = Command::new("flock")
        .arg(&lock)
        .arg("bash")
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("cluster/up.sh"))
        .arg("--dir")
        .arg(&dir)
        .output()
        .expect("run flock");
    let free = Command::new("flock").arg("-n").arg(&lock).arg("true").status().expect("run flock -n");
    let running = controller_managers_of(&dir);
    let down = script("down.sh", &dir, &[]);
    std::fs::remove_dir_all(&scratch).ok();
    assert!(up.status.success(), "up.sh: {}", String::from_utf8_lossy(&up.stderr));
    assert_eq!(running.len(), 1, "the plane is not running: {}", String::from_utf8_lossy(&up.stderr));
    assert!(free.success(), "the servers up.sh started hold the lock it ran under");
    assert!(down.status.success(), "down.sh: {}", String::from_utf8_lossy(&down.stderr));
}
