#!/usr/bin/env bash
# Prints the resident memory of the local node's processes in DIR: control
# plane, node components, containerd and its shims, and every pod's processes.
# Usage: cluster/node/memory.sh DIR
set -euo pipefail
dir=${1:?usage: memory.sh DIR}
total=0
line() { printf '  %-26s %6d MB\n' "$1" "$(($2 / 1024))"; total=$((total + $2)); }
rss() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }
echo "memory of the local node (RSS):"
for n in etcd kube-apiserver; do
	pid=$(cat "$dir/plane/$n.pid" 2>/dev/null) && line "$n" "$(rss "$pid")"
done
for n in containerd kubelet kube-scheduler kube-controller-manager kube-proxy; do
	pid=$(cat "$dir/$n.pid" 2>/dev/null) && line "$n" "$(rss "$pid")"
done
shims=0
for p in $(pgrep -x containerd-shim || true); do shims=$((shims + $(rss "$p"))); done
line "containerd shims" "$shims"
pods=0
for f in $(find /sys/fs/cgroup/pids/kubepods -name cgroup.procs 2>/dev/null); do
	while read -r p; do pods=$((pods + $(rss "$p"))); done <"$f"
done
line "pods' processes" "$pods"
printf '  %-26s %6d MB\n' total "$((total / 1024))"
