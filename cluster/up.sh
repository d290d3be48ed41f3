#!/usr/bin/env bash
# Starts a real local Kubernetes control plane, kube-apiserver on 127.0.0.1
# and etcd on a unix socket in DIR, for the integration tests, and prints `export KUBECONFIG=...` as
# its last stdout line (progress goes to stderr), so
#     eval "$(cluster/up.sh)"
# works. A kube-controller-manager runs with them, with four controllers: the
# garbage collector (it deletes an object whose owner is gone), the namespace
# controller (it empties a deleted namespace, then removes it), and the two
# that give each namespace its `default` ServiceAccount and fill token
# Secrets. There is no kubelet or scheduler: pods are accepted and stay
# Pending.
#
# Usage: cluster/up.sh [--dir DIR] [--no-controller-manager]
#   DIR defaults to <repo>/target/local-cluster.
#   --no-controller-manager: start kube-apiserver and etcd alone (as the
#   benchmarks measure them); up.sh then makes default/default ServiceAccount
#   itself, and a deleted namespace stays Terminating. A plane already
#   running is left as it was started.
#
# With LOCAL_CLUSTER_NODE_IP=ADDR in the environment (set by cluster/node/init.sh,
# which has put ADDR on the node's end of its link) the apiserver runs as a real
# cluster's does for a kubelet: bound to and advertising ADDR, Node,RBAC
# authorization, the `kubernetes` Service at 198.51.100.1 (TEST-NET-2, routes
# nowhere) with endpoints kept by the lease reconciler, and a client
# certificate (pki/apiserver-kubelet-client.*) for `kubectl logs`/exec.
# Without it nothing of that changes.
#
# DIR afterwards holds:
#   .demo-controller-cluster  says up.sh made DIR (see "Which DIR" below)
#   pki/               CA, apiserver serving cert, admin client cert, service-account keys
#   etcd/              etcd's data
#   etcd.sock:0        etcd's client socket, its only way in (see "Who gets in")
#   logs/              etcd.log, kube-apiserver.log, kube-controller-manager.log
#   etcd.sh            execs etcd with this cluster's flags
#   kube-apiserver.sh  execs kube-apiserver with this cluster's flags; optional
#                      arguments: PORT (overrides --secure-port, e.g. for a second
#                      apiserver on the same etcd; empty = the usual one), then
#                      extra flags
#   kube-controller-manager.sh  execs kube-controller-manager with this
#                      cluster's flags (not written with --no-controller-manager)
#   etcd.pid, kube-apiserver.pid, kube-controller-manager.pid
#   env                APISERVER_PORT, APISERVER_URL, ETCD_SOCKET, BIN_DIR, ... (shell-sourceable)
#   kubeconfig         admin (system:masters) kubeconfig, certificates embedded
#   kube-controller-manager.kubeconfig  the controller-manager's own
#                      (system:kube-controller-manager), certificates embedded
#
# Running it again on a DIR whose control plane is up only prints the export
# line; a DIR left behind by a dead one is wiped and started afresh.
# cluster/down.sh stops everything and removes DIR.
#
# Which DIR: one that does not exist yet (up.sh makes it, mode 0700, and marks
# it as its own), or one up.sh made before: owned by whoever runs this, mode
# 0700, holding the marker. Anything else (a directory someone else made, one
# that merely holds files named like these) is refused in one line and left
# as it is. The binaries run are the ones checked: see `checked` in proc.sh.
#
# Who gets in: etcd listens on no TCP port, only on unix sockets in DIR, which
# is mode 0700, so only the user who started it (and root) reaches it: nobody
# else can write an object past the API server's authentication and
# admission. The API server refuses anonymous requests (--anonymous-auth=false):
# every client needs a certificate or a token. Private keys are 0600.
set -euo pipefail

with_kcm=1 # --no-controller-manager sets 0 (see lib.sh)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

log() { echo "up.sh: $*" >&2; }

# Seconds to wait for /readyz. A warm start takes a few seconds; a loaded CI
# machine can take much longer.
ready_timeout=${LOCAL_CLUSTER_TIMEOUT:-90}

# The apiserver's address and the extra flags for a node (see the header).
node_ip=${LOCAL_CLUSTER_NODE_IP:-}
api_host=${node_ip:-127.0.0.1}
service_range=10.0.0.0/24 service_ip=10.0.0.1 auth_mode=RBAC
if [[ -n $node_ip ]]; then service_range=198.51.100.0/24 service_ip=198.51.100.1 auth_mode=Node,RBAC; fi

# A DIR that exists must be one up.sh made, and one that does not must be
# made below directories no other user can change (the directory guard in
# proc.sh): refused now, before anything is built, made or started.
guard_or_parent "$marker"

curl_admin() {
	curl -sS --max-time 3 --cacert "$dir/pki/ca.crt" --cert "$dir/pki/admin.crt" --key "$dir/pki/admin.key" "$@"
}

export_line() { echo "export KUBECONFIG=$dir/kubeconfig"; }

# --- Already running? --------------------------------------------------------
# Asked before building (the cache may be gone while the control plane runs)
# and again under the lock below (another up.sh may have started it meanwhile).
already_running() {
	local url
	[[ -d $dir ]] && url=$(plane_ready "$dir") || return 1
	log "control plane in $dir is already running at $url"
	export_line
}
already_running && exit 0

# --- Binaries -----------------------------------------------------------------
# One line (step in proc.sh): build.sh's output goes to a log, shown only if
# it fails; its last stdout line is the directory. Each binary is resolved and
# checked once (see checked in proc.sh), and the scripts below run that
# resolved path: nothing another user could swap.
build_out=$(step "kube-apiserver, kube-controller-manager and etcd (built from Go modules once, then cached)" control-plane-build bash "$here/build.sh")
bin_dir=${build_out##*$'\n'}
etcd_bin=$(checked "$bin_dir/etcd") || exit 1
apiserver_bin=$(checked "$bin_dir/kube-apiserver") || exit 1
kcm_bin=$(checked "$bin_dir/kube-controller-manager") || exit 1
for b in "$etcd_bin" "$apiserver_bin" "$kcm_bin"; do
	[[ -x $b ]] || { log "error: build.sh printed '$bin_dir', where $b is not executable"; exit 1; }
done

# Serialise up.sh/down.sh runs on the same DIR (flock on DIR itself), so two
# callers never both start, or one wipe what the other starts. DIR is made
# here if missing (claim_dir: `mkdir -m 700`, marked as ours; only its owner
# reaches etcd's sockets and the keys in it). down.sh may remove DIR while we
# wait, leaving us the lock of a deleted directory: hence the check that DIR
# is still the directory locked, and otherwise another go. Every process
# started below gets fd 9 closed, or it would hold the lock for as long as it
# lives.
while :; do
	claim_dir "$marker"
	exec 9<"$dir"
	flock 9
	[[ $(stat -Lc %d:%i "/proc/$$/fd/9") == "$(stat -c %d:%i "$dir" 2>/dev/null)" ]] && break
	exec 9<&-
done
export LOCAL_CLUSTER_LOCK_HELD=$dir # tells down.sh (called below) that we hold it
already_running && exit 0

# Anything else in DIR is stale (dead processes, a half-finished start, logs of
# a failed one): stop whatever of it still runs and start from nothing.
if [[ -n $(find "$dir" -mindepth 1 -maxdepth 1 ! -name "$marker" -print -quit) ]]; then
	log "removing stale state in $dir"
	bash "$here/down.sh" --dir "$dir" # empties DIR but keeps it (and its marker): our lock is on it
fi

t0=${EPOCHREALTIME//[!0-9]/} # microseconds

# --- Cleanup on failure -------------------------------------------------------
# Until the control plane is ready, any exit (error, timeout, Ctrl-C) stops the
# processes this run started, so a failed start never leaves orphans. The
# logs stay in DIR for diagnosis; the next up.sh wipes them.
started=()
ok=0
on_exit() {
	((ok)) && return
	stop ${started[@]+"${started[@]}"}
	rm -f "$dir"/*.pid
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

fail() { # fail LOGNAME MESSAGE
	log "error: $2"
	log "last 30 lines of $dir/logs/$1.log:"
	tail -n 30 "$dir/logs/$1.log" | sed 's/^/    /' >&2
	exit 1
}

# --- PKI ----------------------------------------------------------------------
# EC P-256 keys: instant to generate, and accepted by kube-apiserver for
# serving and client certificates. The service-account key is RSA, the
# conventional choice that every token consumer supports.
pki=$dir/pki
mkdir -p "$pki" "$dir/logs"
(
	cd "$pki"
	exec 2>openssl.log # openssl is chatty; shown only if it fails
	ec() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1"; }
	ec ca.key
	openssl req -x509 -new -key ca.key -subj /CN=local-cluster-ca -days 3650 -out ca.crt \
		-addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
	# sign NAME SUBJECT EXTENSIONS: NAME.key + NAME.crt signed by the CA.
	sign() {
		ec "$1.key"
		openssl req -new -key "$1.key" -subj "$2" -out "$1.csr"
		printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" "$3" >"$1.ext"
		openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -extfile "$1.ext" -out "$1.crt"
		rm "$1.csr" "$1.ext"
	}
	# $service_ip is the `kubernetes` Service's IP in --service-cluster-ip-range.
	sign apiserver /CN=kube-apiserver \
		"extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:$service_ip${node_ip:+,IP:$node_ip}"
	# How the apiserver proves itself to kubelets (logs, exec): system:masters,
	# as kubeadm's apiserver-kubelet-client certificate was.
	[[ -z $node_ip ]] || sign apiserver-kubelet-client /O=system:masters/CN=kube-apiserver-kubelet-client "extendedKeyUsage=clientAuth"
	# O=system:masters: bound to cluster-admin and bypasses RBAC authorization.
	sign admin /O=system:masters/CN=admin "extendedKeyUsage=clientAuth"
	# The user the apiserver's bootstrap RBAC roles name for the
	# controller-manager; each controller then acts as its own ServiceAccount
	# (--use-service-account-credentials), with that controller's role.
	((!with_kcm)) || sign kube-controller-manager /CN=system:kube-controller-manager "extendedKeyUsage=clientAuth"
	openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out sa.key
	openssl pkey -in sa.key -pubout -out sa.pub
	chmod 600 ./*.key
) || { log "error: generating certificates failed:"; cat "$pki/openssl.log" >&2; exit 1; }

# --- Port ---------------------------------------------------------------------
# The API server's one TCP port: let the kernel pick a free one (bind to port
# 0). Another process can take it between here and the API server binding it;
# that start then fails with "address already in use" and is retried below
# with a fresh port. etcd needs none: it listens on unix sockets.
free_port() {
	python3 -c '
import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
'
}

# --- Scripts that start each server -------------------------------------------
# Each execs the server (so the pid of `bash X.sh &` is the server's pid),
# writes nothing itself and logs to stderr; the caller redirects to a log.
write_scripts() {
	local q_dir q_etcd q_apiserver node_flags=
	# For a node (see the header); a repeated flag's last value wins.
	[[ -z $node_ip ]] || node_flags='--endpoint-reconciler-type=lease --kubelet-preferred-address-types=InternalIP --kubelet-client-certificate="$pki/apiserver-kubelet-client.crt" --kubelet-client-key="$pki/apiserver-kubelet-client.key" '
	q_etcd=$(printf %q "$etcd_bin")
	q_apiserver=$(printf %q "$apiserver_bin")
	q_dir=$(printf %q "$dir")
	cat >"$dir/etcd.sh" <<-EOF
		#!/usr/bin/env bash
		# Generated by cluster/up.sh: execs this local cluster's etcd.
		# Usage: bash etcd.sh [EXTRA FLAGS...] >>logs/etcd.log 2>&1 &
		set -euo pipefail
		dir=$q_dir
		# Unix sockets only, in DIR (mode 0700): no TCP port anyone could
		# reach. etcd names a unix socket after the URL's host:port, relative
		# to its working directory: hence the cd and the ":0" in the names.
		# A single member; --unsafe-no-fsync because the data is throwaway and
		# fsync dominates write latency on CI disks.
		cd "\$dir"
		exec $q_etcd \\
		  --name=local \\
		  --data-dir="\$dir/etcd" \\
		  --listen-client-urls=unix://etcd.sock:0 \\
		  --advertise-client-urls=unix://etcd.sock:0 \\
		  --listen-peer-urls=unix://etcd-peer.sock:0 \\
		  --initial-advertise-peer-urls=unix://etcd-peer.sock:0 \\
		  --initial-cluster=local=unix://etcd-peer.sock:0 \\
		  --initial-cluster-state=new \\
		  --unsafe-no-fsync \\
		  "\$@"
	EOF
	cat >"$dir/kube-apiserver.sh" <<-EOF
		#!/usr/bin/env bash
		# Generated by cluster/up.sh: execs this local cluster's kube-apiserver.
		# Usage: bash kube-apiserver.sh [PORT [EXTRA FLAGS...]] >>LOG 2>&1 &
		#   PORT (empty: $apiserver_port) sets --secure-port, e.g. to run a second
		#   apiserver on the same etcd; EXTRA FLAGS are appended (the last of a
		#   repeated flag wins). Write its pid (\$!) to $dir/NAME.pid so
		#   cluster/down.sh stops it too.
		set -euo pipefail
		dir=$q_dir
		cd "\$dir" # etcd's socket is named relative to DIR (see etcd.sh)
		port=\${1:-$apiserver_port}
		((\$# == 0)) || shift
		pki=\$dir/pki
		# --endpoint-reconciler-type=none: otherwise it logs an error every 10 s,
		#   as 127.0.0.1 is an invalid address for the \`kubernetes\` Endpoints.
		# --allow-privileged: as on a real cluster, so privileged pods are judged
		#   by Pod Security admission, not refused by validation outright.
		# --anonymous-auth=false: a request with no certificate or token is
		#   refused (401), health endpoints included.
		exec $q_apiserver \\
		  --etcd-servers=unix://etcd.sock:0 \\
		  --anonymous-auth=false \\
		  --bind-address=$api_host \\
		  --advertise-address=$api_host \\
		  --secure-port="\$port" \\
		  --tls-cert-file="\$pki/apiserver.crt" \\
		  --tls-private-key-file="\$pki/apiserver.key" \\
		  --client-ca-file="\$pki/ca.crt" \\
		  --authorization-mode=$auth_mode \\
		  --service-account-issuer=https://kubernetes.default.svc \\
		  --service-account-key-file="\$pki/sa.pub" \\
		  --service-account-signing-key-file="\$pki/sa.key" \\
		  --service-cluster-ip-range=$service_range \\
		  --endpoint-reconciler-type=none \\
		  --allow-privileged=true \\
		  $node_flags"\$@"
	EOF
	if ((with_kcm)); then cat >"$dir/kube-controller-manager.sh" <<-EOF
		#!/usr/bin/env bash
		# Generated by cluster/up.sh: execs this local cluster's kube-controller-manager.
		# Usage: bash kube-controller-manager.sh [EXTRA FLAGS...] >>LOG 2>&1 &
		set -euo pipefail
		dir=$q_dir
		pki=\$dir/pki
		# --controllers: only the garbage collector, the namespace controller
		#   and the ServiceAccount controllers (a \`default\` one in each
		#   namespace; token Secrets filled).
		# --use-service-account-credentials: each controller acts as its own
		#   ServiceAccount in kube-system, with its own RBAC role.
		# --secure-port=0: it serves nothing. --leader-elect=false: one runs.
		exec $(printf %q "$kcm_bin") \\
		  --kubeconfig="\$dir/kube-controller-manager.kubeconfig" \\
		  --controllers=garbage-collector-controller,namespace-controller,serviceaccount-controller,serviceaccount-token-controller \\
		  --use-service-account-credentials \\
		  --service-account-private-key-file="\$pki/sa.key" \\
		  --root-ca-file="\$pki/ca.crt" \\
		  --secure-port=0 \\
		  --leader-elect=false \\
		  "\$@"
	EOF
	fi
	# Sourceable facts about this cluster, for tests and humans.
	cat >"$dir/env" <<-EOF
		CLUSTER_DIR=$q_dir
		APISERVER_PORT=$apiserver_port
		APISERVER_URL=https://$api_host:$apiserver_port
		ETCD_SOCKET=$q_dir/etcd.sock:0
		BIN_DIR=$(printf %q "$(dirname -- "$apiserver_bin")")
		KUBECONFIG=$q_dir/kubeconfig
	EOF
}

# launch NAME: starts DIR/NAME.sh detached and records its pid. setsid puts it
# in its own session, so neither the end of up.sh nor a terminal hangup or
# Ctrl-C aimed at the caller's process group stops it; its output goes to the
# log, not to up.sh's stdout, or `$(up.sh)` would wait for it forever. It gets
# no other descriptor: one up.sh holds (fd 9, the lock) or inherited (a lock
# its caller took with flock(1), a pipe) would stay open, and a lock held, for
# as long as the server runs. Neither the subshell nor setsid forks again (a
# background job of a script is never a process group leader), so $! is the
# server's pid once the script has exec'ed.
declare -A log_start
launch() {
	log_start[$1]=$(($(stat -c %s "$dir/logs/$1.log" 2>/dev/null || echo 0) + 1))
	(
		for fd in /proc/self/fd/*; do
			fd=${fd##*/}
			if ((fd > 2)); then eval "exec $fd>&-"; fi
		done
		exec setsid bash "$dir/$1.sh" >>"$dir/logs/$1.log" 2>&1 </dev/null
	) &
	started+=("$!")
	echo "$!" >"$dir/$1.pid"
}

# port_clash NAME: did NAME's latest run fail because a port was taken?
port_clash() { tail -c "+${log_start[$1]}" "$dir/logs/$1.log" | grep -q 'address already in use'; }

# --- Start ----------------------------------------------------------------------
# Leaves clash=NAME when a picked port turned out to be taken (worth a retry
# with new ports); exits through fail() on any other failure.
start_once() {
	clash=
	apiserver_port=$(free_port)
	write_scripts

	log "starting etcd on $dir/etcd.sock:0"
	launch etcd
	local etcd_pid=$! deadline=$((SECONDS + 30))
	# Waiting for etcd first costs under a second and makes a broken etcd show
	# up as such instead of as an apiserver that never becomes ready.
	until [[ $(curl -s --max-time 2 --unix-socket "$dir/etcd.sock:0" http://localhost/health 2>/dev/null) == *'"health":"true"'* ]]; do
		alive "$etcd_pid" || fail etcd "etcd exited during startup"
		((SECONDS < deadline)) || fail etcd "etcd not healthy after 30 s"
		sleep 0.2
	done

	log "starting kube-apiserver on $api_host:$apiserver_port"
	launch kube-apiserver
	local api_pid=$! out
	deadline=$((SECONDS + ready_timeout))
	until [[ $(curl_admin "https://$api_host:$apiserver_port/readyz" 2>/dev/null) == ok ]]; do
		if ! alive "$api_pid"; then
			port_clash kube-apiserver && { clash=kube-apiserver; return; }
			fail kube-apiserver "kube-apiserver exited during startup"
		fi
		alive "$etcd_pid" || fail etcd "etcd exited while kube-apiserver was starting"
		if ((SECONDS >= deadline)); then
			# Name the checks still failing; the log says why.
			out=$(curl_admin "https://$api_host:$apiserver_port/readyz?verbose" 2>&1 | grep -v '^\[+\]' || true)
			log "readyz after ${ready_timeout}s:"
			sed 's/^/    /' <<<"$out" >&2
			fail kube-apiserver "kube-apiserver not ready after ${ready_timeout}s"
		fi
		sleep 0.25
	done
}

for attempt in 1 2 3; do
	start_once
	[[ -z $clash ]] && break
	((attempt < 3)) || fail "$clash" "$clash: no free port after $attempt attempts"
	log "the picked port was taken meanwhile ($clash); retrying with a new one"
	stop "${started[@]}"
	started=()
	rm -rf "$dir/etcd" "$dir"/*.pid "$dir"/etcd*.sock:0
done
ms=$(((${EPOCHREALTIME//[!0-9]/} - t0) / 1000))
log "kube-apiserver ready at https://$api_host:$apiserver_port, $((ms / 1000)).$((ms % 1000 / 100)) s after starting"

# --- kubeconfigs ----------------------------------------------------------------
b64() { base64 -w0 <"$1"; }
# kubeconfig FILE USER: a kubeconfig for the client certificate pki/USER.crt,
# certificates embedded, written under a temporary name and renamed.
kubeconfig() {
	cat >"$1.tmp" <<-EOF
		apiVersion: v1
		kind: Config
		clusters:
		- name: local
		  cluster:
		    server: https://$api_host:$apiserver_port
		    certificate-authority-data: $(b64 "$pki/ca.crt")
		users:
		- name: $2
		  user:
		    client-certificate-data: $(b64 "$pki/$2.crt")
		    client-key-data: $(b64 "$pki/$2.key")
		contexts:
		- name: local
		  context:
		    cluster: local
		    user: $2
		current-context: local
	EOF
	chmod 600 "$1.tmp"
	mv "$1.tmp" "$1"
}
kubeconfig "$dir/kubeconfig" admin

# --- default ServiceAccount -------------------------------------------------------
# Without one the ServiceAccount admission plugin rejects every pod in the
# namespace. The controller-manager makes it in every namespace; that it has
# made default/default is also the sign that it runs and reaches the API
# server. (The `default` namespace itself is made by the API server soon
# after it is ready.)
sa_url=https://$api_host:$apiserver_port/api/v1/namespaces/default/serviceaccounts
if ((with_kcm)); then
	kubeconfig "$dir/kube-controller-manager.kubeconfig" kube-controller-manager
	log "starting kube-controller-manager"
	launch kube-controller-manager
	kcm_pid=$!
	deadline=$((SECONDS + ready_timeout))
	until [[ $(curl_admin -o /dev/null -w '%{http_code}' "$sa_url/default" 2>/dev/null) == 200 ]]; do
		alive "$kcm_pid" || fail kube-controller-manager "kube-controller-manager exited during startup"
		((SECONDS < deadline)) || fail kube-controller-manager "kube-controller-manager made no default/default ServiceAccount in ${ready_timeout}s"
		sleep 0.25
	done
	ms=$(((${EPOCHREALTIME//[!0-9]/} - t0) / 1000))
	log "kube-controller-manager running (it made default/default ServiceAccount), $((ms / 1000)).$((ms % 1000 / 100)) s after starting"
else
	# Without a controller-manager, made here. Errors (such as a 404 should
	# the `default` namespace not exist yet) are retried for a while.
	deadline=$((SECONDS + 30))
	while :; do
		code=$(curl_admin -o "$dir/logs/sa.out" -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
			--data '{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"default"}}' \
			"$sa_url" 2>"$dir/logs/sa.err") || true
		[[ $code == 201 || $code == 409 ]] && break
		if ((SECONDS >= deadline)); then
			log "error: creating ServiceAccount default/default failed (HTTP ${code:-none}):"
			cat "$dir/logs/sa.err" "$dir/logs/sa.out" >&2 2>/dev/null || true
			exit 1
		fi
		sleep 0.5
	done
	rm -f "$dir/logs/sa.out" "$dir/logs/sa.err"
fi

ok=1
export_line
