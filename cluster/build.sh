#!/usr/bin/env bash
# Builds the local control plane's two real binaries, kube-apiserver and etcd,
# from the Go modules pinned in cluster/kube-apiserver and cluster/etcd, and
# prints the directory that holds them.
#
# A cold build compiles all of kube-apiserver (minutes: book/src/appendix/setup.md
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

if [[ -x $cache/kube-apiserver && -x $cache/etcd ]]; then
	echo "$cache"
	exit 0
fi

# Build into a temporary name and rename at the end, so an interrupted build
# never leaves a half-written binary that a later run would trust.
tmp=$(mktemp -d "$cache/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

echo "building kube-apiserver $k8s_version and etcd $etcd_version from Go modules (once, minutes: see book/src/appendix/setup.md; cached in $cache)" >&2
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
(
	cd "$here/kube-apiserver"
	go build -trimpath -o "$tmp/kube-apiserver" -ldflags "-s -w \
		-X k8s.io/component-base/version.gitVersion=$k8s_version \
		-X k8s.io/component-base/version.gitMajor=1 \
		-X k8s.io/component-base/version.gitMinor=$minor \
		-X k8s.io/component-base/version.gitCommit=$k8s_commit \
		-X k8s.io/component-base/version.gitTreeState=clean" \
		k8s.io/kubernetes/cmd/kube-apiserver
)

mv "$tmp/etcd" "$tmp/kube-apiserver" "$cache/"
echo "built in $((SECONDS - start)) s" >&2
echo "$cache"
