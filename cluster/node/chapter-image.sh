#!/usr/bin/env bash
# Builds the image the chapters' manifests run on the local node, and loads
# it into the node's containerd when one runs:
#   /usr/local/bin/ch8_secret_copier, ch9_reboot_agent, ch9_reboot_controller
#       the chapters' examples as `make test` builds them (the dev profile:
#       no second, release build), their debug info stripped
#   /usr/local/bin/sh (and sleep)
#       Debian's busybox-static: chapter 9's agent runs its reboot command
#       with `sh -c`, and the default command sleeps
# on the runtime base of the Dockerfile, gcr.io/distroless/cc-debian12:nonroot
# (user 65532), as cluster/image.sh gets it: the real one when podman's store
# has it or can pull it (one try, at most 30 s), else the LOCAL STAND-IN of
# cluster/node/standins.sh, in the project's own podman store, where the image
# is then built too, labelled so, and never pushed.
#
# Tagged demo-controller-chapters:dev (for IMAGE in
# examples/ch8-secret-copier.yaml) and ch9-reboot:dev (the name
# examples/ch9_reboot.yaml uses), and loaded under both names, as
# docker.io/library/NAME:dev, so the manifests' short names find it.
#
# Usage: cluster/node/chapter-image.sh
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
log() { echo "node/chapter-image.sh: $*" >&2; }
source "$repo/cluster/proc.sh" # cargo_target, built, checked, cache_dir
cd "$repo"
t0=$SECONDS

command -v podman >/dev/null 2>&1 || {
	log "error: building the chapters' image needs podman: install it (as root here: cluster/node/deps.sh)"
	exit 1
}
base=gcr.io/distroless/cc-debian12:nonroot
names=(demo-controller-chapters:dev ch9-reboot:dev)
examples=(ch8_secret_copier ch9_reboot_agent ch9_reboot_controller)

# The dev builds, where cargo builds them (checked before cargo runs, and
# each binary once built: root copies them into the image). `make test` has
# built them already; debug info is most of their size, and is left out.
target=$(cargo_target) || exit 1
args=()
for e in "${examples[@]}"; do args+=(--example "$e"); done
cargo build --locked "${args[@]}" >&2
work=$(mktemp -d /var/tmp/demo-controller-chapter-image.XXXXXX)
trap 'rm -rf --one-file-system "$work"' EXIT
mkdir "$work/bin"
for e in "${examples[@]}"; do
	bin=$(built "$target" "debug/examples/$e") || exit 1
	objcopy --strip-debug -- "$bin" "$work/bin/$e"
done
busybox=$(checked /bin/busybox) || {
	log "error: no usable /bin/busybox: install busybox-static (cluster/node/deps.sh)"
	exit 1
}
cp -- "$busybox" "$work/bin/busybox"
ln -s busybox "$work/bin/sh"
ln -s busybox "$work/bin/sleep"

# The base, as cluster/image.sh gets it. A stand-in an earlier build left in
# the default store under the real name does not count as the real one.
stand_in() { # stand_in ENGINE...: the stand-in label of $base there, if any
	local v
	v=$("$@" image inspect --format '{{index .Config.Labels "org.demo-controller.stand-in"}}' "$base" 2>/dev/null) || return 1
	[[ -n $v && $v != '<no value>' ]]
}
engine=(podman)
label=()
if stand_in podman || ! {
	podman image exists "$base" || { log "pulling $base (at most 30 s)" && timeout 30 podman pull -q "$base" >/dev/null 2>&1; }
}; then
	log "could not pull $base: building on its LOCAL STAND-IN in the project's own store; the image is for the local node only and is never pushed"
	store=$(cache_dir podman) || exit 1
	engine=(podman --root "$store/root" --runroot "$store/runroot")
	bash "$here/standins.sh" "${engine[@]}"
	label=(--label "org.demo-controller.built-on-stand-ins=$base")
fi

# crun, podman's default runtime, refuses a hybrid cgroup layout; runc does
# not. (The build only copies files in: nothing runs.)
runtime=()
[[ -x /usr/sbin/runc ]] && runtime=(--runtime /usr/sbin/runc)
tags=()
for n in "${names[@]}"; do tags+=(-t "$n"); done
"${engine[@]}" "${runtime[@]}" build -q --pull=never "${label[@]}" "${tags[@]}" -f - "$work" >/dev/null <<EOF
FROM $base
COPY bin/ /usr/local/bin/
USER 65532:65532
EOF
log "built ${names[*]} in $((SECONDS - t0)) s"

# Into the local node's containerd, when one runs (the node lock names its
# directory), as cluster/image.sh loads demo-controller:dev.
lock=/run/demo-controller-node.lock
if ((EUID == 0)) && [[ -s $lock ]] && ! flock -n "$lock" true; then
	node=$(cat "$lock")
	if [[ -f $node/env ]]; then
		sock=$(. "$node/env" && echo "$CONTAINERD_SOCK")
		for n in "${names[@]}"; do
			ref=$(bash "$here/load-image.sh" --socket "$sock" "${engine[@]}" "$n")
			log "loaded $ref into the local node's containerd"
		done
	fi
fi
