#!/usr/bin/env bash
# `make soak`: a chaos soak of demo-controller --leader-elect with an oracle.
# Builds demo-controller and the soak (bench/harness, its bin `soak`), starts
# a control plane of its own in target/soak-cluster (--cluster-dir), runs
# three replicas under a writer and faults for DURATION, and always stops the
# control plane again, also on Ctrl-C (the soak first stops the replicas it
# runs). The soak prints its figures and exits 1 when the oracle found a
# violation, listing each (130 when interrupted). Logs, writes, the final
# list and the report go to target/soak/ (--out): report.txt, and report.json
# with the same figures and the code they measured (the commit, the git trees
# of src/ and crates/).
# --record also copies report.json to bench/soak.json, the committed record
# the book's soak figures are generated from (tests/figures.rs), but only for
# a run that was not interrupted; one with violations is recorded with them.
# Then DEMO_CONTROLLER_BLESS=1 cargo test --test figures renders the book's
# figures from it; commit both.
# The soak never hangs: a watchdog ends it 20 min past DURATION.
# A soak holds a lock on its control plane while it runs (bench/soak-lock.sh):
# a second soak on the same plane refuses to start, in one line, and leaves
# the running one and its plane alone; so does `make test`.
#
# Usage: DURATION=10m bench/soak.sh [--faults leader-kill,lease-delete,...] [--gap 6s] [--out target/soak] [--cluster-dir target/soak-cluster] [--record]
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

log() { say "$@"; }
# The control plane's directory (relative to the repository, as --out is);
# every other argument is the soak's.
args=()
while (($#)); do
	case $1 in
	--cluster-dir)
		(($# >= 2)) || { say "error: --cluster-dir needs a directory"; exit 2; }
		dir=$2
		shift 2
		;;
	--cluster-dir=*) dir=${1#--cluster-dir=}; shift ;;
	*) args+=("$1"); shift ;;
	esac
done
[[ $dir == /* ]] || dir=$repo/$dir
dir=${dir%/}
# Before anything is built or started: the plane is this soak's alone until
# it ends (fd 8 is the lock; what this starts does not inherit it).
source bench/soak-lock.sh
soak_take_plane "$dir" || exit 1

# Where cargo builds, checked before it runs (cargo_target in cluster/proc.sh);
# the harness is built into the same target directory, as bench/run.sh does.
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
	bash cluster/down.sh --dir "$dir" 8>&- || true
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

# A debug build, as the tests use: the soak checks what is logged, not how fast.
say "building demo-controller and the soak"
cargo build --locked --bin demo-controller 8>&-
CARGO_TARGET_DIR=$target cargo build --locked --manifest-path bench/harness/Cargo.toml --bin soak 8>&-
demo=$(built "$target" debug/demo-controller) || exit 1
bin=$(built "$target" debug/soak) || exit 1

# Without a controller-manager, as bench/run.sh: its record (bench/soak.json)
# was made on kube-apiserver and etcd alone, and stays comparable.
say "starting a control plane of its own in $dir"
bash cluster/up.sh --dir "$dir" --no-controller-manager >/dev/null 8>&-

"$bin" --duration "${DURATION:-10m}" --kubeconfig "$dir/kubeconfig" --cluster-dir "$dir" \
	--demo-controller "$demo" ${args[@]+"${args[@]}"} 8>&- &
soak=$!
wait "$soak"
