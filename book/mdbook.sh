#!/usr/bin/env bash
# Runs the pinned mdbook with the arguments given, installing it first when it
# is missing. It is a crate, built with the machine's cargo (no prebuilt
# download), and cached outside the checkout under its version, like the
# control plane's binaries (cluster/build.sh): a fresh clone, CI on the same
# machine and every worktree share one install, and changing the pin below
# installs the new version beside the old one.
set -euo pipefail

# 0.4.52: the last 0.4 release (0.5 changed the preprocessor and theme
# interfaces); it builds with Rust 1.82 or newer.
version=0.4.52

if ! command -v cargo >/dev/null 2>&1; then
	echo "error: cargo is not installed; the book is built with mdbook, a crate: install Rust (https://rustup.rs) and run this again" >&2
	exit 1
fi

root=${DEMO_CONTROLLER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/demo-controller}/mdbook/$version
bin=$root/bin/mdbook

if [[ ! -x $bin ]]; then
	echo "installing mdbook $version into $root (once, minutes: see book/src/appendix/setup.md)" >&2
	# Into a temporary root, renamed at the end, so an interrupted install
	# never leaves a binary that a later run would trust.
	mkdir -p "$(dirname "$root")"
	tmp=$(mktemp -d "$root.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	cargo install mdbook --version "$version" --locked --root "$tmp" --quiet
	rm -rf "$root"
	mv "$tmp" "$root"
	trap - EXIT
fi

exec "$bin" "$@"
