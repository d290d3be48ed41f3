#!/usr/bin/env bash
# `make demo`: the whole lesson with no cluster at hand. Starts the local
# control plane, runs demo-controller against it, then creates a pod, labels
# it, moves it to Running and deletes it, so onAdd, onUpdate and onDelete
# appear, and tears everything down again (also on Ctrl-C).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

# With root and the node's packages (present or installable) the demo runs real
# pods on a real node; otherwise the apiserver-only lesson below.
if ((EUID == 0)) && { bash cluster/node/deps.sh --check 2>/dev/null || command -v apt-get >/dev/null; }; then
	exec bash cluster/node/demo.sh
fi
echo "demo.sh: no real pods in this demo (no kubelet: they stay Pending); run \`make demo\` as root for the one with a real node" >&2

dir=$repo/target/local-cluster
log=$dir/demo-controller.log
logger=

say() { printf '\n\033[1m==> %s\033[0m\n' "$*" >&2; }

cleanup() {
	trap - EXIT INT TERM
	if [[ -n $logger ]] && kill -0 "$logger" 2>/dev/null; then
		say "stopping demo-controller (SIGTERM: it drains its queue and exits 0)"
		kill -TERM "$logger" 2>/dev/null || true
		wait "$logger" 2>/dev/null || true
	fi
	say "stopping the local control plane"
	bash cluster/down.sh --dir "$dir"
}
trap cleanup EXIT INT TERM

say "building demo-controller"
cargo build --locked --quiet

say "starting the local control plane (kube-apiserver on 127.0.0.1, etcd on a unix socket)"
export KUBECONFIG=$dir/kubeconfig
bash cluster/up.sh --dir "$dir" >/dev/null
source "$dir/env"

# The API, spoken with curl and the admin certificate: no kubectl needed.
api() {
	local method=$1 path=$2 type=${3:-application/json} body=${4:-}
	curl -sS --fail-with-body -o /dev/null -X "$method" -H "Content-Type: $type" ${body:+--data "$body"} \
		--cacert "$dir/pki/ca.crt" --cert "$dir/pki/admin.crt" --key "$dir/pki/admin.key" "$APISERVER_URL$path"
}
pods=/api/v1/namespaces/default/pods

say "starting demo-controller (its log lines follow)"
# Its output goes to the terminal and to a file; with process substitution
# `$!` is the logger itself, the process to signal at the end.
target/debug/demo-controller --probe-addr 0 --metrics-addr 0 > >(tee "$log") 2>&1 &
logger=$!
for _ in $(seq 100); do grep -q "cache synced" "$log" 2>/dev/null && break; sleep 0.1; done

step() { say "$1"; shift; api "$@"; sleep 2; }
step "kubectl run kuard --image=gcr.io/kuar-demo/kuard-amd64:blue   -> onAdd" \
	POST "$pods" application/json \
	'{"metadata":{"name":"kuard","labels":{"run":"kuard"}},"spec":{"containers":[{"name":"kuard","image":"gcr.io/kuar-demo/kuard-amd64:blue"}]}}'
step "kubectl label pod kuard tier=web                              -> onUpdate (label)" \
	PATCH "$pods/kuard" application/merge-patch+json '{"metadata":{"labels":{"tier":"web"}}}'
step "the pod's status moves to Running (there is no kubelet here)  -> onUpdate (phase)" \
	PATCH "$pods/kuard/status" application/merge-patch+json '{"status":{"phase":"Running"}}'
step "kubectl delete pod kuard                                      -> onDelete" \
	DELETE "$pods/kuard"
say "done: that was watch -> cache -> queue -> worker -> log line, three times"
