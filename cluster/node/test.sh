#!/usr/bin/env bash
# Runs the node tests (tests/node.rs, tests/node_chapters.rs,
# tests/node_teardown.rs, tests/node_paths.rs; all named node_*): builds the
# image from the unchanged Dockerfile, starts a real node (cluster/node/up.sh),
# builds and loads the chapters' image (cluster/node/chapter-image.sh), runs
# tests/node.rs and tests/node_chapters.rs against it, stops it, and then runs the teardown tests, which start and
# kill nodes of their own and check that cluster/node/down.sh left the host
# exactly as it was, and the tests in which another local user tries to steer
# the root-run scripts (tests/node_paths.rs). Root only. Prints the
# time of each stage and the memory the node used.
#
# Usage: cluster/node/test.sh [test name filters and libtest flags]
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
if ((EUID != 0)); then
	echo "node/test.sh: the node tests need root (namespaces, cgroups, containerd, a kubelet): run \`make test\` as root" >&2
	exit 1
fi
dir=$repo/target/test-node
say() { echo "node/test.sh: $*" >&2; }
log() { say "$@"; } # for proc.sh
source cluster/proc.sh # step, cargo_target
# Where cargo builds the tests, checked before cargo runs (cargo_target).
cargo_target >/dev/null || exit 1
# tests/node_teardown.rs changes the host as other software would (a network
# namespace, a FORWARD rule, an nft table, ip_forward, a cgroup) and writes
# the command that undoes each change here before making it. Run on every
# exit, so an interrupted run (Ctrl-C, a killed test process) undoes them too.
export DEMO_CONTROLLER_TEST_UNDO=$repo/target/test-node.undo
rm -f "$DEMO_CONTROLLER_TEST_UNDO"
undo() {
	if [[ -f $DEMO_CONTROLLER_TEST_UNDO ]]; then
		bash "$DEMO_CONTROLLER_TEST_UNDO" || say "undoing the teardown test's host changes failed: see $DEMO_CONTROLLER_TEST_UNDO"
		rm -f "$DEMO_CONTROLLER_TEST_UNDO"
	fi
}
trap 'bash cluster/node/down.sh --dir "$dir"; rm -f "$dir.host-before"; undo' EXIT INT TERM

t=$SECONDS
step "the node's Debian packages (cluster/node/deps.sh)" node-deps bash cluster/node/deps.sh
step "the container image (cluster/image.sh)" image bash cluster/image.sh
say "image ready in $((SECONDS - t)) s"
# The host as it was before the node: tests/node.rs compares it with the
# host while the node runs.
bash cluster/node/hoststate.sh >"$dir.host-before"
t=$SECONDS
bash cluster/node/up.sh --dir "$dir" >/dev/null
say "node up in $((SECONDS - t)) s (binaries included)"
t=$SECONDS
step "the chapters' image (cluster/node/chapter-image.sh)" chapter-image bash cluster/node/chapter-image.sh
say "chapters' image built and loaded in $((SECONDS - t)) s"
export DEMO_CONTROLLER_TEST_NODE=$dir
cargo test --locked --test node -- --include-ignored "$@"
cargo test --locked --test node_chapters -- --include-ignored "$@"
bash cluster/node/memory.sh "$dir" >&2 || true
t=$SECONDS
bash cluster/node/down.sh --dir "$dir"
say "node down in $((SECONDS - t)) s"
rm -f "$dir.host-before"
trap undo EXIT INT TERM
unset DEMO_CONTROLLER_TEST_NODE
# The teardown tests compare the host before and after: they run first, on a
# host no other test of this run has just changed.
cargo test --locked --test node_teardown -- --include-ignored "$@"
cargo test --locked --test node_paths -- --include-ignored "$@"
