# Sourced by cluster/lib.sh and cluster/node/lib.sh: how the cluster scripts
# find and stop the processes they started. The caller defines log().

# alive PID: running, not a zombie waiting for its parent to reap it.
alive() {
	local stat
	read -r stat 2>/dev/null <"/proc/$1/stat" || return 1
	stat=${stat##*) } # the state follows the command name, which may hold spaces
	[[ -n $stat && ${stat%% *} != Z ]]
}

# stop PID...: SIGTERM, up to 10 s to exit, then SIGKILL.
stop() {
	local pid deadline
	(($#)) || return 0
	kill -TERM "$@" 2>/dev/null || true
	deadline=$((SECONDS + 10))
	for pid in "$@"; do
		while alive "$pid" && ((SECONDS < deadline)); do sleep 0.1; done
		if alive "$pid"; then
			log "pid $pid ignored SIGTERM for 10 s; killing it"
			kill -KILL "$pid" 2>/dev/null || true
		fi
	done
	return 0
}

# pid_in DIR NAME: the pid in DIR/NAME.pid if that process is alive and its
# command line names DIR, so a recycled pid is never taken for ours; fails
# otherwise.
pid_in() {
	local pid
	pid=$(cat "$1/$2.pid" 2>/dev/null) || return 1
	[[ $pid =~ ^[0-9]+$ && -r /proc/$pid/cmdline ]] || return 1
	tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -qF -- "$1/" || return 1
	echo "$pid"
}
