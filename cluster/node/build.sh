#!/usr/bin/env bash
# Builds the node's Kubernetes binaries, kubelet, kube-scheduler,
# kube-controller-manager and kube-proxy v1.35.4, from the Go module pinned in
# cluster/node/go.mod, and prints the directory that holds them.
#
# Cached outside the checkout like cluster/build.sh's control plane, under a
# key that hashes everything that produced them (go.mod, go.sum, this script,
# the Go version): a new clone or CI on the same machine reuses them. Cold:
# minutes (book/src/appendix/setup.md has the recorded times).
set -euo pipefail

if ! command -v go >/dev/null 2>&1; then
	echo "error: Go is not installed; the node's binaries are built from Go modules: install Go 1.25 or newer (https://go.dev/dl) and run this again" >&2
	exit 1
fi

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
log() { echo "node/build.sh: $*" >&2; }
source "$here/../proc.sh" # cache_dir, go_caches
go_caches || exit 1
k8s_version=v1.35.4
k8s_commit=7b8c6cf0edd376b3d7c2f255142977c7f93db258
bins=(kubelet kube-scheduler kube-controller-manager kube-proxy)

key=$({
	cat "$here/build.sh" "$here/go.mod" "$here/go.sum"
	go version
} | sha256sum | cut -c1-16)
# Resolved and checked before anything is written there (root runs what it
# holds): see cache_dir in proc.sh.
cache=$(cache_dir "node/$key") || exit 1

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

echo "building ${bins[*]} $k8s_version from Go modules (once, minutes: see book/src/appendix/setup.md; cached in $cache)" >&2
start=$SECONDS
export CGO_ENABLED=0 GOFLAGS=-mod=readonly
minor=${k8s_version#v1.}
minor=${minor%%.*}
cd "$here"
# One go build per binary, one after the other: a parallel build of all four
# peaks near 2 GB and competes for the same 2 cores anyway.
for b in "${bins[@]}"; do
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
