#!/bin/bash
# bench/checkpoint_lock.sh -- how long a checkpoint's pg_control write
# takes under load, that is how long the checkpointer holds ControlFileLock
# around it; a WAL writer that installs a new segment waits for that lock
# while it holds WALWriteLock, and every commit waits behind it.  With
# pmwal the write includes pmwal's real sync of pg_wal (wal_ring.c:
# ring_on_control_write); since the checkpointer syncs pg_wal early at its
# data files (ring_on_checkpointer_sync), that sync covers only what came
# since.
#
# A server with an emulated ring, pgbench's single-row INSERT at 4 clients,
# and N checkpoints (CHECKPOINT) during the load, each with strace on the
# checkpointer: the time from its open of global/pg_control to the close,
# and the real fdatasync/fsync calls in between (pmwal's syncs of pg_wal,
# then pg_control's own).  Run as an unprivileged user with pmwal installed
# (pg_config on PATH) and strace:
#   bench/checkpoint_lock.sh [-n checkpoints] [-p port] [-o outdir] [-e on|off]
# -e off runs the same with pmwal.enabled = off (stock).
set -eu

n=8
port=5611
enabled=on
out=$(mktemp -d /tmp/pmwal-ckpt.XXXXXX)
while getopts "n:p:o:e:" opt; do
	case $opt in
		n) n=$OPTARG ;;
		p) port=$OPTARG ;;
		o) out=$OPTARG ;;
		e) enabled=$OPTARG ;;
		*) sed -n '2,20p' "$0"; exit 2 ;;
	esac
done
export PATH="$(pg_config --bindir):$PATH"
mkdir -p "$out"
out=$(cd "$out" && pwd)
data=$out/data
ring=/dev/shm/pmwal_ckpt_$(id -u)_$port.ring
export PGHOST=$out PGPORT=$port PGDATABASE=postgres
cleanup() {
	[ -n "${load:-}" ] && kill "$load" 2>/dev/null
	pg_ctl -D "$data" -m immediate stop >/dev/null 2>&1 || true
	rm -rf "$data" "$ring"
}
trap cleanup EXIT

. "$(cd "$(dirname "$0")" && pwd)/server.sh"
bench_server_start "$data" "$out" "$port" "$ring" "$out/server.log" "pmwal.enabled = $enabled
shared_buffers = 256MB
checkpoint_timeout = 30min"
psql -qX -c "CREATE TABLE bench_insert (id bigint, payload text)"
echo "INSERT INTO bench_insert VALUES (:client_id, 'single-row insert from pgbench');" > "$out/insert.sql"
pgbench -n -c 4 -j 2 -T 3600 -f "$out/insert.sql" >/dev/null 2>&1 &
load=$!
ckpt=$(psql -qAtX -c "SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'")
sleep 3

echo "checkpoint,pg_control_write_ms,syncs_inside,syncs_inside_ms"
for i in $(seq 1 "$n"); do
	sleep 2
	strace -q -T -ttt -e trace=openat,close,fdatasync,fsync -p "$ckpt" -o "$out/strace.$i" &
	st=$!
	sleep 0.5
	psql -qX -c CHECKPOINT
	sleep 0.3
	kill "$st"
	wait "$st" 2>/dev/null || true
	# from the open of global/pg_control (its fd) to that fd's close
	awk -v i="$i" '
		/openat\(.*global\/pg_control"/ && !fd { t0 = $1; match($0, /= [0-9]+ </); fd = substr($0, RSTART + 2, RLENGTH - 4) + 0; next }
		fd && /(fdatasync|fsync)\(/ { n++; match($0, /<[0-9.]+>$/); s += substr($0, RSTART + 1, RLENGTH - 2) }
		fd && $0 ~ ("close\\(" fd "\\)") { printf "%d,%.3f,%d,%.3f\n", i, ($1 - t0) * 1000, n, s * 1000; exit }
	' "$out/strace.$i"
done
