#!/usr/bin/env bash
# Stops the local node that cluster/node/up.sh started in DIR and removes what
# it made, and nothing else: SIGKILL to the node's pid 1, so the kernel kills
# every process in the node's namespaces (control plane, containerd, kubelet,
# pods) and drops their mounts, network interfaces (the host's end of the
# node's link included), routes and firewall rules; then the node's cgroups;
# then DIR. Nothing on the host is restored from a snapshot or found by a
# broad name: firewall rules, nft tables, network namespaces, mounts, sysctls
# and processes that anyone else made stay as they are. Works the same after
# a failed start or a run killed with SIGKILL.
#
# Usage: cluster/node/down.sh [--dir DIR]   (DIR defaults to <repo>/target/local-node)
# Idempotent: without DIR it does nothing. A DIR up.sh did not make (not
# root's and 0700 with .demo-controller-node in it) is refused in one line
# and left as it is.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
log() { echo "node/down.sh: $*" >&2; }

source "$here/lib.sh"
parse_dir "$@"
[[ -e $dir || -L $dir ]] || exit 0
# Only a directory up.sh made (the directory guard in proc.sh): a forged
# marker or node.pid in someone else's directory steers nothing.
guard_dir "$marker"
if ((EUID != 0)); then
	echo "error: stopping the local node needs root, as starting it did: run this as root" >&2
	exit 1
fi
t0=${EPOCHREALTIME//[!0-9]/}
teardown
# The machine's node lock: removed once nothing holds it, if it names DIR.
release_lock
ms=$(((${EPOCHREALTIME//[!0-9]/} - t0) / 1000))
log "node stopped in $((ms / 1000)).$((ms % 1000 / 100)) s; removed its cgroups and $dir"
