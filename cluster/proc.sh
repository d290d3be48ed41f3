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

# plane_ready DIR: the control plane cluster/up.sh started in DIR runs (its
# kube-controller-manager too, if it was started with one) and answers
# /readyz; prints its URL. DIR must have been through the directory guard
# below: its env is sourced.
plane_ready() {
	local url
	[[ -f $1/env && -f $1/kubeconfig ]] && pid_in "$1" etcd >/dev/null && pid_in "$1" kube-apiserver >/dev/null || return 1
	[[ ! -e $1/kube-controller-manager.sh ]] || pid_in "$1" kube-controller-manager >/dev/null || return 1
	# shellcheck source=/dev/null
	url=$(. "$1/env" && echo "$APISERVER_URL")
	[[ $(curl -sS --max-time 3 --cacert "$1/pki/ca.crt" --cert "$1/pki/admin.crt" --key "$1/pki/admin.key" \
		"$url/readyz" 2>/dev/null) == ok ]] && echo "$url"
}

# owner_ok UID: root, us, or TRUSTED_UID (set by a caller that runs this
# repository's scripts as root: their owner could change the scripts
# themselves anyway).
owner_ok() { [[ $1 == 0 || $1 == "$EUID" || $1 == "${TRUSTED_UID:-0}" ]]; }

# checked PATH: prints PATH resolved (absolute, every symlink followed) once
# nothing another user controls can change what it names: every component of
# PATH as given (a symlink by its own owner) and every component of the
# resolved path, up to /, is owned by root, by us or by TRUSTED_UID, and none
# is writable by anybody else (a shared directory with the sticky bit, like
# /tmp, is fine: only an entry's owner can replace it there, and that entry
# is checked too). Otherwise says which path and why, in one line, and fails.
#
# Callers use the printed path, never PATH again: a symlink on PATH that
# pointed at the checked file a moment ago may point elsewhere now, while the
# resolved path runs only through directories no other user can change.
checked() {
	local given=$1 real paths=(/)
	[[ $given == /* ]] || given=$PWD/$given
	# Every part of the path as given, from / down, first: the first part
	# another user controls is the one named, whatever their symlinks below
	# it point at this instant. Then every part of the resolved path.
	prefixes "$given"
	judge "$1" "${paths[@]}" || return 1
	real=$(realpath -e -- "$given" 2>/dev/null) || { log "error: refusing to use $1: it does not exist"; return 1; }
	paths=(/)
	prefixes "$real"
	judge "$1" "${paths[@]}" || return 1
	echo "$real"
}

# judge WHAT PATH...: check_one for each PATH, in order; one stat for them
# all, as this runs for every binary of every start (and one each, only to
# name the first that fails, when one of them is missing).
judge() {
	local what=$1 i p owner mode type st=()
	shift
	mapfile -t st < <(stat -c '%u %a %F' -- "$@" 2>/dev/null)
	if ((${#st[@]} != $#)); then
		for p in "$@"; do
			read -r owner mode type < <(stat -c '%u %a %F' -- "$p" 2>/dev/null) ||
				{ log "error: refusing to use $what: $p does not exist"; return 1; }
			check_one "$what" "$p" "$owner" "$mode" "$type" || return 1
		done
		return 0
	fi
	for ((i = 1; i <= $#; i++)); do
		read -r owner mode type <<<"${st[i - 1]}"
		check_one "$what" "${!i}" "$owner" "$mode" "$type" || return 1
	done
}

# prefixes PATH: appends to paths every path from the first part of PATH
# (absolute) down to PATH itself.
prefixes() {
	local part parts p=
	IFS=/ read -ra parts <<<"$1"
	for part in "${parts[@]}"; do
		[[ -n $part ]] || continue
		p=$p/$part
		paths+=("$p")
	done
}

# check_one WHAT PATH OWNER MODE TYPE: PATH (as stat saw it; a symlink by
# its own owner) is owned by root, us or TRUSTED_UID and writable by nobody
# else (see checked, which refuses WHAT, in one line, when it is not).
check_one() {
	local what=$1 p=$2 owner=$3 mode=$4 type=$5
	if ! owner_ok "$owner"; then
		log "error: refusing to use $what: $p is owned by uid $owner, so that user could have replaced it; ${TRUSTED_HINT:-build it afresh as this user (remove the cache, or set DEMO_CONTROLLER_CACHE to a directory of your own)}"
		return 1
	fi
	if [[ $type != "symbolic link" ]] && ((8#$mode & 8#022)) && { [[ $type != directory ]] || ((!(8#$mode & 8#1000))); }; then
		log "error: refusing to use $what: $p is writable by other users (mode $mode), so one of them could have replaced it; ${TRUSTED_HINT:-chmod go-w it or build afresh}"
		return 1
	fi
}

# make_dirs PATH: PATH as a directory, made if missing, and printed resolved
# (see checked). Nothing is made through a path before it is checked: the
# deepest level that exists is checked first, then each missing level is made
# by itself below it (`mkdir -m 700`, never -p, which would follow whatever
# symlink another user planted in between) and checked in turn.
make_dirs() {
	local p rest=() name
	p=$(realpath -m -s -- "$1") # absolute; symlinks left for checked to judge
	while [[ ! -e $p && ! -L $p ]]; do
		rest=("${p##*/}" ${rest[@]+"${rest[@]}"})
		p=$(dirname -- "$p")
	done
	p=$(checked "$p") || return 1
	for name in ${rest[@]+"${rest[@]}"}; do
		# Made meanwhile by a concurrent run: judged like any other.
		mkdir -m 700 -- "$p/$name" 2>/dev/null || [[ -e $p/$name ]] || { log "error: could not create $p/$name"; return 1; }
		p=$(checked "$p/$name") || return 1
	done
	[[ -d $p ]] || { log "error: refusing to use $1: $p is not a directory"; return 1; }
	echo "$p"
}

# cache_dir SUB: the project's cache directory SUB (e.g. control-plane/KEY),
# under $DEMO_CONTROLLER_CACHE (default ~/.cache/demo-controller), made if
# missing and printed resolved: builds write there, and root runs what they
# wrote, so it must be a directory only root or we can change (make_dirs).
cache_dir() {
	make_dirs "${DEMO_CONTROLLER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/demo-controller}/$1"
}

# go_caches: Go's build and module caches (`go env GOCACHE GOMODCACHE`),
# made if missing and checked (make_dirs): go build trusts what they hold,
# and root runs what it builds, so a cache another user could change (an
# inherited GOCACHE in a shared directory) is refused in one line, as is a
# cache Go cannot name (GOCACHE=off, a relative path, no HOME).
go_caches() {
	local out d dirs
	out=$(go env GOCACHE GOMODCACHE 2>&1) || { log "error: \`go env GOCACHE GOMODCACHE\` failed: ${out%%$'\n'*}"; return 1; }
	mapfile -t dirs <<<"$out"
	for d in "${dirs[0]-}" "${dirs[1]-}"; do
		[[ $d == /* ]] || { log "error: Go names '$d' as a cache (GOCACHE, GOMODCACHE): set both to absolute directories of your own"; return 1; }
		TRUSTED_HINT="set GOCACHE and GOMODCACHE to directories of your own, or unset them" make_dirs "$d" >/dev/null || return 1
	done
}

# --- The directory guard ---------------------------------------------------------
# Every script that works in or removes a DIR (cluster/up.sh and down.sh, the
# node's up.sh, down.sh and exec.sh, and so both demos) goes through these:
# a DIR is used only when this project made it. Made means: created by
# claim_dir with `mkdir -m 700` (which fails if anyone made it first), so it
# is ours, mode 0700, and holds MARKER, a file only we could have written in
# it. A DIR that merely looks like ours (the files a cluster has, a marker
# someone else wrote) is refused. The caller sets dir and repo; every
# directory above DIR may also be the repository owner's (TRUSTED_UID).

# as_dir_check CMD ARGS...: CMD (checked, make_dirs) as DIR's checks run it:
# DIR and the directories above it may be the repository owner's too (their
# owner could change the scripts themselves anyway).
# shellcheck disable=SC2154 # repo: set by the caller
as_dir_check() {
	TRUSTED_UID=$(stat -c %u "$repo") TRUSTED_HINT="pick a --dir that only root (or the repository's owner) can change" "$@"
}

# refuse_dir WHY: the one line of a refusal, and exit 1: nothing was changed.
refuse_dir() {
	log "error: refusing --dir $dir: $1; not touching it"
	exit 1
}

# guard_dir MARKER: exits 1 (refuse_dir) unless DIR is a directory this
# project made (see above); then sets dir to its resolved path.
guard_dir() {
	local marker=$1 owner mode
	[[ -d $dir ]] || refuse_dir "it is not a directory"
	read -r owner mode < <(stat -L -c '%u %a' -- "$dir")
	[[ $owner == "$EUID" ]] || refuse_dir "it is owned by uid $owner, not by uid $EUID, who runs this"
	[[ -f $dir/$marker && ! -L $dir/$marker ]] || refuse_dir "it was not made by this project (no $marker in it)"
	[[ $mode == 700 ]] || refuse_dir "its mode is $mode, not the 700 it was made with"
	dir=$(as_dir_check checked "$dir") || exit 1
}

# guard_or_parent MARKER: guard_dir when DIR exists; otherwise checks the
# deepest directory above it that exists (where claim_dir will make it), so
# a DIR that would be refused is refused before anything is built or made.
guard_or_parent() {
	local p
	if [[ -e $dir || -L $dir ]]; then
		guard_dir "$1"
		return
	fi
	p=$(realpath -m -s -- "$dir")
	while [[ ! -e $p && ! -L $p ]]; do p=$(dirname -- "$p"); done
	as_dir_check checked "$p" >/dev/null || exit 1
}

# claim_dir MARKER: DIR, guarded when it exists; otherwise made: its missing
# parents by make_dirs, DIR itself by `mkdir -m 700` (failing, so refused, if
# someone made it meanwhile), its owner and mode checked, MARKER written.
# Sets dir to its resolved path.
claim_dir() {
	local marker=$1 parent
	if [[ -e $dir || -L $dir ]]; then
		guard_dir "$marker"
		return
	fi
	parent=$(as_dir_check make_dirs "$(dirname -- "$(realpath -m -s -- "$dir")")") || exit 1
	dir=$parent/$(basename -- "$dir")
	mkdir -m 700 -- "$dir" 2>/dev/null || refuse_dir "it was made by someone else meanwhile"
	[[ ! -L $dir && $(stat -c '%u %a' -- "$dir") == "$EUID 700" ]] || refuse_dir "it is not the directory just made"
	echo created >"$dir/$marker"
}

# --- What cargo built -------------------------------------------------------------
# The demos and the chapters run the binaries cargo builds, root too. Where
# cargo builds is its own choice (CARGO_TARGET_DIR, build.target-dir in a
# .cargo/config.toml, and on a newer cargo a build directory of its own where
# it compiles first), so cargo is asked, and each directory is checked like
# any other path root runs from (see checked): only root, we or the
# repository's owner may be able to change it.
target_hint="set CARGO_TARGET_DIR to a directory only you (or the repository's owner) can change, or unset it"

# cargo_home: checks CARGO_HOME (default ~/.cargo), which every cargo
# command reads (`cargo install` too, outside any workspace): its config
# files, and everything in registry/ and git/ (the sources of the crates it
# downloaded: cargo compiles and runs their build scripts and proc-macros)
# and bin/ (where cargo looks first for a subcommand such as cargo-fmt), so
# that no other user could change a file there: each is owned by root or us
# and writable by nobody else (each path as `checked` judges it; `sudo` may
# keep a user's HOME or CARGO_HOME). One that fails is refused in one line.
cargo_home() {
	local home=${CARGO_HOME:-$HOME/.cargo} f sub bad owner mode type
	local hint="set CARGO_HOME to a directory of your own"
	for f in "$home"/config{,.toml}; do
		[[ -e $f || -L $f ]] || continue
		TRUSTED_HINT=$hint checked "$f" >/dev/null || return 1
	done
	# CARGO_HOME itself (or, missing, the directory cargo would make it
	# in): whoever could change it could add those directories later.
	f=$home
	while [[ ! -e $f && ! -L $f ]]; do f=$(dirname -- "$f"); done
	TRUSTED_HINT=$hint checked "$f" >/dev/null || return 1
	for sub in registry git bin; do
		f=$home/$sub
		[[ -e $f || -L $f ]] || continue
		f=$(TRUSTED_HINT=$hint checked "$f") || return 1
		# Below it, the first entry of another user's, or writable by
		# others (a symlink, whose mode means nothing, only by its owner;
		# a sticky directory too: others could add entries to it).
		bad=$(find "$f" \( ! -uid 0 ! -uid "$EUID" \) -print -quit -o \( ! -type l -perm /022 \) -print -quit 2>/dev/null) || bad=$f
		[[ -z $bad ]] && continue
		read -r owner mode type < <(stat -c '%u %a %F' -- "$bad" 2>/dev/null) || owner=''
		if [[ -n $owner ]] && ! owner_ok "$owner"; then
			log "error: refusing to use $home/$sub: $bad is owned by uid $owner, so that user could have replaced it; $hint"
		elif [[ -n $owner && $type != "symbolic link" ]] && ((8#$mode & 8#022)); then
			log "error: refusing to use $home/$sub: $bad is writable by other users (mode $mode), so one of them could have replaced it; $hint"
		else
			log "error: refusing to use $home/$sub: not all of it could be read ($bad)"
		fi
		return 1
	done
}

# cargo_target: checks the directories cargo will build in before anything
# is built there (one that does not exist yet by the deepest directory above
# it that does), and the configuration files that could name another one (or
# a program for cargo to run): .cargo/config.toml in the repository and every
# directory above it, and CARGO_HOME (cargo_home). Prints the target directory, where
# the binaries end up; fails with one line when one is refused. Every make
# target that runs cargo goes through it, most through cluster/cargo.sh.
# shellcheck disable=SC2154 # repo: set by the caller
cargo_target() {
	local meta target build d f
	command -v cargo >/dev/null 2>&1 || { log "error: cargo is not installed: install Rust 1.89 or newer (https://rustup.rs) and run this again"; return 1; }
	d=$repo
	while :; do
		for f in "$d/.cargo/config" "$d/.cargo/config.toml"; do
			[[ -e $f || -L $f ]] || continue
			TRUSTED_UID=$(stat -c %u "$repo") TRUSTED_HINT="remove it, or make it and the directories above it only yours" checked "$f" >/dev/null || return 1
		done
		[[ $d == / ]] && break
		d=$(dirname -- "$d")
	done
	cargo_home || return 1
	meta=$(cd "$repo" && cargo metadata --no-deps --format-version 1 --locked 2>&1) || { log "error: cargo cannot read the workspace: ${meta%%$'\n'*}"; return 1; }
	target=$(grep -o '"target_directory":"[^"]*"' <<<"$meta" | cut -d'"' -f4) || true
	build=$(grep -o '"build_directory":"[^"]*"' <<<"$meta" | cut -d'"' -f4) || true
	[[ $target == /* ]] || { log "error: cargo metadata named no target directory"; return 1; }
	for d in "$target" ${build:+"$build"}; do
		while [[ ! -e $d && ! -L $d ]]; do d=$(dirname -- "$d"); done
		TRUSTED_UID=$(stat -c %u "$repo") TRUSTED_HINT=$target_hint checked "$d" >/dev/null || return 1
	done
	echo "$target"
}

# built TARGET FILE: FILE below the target directory TARGET (cargo_target),
# resolved and checked once cargo has built it; the caller runs the printed
# path (see checked). Fails with one line when it is refused.
built() {
	TRUSTED_UID=$(stat -c %u "$repo") TRUSTED_HINT=$target_hint checked "$1/$2"
}

# stop_logger: the demos' end, for the logger they started ($logger, set by
# the caller, as are say and interrupted). Its first signal makes it drain
# what is queued and exit; a second one makes it exit at once, the drain cut
# short. So it gets one signal: after Ctrl-C (the caller's INT trap sets
# interrupted) it has had it already, as the terminal sends SIGINT to the
# whole foreground process group, and it is only waited for (SIGTERM only if
# it still runs 10 s later: then the SIGINT was sent to the script alone).
# Otherwise it gets SIGTERM, and is waited for.
stop_logger() {
	local deadline
	[[ -n ${logger:-} ]] && alive "$logger" || return 0
	if [[ -n ${interrupted:-} ]]; then
		say "waiting for demo-controller (Ctrl-C reached it too: it drains its queue and exits)"
		deadline=$((SECONDS + 10))
		while alive "$logger" && ((SECONDS < deadline)); do sleep 0.1; done
	fi
	if alive "$logger"; then
		((${interrupted:-0})) || say "stopping demo-controller (SIGTERM: it drains its queue and exits 0)"
		kill -TERM "$logger" 2>/dev/null || true
	fi
	wait "$logger" 2>/dev/null || true
}

# --- Quiet steps -------------------------------------------------------------------
# step LABEL NAME CMD...: one slow step of the set-up (a build, the packages)
# as one line on stderr, the way a progress bar would: LABEL, the seconds it
# took and the log that holds CMD's whole stderr. CMD's stdout passes
# through (build.sh prints the directory it built into there). On failure
# the line says so and the last 30 lines of the log follow; the step's exit
# status is returned. The log is written in step_logs, a directory made like
# the caches (make_dirs: `mkdir -m 700`, every level checked), first under a
# name of its own (mktemp), then renamed to NAME.log, the newest of its kind.
# When that directory cannot be made (a cache another user could change),
# CMD runs as it is, its output not hidden: CMD refuses that cache itself,
# in its own one line.
step() {
	local label=$1 name=$2 t0=$SECONDS status=0 logs tmp log
	shift 2
	if ! logs=$(cache_dir logs 2>/dev/null) || ! tmp=$(mktemp -- "$logs/$name.XXXXXX" 2>/dev/null); then
		"$@"
		return
	fi
	[[ -t 2 ]] && printf '==> %s ...' "$label" >&2
	"$@" 2>"$tmp" || status=$?
	log=$logs/$name.log
	mv -f -- "$tmp" "$log" || log=$tmp
	[[ -t 2 ]] && printf '\r\033[K' >&2
	if ((status)); then
		printf '==> %s: failed after %d s (exit %d); the last 30 lines of %s:\n' "$label" "$((SECONDS - t0))" "$status" "$log" >&2
		tail -n 30 -- "$log" | sed 's/^/    /' >&2
		return "$status"
	fi
	printf '==> %s: %d s (log: %s)\n' "$label" "$((SECONDS - t0))" "$log" >&2
}
