#!/usr/bin/env bash
# Prints the resident memory of the local node in DIR, by component: every
# process in the node's cgroup (control plane, node components, containerd and
# its shims, every pod's processes), summed by command name.
# Usage: cluster/node/memory.sh DIR
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
log() { echo "memory.sh: $*" >&2; }
source "$repo/cluster/node/lib.sh"
parse_dir --dir "${1:?usage: memory.sh DIR}"
# The pids controller's hierarchy (or cgroup v2's) lists every process once.
h=$(cgroup_hierarchies | grep -m1 -E '/(pids|unified)$|^/sys/fs/cgroup$')
echo "memory of the local node (RSS):"
find "$h/$(cgroup_name)" -name cgroup.procs -exec cat {} + 2>/dev/null | while read -r p; do
	comm=$(cat "/proc/$p/comm" 2>/dev/null) || continue
	rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$p/status" 2>/dev/null) || continue
	echo "$comm ${rss:-0}"
done | awk '
	$1 ~ /^containerd-shim/ { $1 = "containerd shims" }
	$1 != "kubelet" && $1 != "containerd" && $1 != "etcd" && $1 != "kube-apiserver" && $1 != "kube-scheduler" &&
	$1 !~ /^kube-controller/ && $1 != "kube-proxy" && $1 != "containerd shims" { $1 = "pods and the rest" }
	{ kb[$1] += $NF; total += $NF }
	END {
		for (n in kb) printf "  %-26s %6d MB\n", n, kb[n] / 1024
		printf "  %-26s %6d MB\n", "total", total / 1024
	}'
