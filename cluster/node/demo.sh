#!/usr/bin/env bash
# `make demo` with real pods (as root): the same lesson as cluster/demo.sh, but
# on a real one-node cluster (cluster/node/up.sh), so every onUpdate line shows
# something a kubelet really did: the pod scheduled, started, Ready, its
# container exiting and restarting, terminating, gone. demo-controller runs on
# this machine against the node's API, as `make run` would against yours.
# Stops the node at the end (also on Ctrl-C), which removes everything it
# made; a node that was already running in DIR (`make node-up`) is used as it
# is and left running.
#
# Usage: cluster/node/demo.sh [--dir DIR]   (DIR defaults to <repo>/target/local-node)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
log() { echo "node/demo.sh: $*" >&2; }
source "$here/lib.sh"
parse_dir "$@"
cd "$repo"
target=$(cargo_target) || exit 1 # where cargo builds demo-controller, checked first
# A DIR that exists goes through the directory guard (proc.sh) before
# anything in it is read; a node running there is not ours to stop.
ours=1
if [[ -e $dir || -L $dir ]]; then
	guard_dir "$marker"
	[[ -f $dir/ready ]] && node_init_pid >/dev/null && ours=0
fi
logfile=$dir/demo-controller.log
pods=/api/v1/namespaces/default/pods
logger='' interrupted='' created=''
# The pod's name: `kuard` on a node of the demo's own (nothing else is there,
# and all of it goes at the end); on one that was running before, a name of
# this run's, so it never meets a pod of someone else's. Either way it
# carries this run's label, and the cleanup deletes only pods that carry it.
run=$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')
label=demo-controller-run=$run
pod=kuard
((ours)) || pod=kuard-$run
t0=$SECONDS

say() { printf '\n\033[1m==> [%3d s] %s\033[0m\n' "$((SECONDS - t0))" "$*" >&2; }

# On any exit: Ctrl-C (which the terminal sends to demo-controller too: see
# stop_logger in proc.sh), a failed step, the end. A second Ctrl-C while it
# runs is ignored, so it always finishes.
cleanup() {
	trap '' INT TERM
	stop_logger
	if ((ours)); then
		say "stopping the node (its namespaces, cgroups and directory go with it)"
		bash cluster/node/down.sh --dir "$dir"
	else
		# The demo's pod, should it have been cut short: only pods with
		# this run's label (a DELETE of the collection, by label).
		if [[ -n $created ]]; then
			api DELETE "$pods?labelSelector=${label/=/%3D}" 2>/dev/null || log "error: could not delete the demo's pod: delete it with KUBECONFIG=$dir/plane/kubeconfig kubectl delete pods -l $label"
		fi
		say "the node in $dir was running before the demo: left running"
	fi
	say "done in $((SECONDS - t0)) s"
}
trap cleanup EXIT
trap 'interrupted=1; exit 130' INT
trap 'exit 143' TERM

step "demo-controller (cargo build)" demo-build cargo build --locked
logger_bin=$(built "$target" debug/demo-controller) || exit 1

if ((ours)); then
	say "starting a real one-node cluster: kube-apiserver, etcd, containerd, kubelet, scheduler, controller-manager, kube-proxy"
	bash cluster/node/up.sh --dir "$dir" >/dev/null
	dir=$(realpath -- "$dir")
else
	say "using the node already running in $dir"
fi
export KUBECONFIG=$dir/plane/kubeconfig
# shellcheck source=/dev/null
source "$dir/plane/env"

api() {
	local method=$1 path=$2 type=${3:-application/json} body=${4:-}
	curl -sS --max-time 10 --fail-with-body -o /dev/null -X "$method" -H "Content-Type: $type" ${body:+--data "$body"} \
		--cacert "$dir/plane/pki/ca.crt" --cert "$dir/plane/pki/admin.crt" --key "$dir/plane/pki/admin.key" "$APISERVER_URL$path"
}
phase() {
	curl -sS --cacert "$dir/plane/pki/ca.crt" --cert "$dir/plane/pki/admin.crt" --key "$dir/plane/pki/admin.key" \
		"$APISERVER_URL$pods/$pod" | python3 -c "import json,sys; p=json.load(sys.stdin); s=p.get('status',{}); c=(s.get('containerStatuses') or [{}])[0]; print(s.get('phase'), c.get('ready'), c.get('restartCount'), 'code' in p)"
}
# wait_until PYTHON-EXPR-OVER phase,ready,restarts,gone  (up to 60 s)
wait_until() {
	local want=$1 ph ready restarts gone
	for _ in $(seq 240); do
		read -r ph ready restarts gone <<<"$(phase 2>/dev/null || echo '- - - True')"
		eval "$want" && return 0
		sleep 0.25
	done
	echo "demo: gave up waiting for: $want" >&2
	return 1
}

say "starting demo-controller (its log lines follow)"
# (tee -i: Ctrl-C reaches tee too, one process group; it goes on, so the
# lines demo-controller logs while it drains still show.)
"$logger_bin" --probe-addr 0 --metrics-addr 0 > >(tee -i "$logfile") 2>&1 &
# shellcheck disable=SC2034 # logger: read by stop_logger (proc.sh) at the end
logger=$!
for _ in $(seq 100); do grep -q "cache synced" "$logfile" 2>/dev/null && break; sleep 0.1; done

created=1 # from here on the pod may exist (a Ctrl-C may cut the POST short after the server took it)
say "kubectl run $pod (busybox: runs 4 s, exits 1, then stays up)  -> onAdd, then onUpdate as it is scheduled, starts, gets Ready"
api POST "$pods" application/json '{"metadata":{"name":"'"$pod"'","labels":{"run":"kuard","demo-controller-run":"'"$run"'"}},"spec":{"terminationGracePeriodSeconds":3,"volumes":[{"name":"d","emptyDir":{}}],"containers":[{"name":"kuard","image":"docker.io/library/busybox:local","imagePullPolicy":"Never","command":["sh","-c","if [ -e /d/ran ]; then exec sleep 3600; fi; touch /d/ran; sleep 4; exit 1"],"volumeMounts":[{"name":"d","mountPath":"/d"}]}]}}'
wait_until '[[ $ph == Running && $ready == True ]]'
say "kubectl label pod $pod tier=web                                -> onUpdate (label)"
api PATCH "$pods/$pod" application/merge-patch+json '{"metadata":{"labels":{"tier":"web"}}}'
sleep 1
say "its container exits 1; the kubelet restarts it                 -> onUpdate (kuard: terminated Error (exit 1), restarts 0 -> 1 (last: Error, exit 1))"
wait_until '[[ $restarts == 1 && $ready == True ]]'
sleep 1
say "kubectl delete pod $pod (grace period 3 s)                     -> onUpdate (terminating), onDelete"
api DELETE "$pods/$pod"
wait_until '[[ $gone == True ]]'
created=''
sleep 1
say "that was watch -> cache -> queue -> worker -> log line, for a pod that really ran"
