# Sourced by up.sh and down.sh: where the repo is, which cluster directory
# to use (--dir DIR, default <repo>/target/local-cluster; -h/--help prints the
# calling script's header comment), its marker, and the process and directory
# helpers both need. The caller defines log(). up.sh alone also takes
# --no-controller-manager (it sets with_kcm=1 before sourcing this, which
# the flag turns to 0).
here=$(cd "$(dirname "${BASH_SOURCE[1]}")" && pwd)
repo=$(dirname "$here")

usage() { echo "usage: $0 [--dir DIR]${with_kcm+ [--no-controller-manager]}" >&2; exit 2; }
dir=$repo/target/local-cluster
while (($#)); do
	case $1 in
	--dir) (($# >= 2)) || usage; dir=$2; shift 2 ;;
	--dir=*) dir=${1#--dir=}; shift ;;
	--no-controller-manager) [[ -n ${with_kcm:-} ]] || usage; with_kcm=0; shift ;;
	-h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0" >&2; exit 0 ;;
	*) usage ;;
	esac
done

# A file in DIR that says "up.sh made this directory": see the directory
# guard in proc.sh. down.sh removes only a DIR that holds it.
marker=.demo-controller-cluster

# alive, stop, pid_in, checked and the directory guard, shared with the
# node's scripts.
source "$here/proc.sh"
