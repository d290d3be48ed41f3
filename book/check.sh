#!/usr/bin/env bash
# Builds the book with warnings as errors, for `make test`.
#
# mdbook 0.4 only logs an include it cannot resolve and goes on, and includes
# nothing for an anchor that is not in the file. So this checks first that
# every {{#include PATH[:ANCHOR]}} names a file that exists and, when it names
# an anchor, that the file has both `ANCHOR: name` and `ANCHOR_END: name`;
# then it builds and fails on any ERROR or WARN line of mdbook's.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
status=0

while IFS= read -r hit; do
	page=${hit%%:*}
	rest=${hit#*:}
	spec=${rest#*'{{#include '}
	spec=${spec%%'}}'*}
	path=${spec%%:*}
	anchor=
	[[ $spec == *:* ]] && anchor=${spec#*:}
	file=$(dirname "$page")/$path
	if [[ ! -f $file ]]; then
		echo "error: ${page#"$here"/}: {{#include $spec}}: no file $path" >&2
		status=1
		continue
	fi
	# A line range (12, 12:40, :40) is not an anchor.
	if [[ -n $anchor && ! $anchor =~ ^[0-9:]*$ ]]; then
		for mark in "ANCHOR: $anchor" "ANCHOR_END: $anchor"; do
			if ! grep -Eq "(^|[^A-Za-z_])$mark\$" "$file"; then
				echo "error: ${page#"$here"/}: {{#include $spec}}: no line ending in '$mark' in $path" >&2
				status=1
			fi
		done
	fi
done < <(grep -rno '{{#include [^}]*}}' "$here/src" --include='*.md' | sed 's/:[0-9]*:/:/')

if [[ $status -ne 0 ]]; then
	exit "$status"
fi

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
