# tools/common.sh -- shared by tools/test and tools/demo: install what pmwal
# needs from Debian's archive, pick the unprivileged user that runs
# PostgreSQL (which refuses to run as root), and build pmwal into a private
# installation of the server in that user's work directory.

# Everything the tests and the demo call: the build, the server, IPC::Run
# for TAP, gdb and strace (tests hold and watch server processes), procps
# (pgrep, ps), gnuplot (the demo's plot), pip (fetching 16-18), bzip2, and
# Patroni with etcd (t/038 runs its own etcd and three Patronis on free
# loopback ports; on a machine with systemd, installing etcd-server also
# starts Debian's etcd service on 2379, which t/038 does not use); 19's
# chroot has its own list (tools/pg19.sh).
# tools/fresh-check proves on a new Debian 12 that nothing else is needed.
PACKAGES="build-essential postgresql-15 postgresql-server-dev-15 libpmem-dev libipc-run-perl gnuplot-nox procps gdb strace python3-pip bzip2 patroni python3-etcd etcd-server etcd-client"

# The server pmwal is built and tested against: Debian's 15 unless
# use_pg_version picks another (tools/pg-versions.sh).
PG_MAJOR=15
PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config
PG_BINDIR=/usr/lib/postgresql/15/bin
PG_MAKE_ARGS=()

use_pg_version() {
	PG_MAJOR=$1
	[ "$PG_MAJOR" = 15 ] && return
	if [ "$PG_MAJOR" = 19 ]; then
		# inside the sid chroot of tools/pg19.sh: Debian's packages, as 15
		if [ ! -x /usr/lib/postgresql/19/bin/pg_config ]; then
			echo "PostgreSQL 19 is tested only by tools/test --pg 19, in a Debian sid chroot (tools/pg19.sh)" >&2
			exit 1
		fi
		PG_CONFIG=/usr/lib/postgresql/19/bin/pg_config
		PG_BINDIR=/usr/lib/postgresql/19/bin
		return
	fi
	. tools/pg-versions.sh
	fetch_pg "$PG_MAJOR"
	PG_CONFIG=$PG_PREFIX/bin/pg_config
	PG_BINDIR=$PG_PREFIX/bin
	# the relocatable build was configured without TAP tests
	PG_MAKE_ARGS=(enable_tap_tests=yes PROVE=prove "PROVE_FLAGS=-I $PG_TAP_DIR")
}

need_root() {
	if [ "$(id -u)" != 0 ]; then
		echo "run this as root (sudo $0): it installs packages and pmwal" >&2
		exit 1
	fi
}

# Install those of the given packages (default: $PACKAGES) that are missing;
# APT_INSTALL_OPTS adds options to apt-get install.
install_packages() {
	local p missing=""
	for p in ${*:-$PACKAGES}; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
	done
	if [ -n "$missing" ]; then
		echo "== installing:$missing"
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -q
		# shellcheck disable=SC2086
		apt-get install -y -q ${APT_INSTALL_OPTS:-} $missing
	fi
}

# Where the tests and the demo run: a work directory of the test user's,
# with a copy of this checkout (src/) and a private installation of the
# server (install/) into which pmwal is installed.  Never the server's own
# directories: a pmwal that a package or a user installed there is not
# replaced by a test build (t/ needs pause points a release lacks), and
# two checkouts, or two versions, can be tested side by side.  Never the
# checkout itself: the test user may not be able to enter it (a clone in
# /root), and it stays as its owner left it.
#
# The private server tree is a copy of the server's: for 15 Debian's
# /usr/lib/postgresql/15, /usr/share/postgresql/15 and
# /usr/include/postgresql under install/usr (PostgreSQL finds its share and
# lib directories relative to its binary, so the copy is self-contained);
# for 19 the same of Debian's 19, inside the sid chroot (tools/pg19.sh);
# for 16-18 the relocatable tree tools/pg-versions.sh fetched.  Any pmwal
# already in it is left out of the copy.
#
# setup_work_dir PURPOSE (test, demo, ...): one work directory per checkout,
# purpose and version, made anew.  Sets WORK_DIR and moves PG_CONFIG and
# PG_BINDIR to the private tree.  After use_pg_version and pick_test_user.
setup_work_dir() {
	local top=${PMWAL_WORK_ROOT:-/var/tmp/pmwal-work} key inst d
	key=$(printf '%s' "$PWD" | sha1sum | cut -c1-8)
	WORK_DIR=$top/$(basename "$PWD")-$key-$1-pg$PG_MAJOR
	# the parent is root's (mode 755), never someone else's or a link
	mkdir -p -m 0755 "$top"
	if [ -L "$top" ] || [ "$(stat -c '%u %a' "$top")" != "0 755" ]; then
		echo "$top must be a directory of root with mode 755; remove it or set PMWAL_WORK_ROOT" >&2
		exit 1
	fi
	rm -rf "$WORK_DIR"
	mkdir -p "$WORK_DIR/src"
	# the checkout, less what a build or a test run leaves behind
	tar -C "$PWD" --exclude=./.git --exclude=./tmp_check --exclude=./tmp_regress \
		--exclude=./results --exclude=./bench/results --exclude='*.o' --exclude='*.so' \
		--exclude='*.bc' -cf - . | tar -C "$WORK_DIR/src" -xf -
	inst=$WORK_DIR/install
	if [ "$PG_MAJOR" = 15 ] || [ "$PG_MAJOR" = 19 ]; then
		for d in /usr/lib/postgresql/$PG_MAJOR /usr/share/postgresql/$PG_MAJOR /usr/include/postgresql; do
			mkdir -p "$inst$(dirname "$d")"
			cp -a "$d" "$inst$d"
		done
		PG_BINDIR=$inst/usr/lib/postgresql/$PG_MAJOR/bin
	else
		cp -a "$PG_PREFIX" "$inst"
		PG_BINDIR=$inst/bin
	fi
	find "$inst" \( -name 'pmwal.so' -o -name 'pmwal.control' -o -name 'pmwal--*.sql' \
		-o -name pmwal_ctl -o -path '*/bitcode/pmwal*' \) -prune -exec rm -rf {} +
	chown -R "$TEST_USER" "$WORK_DIR"
	PG_CONFIG=$PG_BINDIR/pg_config
	echo "== working in $WORK_DIR (a copy of this checkout, and a private installation of $("$PG_CONFIG" --version))"
}

# Build pmwal in the work directory with -Werror and install it into the
# private server tree, as the test user.  "test" builds with PMWAL_TEST=1,
# which compiles in the test-only pause points (test_pause.c) that release
# builds lack; "release" without.
build_and_install() {
	local kind=${1:-test} flags=()
	[ "$kind" = test ] && flags=(PMWAL_TEST=1)
	echo "== building pmwal ($kind build) for $("$PG_CONFIG" --version) with -Wall -Wextra -Werror"
	(cd "$WORK_DIR/src" &&
		as_test_user make -s PG_CONFIG="$PG_CONFIG" "${flags[@]}" PG_CFLAGS="-Wall -Wextra -Werror" &&
		as_test_user make -s PG_CONFIG="$PG_CONFIG" "${flags[@]}" install)
}

# A fingerprint of the pmwal files in the server's own directories (that
# a package or "make install" put there): tools/test and tools/demo check
# that they leave it as it was.  The server of the version in use: Debian's
# 15 (or 19, in its chroot), or the fetched tree of 16-18.
system_pmwal_fingerprint() {
	local cfg=/usr/lib/postgresql/$PG_MAJOR/bin/pg_config
	[ "$PG_MAJOR" = 15 ] || [ "$PG_MAJOR" = 19 ] || cfg=$PG_PREFIX/bin/pg_config
	find "$("$cfg" --pkglibdir)" "$("$cfg" --sharedir)/extension" "$("$cfg" --bindir)" \
		-maxdepth 1 -name 'pmwal*' -type f -exec sha256sum {} + 2>/dev/null | sort
}

# The user that runs PostgreSQL and owns the work directory: the user who
# called sudo, or a dedicated one when run as root directly (CI).
pick_test_user() {
	if [ -n "${SUDO_USER:-}" ] && [ "$SUDO_USER" != root ]; then
		TEST_USER=$SUDO_USER
	else
		TEST_USER=pmwaltest
		id "$TEST_USER" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$TEST_USER"
	fi
}

# A sticky directory (mode 1777) owned by a user who is neither root nor the
# test user (nobody), in which pmwal must refuse a ring (t/026e, issue 21
# case 4); only root can make one, so it is made here, before the tests drop
# to the test user, and named in PMWAL_TEST_STICKY_DIR.  Made with mkdir, so
# that no one else's file or link is ever chowned; an existing one is used
# only if it is exactly that.
make_sticky_test_dir() {
	local d=/tmp/pmwal-test-sticky-nobody
	[ "$(id -u)" = 0 ] || return 0
	if mkdir -m 1777 "$d" 2>/dev/null; then
		chown nobody "$d" && chmod 1777 "$d"
	fi
	if [ ! -L "$d" ] && [ "$(stat -c '%F %U %a' "$d" 2>/dev/null)" = "directory nobody 1777" ]; then
		PMWAL_TEST_STICKY_DIR=$d
		export PMWAL_TEST_STICKY_DIR
	else
		echo "warning: $d is not a directory of nobody with mode 1777; t/026e cannot check a sticky ring directory of another user" >&2
	fi
}

as_test_user() {
	make_sticky_test_dir
	runuser -u "$TEST_USER" -- env PATH="$PG_BINDIR:$PATH" "$@"
}
