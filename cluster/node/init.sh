#!/usr/bin/env bash
# Pid 1 of the local node, run by cluster/node/up.sh inside new pid, mount,
# network and UTS namespaces (`unshare`). It makes the node's own view of the
# machine, starts every component inside it, writes DIR/ready (or DIR/failed
# with one line saying why) and then stays, reaping orphans, until
# cluster/node/down.sh kills it: when pid 1 dies the kernel kills every
# process of the namespace and drops its mounts and network with it.
#
# Usage (up.sh only): init.sh DIR        Logs to DIR/logs/init.log.
set -euo pipefail

dir=$1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
log() { echo "node/init.sh: $*" >&2; }
source "$here/lib.sh"
# shellcheck source=/dev/null
source "$dir/init.env" # repo, timeout, and the binaries and archives up.sh checked, by their resolved paths
: "${repo:?}" "${timeout:?}" "${kubelet:?}" "${kube_scheduler:?}" "${kube_controller_manager:?}" "${kube_proxy:?}" \
	"${pause_tar:?}" "${busybox_tar:?}"
t0=${EPOCHREALTIME//[!0-9]/}
secs() { local m=$(((${EPOCHREALTIME//[!0-9]/} - t0) / 1000)); echo "$((m / 1000)).$((m % 1000 / 100)) s"; }

# fail LOGNAME MESSAGE: the one line up.sh prints, the log's tail, and exit;
# pid 1 exiting takes the whole node with it.
fail() {
	log "error: $2"
	[[ -f $dir/logs/$1.log ]] && { log "last 30 lines of $dir/logs/$1.log:"; tail -n 30 "$dir/logs/$1.log" | sed 's/^/    /' >&2; }
	echo "$2" >"$dir/failed"
	exit 1
}
trap 'fail init "init.sh failed at line $LINENO"' ERR

# --- Its own view of the machine ------------------------------------------------------
# `unshare --propagation private` made every mount private: nothing mounted
# here appears on the host. /run, /var/lib and /var/log become DIR's, so the
# components keep their usual paths and the host's directories stay as they are.
mount --bind "$dir/root/run" /run
mount --bind "$dir/root/var-lib" /var/lib
mount --bind "$dir/root/var-log" /var/log
# Host-wide sysctls the kubelet writes: each masked by a file holding the
# host's value, so its write lands in the file.
for s in "${masked_sysctls[@]}"; do
	[[ -e /proc/sys/$s ]] || continue
	f=$dir/sysctl/${s//\//.}
	cat "/proc/sys/$s" >"$f"
	mount --bind "$f" "/proc/sys/$s"
done
hostname "$node_name"

# --- Network: the link up.sh made, loopback, the forward guard ------------------------------
deadline=$((SECONDS + 30))
until [[ -f $dir/net-ready ]]; do
	((SECONDS < deadline)) || fail init "the host end of the node's link never came"
	sleep 0.05
done
ip link set lo up
ip addr add "$node_ip/$link_prefix" dev "$node_if"
ip link set "$node_if" up
# No default route: the node reaches the host's end of its link and nothing
# beyond, so a pod's packet for anywhere else is dropped right here. And no
# pod's packet is forwarded to the host either (the host would answer a pod
# address through its own default route).
iptables -w -I FORWARD 1 -o "$node_if" -m comment --comment "demo-controller node: pods never reach the host" -j DROP
# Nor does anything on the node itself (its components, and hostNetwork pods,
# which share this network namespace) open a connection to the host: every
# host service bound to 0.0.0.0 answers on the host's end of the link. Only
# replies leave through it, to what the host asked for (the API server, the
# kubelet). In mangle's POSTROUTING, which every packet leaving the node
# passes, locally made or forwarded, before any filter chain of kube-proxy's
# could accept it. No IPv6 on the link either, as on the host's end.
sysctl -qw "net.ipv6.conf.$node_if.disable_ipv6=1" 2>/dev/null || true
iptables -w -t mangle -A POSTROUTING -o "$node_if" -m conntrack ! --ctstate ESTABLISHED,RELATED \
	-m comment --comment "demo-controller node: only replies to the host" -j DROP
ip6tables -w -t mangle -A POSTROUTING -o "$node_if" -m comment --comment "demo-controller node: only replies to the host" -j DROP

# --- Control plane, its apiserver set up for a kubelet ------------------------------
LOCAL_CLUSTER_NODE_IP=$node_ip bash "$repo/cluster/up.sh" --dir "$dir/plane" --no-controller-manager >/dev/null 2>>"$dir/logs/plane.log" ||
	fail plane "the control plane did not start"
plane=$dir/plane
# shellcheck source=/dev/null
api_url=$(. "$plane/env" && echo "$APISERVER_URL")
log "control plane up at $api_url ($(secs))"

# --- Certificates and kubeconfigs for the node's components ---------------------------
(
	cd "$dir/pki"
	exec 2>openssl.log
	umask 077
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
) || fail init "generating the node's certificates failed: $(cat "$dir/pki/openssl.log")"
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
# The bridge and its pods exist only in this network namespace; ipMasq false
# and no default route: pods reach each other, the node and the API server.
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
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    }
  ]
}
EOF
# restrict_oom_score_adj: root here may lack CAP_SYS_RESOURCE, so the
# sandbox's oom_score_adj -998 would be refused and every pod fail to start.
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

# launch NAME CMD...: started in the background, output to logs/NAME.log, pid
# (as seen in here) in NAME.pid.
launch() {
	local name=$1
	shift
	"$@" >>"$dir/logs/$name.log" 2>&1 </dev/null &
	echo "$!" >"$dir/$name.pid"
}
running() { local p; p=$(cat "$dir/$1.pid" 2>/dev/null) && alive "$p"; }
wait_for() { # wait_for WHAT SECONDS LOGNAME COMMAND...
	local what=$1 limit=$2 name=$3 deadline
	shift 3
	deadline=$((SECONDS + limit))
	until "$@" >/dev/null 2>&1; do
		running "$name" || fail "$name" "$name exited before $what"
		((SECONDS < deadline)) || fail "$name" "no $what after $limit s"
		sleep 0.2
	done
}

launch containerd containerd --config "$dir/containerd.toml"
wait_for "containerd socket" 30 containerd ctr --address "$containerd_sock" version
log "containerd up ($(secs))"
for t in "$pause_tar" "$busybox_tar"; do
	ctr --address "$containerd_sock" -n k8s.io image import --no-unpack "$t" >/dev/null 2>"$dir/logs/import.log" ||
		fail import "importing $t into containerd failed"
done
log "images imported ($(secs))"

# --- The control-plane controllers -------------------------------------------------------
# --secure-port=0: they serve nothing; --leader-elect=false: there is one of each.
# --flex-volume-plugin-dir: the controller-manager makes it on start (by
# default under /usr/libexec, on the host), as the kubelet does its own.
launch kube-scheduler "$kube_scheduler" --kubeconfig="$dir/kube-scheduler.kubeconfig" \
	--leader-elect=false --secure-port=0
launch kube-controller-manager "$kube_controller_manager" --kubeconfig="$dir/kube-controller-manager.kubeconfig" \
	--leader-elect=false --secure-port=0 --use-service-account-credentials \
	--service-account-private-key-file="$plane/pki/sa.key" --root-ca-file="$plane/pki/ca.crt" \
	--cluster-signing-cert-file="$plane/pki/ca.crt" --cluster-signing-key-file="$plane/pki/ca.key" \
	--controllers='*' --node-monitor-grace-period=20s --flex-volume-plugin-dir="$dir/volume-plugins"

# --- kubelet ---------------------------------------------------------------------------------
# cgroupRoot: every pod under the node's own cgroup. volumePluginDir: the
# kubelet makes it on start (by default under /usr/libexec, on the host). cgroup v1 here:
# failCgroupV1 false. Eviction and image GC thresholds low, so a small disk
# never evicts the pods or deletes the local images (they cannot be pulled
# again). No anonymous requests, no read-only port, webhook authn/authz as on
# a real node.
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
cgroupRoot: /$(cgroup_name)
volumePluginDir: $dir/volume-plugins
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
launch kubelet "$kubelet" --config="$dir/kubelet.yaml" --kubeconfig="$dir/kubelet.kubeconfig" \
	--hostname-override="$node_name" --node-ip="$node_ip"

# --- kube-proxy ------------------------------------------------------------------------------
# Its rules are this network namespace's. It leaves the conntrack sysctls
# alone with these zeros (nf_conntrack_max is host-wide); health and metrics
# on loopback; Service node ports only on the node address.
launch kube-proxy "$kube_proxy" --kubeconfig="$dir/kube-proxy.kubeconfig" --hostname-override="$node_name" \
	--proxy-mode=iptables --cluster-cidr="$pod_cidr" --nodeport-addresses="$node_ip/32" \
	--conntrack-max-per-core=0 --conntrack-tcp-timeout-established=0 --conntrack-tcp-timeout-close-wait=0 \
	--iptables-localhost-nodeports=false --healthz-bind-address=127.0.0.1:10256 --metrics-bind-address=127.0.0.1:10249

node_json() {
	curl -sS --max-time 3 --cacert "$plane/pki/ca.crt" --cert "$plane/pki/admin.crt" --key "$plane/pki/admin.key" \
		"$api_url/api/v1/nodes/$node_name"
}
node_ready() {
	node_json | python3 -c '
import json, sys
conditions = json.load(sys.stdin).get("status", {}).get("conditions", [])
sys.exit(0 if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions) else 1)'
}
wait_for "Ready node" "$timeout" kubelet node_ready
# Pods are scheduled once the node lifecycle controller has lifted the
# not-ready taint it put on the new node.
schedulable() {
	node_json | python3 -c '
import json, sys
sys.exit(1 if json.load(sys.stdin).get("spec", {}).get("taints") else 0)'
}
wait_for "untainted node" 60 kube-controller-manager schedulable
for n in kube-scheduler kube-controller-manager kube-proxy kubelet containerd; do
	running "$n" || fail "$n" "$n exited during the start"
done
log "node $node_name Ready ($(secs))"
trap - ERR
touch "$dir/ready"

# --- Pid 1 from here on -----------------------------------------------------------------
# Orphans (containerd's shims start as daemons) are reparented to pid 1:
# bash reaps every child that exits, so none is left a zombie. SIGTERM and
# SIGINT are ignored by a pid 1 without handlers; down.sh uses SIGKILL.
while :; do
	sleep 3600 &
	wait $! || true
done
