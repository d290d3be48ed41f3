# Sourced by the node's scripts (up.sh, init.sh, down.sh, exec.sh, ...): the
# node's fixed names and addresses, the --dir option, and how a directory, a
# cgroup and a running node are recognised as this node's own.

node_name=demo-node
# The node's one link to the host: a veth pair on a /30 of the benchmarking
# range (RFC 2544), which routes nowhere. The host end is the only thing the
# node adds to the host's network; the kernel deletes it with the node's
# network namespace.
host_if=dcn-host0
host_ip=198.18.0.9
node_if=eth0
node_ip=198.18.0.10
link_prefix=30
# Pods: a bridge inside the node, TEST-NET-3, no masquerading, no default
# route out of the node: nothing a pod sends can leave the machine.
bridge_if=dcn-br0
pod_cidr=203.0.113.0/24
pod_gateway=203.0.113.1
# Inside the node the usual paths hold (/run/containerd, /var/lib/kubelet,
# /var/log/pods, ...): its mount namespace has DIR/root/{run,var-lib,var-log}
# mounted over /run, /var/lib and /var/log. So DIR must not be under those.
containerd_sock=/run/containerd/containerd.sock
# A file in DIR that says "up.sh made this directory": see the directory
# guard in proc.sh, which every node script goes through.
marker=.demo-controller-node
# One node per machine (it has fixed addresses and a fixed link name): the
# running node holds an flock on this file for as long as any of its
# processes lives; the file holds the node's DIR. Root's, mode 0600, in
# root's /run: flock needs only a descriptor open for reading, so a file
# anyone could open, anyone could hold (see take_lock).
lock_file=/run/demo-controller-node.lock
# Host sysctls that are not per network namespace and that the kubelet writes
# on start (there is no setting to stop it): inside the node each is masked by
# a file of DIR's, as runc masks /proc paths, so the host's never change.
masked_sysctls=(kernel/panic kernel/panic_on_oops vm/overcommit_memory vm/panic_on_oom kernel/keys/root_maxkeys kernel/keys/root_maxbytes)

# alive, stop, checked and the directory guard: the same helpers as the
# control plane's scripts.
source "$(dirname "${BASH_SOURCE[0]}")/../proc.sh"

# parse_dir ARGS...: the scripts' one option, --dir DIR (default
# <repo>/target/local-node; the caller sets repo); -h/--help prints the
# calling script's header comment. Sets dir, absolute, its symlinks left for
# the directory guard to judge and resolve.
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
	dir=$(realpath -m -s -- "$dir")
	return 0
}

# Only one node per machine: take the lock, or refuse in one line. The lock
# is on fd 8 and is inherited by the node's processes, so it stays held as
# long as any of them lives. down.sh removes the file while holding it; a
# lock taken on a file that was removed meanwhile is let go and taken again.
# The file is made root's and 0600 (umask 077) in /run, which only root can
# write, and checked on the open descriptor before it counts: no other user
# can open it, so none can hold it. One left by an older version (0644, which
# any user could open and hold) is removed and made again, unless a process
# of root's has it open: then it may be a running node's.
take_lock() {
	local other um openers
	checked "$(dirname "$lock_file")" >/dev/null || exit 1
	while :; do
		if [[ -L $lock_file || (-e $lock_file && (! -f $lock_file || $(stat -c '%u %a' -- "$lock_file") != "0 600")) ]]; then
			openers=$(lock_openers)
			if [[ " $openers " == *" 0 "* ]]; then
				log "error: $lock_file is open in a process of root's (a local node of an older version?): stop that node first with its cluster/node/down.sh"
				exit 1
			fi
			log "replacing $lock_file: it was not root's with mode 0600, so any user could hold it${openers:+ (open by uid $openers)}"
			rm -f -- "$lock_file"
		fi
		um=$(umask)
		umask 077
		exec 8>>"$lock_file"
		umask "$um"
		if [[ ! -f /proc/$$/fd/8 || $(stat -Lc '%u %a' "/proc/$$/fd/8") != "0 600" ]]; then
			log "error: $lock_file is not root's with mode 0600 (made meanwhile by something else?): not using it"
			exit 1
		fi
		if ! flock -n 8; then
			other=$(cat "$lock_file" 2>/dev/null || true)
			log "error: a local node is already running${other:+ in $other}: only one can run on a machine; stop it first with cluster/node/down.sh --dir ${other:-ITS_DIR}"
			exit 1
		fi
		[[ $(stat -Lc %d:%i "/proc/$$/fd/8") == "$(stat -c %d:%i "$lock_file" 2>/dev/null)" ]] && break
		exec 8>&-
	done
	echo "$dir" >"$lock_file"
}

# lock_openers: the uids of the processes that have the lock file open (an
# flock is held through an open descriptor; /proc/locks names only the
# process that took it, which may be gone while another still holds it).
lock_openers() {
	# (find fails on processes that exit while it reads /proc: fine here.)
	{ find /proc/[0-9]*/fd -lname "$lock_file" 2>/dev/null || true; } | cut -d/ -f3 |
		while read -r pid; do stat -c %u "/proc/$pid" 2>/dev/null || true; done | sort -un | tr '\n' ' ' | sed 's/ $//'
}

# release_lock: removes the lock file if it names DIR and no node holds it
# (fd 8 is ours or free); after that, anyone may start a node.
release_lock() {
	[[ -f $lock_file ]] || return 0
	{ [[ -e /proc/$$/fd/8 ]] || exec 8<"$lock_file"; } && flock -n 8 && [[ $(cat "$lock_file") == "$dir" ]] && rm -f "$lock_file"
	return 0
}

# cgroup_name: the node's own cgroup, in every hierarchy; pods go under it
# (the kubelet's cgroupRoot) and the node's processes in its `system` child.
# Named after DIR, so a node never takes another's.
cgroup_name() { echo "demo-controller-node-$(printf %s "$dir" | sha256sum | cut -c1-8)"; }

# cgroup_hierarchies: the mounted cgroup hierarchies (each cgroup v1
# controller's, and cgroup v2's), by their mount points.
cgroup_hierarchies() { awk '$3 == "cgroup" || $3 == "cgroup2" { print $2 }' /proc/self/mounts | sort -u; }

# node_init_pid: the host pid of the node's first process (pid 1 inside its
# namespaces), if it runs; fails otherwise. Checked, not trusted: it must be
# the child of the recorded `unshare` whose command line names DIR.
node_init_pid() {
	local holder init
	holder=$(cat "$dir/node.pid" 2>/dev/null) && [[ $holder =~ ^[0-9]+$ ]] || return 1
	tr '\0' ' ' 2>/dev/null <"/proc/$holder/cmdline" | grep -qF -- "unshare " || return 1
	tr '\0' ' ' 2>/dev/null <"/proc/$holder/cmdline" | grep -qF -- " $dir " || return 1
	init=$(cat "/proc/$holder/task/$holder/children" 2>/dev/null) && init=${init%% *} && [[ $init =~ ^[0-9]+$ ]] || return 1
	echo "$init"
}

# in_node CMD...: runs CMD inside the node's namespaces (as its processes see
# the machine: its mounts, network, processes).
in_node() {
	local init
	init=$(node_init_pid) || { log "error: no node runs in $dir"; return 1; }
	nsenter --target "$init" --mount --uts --net --pid --wd=/ -- "$@"
}

# teardown [keep-logs]: removes what this node made, and nothing else:
#  1. its processes: SIGKILL to its pid 1, and the kernel kills every other
#     process of its pid namespace (the control plane, containerd, the
#     kubelet, every pod), drops its mount namespace (every container, pod and
#     network-namespace mount) and deletes its network namespace (bridge,
#     veths, routes, iptables and nft rules, ip_forward); its link to the
#     host is deleted from inside it first (the kernel frees a dead network
#     namespace, and the link with it, in the background, so late that the
#     next node could find the name taken), or, for a node already dead,
#     waited for;
#  2. the cgroups up.sh made (listed in DIR/cgroups), now empty;
#  3. DIR's contents and DIR itself, which up.sh made (the caller has been
#     through the directory guard; with keep-logs: all but DIR/logs and the
#     marker, so a failed start can be read afterwards).
# Nothing is found by a broad name or restored from a snapshot: what the host
# had, and anything anyone else changed meanwhile, stays as it is.
teardown() {
	local keep=${1:-} init ns c t p left cg pids waited=
	cg=$(cgroup_name)
	init=$(node_init_pid) || init=
	ns=$(cat "$dir/pidns" 2>/dev/null) || ns=
	# The cgroups up.sh made: exactly DIR's two per hierarchy, nothing else.
	local ours_cg=()
	if [[ -f $dir/cgroups ]]; then
		while read -r c; do
			for h in $(cgroup_hierarchies); do
				[[ $c == "$h/$cg" || $c == "$h/$cg/system" ]] && ours_cg+=("$c")
			done
		done <"$dir/cgroups"
	fi
	# node_pids: every process in the node's cgroups (the node's own and its
	# pods': all of them are the node's, and only they are there).
	node_pids() {
		local c
		for c in ${ours_cg[@]+"${ours_cg[@]}"}; do
			[[ -d $c ]] && find "$c" -name cgroup.procs -exec cat {} + 2>/dev/null
		done | sort -un
	}
	# The host end of its link goes with its network namespace, which the
	# kernel frees in the background, seconds or minutes after the last
	# process: so while the node runs, its end of the link (a veth's two
	# ends go together) is deleted from inside it, and the name is free at once.
	[[ -n $init ]] && { nsenter --target "$init" --net -- ip link del "$node_if" 2>/dev/null || true; }
	[[ -n $init ]] && kill -KILL "$init" 2>/dev/null
	# Whatever is left in its cgroups (pid 1 not found: node.pid gone, or
	# the run killed before it was written) is the node's too.
	pids=$(node_pids)
	# shellcheck disable=SC2086 # one pid per word
	[[ -z $pids ]] || kill -KILL $pids 2>/dev/null || true
	# Gone when no process is left in the node's pid namespace (the kernel
	# kills them all before it lets pid 1 go) and none in its cgroups.
	t=$((SECONDS + 30))
	while :; do
		left=0
		if [[ -n $ns ]]; then
			for p in /proc/[0-9]*; do
				[[ $(readlink "$p/ns/pid" 2>/dev/null) == "$ns" ]] && alive "${p#/proc/}" && { left=1; break; }
			done
		fi
		for p in $(node_pids); do alive "$p" && left=1; done
		((left)) || break
		((SECONDS < t)) || { log "error: the node's processes are still there 30 s after SIGKILL; not removing $dir"; return 1; }
		sleep 0.1
	done
	# A node already dead when this ran (no pid 1 to enter above): its link
	# goes when the kernel frees its network namespace, in the background.
	# Wait for that, by the boot and index up.sh recorded: the name is not
	# deleted from out here, since a link of that name may be another node's.
	if [[ -f $dir/hostlink ]]; then
		t=$((SECONDS + 300))
		while [[ "$(cat /proc/sys/kernel/random/boot_id) $(cat "/sys/class/net/$host_if/ifindex" 2>/dev/null)" == "$(cat "$dir/hostlink")" ]]; do
			[[ -n ${waited:-} ]] || { log "waiting for the kernel to free the node's network namespace (its link $host_if goes with it)"; waited=1; }
			((SECONDS < t)) || { log "error: the node's link $host_if is still there 300 s after its processes; not removing $dir"; return 1; }
			sleep 0.5
		done
	fi
	# Its cgroups, deepest first; a cgroup empties a moment after its last
	# process exits, hence the retries. One that stays means the node was
	# not all gone: DIR (its record) is kept.
	for ((i = ${#ours_cg[@]} - 1; i >= 0; i--)); do
		c=${ours_cg[i]}
		t=$((SECONDS + 10))
		while [[ -d $c ]]; do
			find "$c" -depth -type d -exec rmdir {} + 2>/dev/null || true
			[[ -d $c ]] || break
			((SECONDS < t)) || { log "error: could not remove the node's cgroup $c; not removing $dir"; return 1; }
			sleep 0.1
		done
	done
	# Nothing of the node is mounted in the host's mount table (its mounts
	# lived and died in its own namespace); if something is, someone else put
	# it there: leave DIR alone.
	if awk -v d="$dir" '{ gsub(/\\040/, " ", $5) } $5 == d || index($5, d "/") == 1 { f = 1 } END { exit !f }' /proc/self/mountinfo; then
		log "error: something is mounted at or under $dir (not by the node): not removing it"
		return 1
	fi
	if [[ -n $keep ]]; then
		find "$dir" -mindepth 1 -maxdepth 1 ! -name logs ! -name "$marker" -exec rm -rf --one-file-system {} +
	else
		rm -rf --one-file-system "$dir"
	fi
	return 0
}
