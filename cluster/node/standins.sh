#!/usr/bin/env bash
# Makes LOCAL STAND-INS for the Dockerfile's two base images where the real ones
# cannot be pulled (no container registry is reachable here), under the same
# tags, so the Dockerfile builds unchanged:
#   rust:1.95-bookworm                  a Debian bookworm rootfs (debootstrap, from
#                                       the Debian mirror apt uses) with gcc, make
#                                       (jemalloc's build runs it), libc6-dev,
#                                       ca-certificates, pkg-config and this
#                                       host's Rust toolchain copied in
#   gcr.io/distroless/cc-debian12:nonroot  a distroless-like runtime: only the files
#                                       of base-files netbase tzdata ca-certificates
#                                       libc6 libgcc-s1 libgomp1 libstdc++6 libssl3
#                                       (apt-get download + dpkg-deb -x), the nonroot
#                                       user 65532, /home/nonroot, /tmp 1777
# Both carry the label org.demo-controller.stand-in=<what it replaces> and a
# key label that hashes what built them (this script, the rustc version, the
# host's CA bundle); the image store is the cache: an image with the current
# key is reused, anything else is rebuilt. A real image already under the tag
# (no key label) is left alone and used as it is.
#
# They belong in a container store of the project's own (cluster/image.sh
# passes podman --root/--runroot), never in the machine's default one, where
# other builds would take them for the real images. Never pushed anywhere.
#
# Usage: cluster/node/standins.sh ENGINE [ENGINE OPTIONS...]
#   e.g. cluster/node/standins.sh podman --root DIR --runroot DIR
set -euo pipefail

(($#)) || { echo "usage: standins.sh ENGINE [ENGINE OPTIONS...]" >&2; exit 2; }
engine=("$@")
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
log() { echo "standins.sh: $*" >&2; }

build_tag=docker.io/library/rust:1.95-bookworm
run_tag=gcr.io/distroless/cc-debian12:nonroot
rust_version=1.95.0
ca=/etc/ssl/certs/ca-certificates.crt

key=$({
	cat "$here/standins.sh" "$ca"
	rustc +"$rust_version" -vV 2>/dev/null || rustc -vV
} | sha256sum | cut -c1-16)

# has TAG: an image under TAG made by this key (a real pulled image has no key
# label and is left alone: it is used as is).
has() {
	local labels
	labels=$("${engine[@]}" image inspect --format '{{index .Config.Labels "org.demo-controller.stand-in-key"}}|{{index .Config.Labels "org.demo-controller.stand-in"}}' "$1" 2>/dev/null) || return 1
	[[ $labels == "$key|"* || $labels == "<no value>|<no value>" || $labels == "|" ]]
}

work=$(mktemp -d /var/tmp/demo-controller-standins.XXXXXX)
trap 'rm -rf --one-file-system "$work"' EXIT

# import DIR TAG WHAT CHANGES...: DIR's files as a one-layer image. One ENV
# per change: `podman import` reads "ENV A=1 B=2" as A="1 B=2".
import() {
	local dir=$1 tag=$2 what=$3
	shift 3
	local args=(--change "LABEL org.demo-controller.stand-in=\"LOCAL STAND-IN for $what, built from Debian packages by cluster/node/standins.sh\""
		--change "LABEL org.demo-controller.stand-in-key=$key")
	for c in "$@"; do args+=(--change "$c"); done
	tar -C "$dir" --numeric-owner -cf - . | "${engine[@]}" import -q "${args[@]}" - "$tag" >/dev/null
}

if ! has "$run_tag"; then
	t=$SECONDS
	log "building a LOCAL STAND-IN for $run_tag from Debian packages (about 5 s)"
	mkdir -p "$work/debs" "$work/run"
	(cd "$work/debs" && chmod 755 "$work" && chown _apt "$work/debs" 2>/dev/null; cd "$work/debs" && apt-get download -qq base-files netbase tzdata ca-certificates libc6 libgcc-s1 libgomp1 libstdc++6 libssl3 >&2)
	for d in "$work"/debs/*.deb; do dpkg-deb -x "$d" "$work/run"; done
	r=$work/run
	# The host's bundle: what the host trusts, the pod trusts (in-cluster it
	# uses the service account's CA anyway).
	mkdir -p "$r/etc/ssl/certs" "$r/home/nonroot" "$r/tmp" "$r/root"
	cp "$ca" "$r/etc/ssl/certs/ca-certificates.crt"
	printf '%s\n' 'root:x:0:0:root:/root:/sbin/nologin' 'nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin' \
		'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' >"$r/etc/passwd"
	printf '%s\n' 'root:x:0:' 'nobody:x:65534:' 'nonroot:x:65532:' >"$r/etc/group"
	chown 65532:65532 "$r/home/nonroot"
	chmod 700 "$r/root"
	chmod 1777 "$r/tmp"
	rm -rf "$r/usr/share/doc" "$r/usr/share/man" "$r/usr/share/lintian"
	import "$r" "$run_tag" "$run_tag" "USER 65532:65532" "WORKDIR /home/nonroot" \
		"ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" "ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"
	log "stand-in $run_tag ready in $((SECONDS - t)) s"
fi

if ! has "$build_tag"; then
	t=$SECONDS
	mirror=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n1)
	[[ -n $mirror ]] || mirror=$(awk '$1 == "deb" { print $2; exit }' /etc/apt/sources.list 2>/dev/null)
	mirror=${mirror:-http://deb.debian.org/debian}
	log "building a LOCAL STAND-IN for $build_tag: debootstrap bookworm from $mirror + this host's Rust $rust_version (about 90 s)"
	b=$work/build
	debootstrap --variant=minbase --include=gcc,make,libc6-dev,ca-certificates,pkg-config bookworm "$b" "$mirror" >"$work/debootstrap.log" 2>&1 ||
		{ log "error: debootstrap failed:"; tail -n 20 "$work/debootstrap.log" >&2; exit 1; }
	# The build container must trust what the host trusts, or cargo's
	# downloads fail wherever TLS is intercepted.
	cp "$ca" "$b/etc/ssl/certs/ca-certificates.crt"
	rm -rf "$b/var/cache/apt/archives/"*.deb "$b/var/lib/apt/lists/"* "$b/usr/share/doc" "$b/usr/share/man"
	# The toolchain as the rust image lays it out: RUSTUP_HOME=/usr/local/rustup,
	# CARGO_HOME=/usr/local/cargo with cargo and rustc on PATH. No rustup
	# itself: it could only try to download, and nothing can be downloaded.
	src=$(rustc +"$rust_version" --print sysroot 2>/dev/null || rustc --print sysroot)
	tc=$b/usr/local/rustup/toolchains/$rust_version-x86_64-unknown-linux-gnu
	mkdir -p "$tc" "$b/usr/local/cargo/bin"
	cp -a "$src/bin" "$src/lib" "$src/libexec" "$src/etc" "$tc/" 2>/dev/null || cp -a "$src/bin" "$src/lib" "$tc/"
	for x in "$tc"/bin/*; do ln -s "../../rustup/toolchains/$rust_version-x86_64-unknown-linux-gnu/bin/${x##*/}" "$b/usr/local/cargo/bin/${x##*/}"; done
	import "$b" "$build_tag" "$build_tag" \
		"ENV RUSTUP_HOME=/usr/local/rustup" "ENV CARGO_HOME=/usr/local/cargo" "ENV RUST_VERSION=$rust_version" \
		"ENV PATH=/usr/local/cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
		"WORKDIR /"
	log "stand-in $build_tag ready in $((SECONDS - t)) s"
fi
