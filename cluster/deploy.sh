#!/usr/bin/env bash
# `make deploy` and `make undeploy`: apply demo-controller.yaml, or delete
# what it creates, on one cluster, picked here for both by one rule:
#  1. the context named with --context (`make deploy CONTEXT=name`, make's
#     command line only), in your kubeconfig;
#  2. else, with KUBECONFIG unset and the local node running in NODE_DIR
#     (`make node-up`), the node's own kubeconfig and context;
#  3. else your kubeconfig's current context.
# Either way the context is pinned (kubectl --context) and its API server is
# printed before anything is sent. `delete` then refuses, in one line and
# exit 1 with no request made, a cluster that is not the local node unless
# it was named with --context: a current context may be production.
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
kubectl=${KUBECTL:-kubectl}
command -v "$kubectl" >/dev/null 2>&1 || { log "error: $kubectl is not on PATH: install kubectl (within one minor version of the cluster's)"; exit 1; }

# The local node's API server, when one runs in NODE_DIR: a NODE_DIR that
# exists goes through the directory guard (cluster/proc.sh) before anything
# in it is read.
node_server='' node_kubeconfig=''
source "$here/node/lib.sh" # the directory guard, node_init_pid
dir=$(realpath -m -s -- "$node_dir")
if [[ -e $dir || -L $dir ]]; then
	guard_dir "$marker"
	if [[ -f $dir/ready && -f $dir/plane/env ]] && node_init_pid >/dev/null; then
		# shellcheck source=/dev/null
		node_server=$(. "$dir/plane/env" && echo "$APISERVER_URL")
		node_kubeconfig=$dir/plane/kubeconfig
	fi
fi

if [[ -z $context && -z ${KUBECONFIG:-} && -n $node_kubeconfig ]]; then
	export KUBECONFIG=$node_kubeconfig
fi
target=deploy
[[ $action == apply ]] || target=undeploy
named=1
if [[ -z $context ]]; then
	named=0
	context=$("$kubectl" config current-context 2>/dev/null) || context=
	if [[ -z $context ]]; then
		log "error: your kubeconfig (${KUBECONFIG:-~/.kube/config}) has no current context: name one, e.g. make $target CONTEXT=name"
		exit 1
	fi
fi
server=$("$kubectl" config view --minify --context "$context" -o jsonpath='{.clusters[0].cluster.server}' 2>/dev/null) || server=
if [[ -z $server ]]; then
	log "error: no context $context with a server in your kubeconfig (${KUBECONFIG:-~/.kube/config}); \`kubectl config get-contexts\` lists them"
	exit 1
fi
is_node=0
[[ -n $node_server && $server == "$node_server" ]] && is_node=1
where="context $context at $server"
((is_node)) && where+=" (the local node in $dir)"

k() { "$kubectl" --context "$context" "$@"; }
case $action in
apply)
	log "applying demo-controller.yaml (image $image) to $where"
	sed "s|image: demo-controller:dev|image: $image|" "$repo/demo-controller.yaml" | k apply -f -
	;;
delete)
	if ((!is_node && !named)); then
		log "error: not deleting from $where: it is not the local node; to delete demo-controller there, name it: make $target CONTEXT=$context"
		exit 1
	fi
	log "deleting what demo-controller.yaml created from $where"
	k delete -f "$repo/demo-controller.yaml" --ignore-not-found
	;;
esac
