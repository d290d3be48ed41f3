#!/usr/bin/env bash
# Makes the node's two small local images as docker-archive tarballs and
# prints the directory holding them, cached by what built them:
#   pause.tar     registry.k8s.io/pause:3.10 stand-in: cluster/node/pause.c, static
#   busybox.tar   docker.io/library/busybox:local: Debian's busybox-static, the
#                 workload the tests and the demo run
# Made in the project's own podman store (see cluster/image.sh), so the pause
# stand-in never shows under its real name to other builds on the machine.
#
# Usage: cluster/node/images.sh
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
key=$({ cat "$here/images.sh" "$here/pause.c" /bin/busybox; gcc --version; } | sha256sum | cut -c1-16)
log() { echo "node/images.sh: $*" >&2; }
source "$here/../proc.sh" # cache_dir
# Both resolved and checked before anything is written there (root imports
# the archives into the node): see cache_dir in proc.sh. The podman store is
# made 0700: its images are the project's only.
cache=$(cache_dir "node-images/$key") || exit 1
if [[ -f $cache/pause.tar && -f $cache/busybox.tar ]]; then
	echo "$cache"
	exit 0
fi
store=$(cache_dir podman) || exit 1
own=(podman --root "$store/root" --runroot "$store/runroot")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/pause" "$work/busybox/bin" "$work/busybox/tmp"
gcc -static -Os -s -o "$work/pause/pause" "$here/pause.c"
cp /bin/busybox "$work/busybox/bin/busybox"
for a in sh sleep echo cat ls true false wget id date env; do ln -s busybox "$work/busybox/bin/$a"; done
chmod 1777 "$work/busybox/tmp"
label='LABEL org.demo-controller.stand-in="LOCAL image built by cluster/node/images.sh"'
tar -C "$work/pause" -cf - . | "${own[@]}" import -q --change "$label" --change 'ENTRYPOINT ["/pause"]' - registry.k8s.io/pause:3.10 >/dev/null
tar -C "$work/busybox" -cf - . | "${own[@]}" import -q --change "$label" --change 'ENV PATH=/bin' --change 'CMD ["sh"]' - docker.io/library/busybox:local >/dev/null
"${own[@]}" save -q --format docker-archive -o "$work/pause.tar" registry.k8s.io/pause:3.10
"${own[@]}" save -q --format docker-archive -o "$work/busybox.tar" docker.io/library/busybox:local
mv "$work/pause.tar" "$work/busybox.tar" "$cache/"
echo "$cache"
