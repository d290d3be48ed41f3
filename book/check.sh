#!/usr/bin/env bash
# Builds the book with warnings as errors, for `make test`: fails on any ERROR
# or WARN line of mdbook's.
#
# The pages include no file through mdbook: the code and output they show sit
# in generated blocks (<!-- include: PATH[:ANCHOR] --> ... <!-- /include -->)
# that tests/figures.rs renders from the tested files and checks, so a page
# read on the repository's web page shows them too. A missing file or anchor
# fails that test, not this build.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! bash "$here/mdbook.sh" build "$here" >"$log" 2>&1; then
	cat "$log" >&2
	echo "error: mdbook build failed" >&2
	exit 1
fi
if grep -E '\b(ERROR|WARN)\b' "$log" >&2; then
	echo "error: mdbook warned (above): the book must build without warnings" >&2
	exit 1
fi
echo "book built without warnings: $here/book/index.html"
