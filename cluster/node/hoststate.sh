#!/usr/bin/env bash
# Prints what the local node could change on this host, normalised so that two
# snapshots compare with diff: the host-wide sysctls (the kubelet's among
# them) and the network ones, network links, addresses and routes,
# iptables/ip6tables rules (no counters), nft tables, mounts, network
# namespaces, cgroups a node or any kubelet makes, the directories a node on
# the host would use, and the node's processes. After cluster/node/down.sh it
# must be as it was before cluster/node/up.sh; while the node runs only the
# node's link, its cgroups and its processes may differ.
#
# Usage: cluster/node/hoststate.sh   (as root)
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
log() { echo "hoststate.sh: $*" >&2; }
source "$repo/cluster/node/lib.sh"

echo "## sysctls"
for k in "${masked_sysctls[@]}" net/ipv4/ip_forward net/ipv4/conf/all/forwarding net/ipv4/conf/all/route_localnet \
	net/ipv6/conf/all/forwarding net/bridge/bridge-nf-call-iptables net/bridge/bridge-nf-call-ip6tables \
	net/netfilter/nf_conntrack_max; do
	echo "${k//\//.}=$(cat "/proc/sys/$k" 2>/dev/null || echo absent)"
done
echo "## links"
ip -o link show | awk -F': ' '{ print $2 }' | cut -d@ -f1 | sort
echo "## addresses"
ip -o addr show | awk '{ print $2, $3, $4 }' | sort
echo "## routes"
{ ip route show table all | grep -v '^cache' || true; } | sort
{ ip -6 route show table all | grep -v '^cache' || true; } | sort
echo "## iptables"
{ iptables-save | grep -v '^#' || true; } | sed 's/\[[0-9]*:[0-9]*\]/[c]/'
echo "## ip6tables"
{ ip6tables-save | grep -v '^#' || true; } | sed 's/\[[0-9]*:[0-9]*\]/[c]/'
echo "## nft tables"
nft list tables 2>/dev/null | sort
echo "## mounts"
{ awk '{ print $5, $9 }' /proc/self/mountinfo | grep -vE '^(/var/lib/containers|/run/containers)' || true; } | sort
echo "## network namespaces"
ls /run/netns 2>/dev/null || true
echo "## cgroups"
# cgroup v2's root: which controllers it hands down (a kubelet can add some).
for f in /sys/fs/cgroup/cgroup.subtree_control /sys/fs/cgroup/unified/cgroup.subtree_control; do
	[[ -f $f ]] && echo "$f: $(cat "$f")"
done
ls -d /sys/fs/cgroup/*/demo-controller-node-* /sys/fs/cgroup/demo-controller-node-* /sys/fs/cgroup/*/kubepods* \
	/sys/fs/cgroup/kubepods* /sys/fs/cgroup/*/k8s.io /sys/fs/cgroup/k8s.io 2>/dev/null || true
echo "## directories"
for d in /var/lib/kubelet /var/lib/containerd /run/containerd /var/lib/cni /var/log/pods /var/log/containers \
	/etc/cni/net.d /opt/containerd /usr/libexec/kubernetes /etc/kubernetes; do
	[[ -e $d ]] && echo "$d"
done
echo "## modules"
# Loaded kernel modules: the kernel may load some the first time any node
# runs (bridge, veth, overlay, netfilter); they stay, as with any container
# runtime, so this section is shown, not compared.
if [[ -r /proc/modules ]]; then awk '{ print $1 }' /proc/modules | sort; else echo "(no loadable modules: this kernel has none)"; fi
echo "## processes"
# A node's processes, by name (as the kernel keeps names: 15 characters):
# those in a node's cgroup (demo-controller-node-*), where a node puts every
# process it starts, and where they stay while any is left. Processes of the
# same names elsewhere (a developer's own control plane, a kind cluster, the
# tests' control plane) start and stop as they please: they are not a node's.
for n in kubelet containerd containerd-shim kube-proxy kube-scheduler kube-controller kube-apiserver etcd; do
	count=0
	for pid in $(pgrep -x "$n" || true); do
		grep -q '/demo-controller-node-' "/proc/$pid/cgroup" 2>/dev/null && count=$((count + 1))
	done
	echo "$n: $count"
done
