//! The soak's lock on its control plane (bench/soak-lock.sh). While a soak
//! holds it (a recorded hour-long soak, say), a second soak on the same plane
//! refuses to start and `make test`'s clean-up leaves the plane running; each
//! says so in one line. Once the lock is free, the clean-up stops the plane.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use common::*;
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::ListParams;

/// bash with bench/soak-lock.sh sourced as bench/soak.sh and cluster/test.sh
/// source it, running `script` with the plane's directory as $2.
fn with_soak_lock(script: &str, dir: &Path) -> Command {
    let mut cmd = Command::new("bash");
    cmd.arg("-c")
        .arg(format!(
            r#"set -euo pipefail; repo=$1; log() {{ echo "test.sh: $*" >&2; }}; source "$repo/bench/soak-lock.sh"; {script}"#
        ))
        .arg("soak-lock")
        .arg(repo())
        .arg(dir);
    cmd
}

fn alive(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

#[ignore = "needs the local control plane: run `make test`"]
#[tokio::test(flavor = "multi_thread")]
async fn a_plane_a_soak_holds_is_left_running_by_another_soak_and_by_make_tests_clean_up() {
    let plane = Plane::start("soak-lock").await;
    let dir = plane.dir().to_path_buf();
    let apiserver = std::fs::read_to_string(dir.join("kube-apiserver.pid")).expect("kube-apiserver.pid");
    let apiserver = apiserver.trim();

    // The holder takes the lock as bench/soak.sh does, and keeps it until
    // its standard input closes.
    let mut holder = with_soak_lock(r#"soak_take_plane "$2"; echo held; read -r _ || true"#, &dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the holder");
    let mut held = String::new();
    BufReader::new(holder.stdout.take().expect("the holder's stdout")).read_line(&mut held).expect("read");
    assert_eq!(held, "held\n");
    let holder_pid = holder.id();

    // make test's clean-up (cluster/test.sh) leaves it running, in one line.
    let down = with_soak_lock(r#"soak_plane_down "$2""#, &dir).output().expect("run the clean-up");
    assert!(down.status.success(), "{down:?}");
    assert_eq!(
        String::from_utf8_lossy(&down.stderr),
        format!(
            "test.sh: left the control plane in {} running: a soak (pid {holder_pid}) is using it\n",
            dir.display()
        )
    );

    // A second soak on the same plane refuses before it builds or starts anything.
    let soak = Command::new("bash")
        .arg(repo().join("bench/soak.sh"))
        .arg("--cluster-dir")
        .arg(&dir)
        .env("DURATION", "1m")
        .output()
        .expect("run bench/soak.sh");
    assert_eq!(soak.status.code(), Some(1), "{soak:?}");
    assert_eq!(
        String::from_utf8_lossy(&soak.stderr),
        format!(
            "soak.sh: error: a soak (pid {holder_pid}) is using the control plane in {}: wait for it to end, or give this one a plane of its own (--cluster-dir DIR); nothing was started or stopped\n",
            dir.display()
        )
    );

    // The plane survived both: its kube-apiserver runs and answers.
    assert!(alive(apiserver), "the held plane's kube-apiserver was stopped");
    Api::<Namespace>::all(plane.cluster.client.clone())
        .list(&ListParams::default())
        .await
        .expect("the held plane answers");

    // The soak ends: now the clean-up stops the plane.
    drop(holder.stdin.take());
    assert!(holder.wait().expect("the holder's exit").success());
    let down = with_soak_lock(r#"soak_plane_down "$2""#, &dir).output().expect("run the clean-up");
    assert!(down.status.success(), "{down:?}");
    assert!(!alive(apiserver), "a plane no soak holds was left running");
    assert!(!dir.exists());
    let _ = std::fs::remove_file(format!("{}.lock", dir.display()));
}
