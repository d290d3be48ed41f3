#!/usr/bin/env bash
# Builds the container image from the Dockerfile, unchanged, with docker or
# podman, whichever is installed and works; then, when the local node runs,
# loads the image into its containerd, where the manifest's
# `image: demo-controller:dev` finds it.
#
# The Dockerfile's real base images are used wherever they can be had: already
# in the machine's image store, or pulled (each pull tried once, for at most
# 30 s). Only where a pull fails (no registry reachable) are LOCAL STAND-INS
# made from Debian packages (cluster/node/standins.sh; podman, as root), and
# then only in a container store of the project's own, under
# $DEMO_CONTROLLER_CACHE/podman (default ~/.cache/demo-controller/podman): no
# other build on the machine ever sees them under the real names. An image
# built on a stand-in is built in that store too, labelled so, and never
# pushed.
#
# Usage: cluster/image.sh [IMAGE]          build (default demo-controller:dev)
#        cluster/image.sh --push IMAGE     push; refused for an image built on a stand-in
#        cluster/image.sh --where IMAGE    print the engine (and store options) holding IMAGE
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
log() { echo "image.sh: $*" >&2; }
source "$repo/cluster/proc.sh" # cache_dir
cd "$repo"
t0=$SECONDS

bases=(docker.io/library/rust:1.95-bookworm gcr.io/distroless/cc-debian12:nonroot)
cache=${DEMO_CONTROLLER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/demo-controller}
# own_store: sets own to podman on the project's store, resolved and checked
# (see checked in proc.sh): podman writes its locks there, so no path another
# user controls. Fails when there is no such store, or it is not safe.
own=()
own_store() {
	local store
	[[ -d $cache/podman ]] && store=$(checked "$cache/podman") || return 1
	own=(podman --root "$store/root" --runroot "$store/runroot")
}
stand_in_label=org.demo-controller.built-on-stand-ins

have_docker() { command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; }
have_podman() { command -v podman >/dev/null 2>&1; }
label_of() { # label_of ENGINE... IMAGE LABEL
	local n=$# img=${*: -2:1} label=${*: -1} v
	v=$("${@:1:n-2}" image inspect --format "{{index .Config.Labels \"$label\"}}" "$img" 2>/dev/null) || return 1
	# A label that is not there reads "" (or "<no value>"): absent.
	[[ -n $v && $v != '<no value>' ]] && echo "$v"
}

case ${1:-} in
--where)
	image=${2:?usage: image.sh --where IMAGE}
	if have_docker && docker image inspect "$image" >/dev/null 2>&1; then echo docker; exit 0; fi
	if have_podman && podman image exists "$image" 2>/dev/null; then echo podman; exit 0; fi
	if have_podman && own_store && "${own[@]}" image exists "$image" 2>/dev/null; then echo "${own[*]}"; exit 0; fi
	exit 1
	;;
--push)
	image=${2:?usage: image.sh --push IMAGE}
	engine=
	if have_docker && docker image inspect "$image" >/dev/null 2>&1; then engine=docker
	elif have_podman && podman image exists "$image" 2>/dev/null; then engine=podman; fi
	if [[ -z $engine ]] || label_of "$engine" "$image" "$stand_in_label" >/dev/null ||
		label_of "$engine" "$image" org.demo-controller.stand-in >/dev/null; then
		if have_podman && own_store && "${own[@]}" image exists "$image" 2>/dev/null; then
			log "error: $image was built on local stand-ins for its base images (no registry was reachable): it is for the local node only and is not pushed; build it where the real bases can be pulled (make image) and push that"
		else
			log "error: there is no image $image to push: build it first (make image IMAGE=$image)"
		fi
		exit 1
	fi
	exec "$engine" push "$image"
	;;
-*) echo "usage: image.sh [IMAGE] | --push IMAGE | --where IMAGE" >&2; exit 2 ;;
esac
image=${1:-demo-controller:dev}

engine=
if have_docker; then
	engine=docker
elif have_podman; then
	engine=podman
elif ((EUID == 0)) && command -v apt-get >/dev/null 2>&1; then
	bash cluster/node/deps.sh
	engine=podman
else
	echo "error: building the image needs docker or podman: install one (as root here: cluster/node/deps.sh installs podman)" >&2
	exit 1
fi

if [[ $engine == docker ]]; then
	log "building $image with docker from the unchanged Dockerfile"
	docker build -t "$image" . >&2
	where=(docker)
else
	# crun, podman's default runtime, refuses a hybrid cgroup layout; runc
	# does not.
	runtime=()
	[[ -x /usr/sbin/runc ]] && runtime=(--runtime /usr/sbin/runc)
	# Stand-ins an earlier version of this script left in the default store
	# under the real names are ours to take back.
	for b in "${bases[@]}"; do
		if label_of podman "$b" org.demo-controller.stand-in >/dev/null; then
			log "removing $b from podman's default store: a local stand-in an earlier build left there"
			podman rmi -f "$b" >/dev/null
		fi
	done
	missing=()
	for b in "${bases[@]}"; do
		podman image exists "$b" && continue
		log "pulling $b (at most 30 s)"
		timeout 30 podman pull -q "$b" >/dev/null 2>&1 || missing+=("$b")
	done
	if ((${#missing[@]} == 0)); then
		log "building $image with podman from the unchanged Dockerfile on the real base images"
		podman "${runtime[@]}" build --pull=never --network=host -t "$image" . >&2
		where=(podman)
	else
		log "could not pull ${missing[*]}: building $image on LOCAL STAND-INS in the project's own store ($cache/podman); it is for the local node only and is never pushed"
		# The store resolved and checked before anything is written there (made
		# 0700 if missing: see cache_dir in proc.sh), and used by that path.
		store=$(cache_dir podman) || exit 1
		own=(podman --root "$store/root" --runroot "$store/runroot")
		# The real bases this machine has, into the project's store as they are.
		for b in "${bases[@]}"; do
			[[ " ${missing[*]} " == *" $b "* ]] && continue
			"${own[@]}" image exists "$b" || podman save "$b" | "${own[@]}" load -q >/dev/null
		done
		bash cluster/node/standins.sh "${own[@]}"
		for b in "${bases[@]}"; do
			what=$(label_of "${own[@]}" "$b" org.demo-controller.stand-in || true)
			[[ -n $what ]] && log "base $b is a $what"
		done
		"${own[@]}" "${runtime[@]}" build --pull=never --network=host \
			--label "$stand_in_label=${missing[*]}" -t "$image" . >&2
		where=("${own[@]}")
	fi
fi
log "built $image in $((SECONDS - t0)) s"

# Into the local node's containerd, when one runs (the node lock names its
# directory). Docker Hub's implicit prefix makes `demo-controller:dev` in the
# manifest resolve to this name.
lock=/run/demo-controller-node.lock
if ((EUID == 0)) && [[ -s $lock ]] && ! flock -n "$lock" true; then
	node=$(cat "$lock")
	if [[ -f $node/env ]]; then
		ref=$(bash cluster/node/load-image.sh --socket "$(. "$node/env" && echo "$CONTAINERD_SOCK")" "${where[@]}" "$image")
		log "loaded $ref into the local node's containerd"
	fi
fi
