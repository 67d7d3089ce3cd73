# Refusals at start-up: every ring pmwal must not use stops the server with
# its own FATAL message and is left byte for byte as it was; the rings pmwal
# may re-initialise (empty, interrupted rewrite) are taken over with a LOG.
#
# Each start attempt rotates the server log first, so an assertion on the
# log can only be satisfied by that attempt.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use Fcntl qw(O_WRONLY O_CREAT O_EXCL);
use Time::HiRes qw(usleep);
use PmwalTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $MB = 1024 * 1024;
my $ring_hint =
  qq{See docs/failures.md in pmwal's documentation; "pmwal_ctl inspect" shows what the ring holds.};

# Files this test creates outside the nodes' rings.
my @cleanup;
END { unlink @cleanup; }

# Overwrite a file in place (same inode and mode) with the given bytes.
sub put_bytes
{
	my ($path, $bytes) = @_;
	open my $fh, '+<:raw', $path or die "could not open $path: $!";
	print $fh $bytes or die "could not write $path: $!";
	truncate($fh, length $bytes) or die "could not truncate $path: $!";
	close $fh or die "could not close $path: $!";
	return;
}

# Wait until a running server leaves its ring alone (flusher idle).
sub wait_ring_quiet
{
	my ($ring) = @_;
	my $prev = ring_bytes($ring);
	for (1 .. 40)
	{
		usleep(1_500_000);
		my $cur = ring_bytes($ring);
		return 1 if $cur eq $prev;
		$prev = $cur;
	}
	return 0;
}

sub sysid_of
{
	my ($node) = @_;
	my ($stdout, $stderr) = run_command([ 'pg_controldata', $node->data_dir ]);
	$stdout =~ /^Database system identifier:\s+(\d+)$/m
	  or die "no system identifier in pg_controldata output";
	return $1;
}

###########################################################################
# 1. A second server on a ring in use.
###########################################################################
my $node_a = pmwal_node('a', conf => "autovacuum = off\n");
my $ring_a = $node_a->{pmwal_ring};
$node_a->start;
# Wait until the idle server leaves its ring alone (the start bound it; the
# flusher makes no pass without WAL to sync), so that the comparison below
# sees only what the second server does.
ok(wait_ring_quiet($ring_a), 'ring of the idle node a stops changing');

my $node_b = pmwal_node('b', ring => $ring_a);
my $before = ring_bytes($ring_a);
start_refused($node_b, 'in use');
log_has(
	$node_b,
	qr/FATAL:  pmwal ring "\Q$ring_a\E" is in use by another server\n.*DETAIL:  Another process holds the ring's lock: a running server, or processes left over from a server whose postmaster was killed\.\n.*HINT:  Each server needs its own ring\.  Stop the other server or give this one another pmwal\.path\.\n/,
	'in use: FATAL with DETAIL and HINT');
ok($before eq ring_bytes($ring_a), 'in use: ring bytes unchanged');
is($node_a->safe_psql('postgres', 'SELECT 1'), '1',
	'in use: first server still answers');
$node_a->safe_psql('postgres', 'CREATE EXTENSION pmwal');
$node_a->safe_psql('postgres', 'CREATE TABLE t AS SELECT 42 AS x');
is($node_a->safe_psql('postgres', 'SELECT x FROM t'),
	'42', 'in use: first server still commits');
is($node_a->safe_psql('postgres', 'SELECT path, mode FROM pmwal_status'),
	"$ring_a|emulated", 'in use: first server still has its ring');
ok(!$node_a->log_contains(qr/FATAL|PANIC|ERROR/),
	'in use: no error in the first server\'s log');
my $sysid_a = $node_a->safe_psql('postgres',
	'SELECT system_identifier FROM pg_control_system()');
$node_a->stop;
is(ring_state($ring_a), RING_STATE_EMPTY, 'ring a is empty after a clean stop');

# The pristine, empty 8 MB ring of node a, restored before each case.
my $pristine = ring_bytes($ring_a);
is(length($pristine), 4096 + 8 * $MB, 'ring a is header plus 8 MB');

###########################################################################
# 4. A ring of another cluster.
###########################################################################
my $sysid_b = sysid_of($node_b);
isnt($sysid_a, $sysid_b, 'the two clusters have different system identifiers');
is(ring_field($ring_a, 'system_identifier'), $sysid_a,
	'ring a records its cluster');
$before = ring_bytes($ring_a);
start_refused($node_b, 'other cluster');
log_has(
	$node_b,
	qr/FATAL:  pmwal ring "\Q$ring_a\E" belongs to another database cluster\n.*DETAIL:  The ring belongs to the cluster with system identifier $sysid_a; this cluster's is $sysid_b\.  This data directory has no binding file \("pg_wal\/pmwal\.binding"\): it never bound this ring\.\n.*HINT:  Give this cluster its own ring in pmwal\.path\./,
	'other cluster: FATAL with DETAIL naming both system identifiers');
ok($before eq ring_bytes($ring_a), 'other cluster: ring bytes unchanged');

###########################################################################
# Header damage on node a's own ring.
###########################################################################

# 2. Wrong CRC: one byte of the ring_id changed, CRC kept (format 2: the
# CRC covers the 56 bytes before it).
put_bytes($ring_a, $pristine);
set_conf($node_a, 'pmwal.path' => $ring_a, 'pmwal.size' => '8MB');
my $ring_id_a = ring_field($ring_a, 'ring_id');
ring_set_static($ring_a, ring_id => (substr($ring_id_a, 0, 1) ^ "\x01") . substr($ring_id_a, 1),
	keep_crc => 1);
my $stored = ring_field($ring_a, 'crc');
my $computed = crc32c(substr(ring_bytes($ring_a), 0, 56));
isnt($stored, $computed, 'damaged header: CRC no longer matches');
$before = ring_bytes($ring_a);
start_refused($node_a, 'damaged header');
my ($stored_hex, $computed_hex) =
  (sprintf('%08X', $stored), sprintf('%08X', $computed));
log_has(
	$node_a,
	qr/FATAL:  pmwal ring "\Q$ring_a\E" has a damaged header\n.*DETAIL:  The header checksum is $stored_hex, but its contents give $computed_hex\.\n.*HINT:  \Q$ring_hint\E\n/,
	'damaged header: FATAL with DETAIL and HINT');
ok($before eq ring_bytes($ring_a), 'damaged header: ring bytes unchanged');

# 6. Another WAL block size (CRC recomputed).
put_bytes($ring_a, $pristine);
ring_set_static($ring_a, wal_block_size => 16384);
$before = ring_bytes($ring_a);
start_refused($node_a, 'block size');
log_has(
	$node_a,
	qr/FATAL:  pmwal ring "\Q$ring_a\E" was written with another WAL block size\n.*DETAIL:  The ring was written with a WAL block size of 16384 bytes; this build uses 8192\.\n/,
	'block size: FATAL with DETAIL');
ok($before eq ring_bytes($ring_a), 'block size: ring bytes unchanged');

# 12. A capacity larger than the file.
put_bytes($ring_a, $pristine);
ring_set_static($ring_a, capacity => 64 * $MB);
$before = ring_bytes($ring_a);
start_refused($node_a, 'impossible size');
my ($cap64, $len8) = (64 * $MB, 4096 + 8 * $MB);
log_has(
	$node_a,
	qr/FATAL:  pmwal ring "\Q$ring_a\E" has an impossible size\n.*DETAIL:  The header describes $cap64 data bytes after a 4096-byte header, but the file holds $len8 bytes\.\n/,
	'impossible size: FATAL with DETAIL');
ok($before eq ring_bytes($ring_a), 'impossible size: ring bytes unchanged');

# 13. An unsupported format version.
put_bytes($ring_a, $pristine);
ring_set_static($ring_a, format_version => 99);
$before = ring_bytes($ring_a);
start_refused($node_a, 'format version');
log_has(
	$node_a,
	qr/FATAL:  pmwal ring "\Q$ring_a\E" has an unsupported format\n.*DETAIL:  The ring has format version 99; this pmwal reads version 2\.\n/,
	'format version: FATAL with DETAIL');
ok($before eq ring_bytes($ring_a), 'format version: ring bytes unchanged');

# 11. A ring that holds WAL, started with another pmwal.size.
# (format 2: tail and head page-aligned, a timeline in its word)
put_bytes($ring_a, $pristine);
my $tail = 0x1000000;
ring_write_u64($ring_a, 'timeline', 1);
ring_write_u64($ring_a, 'state', RING_STATE_IN_USE);
ring_write_u64($ring_a, 'tail', $tail);
ring_write_u64($ring_a, 'head', $tail + 2 * 8192);
set_conf($node_a, 'pmwal.size' => '16MB');
$before = ring_bytes($ring_a);
start_refused($node_a, 'resize with WAL');
log_has(
	$node_a,
	qr/FATAL:  pmwal ring "\Q$ring_a\E" holds WAL and its size differs from pmwal\.size\n.*DETAIL:  The ring holds 8 MB of data area; pmwal\.size is 16 MB\.\n.*HINT:  Set pmwal\.size back to 8 MB and restart, so that the WAL it holds is restored; the ring can be resized once it is empty\.\n/,
	'resize with WAL: FATAL with DETAIL and HINT naming 8 MB');
ok($before eq ring_bytes($ring_a), 'resize with WAL: ring bytes unchanged');
is(-s $ring_a, 4096 + 8 * $MB, 'resize with WAL: file size unchanged');
set_conf($node_a, 'pmwal.size' => '8MB');

# 7. Group or other access.
put_bytes($ring_a, $pristine);
for my $mode (0640, 0606)
{
	my $octal = sprintf('%04o', $mode);
	chmod($mode, $ring_a) or die "chmod: $!";
	$before = ring_bytes($ring_a);
	start_refused($node_a, "mode $octal");
	log_has(
		$node_a,
		qr/FATAL:  pmwal ring "\Q$ring_a\E" has group or other access\n.*DETAIL:  Its permissions are $octal; the ring holds a copy of the WAL and must be accessible by the server's user only\.\n.*HINT:  Run chmod 0600 on the file\.\n/,
		"mode $octal: FATAL with DETAIL and HINT");
	ok($before eq ring_bytes($ring_a), "mode $octal: ring bytes unchanged");
	is((stat $ring_a)[2] & 07777, $mode, "mode $octal: mode left alone");
}
chmod(0600, $ring_a) or die "chmod: $!";

###########################################################################
# Other files than a ring.
###########################################################################

# 3. A foreign file: right size, mode 0600, no magic.
my $foreign = "/dev/shm/pmwal_tap_foreign_$$.ring";
unlink $foreign;
push @cleanup, $foreign;
{
	sysopen(my $fh, $foreign, O_WRONLY | O_CREAT | O_EXCL, 0600)
	  or die "could not create $foreign: $!";
	binmode $fh;
	print $fh "\xA5" x (4096 + 8 * $MB) or die "write: $!";
	close $fh or die "close: $!";
	chmod(0600, $foreign) or die "chmod: $!";
}
set_conf($node_a, 'pmwal.path' => $foreign);
$before = ring_bytes($foreign);
start_refused($node_a, 'foreign file');
log_has(
	$node_a,
	qr/FATAL:  file "\Q$foreign\E" is not a pmwal ring\n.*DETAIL:  The file does not start with the pmwal ring magic "PMWALRNG"\.\n.*HINT:  pmwal only uses a ring it created itself and does not overwrite another file; correct pmwal\.path, remove the file, or initialise a device with "pmwal_ctl init"\.\n/,
	'foreign file: FATAL with DETAIL and HINT');
ok($before eq ring_bytes($foreign), 'foreign file: bytes unchanged');

# 8. A file owned by another user.
my $passwd = '/etc/passwd';
my $owner = (stat $passwd)[4];
ok(defined $owner && $owner != $>,
	"$passwd is owned by another user (uid $owner, test runs as $>)");
set_conf($node_a, 'pmwal.path' => $passwd);
$before = ring_bytes($passwd);
start_refused($node_a, 'other owner');
log_has(
	$node_a,
	qr/FATAL:  pmwal ring "\Q$passwd\E" is owned by another user\n.*DETAIL:  The file is owned by user ID $owner; the server runs as user ID $>\.\n.*HINT:  The ring holds a copy of the WAL; give it to the server's user \(chown\) or point pmwal\.path elsewhere\.\n/,
	'other owner: FATAL with DETAIL and HINT');
ok($before eq ring_bytes($passwd), "other owner: $passwd unchanged");

# 9. A directory.
my $dir = PostgreSQL::Test::Utils::tempdir;
set_conf($node_a, 'pmwal.path' => $dir);
start_refused($node_a, 'directory');
log_has(
	$node_a,
	qr/FATAL:  pmwal\.path "\Q$dir\E" is a directory\n.*HINT:  Set pmwal\.path to a file in that directory, for example "\Q$dir\E\/pmwal\.ring"\.\n/,
	'directory: FATAL with HINT');
opendir(my $dh, $dir) or die "opendir: $!";
is_deeply([ grep { !/^\.\.?$/ } readdir $dh ], [],
	'directory: nothing created in it');
closedir $dh;

# 10. A missing directory.
my $nodir = "/dev/shm/pmwal_tap_nodir_$$";
ok(!-e $nodir, 'missing directory: does not exist before');
set_conf($node_a, 'pmwal.path' => "$nodir/ring");
start_refused($node_a, 'missing directory');
log_has(
	$node_a,
	qr/FATAL:  directory of pmwal ring "\Q$nodir\E\/ring" does not exist\n.*DETAIL:  pmwal creates the ring file on first start, but "\Q$nodir\E" is not an existing directory\.\n.*HINT:  Create the directory on a DAX file system \(or use \/dev\/shm to try pmwal\), or correct pmwal\.path\.\n/,
	'missing directory: FATAL with DETAIL and HINT');
ok(!-e $nodir, 'missing directory: nothing created');

# 17. A relative pmwal.path stops the server.  PostgreSQL itself applies a
# value set before _PG_init defined the setting with elevel WARNING only
# (define_custom_variable) and would leave pmwal inactive; pmwal validates
# the value again and refuses to start.
set_conf($node_a, 'pmwal.path' => 'ring');
$node_a->rotate_logfile;
my $started = $node_a->start(fail_ok => 1);
ok(!$started, 'relative path: server refuses to start');
$node_a->stop if $started;
log_has(
	$node_a,
	qr/FATAL:  invalid value for parameter "pmwal\.path": "ring"\n.*DETAIL:  pmwal\.path must be an absolute path\.\n/,
	'relative path: FATAL invalid value with DETAIL');
ok(!-e $node_a->data_dir . '/ring', 'relative path: no ring in the data directory');

# 18. A pmwal.size out of range stops the server instead of silently
# picking the default size.
set_conf($node_a, 'pmwal.path' => $ring_a, 'pmwal.size' => '1MB');
$before = ring_bytes($ring_a);
$node_a->rotate_logfile;
$started = $node_a->start(fail_ok => 1);
ok(!$started, 'size out of range: server refuses to start');
$node_a->stop if $started;
log_has(
	$node_a,
	qr/FATAL:  1 MB is outside the valid range for parameter "pmwal\.size" \(2( MB)? \.\. 65536( MB)?\)/,
	'size out of range: FATAL names the valid range');
ok($before eq ring_bytes($ring_a), 'size out of range: ring bytes unchanged');

###########################################################################
# 14. require_pmem on a ring that is not persistent memory.
###########################################################################
put_bytes($ring_a, $pristine);
set_conf($node_a, 'pmwal.path' => $ring_a, 'pmwal.size' => '8MB');
{
	delete local $ENV{PMEM_IS_PMEM_FORCE};

	$before = ring_bytes($ring_a);
	start_refused($node_a, 'not pmem');
	log_has(
		$node_a,
		qr/FATAL:  pmwal ring "\Q$ring_a\E" is not on persistent memory\n.*DETAIL:  The file cannot be mapped with DAX, so each update would need msync\(\)\.\n.*HINT:  Put pmwal\.path on a DAX file system or a devdax device; or set pmwal\.require_pmem = off to persist with msync\(\), durable but slower; or, only to try pmwal, set PMEM_IS_PMEM_FORCE=1 in the server's environment\.\n/,
		'not pmem: FATAL with DETAIL and HINT');
	ok($before eq ring_bytes($ring_a), 'not pmem: ring bytes unchanged');

	set_conf($node_a, 'pmwal.require_pmem' => 'off');
	start_fine($node_a, 'msync');
	log_has(
		$node_a,
		qr/LOG:  pmwal ring "\Q$ring_a\E" is not on persistent memory; it is persisted with msync\(\), durable but slower\n/,
		'msync: persisting with msync() is logged');
	is($node_a->safe_psql('postgres', 'SELECT mode FROM pmwal_status'),
		'msync', 'msync: status view reports mode msync');
	$node_a->stop;
}
set_conf($node_a, 'pmwal.require_pmem' => 'on');

###########################################################################
# 15. An empty ring grows with pmwal.size.
###########################################################################
is(ring_state($ring_a), RING_STATE_EMPTY, 'resize: ring is empty');
is(ring_field($ring_a, 'capacity'), 8 * $MB, 'resize: ring has 8 MB');
set_conf($node_a, 'pmwal.size' => '16MB');
start_fine($node_a, 'resize');
log_has(
	$node_a,
	qr/LOG:  pmwal re-initialising empty ring "\Q$ring_a\E" from 8 MB to 16 MB\n/,
	'resize: re-initialisation is logged');
is(-s $ring_a, 4096 + 16 * $MB, 'resize: file is header plus 16 MB');
is($node_a->safe_psql('postgres', 'SELECT capacity FROM pmwal_status'),
	16 * $MB, 'resize: status view reports 16 MB');
$node_a->stop;
is(ring_field($ring_a, 'capacity'), 16 * $MB, 'resize: header says 16 MB');

###########################################################################
# 16. An interrupted rewrite of the header of an empty ring.
###########################################################################
my $ring_id_16 = ring_field($ring_a, 'ring_id');
ring_set_static($ring_a, header_size => 7, keep_crc => 1);
ring_write_u64($ring_a, 'state', RING_STATE_REINIT);
isnt(ring_field($ring_a, 'crc'), crc32c(substr(ring_bytes($ring_a), 0, 56)),
	'interrupted rewrite: CRC is wrong');
start_fine($node_a, 'interrupted rewrite');
log_has(
	$node_a,
	qr/LOG:  pmwal initialising ring "\Q$ring_a\E" with 16 MB\n.*DETAIL:  An initialisation of the empty ring was interrupted\.\n/,
	'interrupted rewrite: initialisation is logged');
ok(!$node_a->log_contains(qr/FATAL/), 'interrupted rewrite: no FATAL');
$node_a->stop;
is(ring_state($ring_a), RING_STATE_EMPTY,
	'interrupted rewrite: ring is empty again');
is(ring_field($ring_a, 'crc'), crc32c(substr(ring_bytes($ring_a), 0, 56)),
	'interrupted rewrite: header CRC is valid again');
is(ring_field($ring_a, 'header_size'), 4096, 'interrupted rewrite: the static header is rewritten');
is(ring_field($ring_a, 'ring_id'), $ring_id_16, 'interrupted rewrite: the ring keeps its ring_id');

###########################################################################
# 19. A ring of format 1 (pmwal 1.0 and 1.1): one that holds WAL is refused
#     (the pmwal that wrote it must restore it), an empty one is initialised
#     anew in format 2.
###########################################################################
# A format-1 header: static part (magic, version, header size, system
# identifier, timeline, segment size, block size, reserved, capacity) with
# its CRC at byte 48; tail, head and state words at 64, 192 and 256.
sub v1_header
{
	my (%w) = @_;
	my $st = pack('a8 L< L< Q< L< L< L< L< Q<',
		'PMWALRNG', 1, 4096, $sysid_a, 1, 16 * $MB, 8192, 0, 8 * $MB);
	my $hdr = $st . pack('L<', crc32c($st));
	$hdr .= "\0" x (4096 - length $hdr);
	substr($hdr, 64, 8) = pack('Q<', $w{tail});
	substr($hdr, 192, 8) = pack('Q<', $w{head});
	substr($hdr, 256, 8) = pack('Q<', $w{state});
	return $hdr;
}

set_conf($node_a, 'pmwal.path' => $ring_a, 'pmwal.size' => '8MB');
put_bytes($ring_a, v1_header(tail => 0x1000000, head => 0x1002000, state => RING_STATE_IN_USE)
	  . substr($pristine, 4096));
$before = ring_bytes($ring_a);
start_refused($node_a, 'format 1 with WAL');
log_has(
	$node_a,
	qr/FATAL:  pmwal ring "\Q$ring_a\E" was written by an older pmwal and holds WAL\n.*DETAIL:  The ring has format 1 \(pmwal 1\.1 or older\) and holds WAL from \Q@{[ lsn_format(0x1000000) ]}\E to \Q@{[ lsn_format(0x1002000) ]}\E\.\n.*HINT:  Start the server once with the pmwal that wrote the ring, so that it restores the WAL, and stop it cleanly; then upgrade\./,
	'format 1 with WAL: FATAL with DETAIL and HINT');
ok($before eq ring_bytes($ring_a), 'format 1 with WAL: ring bytes unchanged');

put_bytes($ring_a, v1_header(tail => 0x1002000, head => 0x1002000, state => RING_STATE_IN_USE)
	  . substr($pristine, 4096));
start_fine($node_a, 'format 1, empty');
log_has(
	$node_a,
	qr/LOG:  pmwal initialising ring "\Q$ring_a\E" with 8 MB\n.*DETAIL:  The ring has format 1 \(pmwal 1\.1 or older\) and holds nothing\.\n/,
	'format 1, empty: initialised anew, and the log says so');
$node_a->stop;
is(ring_field($ring_a, 'format_version'), 2, 'format 1, empty: the ring has format 2 now');
is(ring_field($ring_a, 'crc'), crc32c(substr(ring_bytes($ring_a), 0, 56)),
	'format 1, empty: its header CRC is valid');
isnt(ring_field($ring_a, 'ring_id'), "\0" x 16, 'format 1, empty: the ring got a ring_id');

###########################################################################
# 20. The binding (issue 21; t/026* has the cases under load): after a
#     crash, the file at the bound ring's path is another ring of this
#     cluster.  It may not stand in for the ring that may hold the cluster's
#     acknowledged WAL.
###########################################################################
my $ring_other = "/dev/shm/pmwal_tap_other_$$.ring";
unlink $ring_other;
push @cleanup, $ring_other;
set_conf($node_a, 'pmwal.path' => $ring_other);
start_fine($node_a, 'another ring of the cluster');
$node_a->stop;
set_conf($node_a, 'pmwal.path' => $ring_a);
start_fine($node_a, 'back on ring a');
$node_a->stop('immediate');
my ($bound_id, $other_id) = map { unpack('H*', ring_field($_, 'ring_id')) } ($ring_a, $ring_other);
rename($ring_other, $ring_a) or die "rename: $!";
$before = ring_bytes($ring_a);
start_refused($node_a, 'another ring at the bound path');
log_has(
	$node_a,
	qr/FATAL:  pmwal ring "\Q$ring_a\E" is not the ring that may hold this cluster's acknowledged WAL\n.*DETAIL:  The cluster did not shut down cleanly; its WAL was made durable in ring $bound_id at this path \(generation \d+\), but the file there now is ring $other_id\.\n.*HINT:  Put ring $bound_id back at "\Q$ring_a\E"\.  If that ring is lost for good, "pmwal_ctl unbind -D \Q${\ $node_a->data_dir }\E" lets the server start without what only it held; the cluster must then be treated as damaged/,
	'another ring at the bound path: FATAL with DETAIL naming both rings and HINT');
ok($before eq ring_bytes($ring_a), 'another ring at the bound path: ring bytes unchanged');

###########################################################################
# 5. Another WAL segment size, set with pg_resetwal: an empty ring follows
# only a data directory whose binding names it (t/032); without the binding
# file it is refused.
###########################################################################
my $ring_seg = "/dev/shm/pmwal_tap_segsize_$$.ring";
unlink $ring_seg;
push @cleanup, $ring_seg;
set_conf($node_b, 'pmwal.path' => $ring_seg);
start_fine($node_b, 'segment size');
$node_b->stop;
is(ring_field($ring_seg, 'wal_segment_size'), 16 * $MB,
	'segment size: ring was created with 16 MB segments');
command_ok([ 'pg_resetwal', '--wal-segsize=32', '-D', $node_b->data_dir ],
	'segment size: pg_resetwal --wal-segsize=32');
my $binding_b = $node_b->data_dir . '/pg_wal/pmwal.binding';
rename($binding_b, "$binding_b.aside") or die "rename: $!";
$before = ring_bytes($ring_seg);
start_refused($node_b, 'segment size');
my ($seg16, $seg32) = (16 * $MB, 32 * $MB);
log_has(
	$node_b,
	qr/FATAL:  pmwal ring "\Q$ring_seg\E" was written with another WAL segment size\n.*DETAIL:  The ring was written with a WAL segment size of $seg16 bytes; this cluster uses $seg32\.  This data directory has no binding file \("pg_wal\/pmwal\.binding"\): it never bound this ring\.\n.*HINT:  \Q$ring_hint\E\n/,
	'segment size: FATAL with DETAIL and HINT');
ok($before eq ring_bytes($ring_seg), 'segment size: ring bytes unchanged');
rename("$binding_b.aside", $binding_b) or die "rename: $!";
start_fine($node_b, 'segment size, with the binding');
log_has($node_b, qr/LOG:  pmwal ring "\Q$ring_seg\E" follows the new identity of this data directory\n/,
	'segment size, with the binding: the ring follows');
is(ring_field($ring_seg, 'wal_segment_size'), $seg32, 'segment size: the ring says 32 MB segments');
$node_b->stop;

done_testing();
