#!/usr/bin/env bash
# Installs the Debian packages the local node and the image build need, when
# any is missing: containerd, runc and the CNI plugins (the node's container
# runtime), iptables, conntrack and nftables (kube-proxy's rules and their
# cleanup), podman (builds the Dockerfile), debootstrap (the build stand-in's
# rootfs) and busybox-static (the tests' workload image).
#
# Usage: cluster/node/deps.sh [--check]
#   --check: install nothing; exit 1 with one line naming what is missing.
# Exits 1 with one line when something is missing and cannot be installed
# (not root, no apt-get).
set -euo pipefail

# package:file that proves it is installed
need=(
	containerd:/usr/bin/containerd
	runc:/usr/sbin/runc
	containernetworking-plugins:/usr/lib/cni/bridge
	iptables:/usr/sbin/iptables
	conntrack:/usr/sbin/conntrack
	nftables:/usr/sbin/nft
	podman:/usr/bin/podman
	debootstrap:/usr/sbin/debootstrap
	busybox-static:/bin/busybox
)
missing=()
for n in "${need[@]}"; do
	[[ -e ${n#*:} ]] || missing+=("${n%%:*}")
done
((${#missing[@]} == 0)) && exit 0

if [[ ${1:-} == --check ]]; then
	echo "missing Debian packages: ${missing[*]} (as root, cluster/node/deps.sh installs them)" >&2
	exit 1
fi
if ((EUID != 0)) || ! command -v apt-get >/dev/null 2>&1; then
	echo "error: the local node needs the Debian packages ${missing[*]}; install them as root with apt-get (or run this as root on Debian/Ubuntu)" >&2
	exit 1
fi
echo "installing Debian packages: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
