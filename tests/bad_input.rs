//! Bad input: one clear line naming the problem and the fix, a non-zero exit,
//! never a panic. Cases that need a server use the real local control plane.

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Command;

use common::*;

/// Runs the binary with `args` and a clean environment; returns (exit code, stderr).
fn run(args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let mut cmd = Command::new(BIN);
    cmd.args(args).env_remove("KUBECONFIG").env_remove("KUBERNETES_SERVICE_HOST").env_remove("RUST_LOG");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run demo-controller");
    let stderr = String::from_utf8_lossy(&out.stderr).trim_end().to_string();
    assert!(!stderr.contains("panicked"), "it panicked: {stderr}");
    assert!(!stderr.contains("RUST_BACKTRACE"), "a backtrace hint: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "expected exactly one line on stderr, got:\n{stderr}");
    (out.status.code().expect("exit code"), stderr)
}

#[test]
fn unknown_flag() {
    assert_eq!(
        run(&["--frobnicate"], &[]),
        (2, "error: unexpected argument '--frobnicate' found (see demo-controller --help)".into())
    );
}

#[test]
fn invalid_duration() {
    assert_eq!(
        run(&["--resync", "soon"], &[]),
        (
            2,
            "error: invalid value 'soon' for '--resync <DURATION>': expected a duration such as 30s, 5m or 1h (0 disables) (see demo-controller --help)".into()
        )
    );
}

#[test]
fn negative_workers() {
    assert_eq!(
        run(&["--workers", "-3"], &[]),
        (
            2,
            "error: invalid value '-3' for '--workers <N>': expected a whole number from 1 to 64 (see demo-controller --help)"
                .into()
        )
    );
}

#[test]
fn invalid_namespace_name() {
    assert_eq!(
        run(&["--namespace", "Not_A_Namespace"], &[]),
        (
            2,
            "error: invalid value 'Not_A_Namespace' for '--namespace <NS>': a namespace is a DNS label: lower-case letters, digits and '-', at most 63 characters (see demo-controller --help)".into()
        )
    );
}

#[test]
fn invalid_label_selector_caught_locally() {
    assert_eq!(
        run(&["-l", "env in (prod"], &[]),
        (
            2,
            "error: invalid value 'env in (prod' for '--selector <SELECTOR>': expected a label selector such as app=web, tier!=db or 'env in (prod,staging)' (see demo-controller --help)".into()
        )
    );
}

#[ignore = "needs the local control plane: run `make test`"]
#[test]
fn invalid_label_selector_caught_by_the_api_server() {
    let kc = cluster_dir().join("kubeconfig");
    let args = ["--kubeconfig", kc.to_str().unwrap(), "-l", "app=web=x", "--probe-addr", "0", "--metrics-addr", "0"];
    // The message after the selector is the API server's own.
    assert_eq!(
        run(&args, &[]),
        (1, "error: invalid --selector 'app=web=x': found '=', expected: ',' or 'end of string'".into())
    );
}

#[test]
fn missing_kubeconfig_file() {
    assert_eq!(
        run(&["--kubeconfig", "/nonexistent/kubeconfig"], &[]),
        (
            1,
            "error: cannot read kubeconfig /nonexistent/kubeconfig: No such file or directory (os error 2): pass an existing file with --kubeconfig or fix $KUBECONFIG".into()
        )
    );
}

#[test]
fn no_kubeconfig_anywhere_and_not_in_a_pod() {
    let home = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("empty-home");
    std::fs::create_dir_all(&home).unwrap();
    let (code, err) = run(&[], &[("HOME", home.to_str().unwrap())]);
    assert_eq!(code, 1);
    assert_eq!(
        err,
        format!(
            "error: no kubeconfig found ($KUBECONFIG is unset and {}/.kube/config does not exist) and not running in a pod: pass --kubeconfig PATH, or run `make demo` for a local cluster",
            home.display()
        )
    );
}

#[test]
fn malformed_kubeconfig() {
    let path = tmp_file("malformed", "apiVersion: v1\nkind: Config\nclusters: [this is: not: valid\n");
    let (code, err) = run(&["--kubeconfig", path.to_str().unwrap()], &[]);
    assert_eq!(code, 1);
    assert_eq!(
        err,
        format!(
            "error: kubeconfig {} is not a valid kubeconfig: failed to parse kubeconfig YAML: error: line 3 column 24: \
             while parsing a flow mapping, did not find expected ',' or '}}'",
            path.display()
        )
    );
}

#[test]
fn kubeconfig_from_the_environment_that_is_missing() {
    // As kubectl: files in $KUBECONFIG that do not exist are skipped; with
    // none left and no ~/.kube/config, that is the one problem to name.
    let home = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("empty-home");
    std::fs::create_dir_all(&home).unwrap();
    let (code, err) =
        run(&[], &[("KUBECONFIG", "/nonexistent/env-kubeconfig:/nonexistent/other"), ("HOME", home.to_str().unwrap())]);
    assert_eq!(code, 1);
    assert_eq!(
        err,
        format!(
            "error: no kubeconfig found (no file named in $KUBECONFIG exists, nor {}/.kube/config): pass --kubeconfig PATH or fix $KUBECONFIG",
            home.display()
        )
    );
}

#[test]
fn an_in_cluster_config_that_does_not_load_and_no_home_kubeconfig() {
    let home = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("empty-home");
    std::fs::create_dir_all(&home).unwrap();
    let env =
        [("HOME", home.to_str().unwrap()), ("KUBERNETES_SERVICE_HOST", "127.0.0.1"), ("KUBERNETES_SERVICE_PORT", "1")];
    assert_eq!(
        run(&[], &env),
        (
            1,
            format!(
                "error: KUBERNETES_SERVICE_HOST is set but the in-cluster config does not load (failed to read the default namespace: No such file or directory (os error 2)), and {}/.kube/config does not exist: mount the pod's service-account token (automountServiceAccountToken), or pass --kubeconfig PATH",
                home.display()
            )
        )
    );
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn an_in_cluster_config_that_does_not_load_falls_back_to_the_home_kubeconfig() {
    // controller-runtime's order: in-cluster first, then ~/.kube/config.
    let home = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("home-with-kubeconfig");
    std::fs::create_dir_all(home.join(".kube")).unwrap();
    std::fs::copy(cluster_dir().join("kubeconfig"), home.join(".kube/config")).unwrap();
    let mut cmd = Command::new(BIN);
    cmd.args(["--log-format", "json", "--probe-addr", "0", "--metrics-addr", "0", "-n", "default"]);
    cmd.env_remove("KUBECONFIG").env_remove("RUST_LOG");
    let env =
        [("HOME", home.to_str().unwrap()), ("KUBERNETES_SERVICE_HOST", "127.0.0.1"), ("KUBERNETES_SERVICE_PORT", "1")];
    let logger = Logger::spawn(cmd, &env);
    logger.synced().await;
    assert!(logger.stderr().is_empty(), "{:?}", logger.stderr());
}

#[test]
fn a_bad_file_in_the_kubeconfig_list_is_named_alone() {
    let bad = tmp_file("malformed-in-list", "apiVersion: v1\nkind: Config\nclusters: [this is: not: valid\n");
    let good = kubeconfig("good-in-list", "https://127.0.0.1:1", None, "    token: abc");
    let list = format!("/nonexistent/first:{}:{}", bad.display(), good.display());
    let (code, err) = run(&[], &[("KUBECONFIG", &list)]);
    assert_eq!(code, 1);
    assert_eq!(
        err,
        format!(
            "error: kubeconfig {} is not a valid kubeconfig: failed to parse kubeconfig YAML: error: line 3 column 24: \
             while parsing a flow mapping, did not find expected ',' or '}}'",
            bad.display()
        )
    );
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn a_kubeconfig_list_with_a_missing_entry_works_like_kubectl() {
    let kc = cluster_dir().join("kubeconfig");
    let list = format!("/nonexistent/kubeconfig:{}", kc.display());
    let mut cmd = Command::new(BIN);
    cmd.args(["--log-format", "json", "--probe-addr", "0", "--metrics-addr", "0", "-n", "default"]);
    cmd.env_remove("KUBERNETES_SERVICE_HOST").env_remove("RUST_LOG");
    let logger = Logger::spawn(cmd, &[("KUBECONFIG", &list)]);
    logger.synced().await;
    assert!(logger.stderr().is_empty(), "{:?}", logger.stderr());
}

/// A kubeconfig for the local control plane at `path` under its URL, with
/// `user` lines.
fn with_path(name: &str, path: &str, user: &str) -> PathBuf {
    let dir = cluster_dir();
    kubeconfig(name, &format!("{}{path}", server_url(&dir)), Some(b64(&dir.join("pki/ca.crt"))), user)
}

/// User lines for a client certificate the local control plane's CA signed
/// for `name`, a user no role is bound to: authenticated, allowed nothing.
/// (An X.509 v3 certificate, with extensions: rustls refuses v1.)
fn user_without_rights(name: &str) -> String {
    let dir = cluster_dir();
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("e2e-files");
    std::fs::create_dir_all(&out).unwrap();
    let (key, crt) = (out.join(format!("{name}.key")), out.join(format!("{name}.crt")));
    let sh = format!(
        "openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out '{key}' 2>/dev/null && \
         openssl req -new -key '{key}' -subj /CN={name} 2>/dev/null | openssl x509 -req -CA '{ca}' -CAkey '{cakey}' \
         -CAcreateserial -CAserial '{out}/ca.srl' -days 1 -out '{crt}' \
         -extfile <(printf 'basicConstraints=critical,CA:FALSE\\nextendedKeyUsage=clientAuth\\n') 2>/dev/null",
        key = key.display(),
        crt = crt.display(),
        ca = dir.join("pki/ca.crt").display(),
        cakey = dir.join("pki/ca.key").display(),
        out = out.display(),
    );
    assert!(Command::new("bash").args(["-c", &sh]).status().unwrap().success(), "signing a certificate for {name}");
    format!("    client-certificate-data: {}\n    client-key-data: {}", b64(&crt), b64(&key))
}

#[ignore = "needs the local control plane: run `make test`"]
#[test]
fn a_403_on_version_is_reported_as_forbidden() {
    // A user the server knows but grants nothing: it may read /version
    // (system:public-info-viewer) but not a path under a prefix, so the real
    // server answers 403.
    let kc = with_path("no-rights-prefix", "/prefix", &user_without_rights("no-rights"));
    let url = format!("{}/prefix", server_url(&cluster_dir()));
    assert_eq!(
        run(&["--kubeconfig", kc.to_str().unwrap()], &[]),
        (
            1,
            format!(
                "error: the API server at {url} forbids GET /version to this identity (403 Forbidden: forbidden: User \"no-rights\" cannot get path \"/prefix/version\"): check the user in your kubeconfig, or grant it the system:public-info-viewer role"
            )
        )
    );
}

#[ignore = "needs the local control plane: run `make test`"]
#[test]
fn a_kubeconfig_user_without_credentials_is_told_so_when_anonymous_requests_are_refused() {
    // The local control plane refuses anonymous requests, as many clusters do.
    let kc = with_path("anonymous", "", "    {}");
    let url = server_url(&cluster_dir());
    assert_eq!(
        run(&["--kubeconfig", kc.to_str().unwrap()], &[]),
        (
            1,
            format!(
                "error: the API server at {url}/ refuses anonymous requests (401 Unauthorized) and the kubeconfig's user has no credentials: give it a token or a client certificate"
            )
        )
    );
}

#[ignore = "needs the local control plane: run `make test`"]
#[test]
fn a_404_on_version_is_reported_as_not_found() {
    let dir = cluster_dir();
    let user = format!(
        "    client-certificate-data: {}\n    client-key-data: {}",
        b64(&dir.join("pki/admin.crt")),
        b64(&dir.join("pki/admin.key"))
    );
    let kc = with_path("admin-prefix", "/prefix", &user);
    let url = format!("{}/prefix", server_url(&dir));
    assert_eq!(
        run(&["--kubeconfig", kc.to_str().unwrap()], &[]),
        (
            1,
            format!(
                "error: the server at {url} is not a Kubernetes API server: GET /version answered 404 Not Found (is the URL the API server's root, without a path?)"
            )
        )
    );
}

#[test]
fn a_server_that_accepts_and_never_answers() {
    // Accepts TCP connections, reads, never writes: a stuck proxy.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().flatten() {
            held.push(stream);
        }
    });
    let kc = kubeconfig("black-hole", &format!("https://127.0.0.1:{port}"), None, "    token: abc");
    let start = std::time::Instant::now();
    let out = Command::new(BIN)
        .args(["--kubeconfig", kc.to_str().unwrap(), "--probe-addr", "0", "--metrics-addr", "0"])
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let took = start.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr).trim_end().to_string();
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("figures: exit_after_black_holed_server={:.1}s", took.as_secs_f64());
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr,
        format!(
            "error: cannot reach the Kubernetes API server at https://127.0.0.1:{port}/: no answer within 10s (something accepts connections there but does not answer: a stopped API server, a proxy or a firewall?)"
        )
    );
    // No second, rawer line from kube's HTTP layer on stdout either.
    assert!(!stdout.contains("ERROR") && !stdout.contains("WARN"), "{stdout}");
}

#[ignore = "needs the local control plane: run `make test`"]
#[test]
fn unknown_context() {
    let kc = cluster_dir().join("kubeconfig");
    assert_eq!(
        run(&["--kubeconfig", kc.to_str().unwrap(), "--context", "production"], &[]),
        (1, "error: context \"production\" not found in the kubeconfig (available: local): pass one of them with --context".into())
    );
}

#[test]
fn context_with_the_in_cluster_config() {
    assert_eq!(
        run(&["--context", "x"], &[("KUBERNETES_SERVICE_HOST", "127.0.0.1"), ("KUBERNETES_SERVICE_PORT", "1")]),
        (1, "error: --context needs a kubeconfig, but the in-cluster config is in use: pass --kubeconfig too".into())
    );
}

#[test]
fn unreachable_server() {
    // Port 1 on loopback: nothing listens there.
    let kc = kubeconfig("unreachable", "https://127.0.0.1:1", None, "    token: abc");
    let (code, err) = run(&["--kubeconfig", kc.to_str().unwrap()], &[]);
    assert_eq!(code, 1);
    assert!(err.starts_with("error: cannot reach the Kubernetes API server at https://127.0.0.1:1/: "), "{err}");
    assert!(
        err.ends_with("(nothing listens there: is the cluster running? Without one, `make demo` starts a local one)"),
        "{err}"
    );
    assert!(err.contains("Connection refused"), "{err}");
}

#[ignore = "needs the local control plane: run `make test`"]
#[test]
fn tls_ca_mismatch() {
    let dir = cluster_dir();
    // A CA that did not sign the server's certificate: the client cert's own.
    let wrong_ca = b64(&dir.join("pki/admin.crt"));
    let user = format!(
        "    client-certificate-data: {}\n    client-key-data: {}",
        b64(&dir.join("pki/admin.crt")),
        b64(&dir.join("pki/admin.key"))
    );
    let url = server_url(&dir);
    let kc = kubeconfig("wrong-ca", &url, Some(wrong_ca), &user);
    let (code, err) = run(&["--kubeconfig", kc.to_str().unwrap()], &[]);
    assert_eq!(code, 1);
    assert!(err.starts_with(&format!("error: cannot reach the Kubernetes API server at {url}/: ")), "{err}");
    assert!(
        err.ends_with(
            "(the server's certificate is not signed by the CA in your kubeconfig: check certificate-authority-data)"
        ),
        "{err}"
    );
}

#[ignore = "needs the local control plane: run `make test`"]
#[test]
fn invalid_bearer_token() {
    let dir = cluster_dir();
    let url = server_url(&dir);
    let kc = kubeconfig("bad-token", &url, Some(b64(&dir.join("pki/ca.crt"))), "    token: not-a-valid-token");
    assert_eq!(
        run(&["--kubeconfig", kc.to_str().unwrap()], &[]),
        (
            1,
            format!(
                "error: the API server at {url}/ rejected our credentials (401 Unauthorized): the token or client certificate is invalid or expired; refresh the credentials in your kubeconfig"
            )
        )
    );
}

/// A plain HTTP server on loopback (not an API server, not a fake one: it
/// answers every request with the same small web page).
fn plain_http_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten().take(8) {
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            let body = "<html>hello</html>";
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

#[test]
fn a_plain_http_port_addressed_with_https() {
    let port = plain_http_server();
    let kc = kubeconfig("plain-https", &format!("https://127.0.0.1:{port}"), None, "    token: abc");
    let (code, err) = run(&["--kubeconfig", kc.to_str().unwrap()], &[]);
    assert_eq!(code, 1);
    assert!(
        err.starts_with(&format!("error: cannot reach the Kubernetes API server at https://127.0.0.1:{port}/: ")),
        "{err}"
    );
    assert!(err.ends_with("(it does not speak TLS: is this the address of a Kubernetes API server?)"), "{err}");
}

#[test]
fn a_web_server_that_is_not_kubernetes() {
    let port = plain_http_server();
    let kc = kubeconfig("plain-http", &format!("http://127.0.0.1:{port}"), None, "    token: abc");
    let (code, err) = run(&["--kubeconfig", kc.to_str().unwrap()], &[]);
    assert_eq!(code, 1);
    assert!(
        err.starts_with(&format!("error: the server at http://127.0.0.1:{port}/ is not a Kubernetes API server: ")),
        "{err}"
    );
}

#[ignore = "needs the local control plane: run `make test`"]
#[test]
fn metrics_port_already_in_use() {
    let busy = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = busy.local_addr().unwrap().to_string();
    let kc = cluster_dir().join("kubeconfig");
    let (code, err) = run(&["--kubeconfig", kc.to_str().unwrap(), "--probe-addr", "0", "--metrics-addr", &addr], &[]);
    assert_eq!(code, 1);
    assert!(err.starts_with(&format!("error: cannot listen on {addr} for metrics: ")), "{err}");
    assert!(err.ends_with("pass --metrics-addr with a free port, or 0 to turn it off"), "{err}");
}

/// In a pod the probes' port is not optional: the kubelet probes it. A busy
/// default port there is fatal (outside a pod it is a warning: probes.rs).
#[ignore = "needs the local control plane: run `make test`"]
#[test]
fn a_busy_default_probe_port_in_a_pod_is_fatal() {
    let _held = TcpListener::bind("0.0.0.0:8081"); // or already taken by someone else
    let kc = cluster_dir().join("kubeconfig");
    let env = [("KUBERNETES_SERVICE_HOST", "127.0.0.1"), ("KUBERNETES_SERVICE_PORT", "1")];
    let (code, err) = run(&["--kubeconfig", kc.to_str().unwrap(), "--metrics-addr", "0"], &env);
    assert_eq!(code, 1, "{err}");
    assert!(err.starts_with("error: cannot listen on 0.0.0.0:8081 for probes: "), "{err}");
    assert!(err.ends_with("pass --probe-addr with a free port, or 0 to turn it off"), "{err}");
}

#[test]
fn a_resync_below_one_second() {
    assert_eq!(
        run(&["--resync", "500ms"], &[]),
        (
            2,
            "error: invalid value '500ms' for '--resync <DURATION>': a resync below 1s would queue every pod again many times a second: use at least 1s, or 0 to turn it off (see demo-controller --help)".into()
        )
    );
}

#[test]
fn stuck_after_zero() {
    assert_eq!(
        run(&["--stuck-after", "0"], &[]),
        (
            2,
            "error: invalid value '0' for '--stuck-after <DURATION>': 0 would report every busy worker as stuck: use a duration such as 60s (see demo-controller --help)".into()
        )
    );
}

#[test]
fn leader_election_timings_checked_as_client_go_checks_them() {
    assert_eq!(
        run(&["--leader-elect", "--leader-elect-renew-deadline", "20s"], &[]),
        (
            2,
            "error: --leader-elect-lease-duration must be greater than --leader-elect-renew-deadline (see demo-controller --help)".into()
        )
    );
    assert_eq!(
        run(&["--leader-elect", "--leader-elect-retry-period", "9s"], &[]),
        (
            2,
            "error: --leader-elect-renew-deadline must be greater than 1.2 x --leader-elect-retry-period (see demo-controller --help)".into()
        )
    );
    assert_eq!(
        run(&["--leader-elect-retry-period", "0"], &[]),
        (
            2,
            "error: invalid value '0' for '--leader-elect-retry-period <DURATION>': expected a duration above zero such as 2s, 10s or 15s (see demo-controller --help)".into()
        )
    );
}
