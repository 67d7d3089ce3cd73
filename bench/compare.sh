#!/bin/bash
# bench/compare.sh -- pgbench side by side, in one run, on one server:
#   A  stock: synchronous_commit = on, pmwal.enabled = off
#   B  pmwal: synchronous_commit = on, pmwal.enabled = on (emulated ring, /dev/shm)
#   C  no wait: synchronous_commit = off, pmwal.enabled = off (no durability wait)
#   F  free sync: synchronous_commit = on, fsync = off, pmwal.enabled = off.
#      PostgreSQL's own commit path with a WAL sync that costs nothing: the
#      ceiling of any design that keeps that path (B's).  Not safe, only a
#      ceiling.  A, B and C run at fsync = on.
# Configurations are interleaved round by round (A B C F A B C F ...) so
# that drift of the machine hits all four alike.  Each switch is a reload
# (ALTER SYSTEM; synchronous_commit, fsync and pmwal.enabled are all
# SIGHUP settings), checked before the cell: SHOW in a new session, and
# pmwal_status.accelerated.  Before every cell a CHECKPOINT, then a sync of
# the data directory's file system (sync -f): after F, that is what
# PostgreSQL's documentation asks for when fsync is turned back on (WAL
# segments F finished were never synced), and it leaves no dirty page cache
# of one cell for the kernel to write back during the next.
#
# Each cell reports TPS, average and p99 latency, and real WAL fsyncs:
# pg_stat_wal's wal_sync (pg_stat_io's on 18) counts PostgreSQL's sync
# calls, of which pmwal answers ring_syncs from the ring; the fdatasync/fsync
# calls pmwal itself made on pg_wal (flusher, full ring, pg_control writes)
# are added (pmwal_status).  Under F, PostgreSQL counts no syncs (it makes
# none).  And CPU time per transaction for the whole machine, in µs
# (cpu_us_per_tx): user + nice + system + irq + softirq from /proc/stat over
# the pgbench run, over the transactions pgbench processed.  That includes
# pgbench itself and anything else running, so measure on a quiet machine.
# Writes results.csv, summary.md (medians, ratios B/A, B/C and B/F, CPU)
# and tps.png to the output dir.
#
# 1-client cells run with the server on CPU 1 and pgbench on CPU 0, as if
# the client were on another machine: unpinned, one client's round trips
# are dominated by where the scheduler happens to put the two processes
# (same CPU or not), which on a 2-vCPU VM swings the same cell by up to 2x
# from run to run.  -U leaves them unpinned.  machine.txt and the summary's
# first line say which.
#
# With -S, a streaming standby on the same machine (port+1) is the
# synchronous standby (synchronous_standby_names).  It loads pmwal too, on a
# ring of its own (/dev/shm/pmwal_bench_<uid>_<port+1>.ring, 64MB), whose
# pmwal.enabled is switched per cell like the primary's (ALTER SYSTEM and a
# reload on the standby).  The configurations are then A B D R C, no F:
#   A  stock synchronous replication: synchronous_commit = LEVEL (-l: on,
#      remote_write or remote_apply), pmwal.enabled = off on both nodes
#   B  pmwal on the primary only (LEVEL): the standby's walreceiver
#      fdatasyncs its WAL as in stock PostgreSQL
#   D  pmwal on both nodes (LEVEL): the standby's ring answers the
#      walreceiver's WAL syncs
#   R  pmwal on the primary only at synchronous_commit = remote_write (the
#      standby writes, does not flush, before the primary acknowledges):
#      whatever -l says, the most D can reach while keeping `on`'s meaning
#   C  synchronous_commit = off, pmwal off on both (no wait at all, not even
#      for the standby)
# Before each cell the standby's setting is checked in a new session (SHOW,
# and pmwal_status.reason, which must say pmwal.enabled is off exactly when
# it is); its accelerated column becomes true only once the walreceiver
# wrote after the switch, so it is checked after the cell instead, from
# the standby's counters: in D its ring must have answered syncs
# (ring_syncs grew), in every other configuration none.  The standby's real
# WAL fsyncs per cell are its pass_syncs (PostgreSQL's syncs the ring did
# not answer: the walreceiver's fdatasyncs) plus pmwal's own real syncs
# (segments_synced + dir_syncs); appended to results.csv as
# standby_wal_syncs, standby_ring_syncs, standby_pass_syncs,
# standby_pmwal_syncs.  The standby is never pinned to a CPU.
#
# -W USEC (with -S) puts the standby's pg_wal on a slow disk: a directory
# mounted through bench/slowdisk.c (FUSE, built here; Debian's fuse3 and
# libfuse3-dev), whose every fsync/fdatasync takes at least USEC
# microseconds -- a cloud volume's flush latency (0.5-2 ms) where this
# machine's local disk takes ~0.1 ms.  Writes still land in the page
# cache; only syncs wait.  machine.txt gives pg_test_fsync on both pg_wal
# file systems.
#
# Run as an unprivileged user with pmwal installed:
#   bench/compare.sh [-d seconds] [-r rounds] [-c "1 4 16"] [-w "insert tpcb"]
#                    [-s scale] [-o outdir] [-p port] [-U] [-S [-l level]]
#                    [-k checkpoint_timeout] [-W flush_us]
#
# -k (say 30s, with -d 90) makes timed checkpoints fall inside every cell,
# to see what they do to the latency tail (p99.9 and max are reported
# always; without -k a cell sees no checkpoint but the one before it).
set -eu

duration=15
rounds=3
clients="1 4 16"
workloads="insert tpcb"
scale=10
port=5497
pin_single=yes
standby=no
level=on
checkpoint_timeout=30min
slow_flush_us=
here=$(cd "$(dirname "$0")" && pwd)
out="$here/results/$(date +%Y%m%d-%H%M%S)"
while getopts "d:r:c:w:s:o:p:USl:k:W:" opt; do
	case $opt in
		d) duration=$OPTARG ;;
		r) rounds=$OPTARG ;;
		c) clients=$OPTARG ;;
		w) workloads=$OPTARG ;;
		s) scale=$OPTARG ;;
		o) out=$OPTARG ;;
		p) port=$OPTARG ;;
		U) pin_single=no ;;
		S) standby=yes ;;
		l) level=$OPTARG ;;
		k) checkpoint_timeout=$OPTARG ;;
		W) slow_flush_us=$OPTARG ;;
		*) sed -n '2,/^set -eu$/p' "$0" | sed '$d'; exit 2 ;;
	esac
done
# one CPU: nothing to pin apart
[ "$(nproc)" -ge 2 ] || pin_single=no
if [ -n "$slow_flush_us" ] && [ "$standby" != yes ]; then
	echo "-W (the standby's pg_wal on a slow disk) needs -S" >&2
	exit 2
fi
if [ "$(id -u)" = 0 ]; then
	echo "run bench/compare.sh as an unprivileged user (PostgreSQL refuses root)" >&2
	exit 1
fi

bindir=$(pg_config --bindir 2>/dev/null || echo /usr/lib/postgresql/15/bin)
export PATH="$bindir:$PATH"
mkdir -p "$out"
out=$(cd "$out" && pwd)
data="$out/data"
ring="/dev/shm/pmwal_bench_$(id -u)_$port.ring"
log="$out/server.log"
export PGHOST="$out" PGPORT="$port" PGDATABASE=postgres

sdata="$out/standby"
sport=$((port + 1))
sring="/dev/shm/pmwal_bench_$(id -u)_$sport.ring"
slowdisk="$out/slowdisk"
cleanup() {
	pg_ctl -D "$data" -m fast stop >/dev/null 2>&1 || true
	pg_ctl -D "$sdata" -m fast stop >/dev/null 2>&1 || true
	if [ -n "$slow_flush_us" ]; then
		fusermount3 -u "$slowdisk/mnt" 2>/dev/null || true
		rm -rf "$slowdisk"
	fi
	rm -rf "$data" "$sdata" "$ring" "$sring"
}
trap cleanup EXIT
trap "exit 130" INT TERM

echo "== setting up a server in $data (ring $ring)"
. "$here/server.sh"
bench_server_start "$data" "$out" "$port" "$ring" "$log" "shared_buffers = 1GB
checkpoint_timeout = $checkpoint_timeout
log_checkpoints = on
max_connections = 50"
psql -qX -c "CREATE EXTENSION pmwal" -c "CREATE TABLE bench_insert (id bigint, payload text)"
if [ "$standby" = yes ]; then
	echo "== a synchronous standby in $sdata (port $sport), pmwal on a ring of its own ($sring)"
	rm -rf "$sdata" "$sring"
	waldir=()
	if [ -n "$slow_flush_us" ]; then
		echo "== the standby's pg_wal on a slow disk: every sync takes at least $slow_flush_us us ($slowdisk/mnt, bench/slowdisk.c)"
		mkdir -p "$slowdisk/backing" "$slowdisk/mnt"
		cc -O2 -Wall -Wextra -Wno-unused-parameter $(pkg-config fuse3 --cflags) \
			-o "$slowdisk/slowdisk" "$here/slowdisk.c" $(pkg-config fuse3 --libs)
		"$slowdisk/slowdisk" "$slowdisk/backing" "$slow_flush_us" "$slowdisk/mnt" \
			-o default_permissions,fsname=pmwal-slowdisk
		waldir=(--waldir="$slowdisk/mnt/pg_wal")
	fi
	pg_basebackup -D "$sdata" "${waldir[@]}" -R -X stream -c fast >/dev/null
	# the backup's postgresql.conf names the primary's port and ring
	cat >> "$sdata/postgresql.conf" <<CONF
port = $sport
shared_preload_libraries = 'pmwal'
pmwal.path = '$sring'
pmwal.size = 64MB
CONF
	# -R wrote primary_conninfo into postgresql.auto.conf, which overrides
	# postgresql.conf: the standby's name goes there, after it
	echo "primary_conninfo = 'host=$out port=$port application_name=standby'" >> "$sdata/postgresql.auto.conf"
	PMEM_IS_PMEM_FORCE=1 pg_ctl -D "$sdata" -l "$out/standby.log" -w start >/dev/null
	psql -qX -c "ALTER SYSTEM SET synchronous_standby_names = 'standby'" -c "SELECT pg_reload_conf()" >/dev/null
	sync_state=
	for _ in $(seq 1 300); do
		sync_state=$(psql -qAtX -c "SELECT sync_state FROM pg_stat_replication WHERE application_name = 'standby'")
		[ "$sync_state" = sync ] && break
		sleep 0.1
	done
	if [ "$sync_state" != sync ]; then
		echo "the standby did not become synchronous (sync_state '$sync_state')" >&2
		exit 1
	fi
fi
pgbench -q -i -s "$scale" >/dev/null 2>&1
echo "INSERT INTO bench_insert VALUES (:client_id, 'single-row insert from pgbench');" > "$out/insert.sql"

# machine and settings, for the record
{
	echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "kernel: $(uname -r)"
	echo "cpus: $(nproc), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
	echo "memory: $(free -g | awk '/Mem:/ {print $2}') GiB"
	echo "server: $(postgres --version)"
	echo "pg_wal file system: $(df -T "$data/pg_wal" | awk 'NR==2 {print $2" on "$1}')"
	echo "settings: shared_buffers=1GB max_wal_size=8GB checkpoint_timeout=$checkpoint_timeout wal_sync_method=fdatasync pmwal.size=64MB autovacuum=off (VACUUM before each TPC-B cell)"
	[ "$standby" = yes ] && echo "synchronous replication: a standby on this machine (port $sport, fsync = on, unpinned) with pmwal loaded on a ring of its own (pmwal.size=64MB, /dev/shm), pmwal.enabled on only in D; A, B and D at synchronous_commit = $level, R at remote_write, C at off; no F"
	[ "$standby" = yes ] && echo "synchronous_commit level (-l): $level"
	echo "duration per cell: ${duration}s, rounds: $rounds, clients: $clients, pgbench scale: $scale"
	if [ "$pin_single" = yes ]; then
		echo "1-client cells: server on CPU 1, pgbench on CPU 0; other cells unpinned"
	else
		echo "no cell pinned to CPUs"
	fi
	echo "pg_test_fsync on the pg_wal file system (one 8kB write + fdatasync):"
	pg_test_fsync -s 2 -f "$data/pg_test_fsync.tmp" 2>/dev/null | grep -E "^\s+fdatasync" | head -1
	rm -f "$data/pg_test_fsync.tmp"
	if [ -n "$slow_flush_us" ]; then
		echo "the standby's pg_wal on a slow disk (-W $slow_flush_us: bench/slowdisk.c, FUSE); pg_test_fsync there:"
		pg_test_fsync -s 2 -f "$sdata/pg_wal/pg_test_fsync.tmp" 2>/dev/null | grep -E "^\s+fdatasync" | head -1
		rm -f "$sdata/pg_wal/pg_test_fsync.tmp"
	fi
} > "$out/machine.txt"
cat "$out/machine.txt"

configure() {
	local sc en fs sen=off want_acc got=
	case $1 in
		A) sc=$level; en=off; fs=on ;;
		B) sc=$level; en=on; fs=on ;;
		C) sc=off; en=off; fs=on ;;
		F) sc=$level; en=off; fs=off ;;
		D) sc=$level; en=on; fs=on; sen=on ;;
		R) sc=remote_write; en=on; fs=on ;;
	esac
	[ "$standby" = yes ] && configure_standby "$1" "$sen"
	want_acc=$([ "$en" = on ] && echo t || echo f)
	psql -qX -c "ALTER SYSTEM SET synchronous_commit = $sc" -c "ALTER SYSTEM SET fsync = $fs" \
		-c "ALTER SYSTEM SET pmwal.enabled = $en" -c "SELECT pg_reload_conf()" >/dev/null
	# wait until a new session (as pgbench's will be) sees the settings, and
	# the flusher has carried pmwal.enabled to every process
	for _ in $(seq 1 100); do
		got=$(psql -qAtX -F ' ' -c "SELECT current_setting('synchronous_commit'), current_setting('fsync'),
			current_setting('pmwal.enabled'), accelerated FROM pmwal_status")
		[ "$got" = "$sc $fs $en $want_acc" ] && return
		sleep 0.1
	done
	echo "configuration $1 did not take effect: synchronous_commit, fsync, pmwal.enabled, accelerated are '$got', not '$sc $fs $en $want_acc'" >&2
	exit 1
}

# The standby's pmwal.enabled: a reload there, then SHOW in a new session,
# and pmwal_status.reason, which names pmwal.enabled exactly when the
# flusher carried "off" to the standby's processes.  Anything else pmwal
# reports there (standing aside, not interposed) fails the run.
# accelerated is not waited for: in recovery it becomes true only once the
# walreceiver wrote after the switch (checked after the cell, from the
# counters).
configure_standby() {
	local sen=$2 got=
	psql -qX -p "$sport" -c "ALTER SYSTEM SET pmwal.enabled = $sen" -c "SELECT pg_reload_conf()" >/dev/null
	for _ in $(seq 1 100); do
		got=$(psql -qAtX -p "$sport" -F '|' -c "SELECT current_setting('pmwal.enabled'), coalesce(reason, '') FROM pmwal_status")
		case $sen in
			on) case $got in "on|" | "on|the server is in recovery, and no walreceiver streams WAL into the ring now"*) return ;; esac ;;
			off) [ "$got" = "off|pmwal.enabled is off" ] && return ;;
		esac
		sleep 0.1
	done
	echo "configuration $1: the standby's pmwal.enabled did not become $sen: pmwal.enabled and pmwal_status.reason on the standby are '$got'" >&2
	grep -i pmwal "$out/standby.log" | tail -20 >&2
	exit 1
}

# The standby's counters: syncs its ring answered, PostgreSQL's syncs it did
# not answer (the walreceiver's real fdatasyncs), pmwal's own real syncs
standby_syncs() {
	psql -qAtX -p "$sport" -F ' ' -c "SELECT ring_syncs, pass_syncs, segments_synced + dir_syncs FROM pmwal_status"
}

# Put the server's processes (and the backends it forks from now on) on
# the given CPUs; prints the pgbench prefix that keeps the client apart.
all_cpus="0-$(( $(nproc) - 1 ))"
pin_for() {
	local cpus=$all_cpus prefix=""
	if [ "$pin_single" = yes ] && [ "$1" = 1 ] && [ "$(nproc)" -ge 2 ]; then
		cpus=1
		prefix="taskset -c 0"
	fi
	pm=$(head -1 "$data/postmaster.pid")
	for p in $pm $(pgrep -P "$pm"); do
		taskset -a -p -c "$cpus" "$p" >/dev/null
	done
	echo "$prefix"
}

# PostgreSQL's own WAL writes and fsyncs: pg_stat_wal until 17, pg_stat_io
# (object 'wal') from 18 on
if [ "$(psql -qAtX -c 'SHOW server_version_num')" -ge 180000 ]; then
	wal_stats=io
	wal_io_query="SELECT coalesce(sum(fsyncs), 0), coalesce(sum(writes), 0) FROM pg_stat_io WHERE object = 'wal' AND context = 'normal'"
else
	wal_stats=wal
	wal_io_query="SELECT wal_sync, wal_write FROM pg_stat_wal"
fi

# CPU time of the whole machine so far, in jiffies (USER_HZ): user, nice,
# system, irq and softirq of /proc/stat's first line (guest time is in user)
clk_tck=$(getconf CLK_TCK)
cpu_busy() {
	awk '$1 == "cpu" {print $2 + $3 + $4 + $7 + $8; exit}' /proc/stat
}

# pmwal's counters: syncs it answered from the ring, real syncs it made
pmwal_syncs() {
	psql -qAtX -F ' ' -c "SELECT ring_syncs, segments_synced + dir_syncs FROM pmwal_status"
}

# columns are only ever appended (bench/summarize.sh reads older files)
echo "round,workload,clients,config,tps,lat_avg_ms,lat_p99_ms,wal_syncs,wal_writes,pg_wal_syncs,pmwal_syncs,ring_syncs,lat_p999_ms,lat_max_ms,checkpoints,cpu_us_per_tx,standby_wal_syncs,standby_ring_syncs,standby_pass_syncs,standby_pmwal_syncs" > "$out/results.csv"
if [ "$standby" = yes ]; then
	configs="A B D R C"
else
	configs="A B C F"
fi
for r in $(seq 1 "$rounds"); do
	for w in $workloads; do
		for c in $clients; do
			for cfg in $configs; do
				configure $cfg
				if [ "$w" = insert ]; then
					psql -qX -c "TRUNCATE bench_insert"
					script=(-f "$out/insert.sql")
				else
					# what pgbench does before a run unless -n
					psql -qX -c "VACUUM pgbench_branches" -c "VACUUM pgbench_tellers" -c "TRUNCATE pgbench_history"
					script=()
				fi
				psql -qX -c "CHECKPOINT" -c "SELECT pg_stat_reset_shared('$wal_stats')" >/dev/null
				# what the CHECKPOINT left unsynced (under F: everything; and
				# WAL segments F finished), so no cell inherits write-back
				sync -f "$data/pg_wal"
				ckpt_before=$(psql -qAtX -c "SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter" 2>/dev/null ||
					psql -qAtX -c "SELECT num_timed + num_requested FROM pg_stat_checkpointer")
				read -r ring_before pm_before < <(pmwal_syncs)
				[ "$standby" = yes ] && read -r sring_before spass_before spm_before < <(standby_syncs)
				rm -rf "$out/txlog" && mkdir "$out/txlog"
				threads=$(( c < 2 ? 1 : 2 ))
				pin=$(pin_for "$c")
				cpu_before=$(cpu_busy)
				# shellcheck disable=SC2086
				res=$(cd "$out/txlog" && $pin pgbench -n -T "$duration" -c "$c" -j "$threads" -l "${script[@]}" 2>&1)
				cpu_after=$(cpu_busy)
				txs=$(echo "$res" | awk -F': ' '/^number of transactions actually processed/ {split($2, n, "/"); print n[1] + 0}')
				cpu_us=$(awk -v j=$((cpu_after - cpu_before)) -v hz="$clk_tck" -v n="${txs:-0}" \
					'BEGIN {if (n > 0) printf "%.1f", j * 1000000 / hz / n}')
				tps=$(echo "$res" | awk '/^tps/ {print $3}')
				lat=$(echo "$res" | awk '/^latency average/ {print $4}')
				# per-transaction log: 3rd field is the latency in microseconds
				read -r p99 p999 max < <(cat "$out"/txlog/pgbench_log.* | awk '{print $3}' | sort -n |
					awk 'function q(f) { i = int(NR * f); if (i < 1) i = 1; return v[i] / 1000 }
						{v[NR]=$1} END {printf "%.3f %.3f %.3f\n", q(0.99), q(0.999), v[NR] / 1000}')
				read -r pgsyncs writes < <(psql -qAtX -F ' ' -c "$wal_io_query")
				read -r ring_after pm_after < <(pmwal_syncs)
				sb_cols=",,,,"
				sb_note=
				if [ "$standby" = yes ]; then
					read -r sring_after spass_after spm_after < <(standby_syncs)
					sringsyncs=$(( sring_after - sring_before ))
					spass=$(( spass_after - spass_before ))
					spm=$(( spm_after - spm_before ))
					sb_cols=",$(( spass + spm )),$sringsyncs,$spass,$spm"
					sb_note="  standby wal fsyncs $(( spass + spm )) ring syncs $sringsyncs"
				fi
				ckpt_after=$(psql -qAtX -c "SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter" 2>/dev/null ||
					psql -qAtX -c "SELECT num_timed + num_requested FROM pg_stat_checkpointer")
				pmsyncs=$(( pm_after - pm_before ))
				ringsyncs=$(( ring_after - ring_before ))
				# real fsyncs: PostgreSQL's calls the ring did not answer, and pmwal's own
				syncs=$(( pgsyncs - ringsyncs + pmsyncs ))
				echo "$r,$w,$c,$cfg,$tps,$lat,$p99,$syncs,$writes,$pgsyncs,$pmsyncs,$ringsyncs,$p999,$max,$((ckpt_after - ckpt_before)),$cpu_us$sb_cols" >> "$out/results.csv"
				printf "round %s %-6s clients %-3s %s: tps %9.1f  avg %6.3f ms  p99 %7.3f ms  p99.9 %7.3f ms  max %8.3f ms  wal fsyncs %s  checkpoints %s  cpu %s us/tx%s\n" \
					"$r" "$w" "$c" "$cfg" "$tps" "$lat" "$p99" "$p999" "$max" "$syncs" "$((ckpt_after - ckpt_before))" "${cpu_us:--}" "$sb_note"
				# the standby's ring answered the walreceiver's syncs in D,
				# and only in D (the row above is kept, for the record)
				if [ "$standby" = yes ]; then
					if [ "$cfg" = D ] && [ "$sringsyncs" -le 0 ]; then
						echo "configuration D: the standby's ring answered no WAL sync during the cell (standby ring_syncs +$sringsyncs, pass_syncs +$spass, its own real syncs +$spm); pmwal_status on the standby:" >&2
						psql -qX -p "$sport" -c "SELECT accelerated, reason, state, ring_writes, ring_syncs, pass_writes, pass_syncs FROM pmwal_status" >&2
						grep -i pmwal "$out/standby.log" | tail -20 >&2
						exit 1
					fi
					if [ "$cfg" != D ] && [ "$sringsyncs" -ne 0 ]; then
						echo "configuration $cfg: the standby's ring answered $sringsyncs WAL syncs with pmwal.enabled = off there" >&2
						grep -i pmwal "$out/standby.log" | tail -20 >&2
						exit 1
					fi
				fi
			done
		done
	done
done
rm -rf "$out/txlog"

# with -S, summarize.sh writes the legend of A B D R C itself (the level
# from machine.txt)
"$here/summarize.sh" "$out"
