# Sourced by bench/soak.sh and cluster/test.sh (they define `log` and
# `repo`): the lock a soak holds on its control plane for as long as it runs,
# so that no other soak and no `make test` stops a plane a soak is using (a
# recorded hour-long soak, say).
#
# The lock is DIR.lock beside the plane's directory DIR (cluster/down.sh
# removes DIR itself); it holds the pid of the soak that took it. It is held
# with flock on file descriptor 8, which the processes a soak starts must not
# inherit (start them with 8<&-): a kube-apiserver that outlived its soak
# would hold it for ever.

# soak_lock_open DIR: opens DIR.lock on fd 8 in this shell, after checking
# that it is a plain file of this user's (a lock others can open, others can
# hold: root-paths.md), made 0600 if new.
soak_lock_open() {
	local lock=${1%/}.lock
	if [[ -L $lock ]] || { [[ -e $lock ]] && [[ ! -f $lock || $(stat -c %u:%a "$lock") != "$EUID:600" ]]; }; then
		log "error: $lock is not a lock file of this user's with mode 0600: remove it and run this again"
		return 1
	fi
	(umask 077 && : >>"$lock") || return 1
	exec 8>>"$lock"
}

# soak_take_plane DIR: takes DIR's lock for the rest of this shell's life, or
# says in one line which soak holds it and fails (nothing started or stopped).
soak_take_plane() {
	local lock=${1%/}.lock
	soak_lock_open "$1" || return 1
	if ! flock -n 8; then
		exec 8>&-
		log "error: a soak (pid $(cat "$lock" 2>/dev/null)) is using the control plane in $1: wait for it to end, or give this one a plane of its own (--cluster-dir DIR); nothing was started or stopped"
		return 1
	fi
	echo $$ >"$lock"
}

# soak_plane_down DIR: stops the control plane in DIR (cluster/down.sh)
# unless a soak holds its lock; then one line says so, and it is left running.
soak_plane_down() {
	local lock=${1%/}.lock status=0
	(
		soak_lock_open "$1" || exit 1
		if ! flock -n 8; then
			log "left the control plane in $1 running: a soak (pid $(cat "$lock" 2>/dev/null)) is using it"
			exit 0
		fi
		bash "$repo/cluster/down.sh" --dir "$1" 8>&-
	) || status=$?
	return "$status"
}
