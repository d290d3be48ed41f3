#!/usr/bin/env bash
# Measures how long the set-up's slow steps take from nothing, and records it
# in book/src/appendix/setup-times.json, the one place the README and the
# book quote these times from (tests/figures.rs renders them into the pages
# and fails `make test` when a page differs from the record).
#
# Each step runs the project's own script, exactly as `make demo` and
# `make test` run it, but against empty caches of its own in a fresh
# directory (DEMO_CONTROLLER_CACHE, GOCACHE, GOMODCACHE, CARGO_HOME), so
# nothing built before counts; the directory is removed at the end. Then each
# step runs once more, warm, as every run after the first does.
#
#   control-plane   cluster/build.sh: kube-apiserver, kube-controller-manager
#                   and etcd from Go modules
#   start           cluster/up.sh: a start of the control plane, to ready
#   mdbook          book/mdbook.sh: the pinned mdbook, built by cargo install
#   node-binaries   cluster/node/build.sh: kubelet, scheduler, controller-
#                   manager, kube-proxy (after control-plane: its Go caches
#                   warm, as in a real first run)
#   image           cluster/image.sh: the Dockerfile's image on local stand-in
#                   bases (root only: the stand-ins need podman as root)
#
# Then, recorded apart under "chapter1" with its own date and load:
#   chapter1        `make chapter N=1` (cluster/chapter.sh) from nothing to
#                   the chapter's first line: the control plane built and
#                   started, the project and chapter 1 compiled (in an empty
#                   target directory of its own, CARGO_TARGET_DIR); warm is a
#                   second run, the control plane stopped in between. Also
#                   the number of lines it prints before that first line.
#
# Or, recorded apart under "control_plane" with its own date and load (the
# control-plane and start steps alone, e.g. after the control plane changed):
#   control-plane, start   as above
#
# Each record also names the binaries the control-plane build made
# ("binaries"), so the pages say what a measured build compiled.
#
# Usage: cluster/setup-times.sh [--chapter1 | --control-plane]   (a few tens
#        of minutes on 2 cores; --chapter1, --control-plane: that measurement
#        alone, the rest of the record kept as it is)
set -euo pipefail
only=
case ${1:-} in
'') ;;
--chapter1) only=chapter1 ;;
--control-plane) only=control-plane ;;
*) echo "usage: $0 [--chapter1 | --control-plane]" >&2; exit 2 ;;
esac
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
say() { echo "setup-times.sh: $*" >&2; }

work=$(mktemp -d) # 0700, ours
plane=$work/plane
cleanup() {
	[[ -d $plane ]] && bash cluster/down.sh --dir "$plane" >/dev/null 2>&1
	# The image step's container store: let podman remove what it made in it.
	if [[ -d $work/cache/podman/root ]]; then
		podman --root "$work/cache/podman/root" --runroot "$work/cache/podman/runroot" system reset -f >/dev/null 2>&1 || true
	fi
	chmod -R u+w "$work" 2>/dev/null # Go's module cache is read-only
	rm -rf --one-file-system "$work"
}
trap cleanup EXIT
export DEMO_CONTROLLER_CACHE=$work/cache GOCACHE=$work/go-build GOMODCACHE=$work/go-mod CARGO_HOME=$work/cargo
# cargo install needs the toolchain rustup chose; CARGO_HOME only moves its caches.
export RUSTUP_TOOLCHAIN=${RUSTUP_TOOLCHAIN:-$(rustc --version | cut -d' ' -f2)}

declare -A cold warm
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.0f", b - a }'; } # whole seconds since $1
# time_step NAME COMMAND...: runs it cold, then warm, recording each in whole seconds.
time_step() {
	local name=$1 t log=$work/$1.log
	shift
	say "$name: cold ..."
	t=$EPOCHREALTIME
	"$@" >"$log" 2>&1 || { tail -20 "$log" >&2; say "$name failed (above)"; exit 1; }
	cold[$name]=$(since "$t")
	t=$EPOCHREALTIME
	"$@" >"$log" 2>&1 || { tail -20 "$log" >&2; say "$name failed warm (above)"; exit 1; }
	warm[$name]=$(since "$t")
	say "$name: ${cold[$name]} s cold, ${warm[$name]} s warm"
}
start_plane() { bash cluster/up.sh --dir "$plane" && bash cluster/down.sh --dir "$plane"; }

# chapter1: cluster/chapter.sh until chapter 1 prints its first line, then
# stopped (it would wait for events); the lines before that in lines_before.
lines_before=
chapter1() {
	local out=$work/chapter1.out pid n
	N=1 CARGO_TARGET_DIR=$work/target bash cluster/chapter.sh --dir "$plane" >"$out" 2>&1 &
	pid=$!
	until n=$(grep -n -m1 '^chapter 1: ' "$out" | cut -d: -f1) && [[ -n $n ]]; do
		kill -0 "$pid" 2>/dev/null || { cat "$out"; return 1; }
		sleep 0.1
	done
	kill -TERM "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	bash cluster/down.sh --dir "$plane" >/dev/null
	lines_before=$((n - 1))
}
# binaries: the control plane's binaries, as build.sh (cached: instant) has
# them, one name a line.
binaries() { ls "$(bash cluster/build.sh 2>/dev/null | tail -n1)"; }
record_chapter1() {
	python3 - "$out" "$(binaries)" "$@" <<-'PY'
		import json, sys
		path, bins, measured, commit, machine, load, cold, warm, lines = sys.argv[1:]
		with open(path) as f:
		    record = json.load(f)
		record["chapter1"] = {
		    "measured": measured, "commit": commit, "machine": machine, "load": load,
		    "binaries": bins.split(), "cold": int(cold), "warm": int(warm), "lines_before": int(lines),
		}
		with open(path, "w") as f:
		    json.dump(record, f, indent=2)
		    f.write("\n")
	PY
}
machine() { echo "$(nproc) CPUs, $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo) RAM, $(uname -sr)"; }
commit() { git rev-parse --short HEAD 2>/dev/null || echo unknown; }
out=book/src/appendix/setup-times.json

if [[ $only == chapter1 ]]; then
	load_before=$(cut -d' ' -f1-3 /proc/loadavg)
	time_step chapter1 chapter1
	record_chapter1 "$(date -u '+%Y-%m-%d %H:%M UTC')" "$(commit)" "$(machine)" \
		"load average $load_before when it started, $(cut -d' ' -f1-3 /proc/loadavg) when it ended" \
		"${cold[chapter1]}" "${warm[chapter1]}" "$lines_before"
	say "recorded in $out; now run DEMO_CONTROLLER_BLESS=1 cargo test --test figures to update the pages that quote it"
	exit 0
fi
if [[ $only == control-plane ]]; then
	measured=$(date -u '+%Y-%m-%d %H:%M UTC') load_before=$(cut -d' ' -f1-3 /proc/loadavg)
	time_step control-plane bash cluster/build.sh
	time_step start start_plane
	python3 - "$out" "$(binaries)" "$measured" "$(commit)" "$(machine)" \
		"load average $load_before when it started, $(cut -d' ' -f1-3 /proc/loadavg) when it ended" \
		"${cold[control-plane]}" "${warm[control-plane]}" "${cold[start]}" "${warm[start]}" <<-'PY'
		import json, sys
		path, bins, measured, commit, machine, load, build_cold, build_warm, start_cold, start_warm = sys.argv[1:]
		with open(path) as f:
		    record = json.load(f)
		record["control_plane"] = {
		    "measured": measured, "commit": commit, "machine": machine, "load": load, "binaries": bins.split(),
		    "cold": {"control-plane": int(build_cold), "start": int(start_cold)},
		    "warm": {"control-plane": int(build_warm), "start": int(start_warm)},
		}
		with open(path, "w") as f:
		    json.dump(record, f, indent=2)
		    f.write("\n")
	PY
	say "recorded in $out; now run DEMO_CONTROLLER_BLESS=1 cargo test --test figures to update the pages that quote it"
	exit 0
fi

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
time_step control-plane bash cluster/build.sh
time_step start start_plane
time_step mdbook bash book/mdbook.sh --version
time_step node-binaries bash cluster/node/build.sh
if ((EUID == 0)); then
	time_step image bash cluster/image.sh demo-controller:setup-times
fi
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
t_chapter=$(date -u '+%Y-%m-%d %H:%M UTC') load_chapter=$(cut -d' ' -f1-3 /proc/loadavg)
time_step chapter1 chapter1

{
	echo "{"
	echo "  \"written_by\": \"cluster/setup-times.sh\","
	echo "  \"measured\": \"$(date -u '+%Y-%m-%d %H:%M UTC')\","
	echo "  \"commit\": \"$(commit)\","
	echo "  \"machine\": \"$(machine)\","
	echo "  \"load\": \"load average $load_before when it started, $load_after when it ended\","
	echo "  \"binaries\": [$(binaries | sed 's/.*/"&"/' | paste -sd, | sed 's/,/, /g')],"
	first=1
	for kind in cold warm; do
		echo "  \"$kind\": {"
		declare -n times=$kind
		names=(control-plane start mdbook node-binaries image)
		sep=
		for name in "${names[@]}"; do
			[[ -n ${times[$name]:-} ]] || continue
			printf '%s    "%s": %s' "$sep" "$name" "${times[$name]}"
			sep=$',\n'
		done
		echo
		if ((first)); then echo "  },"; else echo "  }"; fi
		first=0
	done
	echo "}"
} >"$out"
record_chapter1 "$t_chapter" "$(commit)" "$(machine)" \
	"load average $load_chapter when it started, $(cut -d' ' -f1-3 /proc/loadavg) when it ended" \
	"${cold[chapter1]}" "${warm[chapter1]}" "$lines_before"
say "recorded in $out; now run DEMO_CONTROLLER_BLESS=1 cargo test --test figures to update the pages that quote it"
