# bench/server.sh -- sourced by bench/compare.sh and bench/checkpoint_lock.sh:
# a throwaway server with pmwal on an emulated ring (/dev/shm), reached
# through a socket in its output directory only.
#
#   bench_server_start DATA SOCKETDIR PORT RING LOG "extra postgresql.conf lines"
bench_server_start() {
	local data=$1 sockdir=$2 port=$3 ring=$4 log=$5 extra=$6
	rm -rf "$data" "$ring"
	initdb -D "$data" -A trust >/dev/null
	cat >> "$data/postgresql.conf" <<CONF
port = $port
unix_socket_directories = '$sockdir'
listen_addresses = ''
shared_preload_libraries = 'pmwal'
pmwal.path = '$ring'
pmwal.size = 64MB
max_wal_size = 8GB
fsync = on
wal_sync_method = fdatasync
# vacuum runs before each cell instead, as pgbench itself does: an
# autovacuum that lands in one cell and not another is noise
autovacuum = off
$extra
CONF
	PMEM_IS_PMEM_FORCE=1 pg_ctl -D "$data" -l "$log" -w start >/dev/null
}
