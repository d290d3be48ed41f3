#!/usr/bin/env bash
# Stops the local control plane that cluster/up.sh started in DIR and removes
# DIR. Stops the kube-controller-manager first, then every kube-apiserver
# (the one up.sh started and any extra one started from
# DIR/kube-apiserver.sh), then etcd, so nothing ever runs against a vanished
# server. Each gets SIGTERM, then SIGKILL after 10 s.
#
# Usage: cluster/down.sh [--dir DIR]     (DIR defaults to <repo>/target/local-cluster)
#
# Idempotent: without DIR it does nothing and exits 0. A DIR up.sh did not
# make (no .demo-controller-cluster, or not ours and 0700) is refused in one
# line and left as it is.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

log() { echo "down.sh: $*" >&2; }

[[ -e $dir || -L $dir ]] || exit 0
# DIR is removed recursively at the end: only a directory up.sh made (the
# directory guard in proc.sh: ours, mode 0700, with the marker), never one
# that merely holds files named like a cluster's (a mistyped --dir, /etc with
# its pki/, a project with a Python env/).
guard_dir "$marker"

# Same lock as up.sh (see there), unless up.sh is our caller and holds it.
held_by_caller=0
[[ ${LOCAL_CLUSTER_LOCK_HELD:-} == "$dir" ]] && held_by_caller=1
while ((!held_by_caller)); do
	{ exec 9<"$dir"; } 2>/dev/null || exit 0 # removed meanwhile: nothing left to do
	flock 9
	[[ $(stat -Lc %d:%i "/proc/$$/fd/9") == "$(stat -c %d:%i "$dir" 2>/dev/null)" ]] && break
	exec 9<&-
done

# ours PID: a live process whose command line names DIR, so a pid file holding
# a recycled pid never gets an unrelated process killed.
ours() {
	alive "$1" && tr '\0' ' ' 2>/dev/null <"/proc/$1/cmdline" | grep -qF -- "$dir/"
}

kcms=() apiservers=() etcds=()
# The pid files: DIR/etcd.pid, DIR/kube-apiserver.pid,
# DIR/kube-controller-manager.pid, and whatever pid files tests wrote for
# extra apiservers.
for f in "$dir"/*.pid; do
	[[ -f $f ]] || continue
	pid=$(cat "$f" 2>/dev/null) || continue
	[[ $pid =~ ^[0-9]+$ ]] && ours "$pid" || continue
	case $(basename "$f") in
	etcd.pid) etcds+=("$pid") ;;
	kube-controller-manager.pid) kcms+=("$pid") ;;
	*) apiservers+=("$pid") ;;
	esac
done
# Plus any etcd, kube-apiserver or kube-controller-manager running with this
# DIR's files whose pid was never written down (a test that forgot, an up.sh
# killed with SIGKILL), so removing DIR never leaves one running without its
# files.
for p in /proc/[0-9]*; do
	pid=${p#/proc/}
	((pid != $$)) || continue
	argv0=
	read -r -d '' argv0 2>/dev/null <"$p/cmdline" || true
	case ${argv0##*/} in
	kube-apiserver) list=apiservers ;;
	kube-controller-manager) list=kcms ;;
	etcd) list=etcds ;;
	*) continue ;;
	esac
	ours "$pid" || continue
	declare -n ref=$list
	[[ " ${ref[*]-} " == *" $pid "* ]] || ref+=("$pid")
	unset -n ref
done

if ((${#etcds[@]} == 0 && ${#apiservers[@]} > 0)); then
	# Without its etcd a kube-apiserver spends about 11 s in a graceful
	# shutdown (measured, v1.35), and DIR's data is thrown away anyway.
	kill -KILL "${apiservers[@]}" 2>/dev/null || true
fi
stop ${kcms[@]+"${kcms[@]}"}
stop ${apiservers[@]+"${apiservers[@]}"}
stop ${etcds[@]+"${etcds[@]}"}
if ((held_by_caller)); then
	# up.sh's lock is on DIR itself: empty it, keep the directory and its marker.
	find "$dir" -mindepth 1 ! -path "$dir/$marker" -delete
	log "stopped ${#kcms[@]} kube-controller-manager, ${#apiservers[@]} kube-apiserver and ${#etcds[@]} etcd process(es); emptied $dir"
else
	rm -rf --one-file-system "$dir"
	log "stopped ${#kcms[@]} kube-controller-manager, ${#apiservers[@]} kube-apiserver and ${#etcds[@]} etcd process(es); removed $dir"
fi
