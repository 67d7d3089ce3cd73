# tools/common.sh -- shared by tools/test and tools/demo: install what pmwal
# needs from Debian's archive, build and install it, and pick the
# unprivileged user that runs PostgreSQL (which refuses to run as root).

PACKAGES="build-essential postgresql-15 postgresql-server-dev-15 libpmem-dev libipc-run-perl gnuplot-nox procps gdb python3-pip bzip2"

# The server pmwal is built and tested against: Debian's 15 unless
# use_pg_version picks another (tools/pg-versions.sh).
PG_MAJOR=15
PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config
PG_BINDIR=/usr/lib/postgresql/15/bin
PG_MAKE_ARGS=()

use_pg_version() {
	PG_MAJOR=$1
	[ "$PG_MAJOR" = 15 ] && return
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

# The build for pmwal's tests: -Werror, and PMWAL_TEST=1, which compiles
# in the test-only pause points (test_pause.c) that release builds lack.
build_and_install() {
	echo "== building pmwal for $("$PG_CONFIG" --version) with -Wall -Wextra -Werror, test pause points on"
	make -s clean PG_CONFIG="$PG_CONFIG"
	make -s PG_CONFIG="$PG_CONFIG" PMWAL_TEST=1 PG_CFLAGS="-Wall -Wextra -Werror"
	make -s PG_CONFIG="$PG_CONFIG" PMWAL_TEST=1 install
}

# The user that owns the checkout while tests write into it: the user who
# called sudo, or a dedicated one when run as root directly (CI).
pick_test_user() {
	if [ -n "${SUDO_USER:-}" ] && [ "$SUDO_USER" != root ]; then
		TEST_USER=$SUDO_USER
	else
		TEST_USER=pmwaltest
		id "$TEST_USER" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$TEST_USER"
		chown -R "$TEST_USER" .
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
