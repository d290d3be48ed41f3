#!/usr/bin/env bash
# Builds the client-go baseline logger, bench/go-logger, and prints the path of
# the binary as its last stdout line (progress goes to stderr), so
#     go_logger=$(bench/build-go-logger.sh | tail -n1)
# works.
#
# Like cluster/build.sh, the binary is cached outside the checkout, under a key
# that hashes everything that produced it: this script, go.mod, go.sum, main.go
# and the Go version. Change any of them and the next run builds afresh; change
# nothing and every later run reuses the binary.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$here/go-logger
log() { echo "build-go-logger.sh: $*" >&2; }

if ! command -v go >/dev/null 2>&1; then
	echo "error: Go is not installed; the client-go baseline logger is built from bench/go-logger: install Go 1.25 or newer (https://go.dev/dl) and run this again" >&2
	exit 1
fi
# `make bench` runs this as root too: Go's caches and this one are checked
# like the control plane's (go_caches, cache_dir and checked in
# cluster/proc.sh), and the path printed is the binary checked, resolved.
source "$here/../cluster/proc.sh"
go_caches || exit 1

key=$(
	{
		cat "$here/build-go-logger.sh" "$src"/go.{mod,sum} "$src/main.go"
		go version
	} | sha256sum | cut -c1-16
)
# Made if missing and checked before anything is written there.
cache=$(cache_dir "go-logger/$key") || exit 1

if [[ ! -x $cache/go-logger ]]; then
	# Build into a temporary name and rename at the end, so an interrupted
	# build never leaves a half-written binary that a later run would trust.
	tmp=$(mktemp -d -- "$cache/.build.XXXXXX")
	trap 'rm -rf --one-file-system -- "$tmp"' EXIT

	echo "building the client-go baseline logger (cached in $cache)" >&2
	start=$SECONDS
	export CGO_ENABLED=0 GOFLAGS=-mod=readonly
	(
		cd "$src"
		go build -trimpath -ldflags "-s -w" -o "$tmp/go-logger" .
	)
	mv -- "$tmp/go-logger" "$cache/go-logger"
	echo "built in $((SECONDS - start)) s" >&2
fi

checked "$cache/go-logger"
