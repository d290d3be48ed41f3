# Sourced by cluster/demo.sh and cluster/demo-context.sh: which kubeconfig
# context `make demo` may run its lesson on. Only a cluster on this machine
# (kind, k3d, minikube, Docker Desktop, Rancher Desktop, OrbStack, colima),
# picked by the name those tools give their context, is used unasked; any
# other is used only when named (`make demo CONTEXT=name`).

# local_context NAME: NAME is the context name one of those tools writes.
local_context() {
	case $1 in
	kind-?* | k3d-?* | minikube | docker-desktop | rancher-desktop | orbstack | colima) return 0 ;;
	*) return 1 ;;
	esac
}

# context_answers NAME: the API server of context NAME answers /readyz
# within 5 s (kubectl on PATH).
context_answers() {
	[[ $(kubectl --context "$1" --request-timeout=5s get --raw /readyz 2>/dev/null) == ok ]]
}

# local_current_context: prints the current context when it is a local one
# (above) that answers; fails otherwise (no kubectl, no current context).
local_current_context() {
	local ctx
	command -v kubectl >/dev/null 2>&1 || return 1
	ctx=$(kubectl config current-context 2>/dev/null) || return 1
	local_context "$ctx" && context_answers "$ctx" || return 1
	echo "$ctx"
}
