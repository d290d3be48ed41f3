#!/usr/bin/env bash
# `make deploy` and `make undeploy`: apply demo-controller.yaml, or delete
# what it creates, on one cluster, picked here for both by one rule:
#  1. the context named with --context (`make deploy CONTEXT=name`, make's
#     command line only), in your kubeconfig (KUBECONFIG, else
#     ~/.kube/config); the local node's directory is not looked at;
#  2. else the local node, when it runs in NODE_DIR (`make node-up`), with
#     its own kubeconfig and context, whatever KUBECONFIG says;
#  3. else nothing: a current context may be production, so it is named in
#     one line with the way to choose it, exit 1, and no request is made.
# The context is pinned (kubectl --context) and its API server is printed
# before anything is sent. For apply, IMAGE must be an image reference
# (checked before anything else: one line and exit 2 when it is not); it
# replaces `demo-controller:dev` in the manifest as a plain string, through
# no sed or shell program built from it.
#
# Usage: cluster/deploy.sh apply|delete [--context NAME] [--node-dir DIR] [--image IMAGE]
#        (DIR defaults to <repo>/target/local-node; IMAGE, for apply, to
#        demo-controller:dev; KUBECTL in the environment, default kubectl)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")
log() { echo "deploy.sh: $*" >&2; }
usage() { echo "usage: $0 apply|delete [--context NAME] [--node-dir DIR] [--image IMAGE]" >&2; exit 2; }

(($#)) || usage
action=$1
shift
case $action in apply | delete) ;; *) usage ;; esac
context='' image=demo-controller:dev node_dir=$repo/target/local-node
while (($#)); do
	(($# >= 2)) || usage
	case $1 in
	--context) context=$2 ;;
	--node-dir) node_dir=$2 ;;
	--image) image=$2 ;;
	*) usage ;;
	esac
	shift 2
done
target=deploy
[[ $action == apply ]] || target=undeploy

# image_reference REF: REF has the grammar of an image reference (as
# docker, podman and the kubelet read one): [registry[:port]/]path[:tag]
# [@sha256:digest], the path in lowercase parts separated by one `.` or `_`,
# two `_` or any number of `-`, 255 characters at most before the tag.
image_reference() {
	local part='([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])'
	local registry="($part(\.$part)*|\[[a-fA-F0-9:]+\])(:[0-9]+)?"
	local component='[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*'
	local tag='[a-zA-Z0-9_][a-zA-Z0-9_.-]{0,127}'
	local name=${1%%@*}
	[[ $name =~ :$tag$ ]] && name=${name%:*}
	((${#name} <= 255)) && [[ $1 =~ ^($registry/)?$component(/$component)*(:$tag)?(@sha256:[a-f0-9]{64})?$ ]]
}
if [[ $action == apply ]] && ! image_reference "$image"; then
	log "error: IMAGE=$(printf %q "$image") is not an image reference: use [registry[:port]/]path[:tag][@sha256:digest], the path in lowercase, e.g. IMAGE=registry.example.com/demo-controller:v0.1.0"
	exit 2
fi

kubectl=${KUBECTL:-kubectl}
command -v "$kubectl" >/dev/null 2>&1 || { log "error: $kubectl is not on PATH: install kubectl (within one minor version of the cluster's)"; exit 1; }

# kubeconfig_entries: the current context's name, then a line per context
# (name, tab, cluster) and per cluster (cluster:name, tab, server), read from
# the kubeconfig alone. `--context` names a context that no kubeconfig has:
# some kubectl builds (gcloud's) ask the server of the context a command
# names, else of the current one, for its version before any command, even
# `kubectl config`; here they have none to ask.
kubeconfig_entries() {
	"$kubectl" config view --context ' (no context: read the kubeconfig only)' -o go-template='{{index . "current-context"}}{{"\n"}}{{range .contexts}}{{.name}}{{"\t"}}{{.context.cluster}}{{"\n"}}{{end}}{{range .clusters}}cluster:{{.name}}{{"\t"}}{{.cluster.server}}{{"\n"}}{{end}}' 2>/dev/null
}

# current_context_refusal: the one line that refuses the current context,
# naming it, its server and the way to choose it (or saying there is none),
# and exit 1. Nothing is sent to any server.
current_context_refusal() {
	local entries current cluster='' server='' name value
	entries=$(kubeconfig_entries) || entries=
	current=${entries%%$'\n'*}
	if [[ -z $current ]]; then
		log "error: no cluster named, and no local node runs in $node_dir: name the cluster's context on make's command line, e.g. make $target CONTEXT=name (\`kubectl config get-contexts\` lists them)"
		exit 1
	fi
	while IFS=$'\t' read -r name value; do
		[[ $name == "$current" && -z $cluster ]] && cluster=$value
	done <<<"${entries#*$'\n'}"
	while IFS=$'\t' read -r name value; do
		[[ -n $cluster && $name == "cluster:$cluster" && -z $server ]] && server=$value
	done <<<"${entries#*$'\n'}"
	if [[ $action == apply ]]; then
		log "error: not applying demo-controller.yaml to context $current at ${server:-no server}: it is not the local node; to deploy demo-controller there, name it: make $target CONTEXT=$current"
	else
		log "error: not deleting from context $current at ${server:-no server}: it is not the local node; to delete demo-controller there, name it: make $target CONTEXT=$current"
	fi
	exit 1
}

where='' dir=''
if [[ -z $context ]]; then
	# The local node, if it runs in NODE_DIR: a NODE_DIR that exists goes
	# through the directory guard (cluster/proc.sh) before anything in it is
	# read, and only here, where the node is the cluster to use.
	source "$here/node/lib.sh" # the directory guard, node_init_pid
	refuse_dir() {
		log "error: refusing NODE_DIR $dir (the local node's directory): $1; not touching it"
		exit 1
	}
	dir=$(realpath -m -s -- "$node_dir")
	if [[ -e $dir || -L $dir ]]; then
		guard_dir "$marker"
		if [[ -f $dir/ready && -f $dir/plane/env && -f $dir/plane/kubeconfig ]] && node_init_pid >/dev/null; then
			export KUBECONFIG=$dir/plane/kubeconfig
			context=$("$kubectl" config current-context 2>/dev/null) || context=
			where=" (the local node in $dir)"
		fi
	fi
	[[ -n $context ]] || current_context_refusal
fi
server=$("$kubectl" config view --minify --context "$context" -o jsonpath='{.clusters[0].cluster.server}' 2>/dev/null) || server=
if [[ -z $server ]]; then
	log "error: no context $context with a server in your kubeconfig (${KUBECONFIG:-~/.kube/config}); \`kubectl config get-contexts\` lists them"
	exit 1
fi
where="context $context at $server$where"

k() { "$kubectl" --context "$context" "$@"; }
case $action in
apply)
	# The image as a plain string: bash's replacement of a quoted pattern by
	# a quoted string reads neither as a pattern or program.
	manifest=$(<"$repo/demo-controller.yaml")
	[[ $manifest == *"image: demo-controller:dev"* ]] || { log "error: demo-controller.yaml names no image demo-controller:dev to replace"; exit 1; }
	manifest=${manifest//"image: demo-controller:dev"/"image: $image"}
	log "applying demo-controller.yaml (image $image) to $where"
	printf '%s\n' "$manifest" | k apply -f -
	;;
delete)
	log "deleting what demo-controller.yaml created from $where"
	k delete -f "$repo/demo-controller.yaml" --ignore-not-found
	;;
esac
