#!/usr/bin/env bash
# Loads IMAGE from podman's or docker's store into the local node's containerd
# (namespace k8s.io, where the kubelet looks), under the name a pod spec's
# short name resolves to: `demo-controller:dev` is
# docker.io/library/demo-controller:dev to the kubelet, while podman keeps it
# as localhost/demo-controller:dev. So the manifest stays unchanged.
#
# Usage: cluster/node/load-image.sh ENGINE IMAGE
set -euo pipefail
engine=${1:?usage: load-image.sh podman|docker IMAGE} image=${2:?usage: load-image.sh podman|docker IMAGE}
sock=/run/containerd/containerd.sock
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
"$engine" save -o "$tmp" "$image" >/dev/null
out=$(ctr --address "$sock" -n k8s.io image import "$tmp")
# The name the archive carried (podman: localhost/NAME:TAG).
got=$(sed -n 's/^unpacking \([^ ]*\) (sha256:.*/\1/p' <<<"$out" | head -n1)
[[ -n $got ]] || { echo "load-image.sh: error: ctr imported no image from $image: $out" >&2; exit 1; }
[[ $got == "$ref" ]] || ctr --address "$sock" -n k8s.io image tag --force "$got" "$ref" >/dev/null
echo "$ref"
