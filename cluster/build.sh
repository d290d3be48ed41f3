#!/usr/bin/env bash
# Builds the local control plane's three real binaries, kube-apiserver,
# kube-controller-manager and etcd, from the Go modules pinned in
# cluster/kube-apiserver (both Kubernetes binaries, one release) and
# cluster/etcd, and prints the directory that holds them.
#
# A cold build compiles all of kube-apiserver and kube-controller-manager (minutes: book/src/appendix/setup.md
# has the recorded times), so the result is cached outside the checkout, under a key that hashes everything
# that produced it: both go.mod/go.sum pairs, this script and the Go version.
# Change any of them and the next run builds afresh; change nothing and every
# later run (a new clone, CI on the same machine) reuses the binaries.
set -euo pipefail

# First, before any other command: say what is missing in one line.
if ! command -v go >/dev/null 2>&1; then
	echo "error: Go is not installed; the local control plane is built from Go modules: install Go 1.26 or newer (https://go.dev/dl) and run this again" >&2
	exit 1
fi

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
log() { echo "build.sh: $*" >&2; }
source "$here/proc.sh" # cache_dir, go_caches
go_caches || exit 1

# Versions, in one place; go.mod files pin the same ones.
k8s_version=v1.35.4
k8s_commit=7b8c6cf0edd376b3d7c2f255142977c7f93db258
etcd_version=v3.6.16

key=$(
	{
		cat "$here/build.sh" "$here"/kube-apiserver/go.{mod,sum} "$here"/etcd/go.{mod,sum}
		go version
	} | sha256sum | cut -c1-16
)
# Resolved and checked before anything is written there (root runs what it
# holds): see cache_dir in proc.sh.
cache=$(cache_dir "control-plane/$key") || exit 1

bins=(etcd kube-apiserver kube-controller-manager)
have=1
for b in "${bins[@]}"; do [[ -x $cache/$b ]] || have=0; done
if ((have)); then
	echo "$cache"
	exit 0
fi

# Build into a temporary name and rename at the end, so an interrupted build
# never leaves a half-written binary that a later run would trust.
tmp=$(mktemp -d "$cache/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

echo "building kube-apiserver and kube-controller-manager $k8s_version and etcd $etcd_version from Go modules (once, minutes: see book/src/appendix/setup.md; cached in $cache)" >&2
start=$SECONDS
export CGO_ENABLED=0 GOFLAGS=-mod=readonly

(
	cd "$here/etcd"
	go build -trimpath -o "$tmp/etcd" \
		-ldflags "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=$etcd_version" \
		go.etcd.io/etcd/server/v3
)

minor=${k8s_version#v1.}
minor=${minor%%.*}
# One go build per binary, one after the other: the two Kubernetes binaries
# share most of their packages, which the second build finds in Go's cache.
cd "$here/kube-apiserver"
for b in kube-apiserver kube-controller-manager; do
	t=$SECONDS
	go build -trimpath -o "$tmp/$b" -ldflags "-s -w \
		-X k8s.io/component-base/version.gitVersion=$k8s_version \
		-X k8s.io/component-base/version.gitMajor=1 \
		-X k8s.io/component-base/version.gitMinor=$minor \
		-X k8s.io/component-base/version.gitCommit=$k8s_commit \
		-X k8s.io/component-base/version.gitTreeState=clean" \
		"k8s.io/kubernetes/cmd/$b"
	echo "  $b: $((SECONDS - t)) s" >&2
done

for b in "${bins[@]}"; do mv "$tmp/$b" "$cache/"; done
echo "built in $((SECONDS - start)) s" >&2
echo "$cache"
