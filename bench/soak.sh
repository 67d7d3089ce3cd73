#!/bin/bash
# bench/soak.sh -- the power-loss crash loop of t/005_crash_loop.pl, run long.
# Not part of CI.
#
#   bench/soak.sh [ITERATIONS]        (default 100)
#
# Each iteration: pgbench load, SIGKILL of every server process at a random
# moment, the simulated power cut of tools/powercut, restart, and a check
# that every acknowledged transaction is there.  pmwal must be installed
# (make install).  Run as root, it runs the test as $SOAK_USER (default
# pmwaltest, who must be able to write the checkout).  PMWAL_CRASH_SEGSIZE
# (WAL segment size in MB, default 1) and PMWAL_CRASH_CONF (extra
# postgresql.conf lines) are passed on, e.g.
#
#   PMWAL_CRASH_SEGSIZE=16 PMWAL_CRASH_CONF='pmwal.flush_interval = 60s' bench/soak.sh 50
#
# Server logs and the last cut's log stay in the printed directory when the
# loop fails.
set -eu
cd "$(dirname "$0")/.."

iterations=${1:-100}
pg_config=${PG_CONFIG:-pg_config}
bindir=$("$pg_config" --bindir)
pgxs=$(dirname "$("$pg_config" --pgxs)")/../..
testdir=$(mktemp -d /tmp/pmwal_soak.XXXXXX)

run=()
if [ "$(id -u)" = 0 ]; then
	user=${SOAK_USER:-pmwaltest}
	chown "$user" "$testdir"
	run=(runuser -u "$user" --)
fi

echo "== soak: $iterations iterations in $testdir"
start=$(date +%s)
status=0
"${run[@]}" env PATH="$bindir:$PATH" TESTDIR="$testdir" \
	PG_REGRESS="$pgxs/src/test/regress/pg_regress" \
	PMWAL_CRASH_ITERATIONS="$iterations" \
	PMWAL_CRASH_SEGSIZE="${PMWAL_CRASH_SEGSIZE:-1}" \
	PMWAL_CRASH_CONF="${PMWAL_CRASH_CONF:-}" \
	prove -I "$pgxs/src/test/perl" -I . t/005_crash_loop.pl || status=$?
echo "== soak: exit $status after $(( $(date +%s) - start )) s; logs in $testdir/tmp_check/log"
exit $status
