//! demo-controller as a pod would run it: the RBAC of demo-controller.yaml,
//! a ServiceAccount token from the TokenRequest API, and the in-cluster
//! configuration (KUBERNETES_SERVICE_HOST/PORT plus the token, CA and
//! namespace files at /var/run/secrets/kubernetes.io/serviceaccount).
//!
//! Those files sit at a fixed path, as in a pod. The test puts them there in
//! a user namespace with a private mount namespace (`unshare --user
//! --map-root-user --mount`): no privilege is needed and the host's /run is
//! untouched. The binary has no test-only override for that directory.

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use serde_json::{Value, json};

const SA_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

fn kinds(wanted: &[&str]) -> Vec<Value> {
    manifest().into_iter().filter(|o| wanted.contains(&o["kind"].as_str().unwrap_or_default())).collect()
}

/// The Namespace, ServiceAccount and RBAC objects of demo-controller.yaml,
/// applied for real; returns a token of that account.
async fn install_rbac(c: &Cluster) -> String {
    for object in kinds(&["Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"]) {
        apply(&c.client, &object, false).await.unwrap_or_else(|e| panic!("apply {}: {e}", object["kind"]));
    }
    token(&c.client, "demo-controller", "demo-controller").await
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// Whether any user may run `path`: every directory above it searchable by
/// others, and the file itself readable and executable by others.
fn readable_by_anyone(path: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &std::path::Path| std::fs::metadata(p).map(|m| m.permissions().mode()).unwrap_or(0);
    mode(path) & 0o005 == 0o005 && path.ancestors().skip(1).all(|dir| mode(dir) & 0o001 != 0)
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn runs_in_cluster_with_the_manifest_rbac() {
    let c = cluster().await;
    let token = install_rbac(&c).await;
    let ns = namespace(&c.client, "incluster").await;
    create(&c.client, &ns, "existing", &[]).await;

    // The files a kubelet mounts into the pod, staged for the private mount.
    let stage = tmp_file("sa/token", &token).parent().unwrap().to_path_buf();
    std::fs::copy(c.dir.join("pki/ca.crt"), stage.join("ca.crt")).unwrap();
    std::fs::write(stage.join("namespace"), "demo-controller").unwrap();
    let url = server_url(&c.dir);
    let port = url.rsplit(':').next().unwrap();
    let script = format!(
        "mount -t tmpfs tmpfs /run && mkdir -p {SA_DIR} && cp {stage}/token {stage}/ca.crt {stage}/namespace {SA_DIR}/ \
         && exec \"$0\" --log-format json --probe-addr 0 --metrics-addr 0 --leader-elect",
        stage = stage.display()
    );
    // Run as an unprivileged user when we are root (as CI is) and the build
    // is readable by others, to prove no privilege is needed; otherwise as
    // whoever runs the tests.
    let mut cmd = if is_root() && readable_by_anyone(std::path::Path::new(BIN)) {
        println!("in-cluster: running unprivileged, as uid 65534, in a user namespace");
        let mut cmd = Command::new("setpriv");
        cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", "unshare"]);
        cmd
    } else {
        println!("in-cluster: running as the current user, in a user namespace");
        Command::new("unshare")
    };
    cmd.args(["--user", "--map-root-user", "--mount", "--propagation", "private", "sh", "-c", &script, BIN])
        .env_remove("KUBECONFIG")
        .env("HOME", "/nonexistent")
        .env("KUBERNETES_SERVICE_HOST", "127.0.0.1")
        .env("KUBERNETES_SERVICE_PORT", port);
    // A lease a killed run of this test left would make this one wait it out.
    let leases = Api::<Lease>::namespaced(c.client.clone(), "demo-controller");
    let _ = leases.delete("demo-controller", &DeleteParams::default()).await;
    let logger = Logger::spawn(cmd, &[]);
    // The manifest's Role lets it create the Lease of its own namespace
    // (read from the namespace file, as in a pod). Finding none, it first
    // waits a lease duration and three retry periods (15s + 6s): the Lease may
    // have been deleted by hand while another replica led.
    let waits = "no holder of the lease seen yet: waiting 21s before taking it, so that a standby that followed an earlier leader takes it first";
    logger.wait_message(waits, Duration::from_secs(30)).await;
    let leads = logger.wait_message("became leader", Duration::from_secs(60)).await;
    assert_eq!(
        leases.get("demo-controller").await.ok().and_then(|l| l.spec?.holder_identity),
        leads["identity"].as_str().map(String::from)
    );
    let synced = logger.synced().await;
    assert!(synced["pods"].as_u64().unwrap() >= 1, "{synced}");
    logger.wait_message(&format!("onAdd: {ns}/existing"), Duration::from_secs(30)).await;
    create(&c.client, &ns, "new", &[]).await;
    logger.wait_message(&format!("onAdd: {ns}/new"), Duration::from_secs(30)).await;
    // The host's own /run is untouched.
    assert!(!std::path::Path::new(SA_DIR).exists(), "the service-account files leaked onto the host");
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn the_manifest_rbac_is_least_privilege() {
    let c = cluster().await;
    let token = install_rbac(&c).await;
    let kc = token_kubeconfig(&c.dir, "least-privilege", &token);
    let sa = client_for(&kc).await;
    let ns = namespace(&c.client, "rbac").await;
    create(&c.client, &ns, "victim", &[]).await;

    // What it needs: list and watch pods everywhere.
    Api::<Pod>::all(sa.clone()).list(&ListParams::default().limit(1)).await.expect("may list pods");
    if let Err(e) = Api::<Pod>::all(sa.clone()).watch(&kube::api::WatchParams::default().timeout(1), "0").await {
        panic!("may watch pods: {e}");
    }
    // Nothing more: not even get, which nothing in demo-controller calls.
    let forbidden = |r: Result<(), kube::Error>| match r {
        Err(kube::Error::Api(s)) => s.code == 403,
        _ => false,
    };
    let get = Api::<Pod>::namespaced(sa.clone(), &ns).get("victim").await.map(|_| ());
    assert!(forbidden(get), "it must not get single pods");
    let secrets = Api::<Secret>::all(sa.clone()).list(&ListParams::default()).await.map(|_| ());
    assert!(forbidden(secrets), "it must not list secrets");
    let create = Api::<Pod>::namespaced(sa.clone(), &ns).create(&PostParams::default(), &pod("intruder", &[])).await;
    assert!(forbidden(create.map(|_| ())), "it must not create pods");
    let delete = Api::<Pod>::namespaced(sa.clone(), &ns).delete("victim", &DeleteParams::default()).await;
    assert!(forbidden(delete.map(|_| ())), "it must not delete pods");
    // Leases: its own, in its own namespace, and no other. Dry runs (the
    // API server authorizes them as the real thing) leave the Lease another
    // test's logger may hold alone; a 404 or 409 is past authorization too.
    let allowed = |r: Result<Lease, kube::Error>| !forbidden(r.map(|_| ()));
    let dry = PostParams { dry_run: true, ..Default::default() };
    let lease = |name: &str| Lease {
        metadata: kube::api::ObjectMeta { name: Some(name.into()), ..Default::default() },
        spec: None,
    };
    let own = Api::<Lease>::namespaced(sa.clone(), "demo-controller");
    assert!(allowed(own.create(&dry, &lease("demo-controller")).await), "it may create its lease");
    assert!(allowed(own.get("demo-controller").await), "it may get its lease");
    assert!(allowed(own.replace("demo-controller", &dry, &lease("demo-controller")).await), "it may update its lease");
    assert!(!allowed(own.get("another").await), "it must not get another lease");
    assert!(!allowed(own.replace("another", &dry, &lease("another")).await), "it must not update another lease");
    let deleted = own.delete("demo-controller", &DeleteParams { dry_run: true, ..Default::default() }).await;
    assert!(forbidden(deleted.map(|_| ())), "it must not delete its lease");
    let elsewhere = Api::<Lease>::namespaced(sa.clone(), &ns);
    assert!(!allowed(elsewhere.create(&dry, &lease("demo-controller")).await), "no leases in other namespaces");
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn every_object_of_the_manifest_passes_server_side_dry_run() {
    let c = cluster().await;
    // The namespace must exist for its objects to be dry-run in it.
    apply(&c.client, &kinds(&["Namespace"])[0], false).await.expect("namespace");
    let objects = manifest();
    let kinds: Vec<&str> = objects.iter().map(|o| o["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        ["Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Deployment"]
    );
    for object in &objects {
        apply(&c.client, object, true).await.unwrap_or_else(|e| panic!("dry-run of {} failed: {e}", object["kind"]));
    }
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn the_pod_template_is_admitted_under_pod_security_restricted() {
    let c = cluster().await;
    let ns = namespace(&c.client, "restricted").await;
    let label = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}});
    apply(&c.client, &label, false).await.expect("label namespace restricted");
    let deployment = manifest().into_iter().find(|o| o["kind"] == "Deployment").unwrap();
    let template = &deployment["spec"]["template"];
    let mut pod: Pod =
        serde_json::from_value(json!({"metadata": template["metadata"], "spec": template["spec"]})).unwrap();
    pod.metadata.name = Some("demo-controller".into());
    // The ServiceAccount the template names, so only Pod Security can object.
    service_account(&c.client, &ns, "demo-controller").await;
    let pods = Api::<Pod>::namespaced(c.client.clone(), &ns);
    pods.create(&PostParams::default(), &pod).await.expect("the Deployment's pod is admitted under restricted");
    // The control: the same pod without its securityContext is refused, so the
    // admission above proves something.
    let mut loose = pod.clone();
    loose.metadata.name = Some("loose".into());
    if let Some(spec) = loose.spec.as_mut() {
        spec.security_context = None;
        spec.containers[0].security_context = None;
    }
    match pods.create(&PostParams::default(), &loose).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 403, "{s:?}");
            assert!(s.message.contains("violates PodSecurity \"restricted:latest\""), "{}", s.message);
        }
        other => panic!("a pod without securityContext was admitted: {other:?}"),
    }
}
