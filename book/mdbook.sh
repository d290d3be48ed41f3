#!/usr/bin/env bash
# Runs the pinned mdbook with the arguments given, installing it first when it
# is missing. It is a crate, built with the machine's cargo (no prebuilt
# download), and cached outside the checkout under its version, like the
# control plane's binaries (cluster/build.sh): a fresh clone, CI on the same
# machine and every worktree share one install, and changing the pin below
# installs the new version beside the old one.
#
# `make test` runs this as root too, so the cache is the project's, checked
# like the control plane's (cache_dir and checked in cluster/proc.sh): a
# cache directory another user could change is refused in one line, exit 1,
# and what runs is the binary checked, by its resolved path.
set -euo pipefail

# 0.4.52: the last 0.4 release (0.5 changed the preprocessor and theme
# interfaces); it builds with Rust 1.82 or newer.
version=0.4.52

if ! command -v cargo >/dev/null 2>&1; then
	echo "error: cargo is not installed; the book is built with mdbook, a crate: install Rust (https://rustup.rs) and run this again" >&2
	exit 1
fi

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
log() { echo "mdbook.sh: $*" >&2; }
source "$here/../cluster/proc.sh" # cache_dir, checked

# The versions' directory, made if missing and checked: nothing is made,
# removed or renamed in it before that.
versions=$(cache_dir mdbook) || exit 1
root=$versions/$version

if [[ ! -x $root/bin/mdbook ]]; then
	cargo_home || exit 1
	echo "installing mdbook $version into $root (once, minutes: see book/src/appendix/setup.md)" >&2
	# Into a temporary root (0700, ours), renamed at the end, so an
	# interrupted install never leaves a binary that a later run would
	# trust; cargo builds inside it too, never in an inherited
	# CARGO_TARGET_DIR. An install without its binary (none of this script's
	# making) is set aside first.
	tmp=$(mktemp -d -- "$versions/.install.XXXXXX")
	trap 'rm -rf --one-file-system -- "$tmp"' EXIT
	cargo install mdbook --version "$version" --locked --root "$tmp" --target-dir "$tmp/target" --quiet
	rm -rf --one-file-system -- "$tmp/target"
	if [[ -e $root || -L $root ]]; then mv -T -- "$root" "$tmp/old"; fi
	mv -T -- "$tmp" "$root"
	rm -rf --one-file-system -- "$root/old"
	trap - EXIT
fi

bin=$(checked "$root/bin/mdbook") || exit 1
exec "$bin" "$@"
