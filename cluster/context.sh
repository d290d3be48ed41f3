# Sourced by cluster/demo.sh and cluster/demo-context.sh: which kubeconfig
# context `make demo` may run its lesson on. Only a cluster on this machine is
# used unasked: a context with the name a local cluster tool gives its own
# (kind, k3d, minikube, Docker Desktop, Rancher Desktop, OrbStack, colima)
# whose API server is on this machine too (local_server). Any other is used
# only when named (`make demo CONTEXT=name`).

# local_context NAME: NAME is the context name one of those tools writes.
local_context() {
	case $1 in
	kind-?* | k3d-?* | minikube | docker-desktop | rancher-desktop | orbstack | colima) return 0 ;;
	*) return 1 ;;
	esac
}

# server_of NAME: the API server URL of context NAME (read from the
# kubeconfig; no request is made).
server_of() {
	kubectl config view --minify --context "$1" -o jsonpath='{.clusters[0].cluster.server}' 2>/dev/null
}

# local_server NAME URL: the API server at URL, of the context NAME, is on
# this machine:
#  - a loopback address (127.0.0.0/8, ::1, localhost) or 0.0.0.0, where kind,
#    k3d, Rancher Desktop, OrbStack and colima put it, and minikube outside
#    Linux;
#  - Docker Desktop's own name for it, kubernetes.docker.internal (its
#    /etc/hosts entry for this machine), or k3d's host.docker.internal;
#  - for minikube, whose VM or container has an address of its own (e.g.
#    192.168.49.2 with the docker driver), a 192.168.x.x address on a bridge
#    of this machine (on_local_bridge): the network its driver made here.
# A context named like a local one whose server is anywhere else (kind-prod
# pointing at a remote cluster) is not local.
local_server() {
	local name=$1 host=${2#*://}
	host=${host%%/*}
	if [[ $host == \[* ]]; then
		host=${host#\[}
		host=${host%%\]*}
	elif [[ $host == *:*:* ]]; then
		: # IPv6 without brackets (and so without a port)
	else
		host=${host%:*}
	fi
	if [[ $host =~ ^127\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$ || $host == localhost || $host == ::1 || $host == 0.0.0.0 ]]; then
		return 0
	fi
	case $name:$host in
	docker-desktop:kubernetes.docker.internal | k3d-?*:host.docker.internal) return 0 ;;
	minikube:192.168.*) [[ $host =~ ^192\.168\.[0-9]{1,3}\.[0-9]{1,3}$ ]] && on_local_bridge "$host" ;;
	*) return 1 ;;
	esac
}

# on_local_bridge ADDR: this machine reaches ADDR directly (no gateway)
# through a bridge of its own: docker's, podman's or libvirt's network for
# containers and VMs, never a physical link to other machines.
on_local_bridge() {
	local route dev
	route=$(ip -o route get "$1" 2>/dev/null) || return 1
	[[ $route != *" via "* && $route =~ \ dev\ ([^ ]+) ]] || return 1
	dev=${BASH_REMATCH[1]}
	[[ -d /sys/class/net/$dev/bridge ]]
}

# context_answers NAME: the API server of context NAME answers /readyz
# within 5 s (kubectl on PATH).
context_answers() {
	[[ $(kubectl --context "$1" --request-timeout=5s get --raw /readyz 2>/dev/null) == ok ]]
}

# local_current_context: prints the current context when it is a local one
# (above) that answers; fails otherwise (no kubectl, no current context). A
# current context that is not local is named on stderr, in one line, with
# how to run the lesson there.
local_current_context() {
	local ctx server
	command -v kubectl >/dev/null 2>&1 || return 1
	ctx=$(kubectl config current-context 2>/dev/null) && [[ -n $ctx ]] || return 1
	server=$(server_of "$ctx") || server=
	if ! local_context "$ctx" || ! local_server "$ctx" "$server"; then
		echo "demo.sh: the current context $ctx (${server:-no server}) is not a local cluster's, so the lesson does not run there unasked: \`make demo CONTEXT=$ctx\` runs it there" >&2
		return 1
	fi
	context_answers "$ctx" || return 1
	echo "$ctx"
}
