#!/usr/bin/env bash
# `make demo`: the whole lesson. On a cluster you already have (CONTEXT, or a
# current context that is local and answers) it runs in a namespace of its
# own there: see cluster/demo-context.sh. Otherwise it starts the local
# control plane, runs demo-controller against it, then creates a pod, labels
# it, moves it to Running and deletes it, so onAdd, onUpdate and onDelete
# appear, and tears everything down again (also on Ctrl-C).
#
# It stops only what it started: with a control plane already running in DIR
# (`make cluster-up`), the lesson runs in it and leaves it running (even as
# root); with a local node already running in NODE_DIR (`make node-up`), the
# node's lesson runs in that node and leaves it running.
#
# Usage: cluster/demo.sh [--dir DIR] [--context NAME]
#        (DIR defaults to <repo>/target/local-cluster; NAME: the kubeconfig
#        context to run on, `make demo CONTEXT=name`, never taken from the
#        environment; NODE_DIR in the environment, default
#        <repo>/target/local-node, which `make demo` always sets)
set -euo pipefail

# --context NAME is this script's own option; lib.sh reads the rest.
context='' rest=()
while (($#)); do
	case $1 in
	--context) (($# >= 2)) || { echo "usage: $0 [--dir DIR] [--context NAME]" >&2; exit 2; }; context=$2; shift 2 ;;
	--context=*) context=${1#--context=}; shift ;;
	*) rest+=("$1"); shift ;;
	esac
done
set -- ${rest[@]+"${rest[@]}"}
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" # repo, dir, marker, the directory guard
log() { echo "demo.sh: $*" >&2; }
cd "$repo"
# Where cargo builds demo-controller, checked before anything is built there
# (all three lessons below run what it builds).
target=$(cargo_target) || exit 1

# The cluster a learner already has: the context named, else the current
# context when its API server is on this machine and answers
# (cluster/context.sh). The lesson then runs there, in a namespace of its
# own (cluster/demo-context.sh).
source cluster/context.sh
if [[ -n $context ]]; then exec bash cluster/demo-context.sh "$context"; fi
if ctx=$(local_current_context); then exec bash cluster/demo-context.sh "$ctx"; fi

# A DIR that exists goes through the directory guard (proc.sh) before
# anything in it is read.
[[ -e $dir || -L $dir ]] && guard_dir "$marker"
ours=1
plane_ready "$dir" >/dev/null && ours=0

# With root and the node's packages (present or installable) the demo runs real
# pods on a real node; otherwise the apiserver-only lesson below.
if ((ours && EUID == 0)) && { bash cluster/node/deps.sh --check 2>/dev/null || command -v apt-get >/dev/null; }; then
	exec bash cluster/node/demo.sh --dir "${NODE_DIR:-$repo/target/local-node}"
fi
log "no real pods in this demo (no kubelet: they stay Pending); for real ones: \`make demo CONTEXT=name\` (or a kind, k3d, minikube, ... current context) on a cluster you have, or \`make demo\` as root with no control plane running in $dir, on a real node"

logfile=$dir/demo-controller.log
logger='' interrupted='' created=''
# The pod's name: `kuard` on a control plane of the demo's own (nothing else
# is there, and all of it goes at the end); on one that was running before,
# a name of this run's, so it never meets a pod of someone else's. Either
# way it carries this run's label, and the cleanup deletes only pods that
# carry it.
run=$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')
label=demo-controller-run=$run

say() { printf '\n\033[1m==> %s\033[0m\n' "$*" >&2; }

# The API, spoken with curl and the admin certificate: no kubectl needed.
api() {
	local method=$1 path=$2 type=${3:-application/json} body=${4:-}
	curl -sS --max-time 10 --fail-with-body -o /dev/null -X "$method" -H "Content-Type: $type" ${body:+--data "$body"} \
		--cacert "$dir/pki/ca.crt" --cert "$dir/pki/admin.crt" --key "$dir/pki/admin.key" "$APISERVER_URL$path"
}
pods=/api/v1/namespaces/default/pods

# On any exit: Ctrl-C (which the terminal sends to demo-controller too: see
# stop_logger in proc.sh), a failed step, the end. A second Ctrl-C while it
# runs is ignored, so it always finishes.
cleanup() {
	trap '' INT TERM
	stop_logger
	if ((ours)); then
		say "stopping the local control plane"
		bash cluster/down.sh --dir "$dir"
	else
		# The demo's pod, should it have been cut short: only pods with
		# this run's label (a DELETE of the collection, by label).
		if [[ -n $created ]]; then
			api DELETE "$pods?labelSelector=${label/=/%3D}" 2>/dev/null || log "error: could not delete the demo's pod: delete it with KUBECONFIG=$dir/kubeconfig kubectl delete pods -l $label"
		fi
		say "the control plane in $dir was running before the demo: left running"
	fi
}
trap cleanup EXIT
trap 'interrupted=1; exit 130' INT
trap 'exit 143' TERM

step "demo-controller (cargo build)" demo-build cargo build --locked
logger_bin=$(built "$target" debug/demo-controller) || exit 1

pod=kuard
((ours)) || pod=kuard-$run
if ((ours)); then
	say "starting the local control plane (kube-apiserver on 127.0.0.1, etcd on a unix socket, kube-controller-manager)"
	bash cluster/up.sh --dir "$dir" >/dev/null
	dir=$(realpath -- "$dir")
else
	say "using the control plane already running in $dir"
fi
export KUBECONFIG=$dir/kubeconfig
# shellcheck source=/dev/null
source "$dir/env"

say "starting demo-controller (its log lines follow)"
# Its output goes to the terminal and to a file; with process substitution
# `$!` is the logger itself, the process to signal at the end.
# (tee -i: Ctrl-C reaches tee too, one process group; it goes on, so the
# lines demo-controller logs while it drains still show.)
"$logger_bin" --probe-addr 0 --metrics-addr 0 > >(tee -i "$logfile") 2>&1 &
# shellcheck disable=SC2034 # logger: read by stop_logger (proc.sh) at the end
logger=$!
for _ in $(seq 100); do grep -q "cache synced" "$logfile" 2>/dev/null && break; sleep 0.1; done

lesson() { say "$1"; shift; api "$@"; sleep 2; }
created=1 # from here on the pod may exist (a Ctrl-C may cut the POST short after the server took it)
lesson "kubectl run $pod --image=gcr.io/kuar-demo/kuard-amd64:blue   -> onAdd" \
	POST "$pods" application/json \
	'{"metadata":{"name":"'"$pod"'","labels":{"run":"kuard","demo-controller-run":"'"$run"'"}},"spec":{"containers":[{"name":"kuard","image":"gcr.io/kuar-demo/kuard-amd64:blue"}]}}'
lesson "kubectl label pod $pod tier=web                              -> onUpdate (label)" \
	PATCH "$pods/$pod" application/merge-patch+json '{"metadata":{"labels":{"tier":"web"}}}'
lesson "the pod's status moves to Running (there is no kubelet here)  -> onUpdate (phase)" \
	PATCH "$pods/$pod/status" application/merge-patch+json '{"status":{"phase":"Running"}}'
lesson "kubectl delete pod $pod                                      -> onDelete" \
	DELETE "$pods/$pod"
created=''
say "done: that was watch -> cache -> queue -> worker -> log line, three times"
