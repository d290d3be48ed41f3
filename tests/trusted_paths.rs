//! Root runs only what it checked, also where no cluster is involved: the
//! cached tools the make targets run (mdbook for the book, the Go logger for
//! the benchmark, the control plane's and the node's binaries) and whatever
//! cargo builds, in every make target that runs cargo. A directory another
//! user could change (one anyone may write to; as root, also one of
//! nobody's) is refused in one line, exit 1 (make adds a line of its own and
//! exits 2), before anything is made in it, and nothing planted there runs.

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn is_root() -> bool {
    std::fs::metadata("/proc/self").map(|m| m.uid() == 0).unwrap_or(false)
}

fn nobody() -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]);
    cmd
}

/// A directory another user could change, and how the scripts say so.
struct Untrusted {
    dir: PathBuf,
    /// What the refusal says of it, after its path.
    why: &'static str,
    /// Whose it is: files are planted in it as that user.
    theirs: bool,
    _open: Option<common::OpenDir>,
}

impl Drop for Untrusted {
    fn drop(&mut self) {
        if self.theirs {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

impl Untrusted {
    /// `sh -c SCRIPT` as the directory's owner.
    fn sh(&self, script: &str) {
        let mut cmd = if self.theirs { nobody() } else { Command::new("env") };
        let out = cmd.args(["sh", "-c", script]).output().unwrap();
        assert!(out.status.success(), "{script}: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// Executables at each of `paths` (relative to the directory) that
    /// append to `marker` when run, by anyone.
    fn plant(&self, paths: &[&str], marker: &Path) {
        for rel in paths {
            let file = self.dir.join(rel);
            self.sh(&format!(
                "mkdir -p '{}' && printf '#!/bin/sh\\necho \"ran $0 as $(id -u)\" >>{}\\nexit 0\\n' >'{}' && chmod 755 '{}'",
                file.parent().unwrap().display(),
                marker.display(),
                file.display(),
                file.display()
            ));
        }
    }

    /// Everything in it, with owner and mode: to show nothing was added.
    fn listing(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut stack = vec![self.dir.clone()];
        while let Some(p) = stack.pop() {
            let m = std::fs::symlink_metadata(&p).unwrap();
            out.push(format!("{} {} {:o} {}", p.display(), m.uid(), m.mode(), m.len()));
            if m.is_dir() {
                stack.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
            }
        }
        out.sort();
        out
    }
}

/// The directories to try: one anyone may write to (no sticky bit), and, as
/// root, one of nobody's (made by nobody, afresh, mode 0755).
fn untrusted(name: &str) -> Vec<Untrusted> {
    let open = common::OpenDir::new(name);
    let mut dirs = vec![Untrusted {
        dir: open.0.clone(),
        why: "is writable by other users (mode 777)",
        theirs: false,
        _open: Some(open),
    }];
    if is_root() {
        let out = nobody().args(["mktemp", "-d", &format!("/tmp/demo-controller-{name}.XXXXXXXX")]).output().unwrap();
        assert!(out.status.success(), "{out:?}");
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        let d = Untrusted { dir, why: "is owned by uid 65534", theirs: true, _open: None };
        d.sh(&format!("chmod 755 '{}'", d.dir.display()));
        dirs.push(d);
    }
    dirs
}

/// A fresh root-only directory for the marker file a planted binary would
/// write: it stays missing unless one of them ran.
fn marker() -> (PathBuf, PathBuf) {
    let dir = common::fresh_dir_in(Path::new(env!("CARGO_TARGET_TMPDIR")), "planted-marker");
    let file = dir.join("ran");
    (dir, file)
}

/// `make ARGS` in the repository as a user types it (no make above it).
fn make(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new("make");
    cmd.arg("--no-print-directory").args(args).current_dir(repo());
    for var in ["MAKEFLAGS", "MFLAGS", "MAKELEVEL", "CONTEXT", "CLUSTER_DIR", "NODE_DIR"] {
        cmd.env_remove(var);
    }
    cmd.envs(env.iter().copied()).output().unwrap()
}

fn lines(bytes: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(bytes).lines().map(str::to_owned).collect()
}

/// make's own line after a recipe failed with `code`.
fn make_line(line: &str, target: &str, code: i32) -> bool {
    line.starts_with("make: *** [Makefile:") && line.ends_with(&format!(": {target}] Error {code}"))
}

const TARGET_HINT: &str =
    "set CARGO_TARGET_DIR to a directory only you (or the repository's owner) can change, or unset it";

#[test]
fn every_make_target_that_runs_cargo_refuses_a_target_dir_others_can_change() {
    let (marker_dir, marker) = marker();
    for d in untrusted("cargo-target") {
        // What cargo would run from there: build scripts, the binaries and
        // the examples the targets run, the test binaries.
        d.plant(
            &[
                "release/demo-controller",
                "release/bench",
                "debug/demo-controller",
                "debug/examples/ch1_watch",
                "debug/build/demo-controller-0000/build-script-build",
                "debug/deps/newcomer-0000",
            ],
            &marker,
        );
        let before = d.listing();
        let path = d.dir.to_str().unwrap();
        // (target, what make names as failing, the refusing script)
        for (args, failing, prefix) in [
            (&["build"][..], "build", "cargo.sh"),
            (&["run"], "run", "cargo.sh"),
            (&["lint"], "lint", "cargo.sh"),
            (&["test"], "lint", "cargo.sh"), // lint runs first
            (&["bench"], "bench", "run.sh"),
            (&["soak"], "soak", "soak.sh"),
            (&["demo"], "demo", "demo.sh"),
            (&["chapter", "N=1"], "chapter", "chapter.sh"),
        ] {
            let out = make(args, &[("CARGO_TARGET_DIR", path)]);
            let err = lines(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "make {args:?}: {err:?}");
            assert_eq!(err.len(), 2, "make {args:?}: {err:?}");
            assert!(
                err[0].starts_with(&format!("{prefix}: error: refusing to use {path}: {path} {}, ", d.why))
                    && err[0].ends_with(TARGET_HINT),
                "make {args:?}: {err:?}"
            );
            assert!(make_line(&err[1], failing, 1), "make {args:?}: {err:?}");
        }
        assert_eq!(d.listing(), before, "something was made in {path}");
    }
    assert!(!marker.exists(), "a planted binary ran: {}", std::fs::read_to_string(&marker).unwrap_or_default());
    let _ = std::fs::remove_dir_all(marker_dir);
}

/// A `go` that needs no Go installed: `go env GOCACHE GOMODCACHE` names two
/// fresh directories of ours, `go version` a fixed version.
fn stub_go() -> (PathBuf, String) {
    let dir = common::fresh_dir_in(Path::new(env!("CARGO_TARGET_TMPDIR")), "stub-go");
    let caches = [common::fresh_dir_in(&dir, "gocache"), common::fresh_dir_in(&dir, "gomodcache")];
    let go = dir.join("go");
    std::fs::write(
        &go,
        format!(
            "#!/bin/sh\ncase $1 in\nenv) echo {}; echo {} ;;\nversion) echo 'go version go1.26.0 linux/amd64' ;;\n*) exit 1 ;;\nesac\n",
            caches[0].display(),
            caches[1].display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&go, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", dir.display(), std::env::var("PATH").unwrap_or_default());
    (dir, path)
}

#[test]
fn the_cached_tools_refuse_a_cache_others_can_change() {
    let (marker_dir, marker) = marker();
    let (go_dir, search) = stub_go();
    for d in untrusted("cache") {
        d.plant(
            &[
                "mdbook/0.4.52/bin/mdbook",
                "go-logger/0000000000000000/go-logger",
                "control-plane/0000000000000000/etcd",
                "control-plane/0000000000000000/kube-apiserver",
                "node/0000000000000000/kubelet",
            ],
            &marker,
        );
        let before = d.listing();
        let path = d.dir.to_str().unwrap();
        // `make book` (mdbook.sh, also run by `make test`'s book check).
        let out = make(&["book"], &[("DEMO_CONTROLLER_CACHE", path)]);
        let err = lines(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err:?}");
        assert_eq!(err.len(), 2, "{err:?}");
        assert!(
            err[0].starts_with(&format!("mdbook.sh: error: refusing to use {path}/mdbook: {path} {}, ", d.why)),
            "{err:?}"
        );
        assert!(make_line(&err[1], "book", 1), "{err:?}");
        // The benchmark's Go logger, the control plane's and the node's
        // binaries: each script by itself, one line and exit 1.
        for (script, prefix) in [
            ("bench/build-go-logger.sh", "build-go-logger.sh"),
            ("cluster/build.sh", "build.sh"),
            ("cluster/node/build.sh", "node/build.sh"),
        ] {
            let out = Command::new("bash")
                .arg(repo().join(script))
                .env("DEMO_CONTROLLER_CACHE", path)
                .env("PATH", &search)
                .current_dir(repo())
                .output()
                .unwrap();
            let err = lines(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{script}: {err:?}");
            assert_eq!(err.len(), 1, "{script}: {err:?}");
            assert!(err[0].starts_with(&format!("{prefix}: error: refusing to use {path}")), "{script}: {err:?}");
            assert!(err[0].contains(&format!(": {path} {}, ", d.why)), "{script}: {err:?}");
        }
        assert_eq!(d.listing(), before, "something was made in {path}");
    }
    assert!(!marker.exists(), "a planted binary ran: {}", std::fs::read_to_string(&marker).unwrap_or_default());
    let _ = std::fs::remove_dir_all(marker_dir);
    let _ = std::fs::remove_dir_all(go_dir);
}

/// What runs is the file checked, by its resolved path: a symlink on the way
/// (here the cache's own, root's, so it passes the check) is not followed
/// again when the tool starts.
#[test]
fn a_cached_tool_runs_by_the_path_it_checked() {
    let base = common::fresh_dir_in(Path::new(env!("CARGO_TARGET_TMPDIR")), "resolved-cache");
    let real = base.join("real");
    let link = base.join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let (go_dir, search) = stub_go();
    let key = Command::new("sh")
        .current_dir(repo())
        .args([
            "-c",
            "{ cat bench/build-go-logger.sh bench/go-logger/go.mod bench/go-logger/go.sum bench/go-logger/main.go; \
             echo 'go version go1.26.0 linux/amd64'; } | sha256sum | cut -c1-16",
        ])
        .output()
        .unwrap();
    let key = String::from_utf8_lossy(&key.stdout).trim().to_owned();
    // Tools that say where they run from.
    for rel in ["mdbook/0.4.52/bin/mdbook", &format!("go-logger/{key}/go-logger")] {
        let file = real.join(rel);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, "#!/bin/sh\necho \"$0\"\n").unwrap();
        std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    let run = |script: &str| {
        let out = Command::new("bash")
            .arg(repo().join(script))
            .env("DEMO_CONTROLLER_CACHE", &link)
            .env("PATH", &search)
            .current_dir(repo())
            .output()
            .unwrap();
        assert!(out.status.success(), "{script}: {out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    assert_eq!(run("book/mdbook.sh"), real.join("mdbook/0.4.52/bin/mdbook").to_str().unwrap());
    assert_eq!(run("bench/build-go-logger.sh"), real.join(format!("go-logger/{key}/go-logger")).to_str().unwrap());
    let _ = std::fs::remove_dir_all(base);
    let _ = std::fs::remove_dir_all(go_dir);
}

#[test]
fn installing_the_books_tool_refuses_a_cargo_home_config_others_can_change() {
    let (marker_dir, marker) = marker();
    for d in untrusted("cargo-home") {
        // A config that would have cargo run a planted program as rustc.
        d.plant(&["wrapper"], &marker);
        d.sh(&format!(
            "printf '[build]\\nrustc-wrapper = \"{}/wrapper\"\\n' >'{}/config.toml'",
            d.dir.display(),
            d.dir.display()
        ));
        let before = d.listing();
        let cache = common::fresh_dir_in(Path::new(env!("CARGO_TARGET_TMPDIR")), "empty-tool-cache");
        let path = d.dir.to_str().unwrap();
        let out = make(&["book"], &[("CARGO_HOME", path), ("DEMO_CONTROLLER_CACHE", cache.to_str().unwrap())]);
        let err = lines(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err:?}");
        assert_eq!(err.len(), 2, "one line, then make's: {err:?}");
        assert!(
            err[0].starts_with(&format!("mdbook.sh: error: refusing to use {path}/config.toml: {path} {}, ", d.why))
                && err[0].ends_with("set CARGO_HOME to a directory of your own"),
            "{err:?}"
        );
        assert!(make_line(&err[1], "book", 1), "{err:?}");
        assert_eq!(d.listing(), before, "something was made in {path}");
        let _ = std::fs::remove_dir_all(cache);
    }
    assert!(!marker.exists(), "a planted program ran: {}", std::fs::read_to_string(&marker).unwrap_or_default());
    let _ = std::fs::remove_dir_all(marker_dir);
}

/// cargo compiles and runs what CARGO_HOME's registry/ and git/ hold (the
/// build scripts and proc-macros of the crates it downloaded) and looks in
/// its bin/ first for a subcommand (`cargo fmt` runs bin/cargo-fmt). So a
/// registry/, git/ or bin/ another user could change, at the top or deep
/// inside, is refused in one line before cargo starts: neither what they
/// planted nor cargo itself runs (here a cargo-fmt of root's own in bin/
/// would say so). `make lint` runs `cargo fmt` first; `make build` builds.
#[test]
fn every_make_target_that_runs_cargo_refuses_a_cargo_home_others_can_change() {
    let (marker_dir, marker) = marker();
    let mut cases: Vec<(&str, &str, &str)> = vec![
        // (where they plant, the directory another user can change, why)
        ("bin/cargo-fmt", "bin", "is writable by other users (mode 777)"),
        (
            "registry/src/index.crates.io-0000000000000000/planted-0.1.0/build.rs",
            "registry",
            "is writable by other users (mode 777)",
        ),
        ("git/checkouts/planted-0000000000000000/0000000/build.rs", "git", "is writable by other users (mode 777)"),
    ];
    if is_root() {
        cases.extend([
            ("bin/cargo-fmt", "bin", "is owned by uid 65534"),
            (
                "registry/src/index.crates.io-0000000000000000/planted-0.1.0/build.rs",
                "registry",
                "is owned by uid 65534",
            ),
            ("git/checkouts/planted-0000000000000000/0000000/build.rs", "git", "is owned by uid 65534"),
            // Deep inside a registry/ of root's: one crate's directory theirs.
            (
                "registry/src/index.crates.io-0000000000000000/planted-0.1.0/build.rs",
                "registry/src/index.crates.io-0000000000000000/planted-0.1.0",
                "is owned by uid 65534",
            ),
        ]);
    }
    for (planted, theirs, why) in cases {
        // CARGO_HOME itself root's (or ours), 0755, in /tmp (sticky).
        let home = common::fresh_dir("demo-controller-cargo-home");
        std::fs::set_permissions(&home, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let d = Untrusted { dir: home.join(theirs), why, theirs: why.contains("owned by"), _open: None };
        std::fs::create_dir_all(&d.dir).unwrap();
        if d.theirs {
            let chown = Command::new("chown").arg("65534:65534").arg(&d.dir).status().unwrap();
            assert!(chown.success());
        } else {
            std::fs::set_permissions(&d.dir, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
        }
        // Their program, and a cargo-fmt of ours: cargo starting would run it.
        let rel = Path::new(planted).strip_prefix(theirs).unwrap().to_str().unwrap().to_owned();
        d.plant(&[rel.as_str()], &marker);
        if !planted.starts_with("bin/") {
            Untrusted { dir: home.join("bin"), why, theirs: false, _open: None }.plant(&["cargo-fmt"], &marker);
        }
        let before = d.listing();
        let path = home.to_str().unwrap();
        let refused = if theirs.contains('/') { theirs.split('/').next().unwrap() } else { theirs };
        for (args, failing) in [(&["lint"][..], "lint"), (&["build"], "build")] {
            let out = make(args, &[("CARGO_HOME", path)]);
            let err = lines(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "make {args:?} ({planted}, {why}): {err:?}");
            assert_eq!(err.len(), 2, "make {args:?}: {err:?}");
            assert_eq!(
                err[0],
                format!(
                    "cargo.sh: error: refusing to use {path}/{refused}: {path}/{theirs} {why}, so {} could have \
                     replaced it; set CARGO_HOME to a directory of your own",
                    if d.theirs { "that user" } else { "one of them" }
                ),
                "make {args:?} ({planted})"
            );
            assert!(make_line(&err[1], failing, 1), "make {args:?}: {err:?}");
        }
        assert_eq!(d.listing(), before, "something was made in {}", d.dir.display());
        drop(d);
        let _ = std::fs::remove_dir_all(&home);
    }
    assert!(!marker.exists(), "a planted program ran: {}", std::fs::read_to_string(&marker).unwrap_or_default());
    let _ = std::fs::remove_dir_all(marker_dir);
}
