#!/usr/bin/env bash
# `make bench`: demo-controller against the client-go logger (WatchList on and
# off), the kube-rs idiomatic logger and the floors, and two replicas of
# demo-controller with --leader-elect side by side, on a dedicated local
# control plane. Builds every peer and the harness (bench/harness, a crate and
# workspace of its own), starts the control plane in target/bench-cluster, runs the
# harness and always stops the control plane again, also on Ctrl-C (the
# harness first kills its peers and deletes what it created).
# The harness prints the tables and writes bench/results.md, results.json and
# bench/results.svg; it prints an estimate of its run time when it starts.
#
# Usage: bench/run.sh [--sizes 1000,10000] [--with-100k] [--burst 5000] [--idle 60s]
#                     [--resync-margin 40s] [--conditions TEXT] [--out bench]
#
# The harness prints how long it expects the run to take when it starts. For a quick look:
#     bench/run.sh --sizes 200,1000 --burst 300 --idle 3s --resync-margin 12s --out target/bench-quick
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
dir=$repo/target/bench-cluster
say() { echo "run.sh: $*" >&2; }

case ${1:-} in -h | --help)
	sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0" >&2
	exit 0
	;;
esac

# Where cargo builds, checked before it runs (root runs what it builds:
# cargo_target in cluster/proc.sh). The harness, a workspace of its own (see
# bench/harness/Cargo.toml), is built into the same target directory so the
# dependencies both share compile once, and every binary runs by the path
# checked once built (built in proc.sh).
log() { say "$@"; }
source cluster/proc.sh
target=$(cargo_target) || exit 1

# The harness runs in the background so that a signal reaches this script at
# once (bash runs traps only between commands); cleanup stops the harness
# (which kills the logger it runs) before the control plane under it.
bench=
declare -A bins
cleanup() {
	local status=$?
	trap - EXIT INT TERM
	if [[ -n $bench ]] && kill -0 "$bench" 2>/dev/null; then
		kill -TERM "$bench" 2>/dev/null || true
		wait "$bench" 2>/dev/null || true
	fi
	bash cluster/down.sh --dir "$dir" || true
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

say "building demo-controller, the kube-rs logger, the floors and the harness (release)"
cargo build --release --locked
CARGO_TARGET_DIR=$target cargo build --release --locked --manifest-path bench/harness/Cargo.toml
for b in bench demo-controller kube-rs-logger bench-floor; do
	bins[$b]=$(built "$target" "release/$b") || exit 1
done

say "building the client-go baseline logger"
[[ -f bench/build-go-logger.sh ]] || { say "error: bench/build-go-logger.sh is missing"; exit 1; }
go_logger=$(bash bench/build-go-logger.sh | tail -n1)
[[ -x $go_logger ]] || { say "error: bench/build-go-logger.sh printed '$go_logger', which is not an executable"; exit 1; }

# Without a controller-manager: the benchmark measures kube-apiserver and etcd
# alone, and its pods name owners that do not exist, which a garbage
# collector would delete.
say "starting a dedicated control plane in $dir"
bash cluster/up.sh --dir "$dir" --no-controller-manager >/dev/null

# For results.md: the command that produced it.
BENCH_COMMAND=bench/run.sh
(($#)) && BENCH_COMMAND+=$(printf ' %q' "$@")
export BENCH_COMMAND
"${bins[bench]}" --kubeconfig "$dir/kubeconfig" --cluster-dir "$dir" --go-logger "$go_logger" \
	--demo-controller "${bins[demo-controller]}" --kube-rs-logger "${bins[kube-rs-logger]}" --floor "${bins[bench-floor]}" "$@" &
bench=$!
wait "$bench"
