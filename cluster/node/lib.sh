# Sourced by cluster/node/up.sh and down.sh: the node's fixed names and
# addresses, and how the host's state is recorded before the node changes it.

node_name=demo-node
node_ip=198.18.0.10     # benchmarking range (RFC 2544): routes nowhere, unlike TEST-NET-1 it is on no link here
pod_cidr=203.0.113.0/24 # TEST-NET-3
pod_gateway=203.0.113.1
dummy_if=dcn-node0
bridge_if=dcn-br0
containerd_sock=/run/containerd/containerd.sock

# alive, stop and pid_in: the same helpers as the control plane's scripts.
source "$(dirname "${BASH_SOURCE[0]}")/../proc.sh"

# parse_dir ARGS...: the scripts' one option, --dir DIR (default
# <repo>/target/local-node; the caller sets repo); -h/--help prints the
# calling script's header comment.
parse_dir() {
	dir=$repo/target/local-node
	while (($#)); do
		case $1 in
		--dir) dir=${2:?--dir needs a directory}; shift 2 ;;
		--dir=*) dir=${1#--dir=}; shift ;;
		-h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0" >&2; exit 0 ;;
		*) echo "usage: $0 [--dir DIR]" >&2; exit 2 ;;
		esac
	done
}

# Host settings the node changes: the kubelet sets the three kernel ones on
# start (no setting leaves them alone), the CNI bridge plugin ip_forward.
node_sysctls=(kernel.panic kernel.panic_on_oops vm.overcommit_memory net.ipv4.ip_forward)
# Directories the node's components create; removed at the end unless they
# existed before.
node_dirs=(/var/lib/kubelet /var/lib/containerd /run/containerd /var/lib/cni /var/log/pods /var/log/containers /run/netns)

# record_host_state HOSTDIR: what down.sh needs to put the host back.
record_host_state() {
	local h=$1 s d
	for s in "${node_sysctls[@]}"; do echo "$s=$(sysctl -n "$s")"; done >"$h/sysctls"
	iptables-save -t filter >/dev/null 2>&1 || true # make sure the tools work before relying on them
	iptables-save >"$h/iptables"
	ip6tables-save >"$h/ip6tables"
	nft list tables >"$h/nft-tables" 2>/dev/null || : >"$h/nft-tables"
	for d in "${node_dirs[@]}"; do [[ -e $d ]] && echo "$d"; done >"$h/dirs"
	: >"$h/cgroups"
	for d in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/*/k8s.io /sys/fs/cgroup/kubepods /sys/fs/cgroup/k8s.io; do
		[[ -d $d ]] && echo "$d" >>"$h/cgroups"
	done
	touch "$h/complete"
}

