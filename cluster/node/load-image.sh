#!/usr/bin/env bash
# Loads IMAGE from an image store (docker's, podman's, or the project's own
# podman store) into the local node's containerd (namespace k8s.io, where the
# kubelet looks), under the name a pod spec's short name resolves to:
# `demo-controller:dev` is docker.io/library/demo-controller:dev to the
# kubelet, while podman keeps it as localhost/demo-controller:dev. So the
# manifest stays unchanged. Prints that name.
#
# Usage: cluster/node/load-image.sh --socket SOCK ENGINE [ENGINE OPTIONS...] IMAGE
#   SOCK: the node's containerd socket as the host sees it (DIR/root/run/containerd/containerd.sock,
#   CONTAINERD_SOCK in DIR/env); e.g. load-image.sh --socket S podman --root R --runroot RR demo-controller:dev
set -euo pipefail
usage() { echo "usage: load-image.sh --socket SOCK ENGINE [ENGINE OPTIONS...] IMAGE" >&2; exit 2; }
[[ ${1:-} == --socket && $# -ge 4 ]] || usage
sock=$2
shift 2
engine=("${@:1:$#-1}") image=${*: -1}
ref=$image
first=${ref%%/*}
# A first part with a dot or colon, or "localhost", is a registry; otherwise
# Docker Hub's, with library/ for one-part names.
if [[ $ref != */* ]]; then
	ref=docker.io/library/$ref
elif [[ $first != *.* && $first != *:* && $first != localhost ]]; then
	ref=docker.io/$ref
fi
tmp=$(mktemp /var/tmp/demo-controller-image.XXXXXX)
trap 'rm -f "$tmp"' EXIT
"${engine[@]}" save -o "$tmp" "$image" >/dev/null
out=$(ctr --address "$sock" -n k8s.io image import "$tmp")
# The name the archive carried (podman: localhost/NAME:TAG).
got=$(sed -n 's/^unpacking \([^ ]*\) (sha256:.*/\1/p' <<<"$out" | head -n1)
[[ -n $got ]] || { echo "load-image.sh: error: ctr imported no image from $image: $out" >&2; exit 1; }
[[ $got == "$ref" ]] || ctr --address "$sock" -n k8s.io image tag --force "$got" "$ref" >/dev/null
echo "$ref"
