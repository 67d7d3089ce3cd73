# tools/vm/vm.sh -- the virtual machine of tools/vm/run and tools/vm/bench,
# sourced by them: its packages, kernel, initramfs and images, booting it,
# running commands in it (with pmwal of the checkout staged), and cutting
# its power.
#
# The guest boots Debian's kernel with a small initramfs (tools/vm/init)
# that switches into the host's root file system, read-only over
# virtio-9p, so it runs the host's own PostgreSQL and pmwal.  It has:
#   - an emulated NVDIMM (1 GB, backed by a file of the host: every store
#     to it survives the guest, as on an eADR platform);
#   - PGDATA's disk: a raw file on the host, virtio-blk, ext4 in the guest;
#   - a writable share, the job directory, for commands and their output;
#   - user networking with restrict=on, only a forward of 127.0.0.1:PORT on
#     the host to the guest's PostgreSQL: the client that records
#     acknowledged commits runs on the host, outside the power cut.
# SIGKILL of QEMU is the power cut: the guest's page cache and everything
# not yet written to its disk are lost.

VM_PACKAGES="qemu-system-x86 linux-image-amd64 ndctl daxctl busybox-static cpio iproute2"
VM_DIR=${PMWAL_VM_DIR:-/var/tmp/pmwal-vm}
VM_JOB=$VM_DIR/job
VM_PID=
VM_BOOTS=0
VM_LOG=$VM_DIR/run.log

vm_log() { echo "$*" | tee -a "$VM_LOG"; }

vm_install_packages() {
	APT_INSTALL_OPTS=--no-install-recommends install_packages $VM_PACKAGES
}

# The newest installed distribution kernel whose modules are there too
# (the guest loads them from the host's /lib/modules).
vm_kernel() {
	local k v
	for k in $(ls -v /boot/vmlinuz-* 2>/dev/null | tac); do
		v=${k#/boot/vmlinuz-}
		if [ -f "/lib/modules/$v/modules.dep" ]; then
			VM_KVER=$v
			VM_VMLINUZ=$k
			return 0
		fi
	done
	echo "no kernel with modules in /boot (is linux-image-amd64 installed?)" >&2
	return 1
}

vm_build_initramfs() {
	local tmp m
	tmp=$(mktemp -d)
	mkdir -p "$tmp/bin" "$tmp/proc" "$tmp/sys" "$tmp/dev" "$tmp/root"
	cp /bin/busybox "$tmp/bin/busybox"
	cp "$(dirname "${BASH_SOURCE[0]}")/init" "$tmp/init"
	for m in virtio_pci 9pnet_virtio 9p; do
		modprobe -S "$VM_KVER" --show-depends "$m" | awk '$1 == "insmod" { print $2 }'
	done | awk '!seen[$0]++' >"$tmp/modules.list"
	while read -r m; do
		mkdir -p "$tmp$(dirname "$m")"
		cp "$m" "$tmp$m"
		echo "$m"
	done <"$tmp/modules.list" >"$tmp/modules"
	rm "$tmp/modules.list"
	(cd "$tmp" && find . | cpio -o -H newc --quiet | gzip -1) >"$VM_DIR/initramfs.gz"
	rm -rf "$tmp"
}

# Fresh images: an all-zero NVDIMM (its namespace starts raw) and an empty
# disk for PGDATA.
vm_images() {
	rm -f "$VM_DIR/nvdimm.img" "$VM_DIR/disk.img"
	truncate -s 1G "$VM_DIR/nvdimm.img"
	truncate -s 4G "$VM_DIR/disk.img"
}

vm_free_port() {
	local p
	for p in $(shuf -i 20000-60000 -n 50); do
		ss -Htln "sport = :$p" | grep -q . || { VM_PORT=$p; return 0; }
	done
	return 1
}

vm_qemu_args() {
	local accel=$1
	VM_ARGS=(-machine pc,nvdimm=on -smp 2 -m 2G,slots=2,maxmem=8G
		-object "memory-backend-file,id=mem1,share=on,mem-path=$VM_DIR/nvdimm.img,size=1G,align=2M"
		-device nvdimm,id=nv1,memdev=mem1
		-kernel "$VM_VMLINUZ" -initrd "$VM_DIR/initramfs.gz"
		-display none -monitor none -no-reboot
		-serial "file:$VM_DIR/console.$VM_BOOTS.log")
	if [ "$accel" = kvm ]; then
		VM_ARGS+=(-accel kvm -cpu max)
	else
		VM_ARGS+=(-accel tcg,thread=multi -cpu max)
	fi
}

# KVM where it works; here /dev/kvm may be a nested hypervisor under which
# the kernel hangs in early boot, so a probe boot has to show it.
vm_pick_accel() {
	local pid i
	VM_ACCEL=tcg
	if [ -n "${PMWAL_VM_ACCEL:-}" ]; then
		VM_ACCEL=$PMWAL_VM_ACCEL
	elif [ -w /dev/kvm ]; then
		VM_BOOTS=probe
		vm_qemu_args kvm
		qemu-system-x86_64 "${VM_ARGS[@]}" -append "console=ttyS0 panic=-1 pmwal_probe" &
		pid=$!
		for i in $(seq 1 200); do
			grep -q "pmwal-vm: probe booted" "$VM_DIR/console.probe.log" 2>/dev/null && VM_ACCEL=kvm && break
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
		VM_BOOTS=0
	fi
	vm_log "== accelerator: $VM_ACCEL$( [ "$VM_ACCEL" = tcg ] && [ -e /dev/kvm ] && echo ' (a probe kernel did not boot under KVM)')"
}

# Boot the guest and wait until it runs commands.
vm_boot() {
	local i t0
	VM_BOOTS=$((VM_BOOTS + 1))
	VM_CMD=0
	rm -rf "$VM_JOB/cmd" "$VM_JOB/booted"
	mkdir -p "$VM_JOB/cmd"
	vm_qemu_args "$VM_ACCEL"
	t0=$(date +%s)
	qemu-system-x86_64 "${VM_ARGS[@]}" \
		-append "console=ttyS0 panic=-1 quiet pmwal_guest=$VM_TOOLS/guest" \
		-drive "file=$VM_DIR/disk.img,format=raw,if=virtio,cache=writeback" \
		-fsdev "local,id=root,path=/,security_model=none,readonly=on,multidevs=remap" \
		-device virtio-9p-pci,fsdev=root,mount_tag=hostroot \
		-fsdev "local,id=job,path=$VM_JOB,security_model=none,multidevs=remap" \
		-device virtio-9p-pci,fsdev=job,mount_tag=job \
		-netdev "user,id=net0,restrict=on,hostfwd=tcp:127.0.0.1:$VM_PORT-:5432" \
		-device virtio-net-pci,netdev=net0 \
		>>"$VM_DIR/qemu.log" 2>&1 &
	VM_PID=$!
	for i in $(seq 1 3000); do
		[ -f "$VM_JOB/booted" ] && break
		if ! kill -0 "$VM_PID" 2>/dev/null; then
			echo "QEMU ended during boot $VM_BOOTS; console:" >&2
			tail -n 40 "$VM_DIR/console.$VM_BOOTS.log" >&2
			tail -n 5 "$VM_DIR/qemu.log" >&2
			return 1
		fi
		sleep 0.2
	done
	if [ ! -f "$VM_JOB/booted" ]; then
		echo "the guest did not come up within 600 s (boot $VM_BOOTS); console:" >&2
		tail -n 40 "$VM_DIR/console.$VM_BOOTS.log" >&2
		return 1
	fi
	vm_log "-- boot $VM_BOOTS: guest up in $(( $(date +%s) - t0 )) s"
}

# Run a shell script in the guest (as root, with env.sh); its output goes
# to the log, and to stderr when it fails.  Returns its exit status.
vm_cmd() {
	local c i rc
	VM_CMD=$((VM_CMD + 1))
	c=$VM_JOB/cmd/$VM_CMD
	printf '%s\n' "$1" >"$c.new"
	mv "$c.new" "$c.sh"
	for i in $(seq 1 6000); do
		[ -f "$c.rc" ] && break
		kill -0 "$VM_PID" 2>/dev/null || { echo "QEMU is gone while running: $1" >&2; return 1; }
		sleep 0.1
	done
	[ -f "$c.rc" ] || { echo "command did not end within 600 s: $1" >&2; return 1; }
	rc=$(cat "$c.rc")
	{ echo "-- guest \$ $1"; cat "$c.out"; } >>"$VM_LOG"
	VM_OUT=$(cat "$c.out")
	[ "$rc" = 0 ] || { echo "guest command failed ($rc): $1" >&2; cat "$c.out" >&2; }
	return "$rc"
}

# The power cut: SIGKILL of QEMU.
vm_cut() {
	kill -KILL "$VM_PID"
	wait "$VM_PID" 2>/dev/null || true
	VM_PID=
}

# A clean end: sync the guest's disks, then power off.
vm_poweroff() {
	[ -n "$VM_PID" ] || return 0
	VM_CMD=$((VM_CMD + 1))
	printf 'sync; umount /mnt/pmem /mnt/data 2>/dev/null || true; sync; echo o >/proc/sysrq-trigger\n' >"$VM_JOB/cmd/$VM_CMD.sh"
	local i
	for i in $(seq 1 300); do kill -0 "$VM_PID" 2>/dev/null || break; sleep 0.2; done
	kill -KILL "$VM_PID" 2>/dev/null || true
	wait "$VM_PID" 2>/dev/null || true
	VM_PID=
}

vm_setup() {
	mkdir -p "$VM_DIR" "$VM_JOB"
	: >"$VM_LOG"
	: >"$VM_DIR/qemu.log"
	VM_TOOLS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
	vm_install_packages
	vm_kernel
	vm_build_initramfs
	vm_images
	vm_free_port
	vm_pick_accel
	trap '[ -n "$VM_PID" ] && kill -KILL "$VM_PID" 2>/dev/null' EXIT
}

# --- PostgreSQL in the guest (needs tools/common.sh and pick_test_user) ----

# pmwal of this checkout, installed into a copy of the server's bin, lib
# and extension directories (VM_STAGE) that vm_boot_staged mounts over the
# host's in the guest: neither the host's installation changes nor does the
# run depend on it staying the same.
VM_STAGE=
vm_stage_pmwal() {
	local d
	echo "== building pmwal for $("$PG_CONFIG" --version) with -Wall -Wextra -Werror"
	make -s clean PG_CONFIG="$PG_CONFIG"
	make -s PG_CONFIG="$PG_CONFIG" PG_CFLAGS="-Wall -Wextra -Werror"
	VM_STAGE=$VM_DIR/stage
	VM_STAGE_DIRS="$("$PG_CONFIG" --bindir) $("$PG_CONFIG" --pkglibdir) $("$PG_CONFIG" --sharedir)/extension"
	rm -rf "$VM_STAGE"
	for d in $VM_STAGE_DIRS; do
		mkdir -p "$VM_STAGE$(dirname "$d")"
		cp -a "$d" "$VM_STAGE$d"
	done
	make -s PG_CONFIG="$PG_CONFIG" install DESTDIR="$VM_STAGE" >/dev/null
}

# Boot, with the staged directories (if any) mounted over the host's.
vm_boot_staged() {
	vm_boot
	[ -z "$VM_STAGE" ] || vm_cmd "for d in $VM_STAGE_DIRS; do mount --bind $VM_STAGE\$d \$d; done"
}

# The server's log in the job share, and env.sh: the settings and helpers
# of every guest command.  Sets PG_UID and PG_GID (TEST_USER's).
vm_guest_env() {
	PG_UID=$(id -u "$TEST_USER")
	PG_GID=$(id -g "$TEST_USER")
	mkdir -p "$VM_JOB/log"
	: >"$VM_JOB/log/server.log"
	# the server's log, written by the server's user in the guest
	chown "$PG_UID:$PG_GID" "$VM_JOB/log" "$VM_JOB/log/server.log"
	chmod 700 "$VM_JOB/log"
	chmod 600 "$VM_JOB/log/server.log"

	cat >"$VM_JOB/env.sh" <<ENV
set -e
PGBIN=$PG_BINDIR
PGDATA=/mnt/data/pgdata
RING=/mnt/pmem/pg/pmwal.ring
DAX=/dev/dax0.0
SERVER_LOG=/mnt/job/log/server.log
as_pg() { setpriv --reuid=$PG_UID --regid=$PG_GID --clear-groups env PATH=$PG_BINDIR:/usr/bin:/bin HOME=/tmp LANG=C "\$@"; }
# pg_ctl -w returns once hot standby takes read-only connections: after a
# cut into a write window, pmwal's start is an archive recovery that ends on
# a new timeline, and rows are counted, and loads start, only after it.
pg_start() {
	as_pg pg_ctl -D \$PGDATA -l \$SERVER_LOG -w -t 900 start || return 1
	for i in \$(seq 1 1800); do
		[ "\$(as_pg psql -h /tmp -XAt -c 'SELECT pg_is_in_recovery()' postgres)" = f ] && return 0
		sleep 0.5
	done
	echo "the server is still in recovery after 900 s"; return 1
}
pg_stop() { as_pg pg_ctl -D \$PGDATA -w -t 900 stop -m fast; }
mounts() {
	mountpoint -q /mnt/data || mount /dev/vda /mnt/data
	if [ -b /dev/pmem0 ] && ! mountpoint -q /mnt/pmem; then mount -o dax /dev/pmem0 /mnt/pmem; fi
	if [ -c \$DAX ]; then chown $PG_UID:$PG_GID \$DAX; chmod 600 \$DAX; fi
}
# configuration is synced at once: a cut would leave the unwritten blocks of
# a file whose size the journal committed as zeros
vm_conf() { printf '%s\n' "\$@" >\$PGDATA/vm.conf && chown $PG_UID:$PG_GID \$PGDATA/vm.conf && sync; }
ENV
}
