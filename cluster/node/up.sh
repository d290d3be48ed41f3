#!/usr/bin/env bash
# Starts a real one-node Kubernetes cluster on this machine: the local control
# plane (cluster/up.sh, with its apiserver set up for a kubelet) plus
# containerd (runc, CNI bridge), kubelet, kube-scheduler,
# kube-controller-manager and kube-proxy v1.35.4. Pods really run. Prints
# `export KUBECONFIG=...` as its last stdout line, like cluster/up.sh.
#
# Usage: cluster/node/up.sh [--dir DIR]     (DIR defaults to <repo>/target/local-node)
#
# Needs root (it changes host state) and the Debian packages in deps.sh, which
# it installs when missing. Only one node can run on a machine.
#
# Addresses route nowhere and nothing leaves the machine:
#   node       198.18.0.10/32 on dcn-node0 (a dummy interface)   (RFC 2544 benchmarking)
#   pods       203.0.113.0/24 on the bridge dcn-br0, no masquerading (TEST-NET-3)
#   services   198.51.100.0/24; `kubernetes` is 198.51.100.1      (TEST-NET-2)
# and a FORWARD rule drops anything forwarded anywhere but into the bridge.
#
# Before it changes anything it records the host's state in DIR/host/
# (sysctls, iptables/ip6tables rules, nft tables, which directories existed);
# cluster/node/down.sh puts all of it back from there, also after a failed
# start (a trap here calls it) or a killed run. DIR afterwards also holds:
#   plane/          the control plane (cluster/up.sh --dir DIR/plane)
#   pki/, *.kubeconfig, containerd.toml, kubelet.yaml, cni/, logs/, *.pid
#   env             KUBECONFIG, NODE_NAME, NODE_IP, ... (shell-sourceable)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
log() { echo "node/up.sh: $*" >&2; }

source "$here/lib.sh"
parse_dir "$@"

if ((EUID != 0)); then
	echo "error: the local node needs root (it runs containerd and a kubelet, and sets up a bridge and iptables rules): run this as root" >&2
	exit 1
fi


mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
ms() { echo $(((${EPOCHREALTIME//[!0-9]/} - t0) / 1000)); }
secs() { local m; m=$(ms); echo "$((m / 1000)).$((m % 1000 / 100)) s"; }

# Already running?
if [[ -f $dir/env ]] && pid_in "$dir" kubelet >/dev/null && pid_in "$dir" containerd >/dev/null; then
	log "node in $dir is already running"
	echo "export KUBECONFIG=$dir/plane/kubeconfig"
	exit 0
fi
# Another node on this machine (its own dir, or anything else holding
# containerd's socket or the kubelet's directory) cannot share them.
if [[ -S $containerd_sock ]] || [[ -e /var/lib/kubelet/pki ]]; then
	if [[ ! -d $dir/host ]]; then
		log "error: another containerd or kubelet is using $containerd_sock or /var/lib/kubelet: stop it first (cluster/node/down.sh --dir ITS_DIR)"
		exit 1
	fi
fi
if [[ -n $(ls -A "$dir") ]]; then
	log "removing stale state in $dir"
	bash "$here/down.sh" --dir "$dir"
	mkdir -p "$dir"
fi

# --- What it needs: packages, binaries, images (all cached) ----------------------
bash "$here/deps.sh"
bin=$(bash "$here/build.sh" | tail -n1)
imgs=$(bash "$here/images.sh" | tail -n1)

t0=${EPOCHREALTIME//[!0-9]/}
mkdir -p "$dir/logs" "$dir/host" "$dir/pki" "$dir/cni/net.d" "$dir/cni/ipam" "$dir/opt"

# --- Record the host's state, then undo everything on any failure ----------------
record_host_state "$dir/host"
ok=0
on_exit() {
	((ok)) && return
	log "start failed; undoing everything (logs were in $dir/logs)"
	cp -r "$dir/logs" "$dir.failed-logs" 2>/dev/null || true
	bash "$here/down.sh" --dir "$dir" || true
	log "logs of the failed start kept in $dir.failed-logs"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP
rm -rf "$dir.failed-logs"

fail() { # fail LOGNAME MESSAGE
	log "error: $2"
	[[ -f $dir/logs/$1.log ]] && { log "last 30 lines of $dir/logs/$1.log:"; tail -n 30 "$dir/logs/$1.log" | sed 's/^/    /' >&2; }
	exit 1
}

# --- Network: a dummy interface for the node address, the forward guard -----------
# A dummy interface; where the kernel has no dummy driver (as in some
# containers), an empty bridge serves the same: an address of this host that
# is not loopback, so pods can reach it.
ip link add "$dummy_if" type dummy 2>/dev/null || ip link add "$dummy_if" type bridge
ip addr add "$node_ip/32" dev "$dummy_if"
ip link set "$dummy_if" up
# Nothing forwarded leaves the machine: the only forwarding a node needs here
# is into its own pod bridge (traffic between pods on the bridge is not
# forwarded at all; pod -> node address is local delivery).
iptables -w -I FORWARD 1 ! -o "$bridge_if" -m comment --comment "demo-controller local node: nothing leaves" -j DROP

# --- Control plane, its apiserver set up for a kubelet ------------------------------
LOCAL_CLUSTER_NODE_IP=$node_ip bash "$repo/cluster/up.sh" --dir "$dir/plane" >/dev/null
plane=$dir/plane
# shellcheck source=/dev/null
api_url=$(. "$plane/env" && echo "$APISERVER_URL")
log "control plane up at $api_url ($(secs))"

# --- Certificates and kubeconfigs for the node's components ---------------------------
(
	cd "$dir/pki"
	exec 2>openssl.log
	for c in "kubelet:/O=system:nodes/CN=system:node:$node_name" "kube-scheduler:/CN=system:kube-scheduler" \
		"kube-controller-manager:/CN=system:kube-controller-manager" "kube-proxy:/CN=system:kube-proxy"; do
		n=${c%%:*}
		openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$n.key"
		openssl req -new -key "$n.key" -subj "${c#*:}" -out "$n.csr"
		printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" "extendedKeyUsage=clientAuth" >"$n.ext"
		openssl x509 -req -in "$n.csr" -CA "$plane/pki/ca.crt" -CAkey "$plane/pki/ca.key" -CAcreateserial -CAserial "$dir/pki/ca.srl" -days 365 -extfile "$n.ext" -out "$n.crt"
		rm "$n.csr" "$n.ext"
	done
	chmod 600 ./*.key
) || fail openssl "generating the node's certificates failed: $(cat "$dir/pki/openssl.log")"
for n in kubelet kube-scheduler kube-controller-manager kube-proxy; do
	cat >"$dir/$n.kubeconfig" <<-EOF
		apiVersion: v1
		kind: Config
		clusters:
		- name: local
		  cluster: {server: "$api_url", certificate-authority: "$plane/pki/ca.crt"}
		users:
		- name: $n
		  user: {client-certificate: "$dir/pki/$n.crt", client-key: "$dir/pki/$n.key"}
		contexts:
		- name: local
		  context: {cluster: local, user: $n}
		current-context: local
	EOF
done

# --- containerd ---------------------------------------------------------------------------
cat >"$dir/cni/net.d/10-demo-node.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "demo-node",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$bridge_if",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$pod_cidr", "gateway": "$pod_gateway"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "$dir/cni/ipam"
      }
    }
  ]
}
EOF
# restrict_oom_score_adj: root here lacks CAP_SYS_RESOURCE, so the sandbox's
# oom_score_adj -998 would be refused and every pod fail to start.
cat >"$dir/containerd.toml" <<EOF
version = 2
root = "/var/lib/containerd"
state = "/run/containerd"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.internal.v1.tracing", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "$containerd_sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "$dir/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10"
  restrict_oom_score_adj = true
  enable_cdi = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "/usr/sbin/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$dir/cni/net.d"
EOF

# launch NAME CMD...: started detached in its own session, output to
# logs/NAME.log, pid in NAME.pid. The command line names DIR (every component
# gets a flag or config path under DIR), which down.sh checks before killing.
launch() {
	local name=$1
	shift
	setsid "$@" >>"$dir/logs/$name.log" 2>&1 </dev/null &
	echo "$!" >"$dir/$name.pid"
}
wait_for() { # wait_for WHAT SECONDS LOGNAME COMMAND...
	local what=$1 limit=$2 name=$3 deadline
	shift 3
	deadline=$((SECONDS + limit))
	until "$@" >/dev/null 2>&1; do
		pid_in "$dir" "$name" >/dev/null || fail "$name" "$name exited before $what"
		((SECONDS < deadline)) || fail "$name" "no $what after $limit s"
		sleep 0.2
	done
}

launch containerd containerd --config "$dir/containerd.toml"
wait_for "containerd socket" 30 containerd ctr --address "$containerd_sock" version
log "containerd up ($(secs))"
for t in "$imgs/pause.tar" "$imgs/busybox.tar"; do
	ctr --address "$containerd_sock" -n k8s.io image import --no-unpack "$t" >/dev/null 2>"$dir/logs/import.log" ||
		fail import "importing $t into containerd failed"
done
# The demo-controller image, when `make image` has built one.
if command -v podman >/dev/null && podman image exists demo-controller:dev 2>/dev/null; then
	bash "$here/load-image.sh" podman demo-controller:dev >/dev/null 2>"$dir/logs/import.log" ||
		fail import "importing demo-controller:dev into containerd failed"
fi
log "images imported ($(secs))"

# --- The control-plane controllers -------------------------------------------------------
# --secure-port=0: they serve nothing; --leader-elect=false: there is one of each.
launch kube-scheduler "$bin/kube-scheduler" --kubeconfig="$dir/kube-scheduler.kubeconfig" \
	--leader-elect=false --secure-port=0
launch kube-controller-manager "$bin/kube-controller-manager" --kubeconfig="$dir/kube-controller-manager.kubeconfig" \
	--leader-elect=false --secure-port=0 --use-service-account-credentials \
	--service-account-private-key-file="$plane/pki/sa.key" --root-ca-file="$plane/pki/ca.crt" \
	--cluster-signing-cert-file="$plane/pki/ca.crt" --cluster-signing-key-file="$plane/pki/ca.key" \
	--controllers='*' --node-monitor-grace-period=20s

# --- kubelet ---------------------------------------------------------------------------------
# cgroup v1 here: failCgroupV1 false. Eviction and image GC thresholds low, so
# a small disk never evicts the pods or deletes the local images (they cannot
# be pulled again). readOnlyPort 0, webhook authn/authz as on a real node.
cat >"$dir/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $node_ip
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: "$plane/pki/ca.crt"}
authorization: {mode: Webhook}
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://$containerd_sock
evictionHard: {memory.available: "10Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
resolvConf: ""
serializeImagePulls: false
shutdownGracePeriod: 0s
EOF
launch kubelet "$bin/kubelet" --config="$dir/kubelet.yaml" --kubeconfig="$dir/kubelet.kubeconfig" \
	--hostname-override="$node_name" --node-ip="$node_ip"

# --- kube-proxy ------------------------------------------------------------------------------
# It leaves the conntrack sysctls alone with these zeros; health and metrics on
# loopback; Service node ports only on the node address.
launch kube-proxy "$bin/kube-proxy" --kubeconfig="$dir/kube-proxy.kubeconfig" --hostname-override="$node_name" \
	--proxy-mode=iptables --cluster-cidr="$pod_cidr" --nodeport-addresses="$node_ip/32" \
	--conntrack-max-per-core=0 --conntrack-tcp-timeout-established=0 --conntrack-tcp-timeout-close-wait=0 \
	--iptables-localhost-nodeports=false --healthz-bind-address=127.0.0.1:10256 --metrics-bind-address=127.0.0.1:10249

node_ready() {
	curl -sS --max-time 3 --cacert "$plane/pki/ca.crt" --cert "$plane/pki/admin.crt" --key "$plane/pki/admin.key" \
		"$api_url/api/v1/nodes/$node_name" | python3 -c '
import json, sys
conditions = json.load(sys.stdin).get("status", {}).get("conditions", [])
sys.exit(0 if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions) else 1)'
}
wait_for "Ready node" 90 kubelet node_ready
# Pods are scheduled once the node lifecycle controller has lifted the
# not-ready taint it put on the new node.
schedulable() {
	curl -sS --max-time 3 --cacert "$plane/pki/ca.crt" --cert "$plane/pki/admin.crt" --key "$plane/pki/admin.key" \
		"$api_url/api/v1/nodes/$node_name" | python3 -c '
import json, sys
sys.exit(1 if json.load(sys.stdin).get("spec", {}).get("taints") else 0)'
}
wait_for "untainted node" 60 kube-controller-manager schedulable
for n in kube-scheduler kube-controller-manager kube-proxy kubelet containerd; do
	pid_in "$dir" "$n" >/dev/null || fail "$n" "$n exited during the start"
done
log "node $node_name Ready ($(secs))"

cat >"$dir/env" <<EOF
NODE_DIR=$dir
NODE_NAME=$node_name
NODE_IP=$node_ip
POD_CIDR=$pod_cidr
BIN_DIR=$bin
CONTAINERD_SOCK=$containerd_sock
KUBECONFIG=$plane/kubeconfig
EOF
ok=1
echo "export KUBECONFIG=$plane/kubeconfig"
