//! `make deploy` and `make undeploy` pick their cluster by one rule
//! (cluster/deploy.sh): the context named with CONTEXT= on make's command
//! line, else the local node when it runs, else none. A context that was not
//! named (the current one, an exported KUBECONFIG's, an exported CONTEXT) gets
//! one line naming it and the way to choose it, and no request: recording
//! listeners stand in for the API servers of the contexts and count every
//! request that reaches them. IMAGE is checked against the image reference
//! grammar before anything else.

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

/// A plain HTTP server on a local port: it records the request line of every
/// request made to it and answers each with 404 (it is no API server).
struct Recording {
    url: String,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Recording {
    fn start() -> Recording {
        use std::io::{BufRead, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        // Ends with the test process (the listener is never closed).
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let _ = conn.set_read_timeout(Some(std::time::Duration::from_secs(5)));
                let mut reader = std::io::BufReader::new(&conn);
                let mut first = String::new();
                let _ = reader.read_line(&mut first);
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                    line.clear();
                }
                log.lock().unwrap().push(first.trim().to_string());
                let _ = (&conn).write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
            }
        });
        Recording { url, seen }
    }

    /// The requests so far, e.g. `GET /openapi/v3?timeout=32s HTTP/1.1`.
    fn requests(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

/// Two clusters: `current`, the kubeconfig's current context, and `named`,
/// another context of the same kubeconfig. The kubeconfig is written twice:
/// as a file to export in KUBECONFIG, and as `home/.kube/config`.
struct Clusters {
    current: Recording,
    named: Recording,
    kubeconfig: PathBuf,
    home: PathBuf,
}

impl Clusters {
    fn start(name: &str) -> Clusters {
        let (current, named) = (Recording::start(), Recording::start());
        let dir = common::fresh_dir_in(Path::new(env!("CARGO_TARGET_TMPDIR")), name);
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: a\n  cluster:\n    server: {}\n- name: b\n  cluster:\n    \
             server: {}\nusers:\n- name: u\n  user:\n    token: x\ncontexts:\n- name: current\n  context:\n    \
             cluster: a\n    user: u\n- name: named\n  context:\n    cluster: b\n    user: u\n\
             current-context: current\n",
            current.url, named.url
        );
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(&kubeconfig, &text).unwrap();
        let home = dir.join("home");
        std::fs::create_dir_all(home.join(".kube")).unwrap();
        std::fs::write(home.join(".kube/config"), &text).unwrap();
        Clusters { current, named, kubeconfig, home }
    }
}

/// `make ARGS` as a user types it, its environment cleared of what could
/// pick a cluster, then `env` set.
fn make(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, Vec<String>) {
    let mut cmd = Command::new("make");
    cmd.current_dir(env!("CARGO_MANIFEST_DIR")).arg("--no-print-directory").args(args);
    for var in ["MAKEFLAGS", "MFLAGS", "MAKELEVEL", "CONTEXT", "CLUSTER_DIR", "NODE_DIR", "KUBECONFIG", "IMAGE"] {
        cmd.env_remove(var);
    }
    let out = cmd.envs(env.iter().copied()).output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).lines().map(str::to_owned).collect())
}

/// make's own line after a recipe failed with `code`.
fn make_line(line: &str, target: &str, code: i32) -> bool {
    line.starts_with("make: *** [Makefile:") && line.ends_with(&format!(": {target}] Error {code}"))
}

/// A NODE_DIR where no node runs.
fn no_node() -> String {
    format!("NODE_DIR={}/no-node-here", env!("CARGO_TARGET_TMPDIR"))
}

fn is_root() -> bool {
    std::fs::metadata("/proc/self").map(|m| m.uid() == 0).unwrap_or(false)
}

#[test]
fn deploy_and_undeploy_send_nothing_to_a_context_not_named() {
    let c = Clusters::start("deploy-not-named");
    let kc = c.kubeconfig.to_str().unwrap();
    let home = c.home.to_str().unwrap();
    let no_node = no_node();
    for (target, refusal) in [
        (
            "deploy",
            format!(
                "deploy.sh: error: not applying demo-controller.yaml to context current at {}: it is not the local \
                 node; to deploy demo-controller there, name it: make deploy CONTEXT=current",
                c.current.url
            ),
        ),
        (
            "undeploy",
            format!(
                "deploy.sh: error: not deleting from context current at {}: it is not the local node; to delete \
                 demo-controller there, name it: make undeploy CONTEXT=current",
                c.current.url
            ),
        ),
    ] {
        // The current context of an exported KUBECONFIG, of ~/.kube/config,
        // and either with CONTEXT exported (only make's command line counts).
        for env in [
            vec![("KUBECONFIG", kc)],
            vec![("HOME", home)],
            vec![("KUBECONFIG", kc), ("CONTEXT", "named")],
            vec![("HOME", home), ("CONTEXT", "named")],
        ] {
            let (code, lines) = make(&[target, &no_node], &env);
            assert_eq!(code, Some(2), "make {target} {env:?}: {lines:?}");
            assert_eq!(lines.len(), 2, "make {target} {env:?}: {lines:?}");
            assert_eq!(lines[0], refusal, "make {target} {env:?}");
            assert!(make_line(&lines[1], target, 1), "make {target} {env:?}: {lines:?}");
        }
    }
    // Not one request, not even the version some kubectl builds (gcloud's)
    // ask the current context's server for before any command.
    assert_eq!(c.current.requests(), Vec::<String>::new(), "the current context was asked");
    assert_eq!(c.named.requests(), Vec::<String>::new(), "a context exported in CONTEXT was asked");

    // With no current context, the line says how to name one.
    let empty = common::tmp_file("deploy-no-context/kubeconfig", "apiVersion: v1\nkind: Config\n");
    let (code, lines) = make(&["deploy", &no_node], &[("KUBECONFIG", empty.to_str().unwrap())]);
    assert_eq!(code, Some(2), "{lines:?}");
    assert_eq!(
        lines[0],
        format!(
            "deploy.sh: error: no cluster named, and no local node runs in {}/no-node-here: name the cluster's \
             context on make's command line, e.g. make deploy CONTEXT=name (`kubectl config get-contexts` lists them)",
            env!("CARGO_TARGET_TMPDIR")
        )
    );
}

/// The first line of `make TARGET CONTEXT=named` (IMAGE left as it is):
/// the context and its server, before anything is sent.
fn said_first(target: &str, server: &str) -> String {
    match target {
        "deploy" => {
            format!("deploy.sh: applying demo-controller.yaml (image demo-controller:dev) to context named at {server}")
        }
        _ => format!("deploy.sh: deleting what demo-controller.yaml created from context named at {server}"),
    }
}

#[test]
fn deploy_and_undeploy_use_the_context_named_on_makes_command_line() {
    let c = Clusters::start("deploy-named");
    let kc = c.kubeconfig.to_str().unwrap();
    let home = c.home.to_str().unwrap();
    let no_node = no_node();
    for (target, first) in
        [("deploy", said_first("deploy", &c.named.url)), ("undeploy", said_first("undeploy", &c.named.url))]
    {
        for env in [vec![("KUBECONFIG", kc)], vec![("HOME", home)]] {
            let before = c.named.requests().len();
            let (code, lines) = make(&[target, &no_node, "CONTEXT=named"], &env);
            // The server is said first; then the requests go there, and
            // fail: it is no API server.
            assert_eq!(code, Some(2), "make {target} {env:?}: {lines:?}");
            assert_eq!(lines[0], first, "make {target} {env:?}");
            let asked = c.named.requests();
            assert!(
                asked[before..].iter().any(|r| !r.starts_with("GET /version")),
                "make {target} {env:?}: the named cluster was not asked: {asked:?}"
            );
        }
    }
    assert_eq!(c.current.requests(), Vec::<String>::new(), "the current context was asked");
}

/// A NODE_DIR the directory guard refuses: not made by this project, or
/// (as root) another user's.
fn refused_node_dirs() -> Vec<PathBuf> {
    let mut dirs = vec![common::fresh_dir_in(Path::new(env!("CARGO_TARGET_TMPDIR")), "not-a-node-dir")];
    if is_root() {
        let out = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--", "mktemp", "-d"])
            .arg("/tmp/demo-controller-their-node.XXXXXXXX")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        dirs.push(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()));
    } else {
        dirs.push(PathBuf::from("/usr")); // root's
    }
    dirs
}

/// The node's directory is guarded only when the node is the cluster to use:
/// with CONTEXT= named, a NODE_DIR left by someone else (a root run's, for
/// a user) is not looked at; with none named, it is refused in one line.
#[test]
fn the_local_nodes_directory_is_guarded_only_when_it_is_the_target() {
    let c = Clusters::start("deploy-node-dir");
    let kc = c.kubeconfig.to_str().unwrap();
    for dir in refused_node_dirs() {
        let node_dir = format!("NODE_DIR={}", dir.display());
        for (target, first) in
            [("deploy", said_first("deploy", &c.named.url)), ("undeploy", said_first("undeploy", &c.named.url))]
        {
            let (_, lines) = make(&[target, &node_dir, "CONTEXT=named"], &[("KUBECONFIG", kc)]);
            assert_eq!(lines.first(), Some(&first), "make {target} {node_dir}: {lines:?}");
            let (code, lines) = make(&[target, &node_dir], &[("KUBECONFIG", kc)]);
            assert_eq!(code, Some(2), "{lines:?}");
            assert_eq!(lines.len(), 2, "{lines:?}");
            assert!(
                lines[0].starts_with(&format!(
                    "deploy.sh: error: refusing NODE_DIR {} (the local node's directory): ",
                    dir.display()
                )),
                "make {target} {node_dir}: {lines:?}"
            );
            assert!(make_line(&lines[1], target, 1), "{lines:?}");
        }
        if dir.starts_with(env!("CARGO_TARGET_TMPDIR")) || dir.starts_with("/tmp") {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    assert_eq!(c.current.requests(), Vec::<String>::new(), "the current context was asked");
}

const IMAGE_FIX: &str = " is not an image reference: use [registry[:port]/]path[:tag][@sha256:digest], the path in \
                         lowercase, e.g. IMAGE=registry.example.com/demo-controller:v0.1.0";

/// IMAGE is checked against the image reference grammar before any cluster
/// is chosen: a bad one is one line, exit 2, and nothing of it runs (it once
/// went into a sed script, where `|e` and a newline made sed's `e` command,
/// and into make's shell command, where a quote ended the string).
#[test]
fn a_bad_image_is_one_line_and_exit_2_before_any_request() {
    let c = Clusters::start("deploy-bad-image");
    let kc = c.kubeconfig.to_str().unwrap();
    let marker_dir = common::fresh_dir_in(Path::new(env!("CARGO_TARGET_TMPDIR")), "image-marker");
    let marker = marker_dir.join("ran");
    let m = marker.display();
    let sed = format!("demo-controller:dev|e touch {m}\n");
    let quote = format!("x';touch {m};'");
    let long = format!("registry.example.com/{}:v1", "a".repeat(240));
    let bad = [
        sed.as_str(),
        quote.as_str(),
        "demo-controller:dev\n",
        "registry.example.com/demo controller:v1",
        "registry.example.com/Demo-Controller:v1",
        "demo-controller:",
        "demo-controller:v1:v2",
        "demo-controller@sha256:0123",
        "demo-controller@md5:0123456789abcdef0123456789abcdef",
        "-demo-controller",
        "registry.example.com:port/demo-controller",
        "",
        &long,
    ];
    for image in bad {
        let (code, lines) = make(&["deploy", &no_node(), "CONTEXT=named"], &[("KUBECONFIG", kc), ("IMAGE", image)]);
        assert_eq!(code, Some(2), "IMAGE={image:?}: {lines:?}");
        assert_eq!(lines.len(), 2, "IMAGE={image:?}: one line, then make's: {lines:?}");
        assert!(lines[0].starts_with("deploy.sh: error: IMAGE=") && lines[0].ends_with(IMAGE_FIX), "{lines:?}");
        assert!(make_line(&lines[1], "deploy", 2), "{lines:?}");
        // The script itself: the same line, exit 2.
        let out = Command::new("bash")
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .args(["cluster/deploy.sh", "apply", "--context", "named", "--image", image])
            .env("KUBECONFIG", kc)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stderr), format!("{}\n", lines[0]));
    }
    assert!(!marker.exists(), "a command in IMAGE ran");
    assert_eq!(c.named.requests(), Vec::<String>::new(), "a bad IMAGE reached the cluster");
    // Good ones go on to the cluster, named as given.
    let digest = format!("sha256:{}", "0123456789abcdef".repeat(4));
    for image in [
        "demo-controller:dev".to_owned(),
        "registry.example.com:5000/team/demo-controller:v0.1.0".to_owned(),
        format!("registry.example.com:5000/team/demo-controller:v0.1.0@{digest}"),
        format!("localhost:5000/demo_controller__x.y-z@{digest}"),
        "[::1]:5000/demo-controller:V1.0_rc-1".to_owned(),
    ] {
        let (_, lines) = make(&["deploy", &no_node(), "CONTEXT=named"], &[("KUBECONFIG", kc), ("IMAGE", &image)]);
        assert_eq!(
            lines.first().map(String::as_str),
            Some(
                format!("deploy.sh: applying demo-controller.yaml (image {image}) to context named at {}", c.named.url)
                    .as_str()
            ),
            "{lines:?}"
        );
    }
    let _ = std::fs::remove_dir_all(marker_dir);
}

/// On a real API server, the Deployment `make deploy` applies runs IMAGE as
/// given, a registry port and a digest included.
#[tokio::test]
#[ignore = "needs the local control plane: run `make test`"]
async fn make_deploy_applies_the_image_as_given() {
    use k8s_openapi::api::apps::v1::Deployment;
    let plane = common::Plane::start("deploy-image").await;
    let url = common::server_url(plane.dir());
    let kc = plane.admin_kubeconfig(&url);
    let image = format!("registry.example.com:5000/team/demo-controller:v0.1.0@sha256:{}", "ab".repeat(32));
    let (code, lines) =
        make(&["deploy", &no_node(), "CONTEXT=ctx"], &[("KUBECONFIG", kc.to_str().unwrap()), ("IMAGE", &image)]);
    assert_eq!(code, Some(0), "{lines:?}");
    assert_eq!(lines[0], format!("deploy.sh: applying demo-controller.yaml (image {image}) to context ctx at {url}"));
    let deployments = kube::Api::<Deployment>::namespaced(plane.cluster.client.clone(), "demo-controller");
    let applied = deployments.get("demo-controller").await.expect("the Deployment");
    let spec = applied.spec.and_then(|s| s.template.spec).expect("a pod spec");
    assert_eq!(spec.containers[0].image.as_deref(), Some(image.as_str()));
}

/// Each test the security page and the commands page name as proof of a
/// claim, written `FILE::NAME` (the test NAME in tests/FILE.rs), exists.
#[test]
fn every_test_the_security_and_commands_pages_name_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for page in ["book/src/appendix/security.md", "book/src/appendix/commands.md"] {
        let text = std::fs::read_to_string(root.join(page)).unwrap();
        let named: Vec<(&str, &str)> = text
            .split('`')
            .skip(1)
            .step_by(2)
            .filter_map(|code| code.split_once("::"))
            .filter(|(file, name)| {
                !file.is_empty()
                    && file.chars().all(|c| c.is_ascii_lowercase() || c == '_')
                    && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            })
            .collect();
        assert!(named.len() >= 3, "{page} names its tests as `file::name`: found {named:?}");
        for (file, name) in named {
            let source = std::fs::read_to_string(root.join("tests").join(format!("{file}.rs")))
                .unwrap_or_else(|e| panic!("{page} names {file}::{name}: tests/{file}.rs: {e}"));
            // The function, right after its test attributes.
            let lines: Vec<&str> = source.lines().collect();
            let at = lines.iter().position(|l| {
                l.trim_start()
                    .strip_prefix("fn ")
                    .or_else(|| l.trim_start().strip_prefix("async fn "))
                    .is_some_and(|rest| rest.strip_prefix(name).is_some_and(|after| after.starts_with('(')))
            });
            let at = at.unwrap_or_else(|| panic!("{page} names {file}::{name}: no such function in tests/{file}.rs"));
            let attributes = lines[..at].iter().rev().take_while(|l| l.trim_start().starts_with("#[")).count();
            assert!(
                lines[at - attributes..at].iter().any(|l| l.contains("#[test]") || l.contains("#[tokio::test")),
                "{page} names {file}::{name}: it is not a test"
            );
        }
    }
}
