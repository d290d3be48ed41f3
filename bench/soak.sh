#!/usr/bin/env bash
# `make soak`: a chaos soak of demo-controller --leader-elect with an oracle.
# Builds demo-controller and the soak (bench/harness, its bin `soak`), starts
# a control plane of its own in target/soak-cluster, runs three replicas under
# a writer and faults for DURATION, and always stops the control plane again,
# also on Ctrl-C (the soak first stops the replicas it runs). The soak prints
# its figures and exits 1 when the oracle found a violation, listing each
# (130 when interrupted). Logs, writes, the final list and the report go to
# target/soak/ (--out): report.txt, and report.json with the same figures and
# the code they measured (the commit, the git trees of src/ and crates/).
# --record also copies report.json to bench/soak.json, the committed record
# the book's soak figures are generated from (tests/figures.rs), but only for
# a run that was not interrupted; one with violations is recorded with them.
# Then DEMO_CONTROLLER_BLESS=1 cargo test --test figures renders the book's
# figures from it; commit both.
# The soak never hangs: a watchdog ends it 20 min past DURATION.
#
# Usage: DURATION=10m bench/soak.sh [--faults leader-kill,lease-delete,...] [--gap 6s] [--out target/soak] [--record]
# The record:   make soak DURATION=60m ARGS=--record
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
dir=$repo/target/soak-cluster
say() { echo "soak.sh: $*" >&2; }

case ${1:-} in -h | --help)
	sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0" >&2
	exit 0
	;;
esac

# Where cargo builds, checked before it runs (cargo_target in cluster/proc.sh);
# the harness is built into the same target directory, as bench/run.sh does.
log() { say "$@"; }
source cluster/proc.sh
target=$(cargo_target) || exit 1

soak=
cleanup() {
	local status=$?
	trap - EXIT INT TERM
	if [[ -n $soak ]] && kill -0 "$soak" 2>/dev/null; then
		kill -TERM "$soak" 2>/dev/null || true
		wait "$soak" 2>/dev/null || true
	fi
	bash cluster/down.sh --dir "$dir" || true
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

# A debug build, as the tests use: the soak checks what is logged, not how fast.
say "building demo-controller and the soak"
cargo build --locked --bin demo-controller
CARGO_TARGET_DIR=$target cargo build --locked --manifest-path bench/harness/Cargo.toml --bin soak
demo=$(built "$target" debug/demo-controller) || exit 1
bin=$(built "$target" debug/soak) || exit 1

# Without a controller-manager, as bench/run.sh: its record (bench/soak.json)
# was made on kube-apiserver and etcd alone, and stays comparable.
say "starting a control plane of its own in $dir"
bash cluster/up.sh --dir "$dir" --no-controller-manager >/dev/null

"$bin" --duration "${DURATION:-10m}" --kubeconfig "$dir/kubeconfig" --cluster-dir "$dir" \
	--demo-controller "$demo" "$@" &
soak=$!
wait "$soak"
