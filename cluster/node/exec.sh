#!/usr/bin/env bash
# Runs a command inside the running local node, as its own processes see the
# machine: its mounts (/var/lib/kubelet, /run/containerd, ...), its network
# (the pod bridge, kube-proxy's rules), its processes. Like `docker exec` into
# a kind node.
#
# Usage: cluster/node/exec.sh [--dir DIR] -- COMMAND [ARGS...]
#   e.g. cluster/node/exec.sh -- ctr -n k8s.io containers ls
#        cluster/node/exec.sh -- iptables -t nat -S KUBE-SERVICES
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
log() { echo "node/exec.sh: $*" >&2; }
source "$here/lib.sh"
args=()
while (($#)) && [[ $1 != -- ]]; do args+=("$1"); shift; done
(($#)) && shift
(($#)) || { echo "usage: $0 [--dir DIR] -- COMMAND [ARGS...]" >&2; exit 2; }
parse_dir ${args[@]+"${args[@]}"}
if ((EUID != 0)); then
	echo "error: entering the local node's namespaces needs root: run this as root" >&2
	exit 1
fi
[[ -e $dir || -L $dir ]] || { log "error: no node runs in $dir"; exit 1; }
# Only a directory up.sh made (the directory guard in proc.sh): a forged
# node.pid in someone else's directory must not choose what root enters.
guard_dir "$marker"
in_node "$@"
