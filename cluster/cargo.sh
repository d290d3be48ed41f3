#!/usr/bin/env bash
# Runs cargo with the arguments given, from the repository, once the
# directories it will build in are checked (cargo_target in proc.sh): cargo
# runs the build scripts and test binaries it finds there, and make runs as
# root too, so a CARGO_TARGET_DIR (or a configured target-dir) that another
# user could change is refused in one line, exit 1, before cargo starts.
# `make build`, `make run` and `make lint` run cargo through this; the other
# scripts that run cargo (cluster/test.sh, bench/run.sh, the demos, the
# chapters) call cargo_target themselves.
#
# Usage: cluster/cargo.sh [--shared-target] CARGO-ARGS...
#   --shared-target: build in the repository's target directory (the one
#   checked) even for another workspace's manifest (bench/harness), so the
#   dependencies both share compile once.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
log() { echo "cargo.sh: $*" >&2; }
source "$repo/cluster/proc.sh" # cargo_target
target=$(cargo_target) || exit 1
if [[ ${1:-} == --shared-target ]]; then
	shift
	export CARGO_TARGET_DIR=$target
fi
exec cargo "$@"
