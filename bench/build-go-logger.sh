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

if ! command -v go >/dev/null 2>&1; then
	echo "error: Go is not installed; the client-go baseline logger is built from bench/go-logger: install Go 1.25 or newer (https://go.dev/dl) and run this again" >&2
	exit 1
fi

key=$(
	{
		cat "$here/build-go-logger.sh" "$src"/go.{mod,sum} "$src/main.go"
		go version
	} | sha256sum | cut -c1-16
)
cache=${DEMO_CONTROLLER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/demo-controller}/go-logger/$key

if [[ -x $cache/go-logger ]]; then
	echo "$cache/go-logger"
	exit 0
fi

mkdir -p "$cache"
# Build into a temporary name and rename at the end, so an interrupted build
# never leaves a half-written binary that a later run would trust.
tmp=$(mktemp -d "$cache/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

echo "building the client-go baseline logger (cached in $cache)" >&2
start=$SECONDS
export CGO_ENABLED=0 GOFLAGS=-mod=readonly

(
	cd "$src"
	go build -trimpath -ldflags "-s -w" -o "$tmp/go-logger" .
)

mv "$tmp/go-logger" "$cache/go-logger"
echo "built in $((SECONDS - start)) s" >&2
echo "$cache/go-logger"
