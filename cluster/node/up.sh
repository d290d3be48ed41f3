#!/usr/bin/env bash
# Starts a real one-node Kubernetes cluster on this machine, in namespaces of
# its own: the local control plane (cluster/up.sh, its apiserver set up for a
# kubelet), containerd (runc, CNI bridge), kubelet, kube-scheduler,
# kube-controller-manager and kube-proxy v1.35.4. Pods really run. Prints
# `export KUBECONFIG=...` as its last stdout line, like cluster/up.sh.
#
# Usage: cluster/node/up.sh [--dir DIR]     (DIR defaults to <repo>/target/local-node)
#
# Needs root and the Debian packages in deps.sh, which it installs when
# missing. One node per machine: a second up.sh is refused while one runs.
#
# What it does to the host:
#   - one process tree, every process of which lives in the node's own pid,
#     mount, network and UTS namespaces (`unshare`; cluster/node/init.sh is its
#     pid 1). The node's mounts, bridge, veths, routes, iptables and nft rules,
#     ip_forward and hostname exist only in there; the kubelet's writes to the
#     host-wide kernel.* and vm.* sysctls land in files of DIR masking them;
#   - one link to it, a veth pair: dcn-host0 198.18.0.9/30 on the host,
#     eth0 198.18.0.10/30 in the node (the API server and the kubelet listen
#     there). The node has no default route: nothing leaves it;
#   - a cgroup of its own in each hierarchy, demo-controller-node-<hash of DIR>:
#     the node's processes in its `system` child, the pods under it (the
#     kubelet's cgroupRoot);
#   - DIR, made by up.sh (`mkdir -m 700`) and marked as a node's by the file
#     .demo-controller-node. A DIR that exists and was not made so (not
#     root's, not 0700, no marker) is refused in one line and left as it is;
#     so is one below a directory that a user other than root (or the
#     repository's owner) could change;
#   - while it runs, /run/demo-controller-node.lock (one node per machine),
#     root's and 0600, so no other user can hold it.
#
# What root runs (the control plane's and the node's binaries, the image
# archives) is resolved and checked first (see checked in cluster/proc.sh:
# owned by root or by whoever runs this, writable by nobody else, all the way
# up), and the resolved paths are what run.
# The kernel may load modules the node uses (bridge, veth, overlay,
# netfilter) the first time, as for any container runtime; they stay loaded.
# cluster/node/down.sh kills the node's pid 1, so the kernel removes every
# process, mount, interface and rule of it, then removes its cgroups and DIR.
# A failed start does the same and keeps DIR/logs to read.
#
# DIR afterwards holds:
#   root/{run,var-lib,var-log}   the node's /run, /var/lib and /var/log
#   plane/         the control plane (cluster/up.sh --dir DIR/plane, in the node)
#   pki/, *.kubeconfig, containerd.toml, kubelet.yaml, cni/, sysctl/, logs/
#   node.pid       the `unshare` holding the namespaces; init.pid its child,
#                  the node's pid 1 (host pids); cgroups: what up.sh made
#   env            KUBECONFIG, NODE_NAME, NODE_IP, CONTAINERD_SOCK, ... (shell-sourceable)
#
# LOCAL_NODE_TIMEOUT (seconds, default 90): how long to wait for a Ready node.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
log() { echo "node/up.sh: $*" >&2; }

source "$here/lib.sh"
parse_dir "$@"

if ((EUID != 0)); then
	echo "error: the local node needs root (it creates namespaces, a cgroup and a veth pair, and runs containerd and a kubelet): run this as root" >&2
	exit 1
fi

# Inside the node, /run, /var/lib and /var/log are its own: what it needs
# from the host must not live there, nor DIR.
hidden() { case $1 in /run | /run/* | /var/lib | /var/lib/* | /var/log | /var/log/*) return 0 ;; esac; return 1; }
if hidden "$dir" || hidden "$(realpath -m -- "$dir")"; then
	log "error: --dir $dir is under /run, /var/lib or /var/log, which the node mounts its own over: pick another"
	exit 1
fi
if hidden "$repo"; then
	log "error: the repository is under /run, /var/lib or /var/log ($repo), which the node mounts its own over: clone it elsewhere"
	exit 1
fi
parent=$(dirname -- "$dir")
if [[ ! -d $parent && $parent != "$repo/target" ]]; then
	log "error: --dir $dir: its parent $parent does not exist; make it first (the node creates only DIR itself)"
	exit 1
fi

# --- Refuse what is not ours, and a second node ---------------------------------
# A DIR that exists must be one up.sh made, and one that does not must be
# made below directories no other user can change (the directory guard in
# proc.sh): refused now, before anything is built, made or started.
guard_or_parent "$marker"
if [[ -d $dir && -f $dir/ready ]] && node_init_pid >/dev/null; then
	log "node in $dir is already running"
	echo "export KUBECONFIG=$(printf %q "$dir/plane/kubeconfig")"
	exit 0
fi
take_lock
trap release_lock EXIT # until the node runs (on_exit below takes over)
if [[ -d $dir ]]; then
	log "removing what a stopped node left in $dir"
	teardown
fi

# --- What it needs: packages, binaries, images (all cached) ----------------------
# Built here, on the host: inside the node there is no network to fetch Go
# modules with (the control plane's own up.sh, run in there, finds its
# binaries cached). Each binary and archive is resolved and checked once
# (see checked in proc.sh), and init.sh gets those resolved paths: what runs
# as root is what was checked, whatever a symlink on the way points at later.
# Each slow step is one line (step in proc.sh), its output in a log shown
# only if it fails.
step "the node's Debian packages (cluster/node/deps.sh)" node-deps bash "$here/deps.sh"
plane_bin=$(step "kube-apiserver, kube-controller-manager and etcd (built from Go modules once, then cached)" control-plane-build bash "$repo/cluster/build.sh" | tail -n1)
bin=$(step "kubelet, scheduler, controller-manager, kube-proxy (built once, then cached)" node-build bash "$here/build.sh" | tail -n1)
imgs=$(step "the node's pause and busybox images (built once, then cached)" node-images bash "$here/images.sh" | tail -n1)
declare -A use
for f in "$plane_bin"/{etcd,kube-apiserver} "$bin"/{kubelet,kube-scheduler,kube-controller-manager,kube-proxy} "$imgs"/{pause,busybox}.tar; do
	use[${f##*/}]=$(checked "$f") || exit 1
	if hidden "${use[${f##*/}]}"; then
		log "error: the cache ${use[${f##*/}]} is under /run, /var/lib or /var/log, which the node mounts its own over: set DEMO_CONTROLLER_CACHE to a directory elsewhere"
		exit 1
	fi
done

# DIR itself, made now (claim_dir: `mkdir -m 700`, marked as ours) and only
# now, so a refusal above leaves nothing behind.
claim_dir "$marker"
t0=${EPOCHREALTIME//[!0-9]/}
ms() { echo $(((${EPOCHREALTIME//[!0-9]/} - t0) / 1000)); }
secs() { local m; m=$(ms); echo "$((m / 1000)).$((m % 1000 / 100)) s"; }
mkdir -p "$dir"/{logs,pki,sysctl,opt,cni/net.d} "$dir"/root/{run,var-lib,var-log}

# --- On any failure: remove what was made, keep the logs ---------------------------
ok=0
on_exit() {
	((ok)) && return
	[[ -n ${tailer:-} ]] && kill "$tailer" 2>/dev/null
	log "start failed; removing the node (its logs stay in $dir/logs; cluster/node/down.sh --dir $dir removes them)"
	teardown keep-logs && release_lock
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

# --- Its cgroups ------------------------------------------------------------------
# One per hierarchy, with a `system` child for the node's own processes (pods
# go beside it, under kubepods). cpuset needs its CPUs and memory nodes set
# before a process can join.
cg=$(cgroup_name)
: >"$dir/cgroups"
procs=()
for h in $(cgroup_hierarchies); do
	for c in "$h/$cg" "$h/$cg/system"; do
		[[ -d $c ]] || { mkdir "$c" && echo "$c" >>"$dir/cgroups"; }
		if [[ -f $c/cpuset.cpus ]]; then
			cat "$(dirname "$c")/cpuset.cpus" >"$c/cpuset.cpus"
			cat "$(dirname "$c")/cpuset.mems" >"$c/cpuset.mems"
		fi
	done
	# cgroup v2: the controllers its children need, enabled for them.
	if [[ -f $h/$cg/cgroup.subtree_control ]]; then
		for x in $(cat "$h/$cg/cgroup.controllers"); do echo "+$x" >"$h/$cg/cgroup.subtree_control" 2>/dev/null || true; done
	fi
	procs+=("$h/$cg/system/cgroup.procs")
done

# What init.sh needs to know: the checked paths, resolved.
cat >"$dir/init.env" <<EOF
repo=$(printf %q "$repo")
kubelet=$(printf %q "${use[kubelet]}")
kube_scheduler=$(printf %q "${use[kube-scheduler]}")
kube_controller_manager=$(printf %q "${use[kube-controller-manager]}")
kube_proxy=$(printf %q "${use[kube-proxy]}")
pause_tar=$(printf %q "${use[pause.tar]}")
busybox_tar=$(printf %q "${use[busybox.tar]}")
timeout=${LOCAL_NODE_TIMEOUT:-90}
EOF

# --- The node: one process tree in namespaces of its own ----------------------------
# A shell moves itself into the node's cgroups, then execs setsid (a new
# session: no terminal signal of ours reaches it), which execs unshare, which
# forks init.sh as pid 1 of the new namespaces. --kill-child: should unshare be
# killed, pid 1 is too, and with it the whole node. The lock (fd 8) goes with
# them; fd 9 (cluster/up.sh's lock, if any) does not.
bash -c 'for f in "${@:2}"; do echo $$ >"$f"; done; exec setsid unshare --fork --pid --mount-proc --mount --net --uts \
	--propagation private --kill-child bash "$0/init.sh" "$1"' "$here" "$dir" "${procs[@]}" \
	>>"$dir/logs/init.log" 2>&1 </dev/null 9<&- &
echo "$!" >"$dir/node.pid"
tail -n +1 -F --pid=$$ "$dir/logs/init.log" >&2 2>/dev/null &
tailer=$!

deadline=$((SECONDS + 10))
until init=$(node_init_pid); do
	((SECONDS < deadline)) || { log "error: the node's namespaces did not start (see $dir/logs/init.log)"; exit 1; }
	sleep 0.05
done
echo "$init" >"$dir/init.pid"
readlink "/proc/$init/ns/pid" >"$dir/pidns"

# --- Its link to the host -------------------------------------------------------------
# Created with its node end already in the node's network namespace; no IPv6
# on the host end (no link-local address or route on the host).
if [[ -e /sys/class/net/$host_if ]]; then
	log "error: the host already has a link named $host_if: another node's, or the last one's while the kernel is still removing its network namespace; see \`ip link show $host_if\`, and try again once it is gone"
	exit 1
fi
ip link add "$host_if" type veth peer name "$node_if" netns "$init"
# Which link is ours, for down.sh: this boot's interface index (a link of
# that name later, or after a reboot, may be another node's).
echo "$(cat /proc/sys/kernel/random/boot_id) $(cat "/sys/class/net/$host_if/ifindex")" >"$dir/hostlink"
[[ -e /proc/sys/net/ipv6/conf/$host_if ]] && sysctl -qw "net.ipv6.conf.$host_if.disable_ipv6=1"
ip addr add "$host_ip/$link_prefix" dev "$host_if"
ip link set "$host_if" up
touch "$dir/net-ready" # init.sh configures the node end

# --- Wait for init.sh: Ready, or failed -------------------------------------------------
until [[ -f $dir/ready ]]; do
	if [[ -f $dir/failed ]] || ! alive "$init"; then
		sleep 0.3 # the last lines of init.log reach the terminal first
		log "error: $(cat "$dir/failed" 2>/dev/null || echo "the node's pid 1 exited (see $dir/logs/init.log)")"
		exit 1
	fi
	sleep 0.2
done
kill "$tailer" 2>/dev/null || true
tailer=
# The demo-controller image, when `make image` has built one (in the host's
# image store; the node's containerd is reached through its socket).
if store=$(bash "$repo/cluster/image.sh" --where demo-controller:dev 2>/dev/null); then
	# shellcheck disable=SC2086 # $store is podman's options, word by word
	bash "$here/load-image.sh" --socket "$dir/root$containerd_sock" $store demo-controller:dev >/dev/null ||
		{ log "error: importing demo-controller:dev into the node's containerd failed"; exit 1; }
	log "loaded demo-controller:dev into the node ($(secs))"
fi
q() { printf %q "$1"; }
cat >"$dir/env" <<EOF
NODE_DIR=$(q "$dir")
NODE_NAME=$node_name
NODE_IP=$node_ip
POD_CIDR=$pod_cidr
BIN_DIR=$(q "$(dirname -- "${use[kubelet]}")")
CONTAINERD_SOCK=$(q "$dir/root$containerd_sock")
NODE_CGROUP=$cg
KUBECONFIG=$(q "$dir/plane/kubeconfig")
EOF
log "node $node_name Ready in $(secs)"
ok=1
echo "export KUBECONFIG=$(q "$dir/plane/kubeconfig")"
