#!/usr/bin/env bash
# `make demo` on the cluster you already have (see cluster/demo.sh, which
# comes here when the current context is a local one that answers, or when
# CONTEXT names one): the same lesson, with real pods, and no root. It
# creates a namespace of its own (a name the API server generates from
# demo-controller-), runs demo-controller against that namespace only,
# creates a pod in it, labels it and deletes it, then deletes the namespace
# (also on Ctrl-C). Nothing outside that namespace is written.
#
# Usage: cluster/demo-context.sh CONTEXT
set -euo pipefail
if (($# != 1)) || [[ -z $1 ]]; then echo "usage: $0 CONTEXT" >&2; exit 2; fi
ctx=$1
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
source cluster/context.sh
log() { echo "demo.sh: $*" >&2; }
say() { printf '\n\033[1m==> %s\033[0m\n' "$*" >&2; }
source cluster/proc.sh # step, cargo_target, built
# Where cargo builds demo-controller, checked before anything is built there.
target=$(cargo_target) || exit 1

command -v kubectl >/dev/null 2>&1 || { log "error: CONTEXT=$ctx needs kubectl on PATH: install it (within one minor version of the cluster's)"; exit 1; }
if ! kubectl config get-contexts -o name 2>/dev/null | grep -qxF -- "$ctx"; then
	log "error: no context $ctx in your kubeconfig (${KUBECONFIG:-~/.kube/config}); \`kubectl config get-contexts\` lists them"
	exit 1
fi
context_answers "$ctx" || { log "error: context $ctx does not answer (kubectl --context $ctx get --raw /readyz failed): start that cluster, or pick another CONTEXT"; exit 1; }
cluster=$(kubectl config view -o jsonpath="{.contexts[?(@.name==\"$ctx\")].context.cluster}")
server=$(kubectl config view -o jsonpath="{.clusters[?(@.name==\"$cluster\")].cluster.server}")
log "using your cluster: context $ctx ($server), in a namespace of its own, deleted at the end"

k() { kubectl --context "$ctx" "$@"; }
ns='' logger='' work='' interrupted='' asked=''
# This run's label, on the namespace it creates: a Ctrl-C that cuts the
# create short after the server took it leaves the name unknown, and the
# cleanup finds the namespace by the label. It deletes nothing else.
run=$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')
label=demo-controller-run=$run
# On any exit: Ctrl-C (which the terminal sends to demo-controller too: see
# stop_logger in proc.sh), a failed step, the end. A second Ctrl-C while it
# runs is ignored, so it always finishes (each request has a time limit).
cleanup() {
	trap '' INT TERM
	stop_logger
	if [[ -z $ns && -n $asked ]]; then
		ns=$(k --request-timeout=10s get namespaces -l "$label" -o jsonpath='{.items[*].metadata.name}' 2>/dev/null) ||
			log "error: could not look for the demo's namespace: delete it with kubectl --context $ctx delete namespace -l $label"
	fi
	for n in $ns; do
		say "kubectl delete namespace $n   (the demo's namespace, and all in it)"
		k --request-timeout=10s delete namespace "$n" --wait=false >/dev/null || log "error: could not delete namespace $n: delete it with kubectl --context $ctx delete namespace $n"
	done
	[[ -z $work ]] || rm -rf -- "$work"
}
trap cleanup EXIT
trap 'interrupted=1; exit 130' INT
trap 'exit 143' TERM

step "demo-controller (cargo build)" demo-build cargo build --locked
logger_bin=$(built "$target" debug/demo-controller) || exit 1

# The API server picks the name (generateName), so no run meets another's.
asked=1 # from here on the namespace may exist
ns=$(k create -o jsonpath='{.metadata.name}' -f - <<<'{"apiVersion":"v1","kind":"Namespace","metadata":{"generateName":"demo-controller-","labels":{"app.kubernetes.io/created-by":"demo-controller-demo","demo-controller-run":"'"$run"'"}}}')
say "kubectl create namespace $ns"
# Its `default` ServiceAccount, without which no pod is admitted, comes from
# the controller-manager; a cluster that has none (a bare API server) gets it
# from us after a few seconds.
for _ in $(seq 20); do k -n "$ns" get serviceaccount default >/dev/null 2>&1 && break; sleep 0.25; done
k -n "$ns" get serviceaccount default >/dev/null 2>&1 || k -n "$ns" create serviceaccount default >/dev/null

work=$(mktemp -d) # 0700, ours: demo-controller's log, to see when its cache has synced
say "starting demo-controller -n $ns (its log lines follow)"
# (tee -i: Ctrl-C reaches tee too, one process group; it goes on, so the
# lines demo-controller logs while it drains still show.)
"$logger_bin" --context "$ctx" -n "$ns" --probe-addr 0 --metrics-addr 0 > >(tee -i "$work/log") 2>&1 &
logger=$!
for _ in $(seq 100); do grep -q "cache synced" "$work/log" 2>/dev/null && break; sleep 0.1; done

# Ctrl-C reaches demo-controller too (one process group): it drains and
# exits. Bash runs the INT trap above only if the command it was waiting for
# died of the signal, which a kubectl that exits on its own may not do, so
# the lesson also stops (130, as for Ctrl-C) once demo-controller has said
# it received SIGINT, and (1) if it stopped for any other reason.
running() {
	kill -0 "$logger" 2>/dev/null && return 0
	# (its last lines may still be on their way through tee)
	for _ in $(seq 20); do
		grep -q "received SIGINT" "$work/log" 2>/dev/null && exit 130
		sleep 0.05
	done
	log "error: demo-controller stopped before the lesson ended: its lines above say why"
	exit 1
}
pod() { k -n "$ns" get pod kuard -o jsonpath='{.status.phase}/{.spec.nodeName}' 2>/dev/null || true; }
say "kubectl -n $ns run kuard --image=registry.k8s.io/pause:3.10   -> onAdd, then onUpdate as a node runs it"
k -n "$ns" run kuard --image=registry.k8s.io/pause:3.10 >/dev/null
# Until it runs (up to 60 s); a pod no node has taken after 10 s stays
# Pending (a cluster with no scheduler or kubelet): the lesson goes on.
for i in $(seq 240); do
	running
	state=$(pod)
	[[ ${state%%/*} == Running ]] && break
	if [[ -z ${state#*/} ]] && ((i >= 40)); then
		say "no node has taken it after 10 s: it stays Pending on this cluster"
		break
	fi
	sleep 0.25
done
sleep 1
running
say "kubectl -n $ns label pod kuard tier=web   -> onUpdate (label)"
k -n "$ns" label pod kuard tier=web >/dev/null
sleep 2
running
say "kubectl -n $ns delete pod kuard   -> onUpdate (terminating), onDelete"
k -n "$ns" delete pod kuard --grace-period=3 >/dev/null
sleep 2
running
say "done: that was watch -> cache -> queue -> worker -> log line, for each change"
