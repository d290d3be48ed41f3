#!/usr/bin/env bash
# `make chapter N=1`: chapter N of the book in one command. Starts the local
# control plane in DIR (or uses the one running there, `make cluster-up`),
# makes the chapter's namespace `play` with its `default` ServiceAccount
# (without it no pod is admitted; the plane's controller-manager makes it
# too, a moment later, or never on a plane started without one), then runs
# examples/chN_*.rs against it.
# Its first two lines name the chapter and give the kubectl command (with
# the KUBECONFIG to use) that makes a pod appear in it. Chapter 7 first
# installs its PodSummary CRD (what the chapter prints with --print-crd) and
# prints the commands that create a PodSummary and a pod it selects.
# Chapter 8 prints the commands that make a namespace ask for copies,
# create a source Secret in `play`, and show its copy. Ctrl-C
# stops the chapter; the control plane stays up for the next one (`make
# cluster-down` stops it). Chapter 9 makes three Node objects, Ready
# (node-1 to node-3: a bare API server accepts Nodes without a kubelet),
# runs one agent per node in the background (its lines prefixed with the
# node's name) and the controller in the foreground, and prints the kubectl
# lines that ask for a reboot; Ctrl-C stops all four programs.
#
# Usage: N=1 cluster/chapter.sh [--dir DIR]   (N: 1 to 5, 7, 8 or 9; DIR defaults to
#        <repo>/target/local-cluster; ARGS in the environment: more flags
#        for the chapter, e.g. ARGS="--pitfall never-done" for chapter 4)
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" # repo, dir, marker, step, the directory guard
log() { echo "chapter.sh: $*" >&2; }
cd "$repo"

# Chapter 6 runs two replicas: its page says how (two terminals).
chapters=([1]=ch1_watch [2]=ch2_cache [3]=ch3_queue [4]=ch4_controller [5]=ch5_controller_runtime [7]=ch7_pod_summary
	[8]=ch8_secret_copier [9]=ch9_reboot_controller)
n=${N:-}
if [[ ! $n =~ ^[1-9]$ ]] || [[ -z ${chapters[n]:-} ]]; then
	echo "make chapter: N must be one of ${!chapters[*]} (got '${n}'): e.g. make chapter N=1" >&2
	exit 2
fi
example=${chapters[n]}
ns=play
# Where cargo builds the chapter, checked before anything is built there.
target=$(cargo_target) || exit 1

# The command first: the path DIR will have once made, resolved.
kubeconfig=$(realpath -m -- "$dir")/kubeconfig
if ((n == 7)); then
	log "chapter $n (examples/$example.rs) on the local control plane; to create a PodSummary and a pod it selects, in another terminal:"
	echo "    echo '{\"apiVersion\":\"demo.example.com/v1alpha1\",\"kind\":\"PodSummary\",\"metadata\":{\"name\":\"web\"},\"spec\":{\"selector\":{\"matchLabels\":{\"app\":\"web\"}}}}' | KUBECONFIG=$kubeconfig kubectl -n $ns apply -f -" >&2
	echo "    KUBECONFIG=$kubeconfig kubectl -n $ns run web-1 --image=registry.k8s.io/pause:3.10 --labels=app=web" >&2
	echo "    KUBECONFIG=$kubeconfig kubectl -n $ns describe podsummary web   # its status and Events" >&2
elif ((n == 8)); then
	log "chapter $n (examples/$example.rs) on the local control plane; to make a namespace ask for copies, a source, and see its copy, in another terminal:"
	echo "    export KUBECONFIG=$kubeconfig" >&2
	echo "    kubectl create namespace team-a && kubectl label namespace team-a demo.example.com/copies=true" >&2
	echo "    kubectl -n $ns create secret generic db --from-literal=password=s3cret && kubectl -n $ns label secret db demo.example.com/copy=true" >&2
	echo "    kubectl -n team-a get secret db --show-labels   # the copy" >&2
elif ((n == 9)); then
	log "chapter $n (examples/ch9_reboot_agent.rs, examples/$example.rs) on the local control plane; to ask for reboots, in another terminal:"
	for node in node-1 node-2 node-3; do
		echo "    KUBECONFIG=$kubeconfig kubectl annotate node $node demo.example.com/reboot-needed=true" >&2
	done
	echo "    KUBECONFIG=$kubeconfig kubectl get nodes -o custom-columns=NAME:.metadata.name,ANNOTATIONS:.metadata.annotations   # who is where" >&2
else
	log "chapter $n (examples/$example.rs) on the local control plane; to make a pod appear in it, in another terminal:"
	echo "    KUBECONFIG=$kubeconfig kubectl -n $ns run kuard --image=registry.k8s.io/pause:3.10" >&2
fi

step "kube-apiserver, kube-controller-manager and etcd (built from Go modules once, then cached)" control-plane-build bash cluster/build.sh >/dev/null
step "the local control plane (cluster/up.sh --dir $dir)" control-plane-up bash cluster/up.sh --dir "$dir" >/dev/null
guard_dir "$marker"
# shellcheck source=/dev/null
source "$dir/env"

# post PATH BODY [TYPE]: creates an object with the admin certificate (no
# kubectl needed), from JSON or the TYPE given; one that exists already is fine.
post() {
	local code
	code=$(curl -sS -o /dev/null -w '%{http_code}' -X POST -H "Content-Type: ${3:-application/json}" --data-binary "$2" \
		--cacert "$dir/pki/ca.crt" --cert "$dir/pki/admin.crt" --key "$dir/pki/admin.key" "$APISERVER_URL$1") || true
	[[ $code == 201 || $code == 409 ]] || { log "error: creating $1 failed (HTTP ${code:-none}): see $dir/logs/kube-apiserver.log"; exit 1; }
}
post /api/v1/namespaces "{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"$ns\"}}"
post "/api/v1/namespaces/$ns/serviceaccounts" '{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"default"}}'

if ((n == 9)); then
	step "examples/ch9_reboot_*.rs (cargo build --example ...)" "chapter-build" \
		cargo build --locked --example ch9_reboot_agent --example "$example"
else
	step "examples/$example.rs (cargo build --example $example)" "chapter-build" cargo build --locked --example "$example"
fi
export KUBECONFIG=$dir/kubeconfig
program=$(built "$target" "debug/examples/$example") || exit 1
if ((n == 7)); then
	# The CRD made from the chapter's Rust type. One already installed is
	# kept (make cluster-down, then this again, installs a changed one).
	crd=/apis/apiextensions.k8s.io/v1/customresourcedefinitions
	post "$crd" "$("$program" --print-crd)" application/yaml
	established() {
		curl -sS --cacert "$dir/pki/ca.crt" --cert "$dir/pki/admin.crt" --key "$dir/pki/admin.key" \
			"$APISERVER_URL$crd/podsummaries.demo.example.com" | tr -d ' \n' |
			grep -q '"type":"Established","status":"True"'
	}
	tries=0
	until established; do
		((++tries < 100)) || { log "error: the PodSummary CRD is not Established after 10 s: see $dir/logs/kube-apiserver.log"; exit 1; }
		sleep 0.1
	done
	log "the PodSummary CRD is installed (podsummaries.demo.example.com)"
fi
if ((n == 9)); then
	# Three Nodes, Ready, as a kubelet would report them (a Node keeps the
	# status it is created with). Ones made by an earlier run are kept.
	for node in node-1 node-2 node-3; do
		post /api/v1/nodes "{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"metadata\":{\"name\":\"$node\"},\"status\":{\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\",\"reason\":\"KubeletReady\"}]}}"
	done
	agent=$(built "$target" debug/examples/ch9_reboot_agent) || exit 1
	agents=()
	trap 'kill "${agents[@]}" 2>/dev/null || true' EXIT
	for node in node-1 node-2 node-3; do
		"$agent" --node "$node" > >(sed -u "s/^/agent $node: /") 2>&1 &
		agents+=($!)
	done
	log "running one agent per node and examples/$example.rs ${ARGS:-}  (Ctrl-C stops them; the control plane stays up: make cluster-down)"
	# shellcheck disable=SC2086 # ARGS: the learner's flags, split as a shell would
	"$program" ${ARGS:-} || true
	exit 0
fi
log "running examples/$example.rs -n $ns ${ARGS:-}  (Ctrl-C stops it; the control plane stays up: make cluster-down)"
# shellcheck disable=SC2086 # ARGS: the learner's flags, split as a shell would
exec "$program" -n "$ns" ${ARGS:-}
