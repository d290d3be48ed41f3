#!/usr/bin/env bash
# Builds the container image from the Dockerfile, unchanged, with docker or
# podman, whichever is installed and works; then, when the local node runs,
# loads the image into its containerd, where the manifest's
# `image: demo-controller:dev` finds it.
#
# Where the Dockerfile's base images cannot be pulled (no registry reachable),
# LOCAL STAND-INS are made under the same tags from Debian packages first
# (cluster/node/standins.sh; podman only, as root): the build says so.
#
# Usage: cluster/image.sh [IMAGE]        (default demo-controller:dev)
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
image=${1:-demo-controller:dev}
log() { echo "image.sh: $*" >&2; }
cd "$repo"
t0=$SECONDS

engine=
if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
	engine=docker
elif command -v podman >/dev/null 2>&1; then
	engine=podman
elif ((EUID == 0)) && command -v apt-get >/dev/null 2>&1; then
	bash cluster/node/deps.sh
	engine=podman
else
	echo "error: building the image needs docker or podman: install one (as root here: cluster/node/deps.sh installs podman)" >&2
	exit 1
fi

bases=(docker.io/library/rust:1.95-bookworm gcr.io/distroless/cc-debian12:nonroot)
if [[ $engine == podman ]]; then
	# crun, podman's default runtime, refuses a hybrid cgroup layout; runc
	# does not. --pull=never: nothing can be pulled; the bases are local.
	cmd=(podman)
	[[ -x /usr/sbin/runc ]] && cmd+=(--runtime /usr/sbin/runc)
	cmd+=(build --pull=never --network=host)
	# Makes (or reuses, when up to date) a stand-in for each base that is
	# not here as a real image.
	bash cluster/node/standins.sh podman
	for b in "${bases[@]}"; do
		what=$(podman image inspect --format '{{index .Config.Labels "org.demo-controller.stand-in"}}' "$b" 2>/dev/null || true)
		[[ -n $what && $what != '<no value>' ]] && log "base $b is a $what"
	done
else
	cmd=(docker build)
fi
log "building $image with $engine from the unchanged Dockerfile"
"${cmd[@]}" -t "$image" . >&2
log "built $image in $((SECONDS - t0)) s"

# Into the local node's containerd, when one runs. Docker Hub's implicit prefix
# makes `demo-controller:dev` in the manifest resolve to this name.
sock=/run/containerd/containerd.sock
if [[ -S $sock ]] && command -v ctr >/dev/null 2>&1; then
	ref=$(bash cluster/node/load-image.sh "$engine" "$image")
	log "loaded $ref into the local node's containerd"
fi
