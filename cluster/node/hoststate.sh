#!/usr/bin/env bash
# Prints what the local node may change on this host, normalised so that two
# snapshots compare with diff: the sysctls, network links, addresses and
# routes, iptables/ip6tables rules (no counters), nft tables, mounts, network
# namespaces, the node's cgroups and directories, and the node's processes.
# cluster/node/down.sh must leave it as it was before cluster/node/up.sh.
#
# Usage: cluster/node/hoststate.sh   (as root)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

echo "## sysctls"
for k in "${node_sysctls[@]}" net.ipv4.conf.all.forwarding net.ipv4.conf.all.route_localnet net.ipv6.conf.all.forwarding \
	net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables net.netfilter.nf_conntrack_max; do
	echo "$k=$(sysctl -n "$k" 2>/dev/null || echo absent)"
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
ls -d /sys/fs/cgroup/*/kubepods* /sys/fs/cgroup/kubepods* /sys/fs/cgroup/*/k8s.io /sys/fs/cgroup/k8s.io 2>/dev/null || true
echo "## directories"
for d in "${node_dirs[@]}"; do [[ -e $d ]] && echo "$d"; done
echo "## processes"
# (process names as the kernel keeps them: 15 characters)
for n in kubelet containerd containerd-shim kube-proxy kube-scheduler kube-controller; do
	echo "$n: $(pgrep -xc "$n" || true)"
done
