#!/usr/bin/env bash
# Installs the Debian packages the local node and the image build need, when
# any is missing: containerd, runc and the CNI plugins (the node's container
# runtime), iptables, conntrack and nftables (kube-proxy's rules and their
# cleanup), podman (builds the Dockerfile), debootstrap (the build stand-in's
# rootfs) and busybox-static (the tests' workload image).
#
# Installing leaves no service enabled or started: Debian's postinst scripts
# would start containerd (and enable its unit, and podman's, for every boot),
# and a second containerd on the same socket collides with the node's own. So
# the install runs under a policy-rc.d that forbids starting anything (unless
# the machine has its own policy-rc.d, which is then left to decide), and the
# systemd enablement links the install created are removed again with
# deb-systemd-helper, which also remembers them as disabled for later
# upgrades. Links that existed before are the owner's and stay.
#
# Only what is missing is installed, with no recommended packages
# (--no-install-recommends) and no upgrade of a package already installed
# (--no-upgrade). One a missing package depends on may still have to move to
# a newer version (apt would otherwise refuse the install): the plan is
# simulated first and any such upgrade named in one line before it happens.
#
# Usage: cluster/node/deps.sh [--check | --missing]
#   --check: install nothing; exit 1 with one line naming what is missing.
#   --missing: install nothing; print the packages missing, one a line.
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
if [[ ${1:-} == --missing ]]; then
	((${#missing[@]} == 0)) || printf '%s\n' "${missing[@]}"
	exit 0
fi
((${#missing[@]} == 0)) && exit 0

if [[ ${1:-} == --check ]]; then
	echo "missing Debian packages: ${missing[*]} (as root, cluster/node/deps.sh installs them)" >&2
	exit 1
fi
if ((EUID != 0)) || ! command -v apt-get >/dev/null 2>&1; then
	echo "error: the local node needs the Debian packages ${missing[*]}; install them as root with apt-get (or run this as root on Debian/Ubuntu)" >&2
	exit 1
fi
echo "installing Debian packages: ${missing[*]} (no service enabled or started)" >&2
export DEBIAN_FRONTEND=noninteractive
links() { find /etc/systemd/system \( -type l -o -type d -name '*.wants' \) 2>/dev/null | sort; }
before=$(mktemp) policy=
trap 'rm -f "$before"; if [[ -n $policy ]]; then rm -f "$policy"; fi' EXIT
links >"$before"
# One of ours, left by a run that was killed before it could remove it.
if grep -qx '# cluster/node/deps.sh: no service starts while it installs packages' /usr/sbin/policy-rc.d 2>/dev/null; then
	rm -f /usr/sbin/policy-rc.d
fi
if [[ ! -e /usr/sbin/policy-rc.d ]]; then
	policy=/usr/sbin/policy-rc.d
	printf '#!/bin/sh\n# cluster/node/deps.sh: no service starts while it installs packages\nexit 101\n' >"$policy"
	chmod 755 "$policy"
fi
# Even a failed install may have enabled a unit: clean up either way.
status=0
install=(apt-get install -y --no-install-recommends --no-upgrade "${missing[@]}")
# In the simulated plan (-s), an installed package it upgrades shows as
# "Inst NAME [OLD VERSION] (...)"; a new one has no bracket.
upgrades() { "${install[@]}" -s 2>/dev/null | awk '$1 == "Inst" && $3 ~ /^\[/ { printf "%s ", $2 }'; }
{
	apt-get update -qq &&
		up=$(upgrades) &&
		{ [[ -z $up ]] || echo "deps.sh: the missing packages need newer versions of these installed ones: $up" >&2; } &&
		"${install[@]}" -qq
} >&2 || status=$?
for l in $(links | comm -13 "$before" -); do
	[[ -d $l && ! -L $l ]] && continue # a .wants directory the install made: removed below if left empty
	unit=${l##*/}
	deb-systemd-helper disable "$unit" >/dev/null 2>&1 || true
	[[ -L $l ]] && rm -f "$l"
	echo "deps.sh: left $unit disabled (the package had enabled it)" >&2
done
for d in $(links | comm -13 "$before" - | sort -r); do
	[[ -d $d && ! -L $d ]] && rmdir "$d" 2>/dev/null || true
done
if [[ -d /run/systemd/system ]]; then systemctl daemon-reload 2>/dev/null || true; fi
exit "$status"
