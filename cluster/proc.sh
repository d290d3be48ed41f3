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

# trusted FILE...: succeeds if no other user could have written FILE (a
# binary about to be run, often as root, from a cache under $HOME): FILE and
# every directory above it are owned by root, by us or by TRUSTED_UID (set by
# a caller that runs this repository's scripts as root: their owner could
# change the scripts themselves anyway), and writable by nobody else (a
# shared directory with the sticky bit, like /tmp, is fine: only an entry's
# owner can replace it there). Otherwise says which path and why, in one
# line, and fails.
trusted() {
	local f p owner mode
	for f in "$@"; do
		p=$(readlink -f -- "$f") || { log "error: $f does not exist"; return 1; }
		while :; do
			read -r owner mode < <(stat -c '%u %a' -- "$p")
			if [[ $owner != 0 && $owner != "$EUID" && $owner != "${TRUSTED_UID:-0}" ]]; then
				log "error: refusing to use $f: $p is owned by uid $owner, so that user could have replaced it; ${TRUSTED_HINT:-build it afresh as this user (remove the cache, or set DEMO_CONTROLLER_CACHE to a directory of your own)}"
				return 1
			fi
			if ((8#$mode & 8#022)) && { [[ ! -d $p ]] || ((!(8#$mode & 8#1000))); }; then
				log "error: refusing to use $f: $p is writable by other users (mode $mode), so one of them could have replaced it; ${TRUSTED_HINT:-chmod go-w it or build afresh}"
				return 1
			fi
			[[ $p == / ]] && break
			p=$(dirname -- "$p")
		done
	done
}
