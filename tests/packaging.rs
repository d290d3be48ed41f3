//! What the container image and the manifest depend on, checked without a
//! container engine: the Dockerfile copies files that exist and ships the
//! binary this crate builds, and the Dockerfile, demo-controller.yaml, the
//! Makefile and the binary's defaults agree with each other.

mod common;

use std::path::Path;

use serde_json::Value;

fn read(file: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(file)).expect(file)
}

fn deployment() -> Value {
    common::manifest().into_iter().find(|o| o["kind"] == "Deployment").expect("a Deployment")
}

#[test]
fn the_dockerfile_copies_what_exists_and_ships_this_binary() {
    let dockerfile = read("Dockerfile");
    for line in dockerfile.lines().filter(|l| l.starts_with("COPY ") && !l.contains("--from=")) {
        let parts: Vec<&str> = line.split_whitespace().collect();
        for source in &parts[1..parts.len() - 1] {
            assert!(Path::new(env!("CARGO_MANIFEST_DIR")).join(source).exists(), "Dockerfile copies missing {source}");
        }
    }
    assert!(dockerfile.contains("cargo build --release --locked"));
    let binary = format!("/src/target/release/{}", env!("CARGO_PKG_NAME"));
    assert!(dockerfile.contains(&binary), "the runtime stage must copy {binary}");
    let entry = dockerfile.lines().find(|l| l.starts_with("ENTRYPOINT")).expect("ENTRYPOINT");
    assert!(entry.contains(&format!("/usr/local/bin/{}", env!("CARGO_PKG_NAME"))), "{entry}");
    // The build image's toolchain is the one the crate allows.
    let from = dockerfile.lines().find(|l| l.starts_with("FROM rust:")).expect("a rust build stage");
    let version = from.trim_start_matches("FROM rust:").split('-').next().unwrap();
    let minor = |v: &str| v.split('.').nth(1).unwrap().parse::<u32>().unwrap();
    assert!(minor(version) >= minor(env!("CARGO_PKG_RUST_VERSION")), "{from}");
}

/// The image builds the whole workspace: every crate the manifest names by
/// path (a workspace member, a path dependency) is let into the build
/// context by .dockerignore and copied before the first `cargo build`, which
/// reads every member's manifest.
#[test]
fn the_image_build_context_holds_the_workspace_crates() {
    let manifest = read("Cargo.toml");
    let quoted = |text: &str| text.split('"').skip(1).step_by(2).map(str::to_string).collect::<Vec<_>>();
    let members = manifest.lines().filter(|l| l.starts_with("members = ")).flat_map(quoted);
    let path_deps =
        manifest.lines().filter_map(|l| l.split(" path = ").nth(1)).flat_map(|p| quoted(p).into_iter().take(1));
    let crates: Vec<String> = members.chain(path_deps).collect();
    assert!(crates.contains(&"crates/kube-pod-protobuf".to_string()), "{crates:?}");
    let dockerfile = read("Dockerfile");
    let ignore = read(".dockerignore");
    let first_build = dockerfile.find("cargo build").expect("a cargo build");
    for krate in &crates {
        let top = krate.split('/').next().unwrap();
        assert!(ignore.lines().any(|l| l == format!("!{top}/")), ".dockerignore leaves {top}/ out of the context");
        let copy = dockerfile.find(&format!("\nCOPY {top} ./{top}\n")).unwrap_or_else(|| panic!("no COPY of {top}/"));
        assert!(copy < first_build, "{top}/ is copied after the first cargo build, which needs {krate}/Cargo.toml");
        assert!(Path::new(env!("CARGO_MANIFEST_DIR")).join(krate).join("Cargo.toml").exists(), "{krate}");
    }
}

#[test]
fn the_image_user_matches_the_manifest_and_is_not_root() {
    let dockerfile = read("Dockerfile");
    let user = dockerfile.lines().rev().find_map(|l| l.strip_prefix("USER ")).expect("USER in the runtime stage");
    let (uid, gid) = user.trim().split_once(':').expect("USER uid:gid");
    assert_ne!(uid, "0");
    let pod_security = &deployment()["spec"]["template"]["spec"]["securityContext"];
    assert_eq!(pod_security["runAsUser"].as_u64().unwrap().to_string(), uid);
    assert_eq!(pod_security["runAsGroup"].as_u64().unwrap().to_string(), gid);
    assert_eq!(pod_security["runAsNonRoot"], true);
}

#[test]
fn ports_and_probes_match_the_binary_defaults() {
    let container = &deployment()["spec"]["template"]["spec"]["containers"][0];
    let ports: Vec<(String, u64)> = container["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["name"].as_str().unwrap().to_string(), p["containerPort"].as_u64().unwrap()))
        .collect();
    // In a pod, --metrics-addr and --probe-addr default to 0.0.0.0:8080 and
    // 0.0.0.0:8081 (loopback elsewhere).
    assert_eq!(ports, [("metrics".to_string(), 8080), ("probes".to_string(), 8081)]);
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(container["readinessProbe"]["httpGet"]["port"], "probes");
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(container["livenessProbe"]["httpGet"]["port"], "probes");
    let dockerfile = read("Dockerfile");
    assert!(dockerfile.contains("EXPOSE 8080 8081"));
    let help = std::process::Command::new(common::BIN).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(help.contains("[default: 127.0.0.1:8080, or 0.0.0.0:8080 in a pod]"), "{help}");
    assert!(help.contains("[default: 127.0.0.1:8081, or 0.0.0.0:8081 in a pod]"), "{help}");
}

#[test]
fn two_replicas_elect_a_leader_on_a_lease_of_their_own_namespace() {
    let spec = &deployment()["spec"];
    assert_eq!(spec["replicas"], 2, "a leader and a standby");
    let args = &spec["template"]["spec"]["containers"][0]["args"];
    assert!(args.as_array().unwrap().contains(&"--leader-elect".into()), "two replicas without election log twice");
    assert_eq!(spec["strategy"]["rollingUpdate"]["maxUnavailable"], 0, "a rollout keeps a standby");
    // Least privilege: the Lease's rules in a Role of the namespace, get
    // and update on the one lease by name, and no cluster-wide rule on leases.
    let objects = common::manifest();
    let role = objects.iter().find(|o| o["kind"] == "Role").expect("a Role");
    assert_eq!(role["metadata"]["namespace"], "demo-controller");
    let rules = role["rules"].as_array().unwrap();
    let named = rules.iter().find(|r| r["resourceNames"].is_array()).expect("a rule by name");
    assert_eq!(
        (&named["resourceNames"][0], &named["verbs"]),
        (&"demo-controller".into(), &serde_json::json!(["get", "update"]))
    );
    assert!(rules.iter().all(|r| r["resources"] == serde_json::json!(["leases"])));
    let cluster_role = objects.iter().find(|o| o["kind"] == "ClusterRole").expect("a ClusterRole");
    assert_eq!(cluster_role["rules"].as_array().unwrap().len(), 1, "pods only, cluster-wide");
    let binding = objects.iter().find(|o| o["kind"] == "RoleBinding").expect("a RoleBinding");
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    assert_eq!(binding["subjects"][0]["name"], "demo-controller");
}

/// `bash SCRIPT` from the repository, its command set up by `env`.
fn bash(
    script: &str,
    env: impl FnOnce(&mut std::process::Command) -> &mut std::process::Command,
) -> std::process::Output {
    let mut cmd = std::process::Command::new("/bin/bash");
    cmd.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join(script));
    env(&mut cmd).output().unwrap()
}

/// The Go that builds these modules without fetching a newer toolchain: the
/// highest of their go.mod files' `go` lines, as "1.26".
fn go_needed(files: &[&str]) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let versions = files.iter().map(|file| {
        let text = std::fs::read_to_string(root.join(file)).expect(file);
        let line = text.lines().find_map(|l| l.strip_prefix("go ")).unwrap_or_else(|| panic!("{file}: no go line"));
        let mut parts = line.trim().split('.').map(|p| p.parse::<u32>().unwrap_or_else(|_| panic!("{file}: {line}")));
        (parts.next().unwrap_or_default(), parts.next().unwrap_or_default())
    });
    let (major, minor) = versions.max().expect("a go.mod");
    format!("{major}.{minor}")
}

#[test]
fn the_go_the_readme_asks_for_builds_every_module() {
    let go = go_needed(&[
        "bench/go-logger/go.mod",
        "cluster/etcd/go.mod",
        "cluster/kube-apiserver/go.mod",
        "cluster/node/go.mod",
    ]);
    assert!(read("README.md").contains(&format!(", Go {go} or newer,")), "the README's prerequisites: Go {go}");
}

#[test]
fn building_without_go_says_what_to_install() {
    let plane = ["cluster/etcd/go.mod", "cluster/kube-apiserver/go.mod"];
    for (script, what, modules) in [
        ("cluster/build.sh", "the local control plane is built", &plane[..]),
        ("cluster/node/build.sh", "the node's binaries are built", &["cluster/node/go.mod"][..]),
    ] {
        let out = bash(script, |cmd| cmd.env_clear().env("PATH", "/nonexistent"));
        assert_eq!(out.status.code(), Some(1), "{script}");
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            format!(
                "error: Go is not installed; {what} from Go modules: install Go {} or newer (https://go.dev/dl) and \
                 run this again\n",
                go_needed(modules)
            ),
            "{script}"
        );
    }
}

/// go build trusts its caches, and root runs what it builds: a GOCACHE that
/// other users can write to (no sticky bit) is one line and exit 1, before
/// anything is built.
#[test]
fn a_go_cache_others_can_change_is_one_line_and_exit_1() {
    let open = common::OpenDir::new("open-gocache");
    let path = open.path();
    // A `go` that answers `go env GOCACHE GOMODCACHE` with $GOCACHE twice, as
    // a real one would with both set: the test needs no Go installed.
    let go =
        common::tmp_file("stub-go/go", "#!/bin/sh\n[ \"$1\" = env ] || exit 1\necho \"$GOCACHE\"\necho \"$GOCACHE\"\n");
    std::fs::set_permissions(&go, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let search = format!("{}:{}", go.parent().unwrap().display(), std::env::var("PATH").unwrap_or_default());
    for (script, prefix) in [("cluster/build.sh", "build.sh"), ("cluster/node/build.sh", "node/build.sh")] {
        let out = bash(script, |cmd| cmd.env("GOCACHE", path).env("PATH", &search));
        assert_eq!(out.status.code(), Some(1), "{script}");
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            format!(
                "{prefix}: error: refusing to use {path}: {path} is writable by other users (mode 777), so one of them \
                 could have replaced it; set GOCACHE and GOMODCACHE to directories of your own, or unset them\n"
            ),
            "{script}"
        );
    }
    assert!(open.is_empty(), "go wrote to {path}");
}

/// The README's layout block names every folder of the repository (each by
/// its whole path, nested ones too: what `git ls-files | xargs -n1 dirname |
/// sort -u` lists) and every module of src/ (a new one must be placed for a
/// reader).
#[test]
fn the_readme_layout_names_every_folder_and_module() {
    let readme = read("README.md");
    let layout = readme.split("\n```text\nsrc/").nth(1).expect("the layout block, starting at src/");
    let layout = format!("src/{}", &layout[..layout.find("\n```").expect("the layout block's end")]);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tracked = std::process::Command::new("git").arg("-C").arg(root).args(["ls-files"]).output();
    // Only what git tracks (build output and caches are not the layout); a
    // copy without git checks src/ alone.
    let tracked = tracked.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
    let missing = folders_missing_from(&layout, &tracked);
    assert!(missing.is_empty(), "the README's layout does not name {}:\n{layout}", missing.join(", "));
    for entry in std::fs::read_dir(root.join("src")).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let module = name.trim_end_matches(".rs");
        if module == "lib" {
            continue;
        }
        let named = if entry.path().is_dir() { format!("{module}/") } else { module.to_string() };
        assert!(layout.contains(&named), "the README's layout does not name src/{name}:\n{layout}");
    }
}

/// The folders of the tracked files `tracked` (one path a line) that `layout`
/// does not name as a word `folder/` of its own (`bench/harness/src/` does not
/// name `bench/harness/`), each once, in order.
fn folders_missing_from(layout: &str, tracked: &str) -> Vec<String> {
    let words: std::collections::HashSet<&str> =
        layout.split_whitespace().map(|w| w.trim_start_matches('(').trim_end_matches([',', ';', ':', ')'])).collect();
    let mut folders = std::collections::BTreeSet::new();
    for file in tracked.lines() {
        let mut folder = Path::new(file).parent();
        while let Some(f) = folder.filter(|f| !f.as_os_str().is_empty()) {
            folders.insert(f.to_string_lossy().into_owned());
            folder = f.parent();
        }
    }
    folders.into_iter().filter(|f| !words.contains(format!("{f}/").as_str())).collect()
}

#[test]
fn a_folder_missing_from_the_layout_is_named() {
    let tracked = "Makefile\n.ci/run\nsrc/main.rs\nbench/harness/src/bin/floor.rs\nbench/run.sh\n";
    let layout = "src/ the program\nbench/ bench/harness/ and bench/harness/src/\n";
    assert_eq!(folders_missing_from(layout, tracked), vec![".ci", "bench/harness/src/bin"]);
    assert!(
        folders_missing_from(".ci/ src/ bench/ bench/harness/src/bin/ bench/harness/src/", tracked)
            .contains(&"bench/harness".to_string())
    );
}
