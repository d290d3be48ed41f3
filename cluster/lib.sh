# Sourced by up.sh and down.sh: where the repo is, which cluster directory
# to use (--dir DIR, default <repo>/target/local-cluster; -h/--help prints the
# calling script's header comment), and the process helpers both need. The
# caller defines log().
here=$(cd "$(dirname "${BASH_SOURCE[1]}")" && pwd)
repo=$(dirname "$here")

usage() { echo "usage: $0 [--dir DIR]" >&2; exit 2; }
dir=$repo/target/local-cluster
while (($#)); do
	case $1 in
	--dir) (($# >= 2)) || usage; dir=$2; shift 2 ;;
	--dir=*) dir=${1#--dir=}; shift ;;
	-h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0" >&2; exit 0 ;;
	*) usage ;;
	esac
done

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
}
