#!/usr/bin/env bash
# Runs every test, unit and end-to-end, against a real local control plane:
# builds (or reuses) kube-apiserver, kube-controller-manager and etcd, starts
# them (cluster/up.sh), runs `cargo test`, and always stops them again,
# whatever happens. A full run (no name filters)
# then runs a 2-minute chaos soak with every fault (bench/soak.sh, on a control
# plane of its own) before the node tests.
#
# Tests that need the control plane are marked #[ignore] with the reason
# "needs the local control plane: run `make test`", so a bare `cargo test`
# reports them as not run; here they run, with --include-ignored. So does
# tests/fresh_chapters.rs, ignored as it needs the network: it builds
# chapters 1 to 4 and 8 in fresh projects from each page's `cargo add` line (crates.io).
#
# Usage: cluster/test.sh [test name filters and libtest flags, e.g. --nocapture]
# NODE=skip (make test NODE=skip) leaves the node tests out, even as root, and
# says how many did not run.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

if ! command -v cargo >/dev/null 2>&1; then
	echo "error: cargo is not installed: install Rust 1.89 or newer (https://rustup.rs) and run this again" >&2
	exit 1
fi

# Where cargo builds, checked before cargo runs (it runs the build scripts and
# test binaries it finds there, and this runs as root too): cargo_target in
# cluster/proc.sh.
log() { echo "test.sh: $*" >&2; }
source cluster/proc.sh
target=$(cargo_target) || exit 1

case ${NODE:-} in
'' | skip) ;;
*)
	echo "error: NODE='$NODE' is not understood: use NODE=skip to leave the node tests out, or leave NODE unset" >&2
	exit 2
	;;
esac

dir=$repo/target/test-cluster
# Stop the shared control plane and any a test started for itself (tests that
# crash an API server get their own under target/test-planes/), even when a
# test process died before its own cleanup ran. The short soak's plane is
# stopped too, should the soak have died before its own cleanup, unless a
# soak holds its lock (bench/soak-lock.sh): then one line says it was left
# running. The plane of `make soak` (target/soak-cluster) is never touched:
# a recorded soak may be using it.
source "$repo/bench/soak-lock.sh"
soak_dir=$repo/target/soak-test-cluster
cleanup() {
	bash "$repo/cluster/down.sh" --dir "$dir"
	soak_plane_down "$soak_dir" || true
	for plane in "$repo"/target/test-planes/*/; do
		[[ -d $plane ]] && bash "$repo/cluster/down.sh" --dir "$plane"
	done
	return 0
}
trap cleanup EXIT INT TERM

# Every test's name, for the checks below ("NAME: test" lines of libtest's --list).
test_names() { cargo test --locked "$@" -- --include-ignored --list 2>/dev/null | sed -n 's/: test$//p'; }

# A name filter that matches no test would let a run pass having run nothing:
# each one given must match at least one test. ($1: what the filters are for;
# then the filters; the names to match are on stdin.)
require_matches() {
	local what=$1 names f
	shift
	names=$(cat)
	for f in "$@"; do
		if ! grep -qF -- "$f" <<<"$names"; then
			echo "error: the test filter '$f' ($what) matches no test: correct or remove it" >&2
			return 1
		fi
	done
}
filters=() skip_next=0
for a in "$@"; do
	if ((skip_next)); then skip_next=0; elif [[ $a == --skip ]]; then skip_next=1; elif [[ $a != -* ]]; then filters+=("$a"); fi
done
all_tests=$(test_names)
require_matches "given to make test" ${filters[@]+"${filters[@]}"} <<<"$all_tests"
# The run below leaves the node tests out with `--skip node_`, which libtest
# matches anywhere in a name: a test named `..._node_...` would be skipped
# there and never run as a node test either, reported as nothing at all.
if misnamed=$(grep 'node_' <<<"$all_tests" | grep -v '^node_'); then
	echo "error: these tests have 'node_' inside their names, so the run would skip them unreported: rename them (only node tests start with node_):" $misnamed >&2
	exit 1
fi

# The benchmark harness's own unit tests (it writes results.json, which the
# book's figures come from); a workspace of its own, built into the same
# target directory (bench/run.sh does too).
CARGO_TARGET_DIR=$target cargo test --locked --manifest-path bench/harness/Cargo.toml

# The control plane first (a cold build of it takes minutes), then the tests.
# The node tests (node_*) run after them, against a real node of their own.
bash cluster/up.sh --dir "$dir" >/dev/null
export DEMO_CONTROLLER_TEST_CLUSTER=$dir
# The workspace's default members: the program and crates/kube-pod-protobuf
# (Cargo.toml), so the reader's own tests run here too, and name filters
# (checked above against the same list) may name them.
# The chapters' tests run the examples' own binaries (target/debug/examples/),
# built here first. Chapter 8's decision has unit tests in its file, which
# run only when asked for (an example is no test target unless Cargo.toml
# says so, and saying so makes the Dockerfile's manifest need examples/).
cargo build --locked --examples
cargo test --locked --example ch8_secret_copier
# --no-fail-fast: every test binary runs, so one run shows every failure.
cargo test --locked --no-fail-fast -- --include-ignored --skip node_ "$@"
# The tests above read pods in protobuf (the default --wire). Those that
# exercise the watch (relists after 410, restarts under churn, deletes missed
# while away, by a standby that then leads too, selector exits, every e2e
# flow) run again on JSON, kube's own watcher, so both wires stay proven.
# (Only in a full run: with name filters, the filtered run above is what was
# asked for.)
if (($# == 0)); then
	json_again=(restarts_under_churn deletes_it_could_not_see relabelled_out_of_the_selector without_streaming_lists
		a_delete_only_a_relist_finds a_delete_both_relists_found)
	test_names --test faults --test watch --test leader |
		require_matches "the JSON re-run in cluster/test.sh" "${json_again[@]}"
	export DEMO_CONTROLLER_WIRE=json
	cargo test --locked --test e2e -- --include-ignored
	cargo test --locked --test faults --test watch --test leader -- --include-ignored "${json_again[@]}"
	unset DEMO_CONTROLLER_WIRE

	# A short chaos soak (`make soak`): three replicas with --leader-elect on a
	# control plane of its own, a writer, every fault, checked by its oracle.
	# It prints its report (also in target/soak-test/); a violation fails the
	# run. It starts and always stops its own control plane (in
	# target/soak-test-cluster, not the one `make soak` uses), and never hangs
	# (a watchdog ends it 20 min past its duration).
	bash cluster/down.sh --dir "$dir" # the plain control plane is done with: free its memory
	DURATION=2m bash bench/soak.sh --cluster-dir "$soak_dir" --out target/soak-test
fi

# --- The node tests: demo-controller as a pod on a real kubelet --------------
# Root only (containerd, a kubelet, a bridge, iptables). Without root they are
# reported as not run, never as passed.
# The node tests this run would include: all of them, or those the filters name.
node_tests=()
for name in $(grep -E '^node_' <<<"$all_tests"); do
	wanted=$((${#filters[@]} == 0))
	for f in ${filters[@]+"${filters[@]}"}; do [[ $name == *"$f"* ]] && wanted=1; done
	((wanted)) && node_tests+=("$name")
done
((${#node_tests[@]})) || exit 0 # filters that select no node test skip the node (and its image build)
if [[ ${NODE:-} == skip ]]; then
	echo "test.sh: ${#node_tests[@]} node tests (node_*) were NOT run: NODE=skip left them out; run \`make test\` as root without it for them" >&2
	exit 0
fi
if ((EUID != 0)); then
	echo "test.sh: ${#node_tests[@]} node tests (node_*) were NOT run: they need root and the local node; run \`make test\` as root" >&2
	exit 0
fi
bash cluster/down.sh --dir "$dir" # the plain control plane is done with: free its memory
bash cluster/node/test.sh "$@"
