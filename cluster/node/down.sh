#!/usr/bin/env bash
# Stops the local node that cluster/node/up.sh started in DIR and puts the host
# back as DIR/host/ recorded it before the start: every process (kubelet,
# kube-proxy, scheduler, controller-manager, every pod's processes, the
# containerd shims, containerd), the pods' mounts and network namespaces, the
# bridge and its veths, the dummy interface, iptables/ip6tables rules and the
# nft tables that were not there, the sysctls the kubelet and the CNI plugin
# changed, the kubepods cgroups, /var/lib/{kubelet,containerd,cni},
# /run/containerd, /var/log/pods; then the control plane (cluster/down.sh) and
# DIR. Works from the recorded state alone, so it also cleans up after a
# failed start or a run killed with SIGKILL.
#
# Usage: cluster/node/down.sh [--dir DIR]   (DIR defaults to <repo>/target/local-node)
# Idempotent: without DIR it does nothing.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
log() { echo "node/down.sh: $*" >&2; }

source "$here/lib.sh"
parse_dir "$@"
[[ -e $dir ]] || exit 0
dir=$(cd "$dir" && pwd)
if ((EUID != 0)); then
	echo "error: stopping the local node needs root, as starting it did: run this as root" >&2
	exit 1
fi
t0=$SECONDS

# ours NAME: live processes whose executable is NAME and whose command line
# names DIR (the pid files first, then a scan, for pids never written down).
ours() {
	local p pid argv0
	for p in /proc/[0-9]*; do
		pid=${p#/proc/}
		read -r -d '' argv0 2>/dev/null <"$p/cmdline" || true
		[[ ${argv0##*/} == "$1" ]] || continue
		tr '\0' ' ' 2>/dev/null <"$p/cmdline" | grep -qF -- "$dir/" && echo "$pid"
	done
	return 0
}

# --- Processes -----------------------------------------------------------------
# The kubelet first, so it restarts nothing; then every process of every pod
# (all live in the kubepods cgroups); then the shims and containerd.
for n in kubelet kube-proxy kube-scheduler kube-controller-manager; do
	mapfile -t pids < <(ours "$n")
	stop ${pids[@]+"${pids[@]}"}
done
kill_cgroup_procs() {
	local f pid any=0
	for f in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods /sys/fs/cgroup/*/k8s.io /sys/fs/cgroup/k8s.io; do
		[[ -d $f ]] || continue
		while read -r pid; do
			kill -KILL "$pid" 2>/dev/null && any=1
		done < <(find "$f" -name cgroup.procs -exec cat {} + 2>/dev/null)
	done
	((any))
}
for _ in $(seq 50); do kill_cgroup_procs || break; sleep 0.1; done
mapfile -t pids < <(ours containerd)
stop ${pids[@]+"${pids[@]}"}
# Shims outlive containerd; theirs name its socket. Killed, then waited for
# until they are gone from the process table (not even a zombie is left).
shims() {
	local p argv0
	for p in /proc/[0-9]*; do
		read -r -d '' argv0 2>/dev/null <"$p/cmdline" || continue
		[[ ${argv0##*/} == containerd-shim* ]] || continue
		tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -qF -- "$containerd_sock" && echo "${p#/proc/}"
	done
	return 0
}
mapfile -t pids < <(shims)
for pid in ${pids[@]+"${pids[@]}"}; do kill -KILL "$pid" 2>/dev/null || true; done
for pid in ${pids[@]+"${pids[@]}"}; do
	for _ in $(seq 100); do [[ -e /proc/$pid ]] || break; sleep 0.05; done
done
# A shim that died on its own just before may still wait to be reaped.
for _ in $(seq 100); do pgrep -x containerd-shim >/dev/null || break; sleep 0.05; done

# --- Mounts, network namespaces ------------------------------------------------------
# Deepest first; a busy one is detached lazily.
mapfile -t mounts < <(awk '{ print $5 }' /proc/self/mountinfo | grep -E '^(/var/lib/kubelet|/var/lib/containerd|/run/containerd|/run/netns)(/|$)' | awk '{ print length, $0 }' | sort -rn | cut -d' ' -f2-)
for m in ${mounts[@]+"${mounts[@]}"}; do
	umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "warning: could not unmount $m"
done

# --- Network --------------------------------------------------------------------------------
for l in $(ip -o link show master "$bridge_if" 2>/dev/null | awk -F': ' '{ print $2 }' | cut -d@ -f1); do
	ip link del "$l" 2>/dev/null || true
done
ip link del "$bridge_if" 2>/dev/null || true
ip link del "$dummy_if" 2>/dev/null || true

h=$dir/host
if [[ -f $h/complete ]]; then
	# iptables: the recorded rules back in every table that existed; tables
	# made since (by kube-proxy, the kubelet, the forward guard) deleted.
	iptables-restore -w <"$h/iptables" || log "warning: iptables-restore failed"
	ip6tables-restore -w <"$h/ip6tables" || log "warning: ip6tables-restore failed"
	while read -r _ family table; do
		[[ -n $table ]] || continue
		grep -qxF "table $family $table" "$h/nft-tables" || nft delete table "$family" "$table" 2>/dev/null || true
	done < <(nft list tables 2>/dev/null)
	while IFS='=' read -r k v; do
		[[ $(sysctl -n "$k") == "$v" ]] || sysctl -qw "$k=$v" || log "warning: could not restore $k=$v"
	done <"$h/sysctls"
	# cgroups made by the kubelet and containerd, deepest first.
	for f in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods /sys/fs/cgroup/*/k8s.io /sys/fs/cgroup/k8s.io; do
		[[ -d $f ]] && ! grep -qxF "$f" "$h/cgroups" || continue
		find "$f" -depth -type d -exec rmdir {} + 2>/dev/null || true
		[[ -d $f ]] && log "warning: could not remove cgroup $f"
	done
	for d in "${node_dirs[@]}"; do
		grep -qxF "$d" "$h/dirs" || rm -rf "$d"
	done
else
	log "no complete record of the host's state in $dir/host: removed processes, mounts and interfaces only"
fi

# The control plane's data goes with DIR: no graceful apiserver shutdown to
# wait for (with watchers attached it takes 10 s or more).
pid=$(cat "$dir/plane/kube-apiserver.pid" 2>/dev/null) && [[ $pid =~ ^[0-9]+$ ]] &&
	tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$dir/plane/" && kill -KILL "$pid" 2>/dev/null || true
bash "$repo/cluster/down.sh" --dir "$dir/plane" 2>/dev/null || true
rm -rf "$dir"
log "node stopped and host restored in $((SECONDS - t0)) s; removed $dir"
