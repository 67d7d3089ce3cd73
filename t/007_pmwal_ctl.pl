# pmwal_ctl, the offline tool for a stopped cluster's ring: inspect, verify,
# dump (read back with pg_waldump) and reset (only when confirmed), and its
# refusals: usage errors, a ring in use by a running server.
use strict;
use warnings;
use FindBin;
use Digest::SHA;
use Time::HiRes ();
use lib $FindBin::RealBin;

use PmwalTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = pmwal_node('ctl', size => '16MB', conf => q{
wal_writer_delay = 10s
checkpoint_timeout = 1h
pmwal.flush_interval = 60s
restart_after_crash = off
});
my $ring = $node->{pmwal_ring};
my $pgdata = $node->data_dir;
my $sha = sub { Digest::SHA->new(256)->addfile($ring)->hexdigest };

# Run pmwal_ctl; returns (exit code, stdout + stderr).
sub ctl
{
	my ($stdout, $stderr) = run_command([ 'pmwal_ctl', @_ ]);
	return ($? >> 8, "$stdout$stderr");
}

# --- usage -----------------------------------------------------------------
my ($rc, $out) = ctl();
is($rc, 1, 'no arguments: exit 1');
like($out, qr/Usage:.*pmwal_ctl inspect/s, 'no arguments: usage is shown');
($rc, $out) = ctl('--help');
is($rc, 0, '--help: exit 0');
like($out, qr/reset --discard-wal RING/, '--help: usage is shown');
($rc, $out) = ctl('frobnicate', $ring);
is($rc, 1, 'unknown command: exit 1');
like($out, qr/unknown command "frobnicate"/, 'unknown command: named');
($rc, $out) = ctl('inspect', '--bogus', $ring);
is($rc, 1, 'unknown option: exit 1');
like($out, qr/Try "pmwal_ctl --help"/, 'unknown option: points to --help');
($rc, $out) = ctl('inspect');
is($rc, 1, 'no ring path: exit 1');
like($out, qr/expected exactly one ring path/, 'no ring path: said so');
($rc, $out) = ctl('inspect', '/nonexistent/pmwal.ring');
is($rc, 1, 'missing ring: exit 1');
like($out, qr{could not open ring "/nonexistent/pmwal.ring": No such file or directory},
	'missing ring: the error names the file and the cause');

# --- a running server holds the ring ----------------------------------------
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION pmwal; CREATE TABLE t (id int, v text)');
wait_accelerated($node, 't') or die 'commits are not accelerated';
($rc, $out) = ctl('inspect', $ring);
is($rc, 0, 'inspect on a running server: allowed (read-only)');
like($out, qr/lock:\s+held/, 'inspect on a running server: says the lock is held');
for my $cmd ([ 'verify', $ring ], [ 'dump', '--to', $node->basedir . '/nodump', $ring ],
	[ 'reset', '--discard-wal', $ring ])
{
	my $before = $sha->();
	($rc, $out) = ctl(@$cmd);
	is($rc, 1, "$cmd->[0] on a running server: refused");
	like($out, qr/is in use by a running server; stop the server first/,
		"$cmd->[0] on a running server: says why");
	is($sha->(), $before, "$cmd->[0] on a running server: ring unchanged") if $cmd->[0] eq 'reset';
}

# --- a ring holding WAL: commits, then every server process killed ---------
my $acked = 200;
$node->safe_psql('postgres',
	join("\n", map { "INSERT INTO t VALUES ($_, 'pmwal_ctl test row $_');" } 1 .. $acked));
powercut_kill($node);
my ($tail, $last_end, $head) = map { ring_read_u64($ring, $_) } qw(tail last_end head);
cmp_ok($head, '>', $tail, 'the killed server left WAL in the ring');
my $fmt = sub { sprintf('%X/%X', $_[0] >> 32, $_[0] & 0xffffffff) };
my $sysid = (run_command([ 'pg_controldata', $pgdata ]))[0] =~ /Database system identifier:\s+(\d+)/ && $1;

($rc, $out) = ctl('inspect', '-D', $pgdata, $ring);
is($rc, 0, 'inspect: exit 0');
like($out, qr/lock:\s+free/, 'inspect: the lock is free');
like($out, qr/system identifier:\s+$sysid \(matches the cluster\)/, 'inspect: system identifier of this cluster');
like($out, qr/capacity:\s+16777216 bytes \(16 MB\)/, 'inspect: capacity');
like($out, qr/state:\s+in use/, 'inspect: state in use');
like($out, qr/tail:\s+\Q${\ $fmt->($tail)}\E\n/, 'inspect: tail');
like($out, qr/last acknowledged:\s+\Q${\ $fmt->($last_end)}\E\n/, 'inspect: last acknowledged commit');
like($out, qr/head:\s+\Q${\ $fmt->($head)}\E\n/, 'inspect: head');
like($out, qr/holds:\s+${\ ($head - $tail)} bytes of WAL/, 'inspect: bytes held');
like($out, qr/restore at start:\s+yes: [0-9A-F\/]+ to \Q${\ $fmt->($head)}\E/, 'inspect: a start would restore it');

($rc, $out) = ctl('verify', '-D', $pgdata, $ring);
is($rc, 0, 'verify: a good ring verifies');
like($out, qr/WAL:\s+ok: .* reads cleanly through the last acknowledged commit/, 'verify: says ok');

# --- dump, read back with pg_waldump ---------------------------------------
my $dumpdir = $node->basedir . '/dump';
($rc, $out) = ctl('dump', '--to', $dumpdir, $ring);
is($rc, 0, 'dump: exit 0');
like($out, qr/wrote WAL \Q${\ $fmt->($tail)}\E to \Q${\ $fmt->($head)}\E into \d+ segment file\(s\)/,
	'dump: says what it wrote');
my @segs = glob("$dumpdir/*");
ok(@segs >= 1 && !grep({ !m{/[0-9A-F]{24}$} } @segs), 'dump: files are named like WAL segments');
my ($wd_out, $wd_err) = run_command([ 'pg_waldump', "--path=$dumpdir",
		'--start=' . $fmt->($tail), '--end=' . $fmt->($last_end) ]);
is($?, 0, 'pg_waldump reads the dump to the last acknowledged commit');
my $commits = () = $wd_out =~ /desc: COMMIT /g;
cmp_ok($commits, '>=', 1, "pg_waldump finds $commits commit records in the dump");
like($wd_out, qr/rmgr: Heap .*desc: INSERT/, 'pg_waldump finds the inserts in the dump');

# --- one flipped byte: verify fails, and passes again once repaired --------
my $at = $last_end - 20;	# inside the last commit record, not in padding
my $off = 4096 + $at % 16777216;
my $orig = PmwalTest::_rw($ring, $off, 1);
PmwalTest::_rw($ring, $off, 0, chr(ord($orig) ^ 0xff));
($rc, $out) = ctl('verify', '-D', $pgdata, $ring);
is($rc, 1, 'verify: a flipped byte fails verification');
like($out, qr/WAL:\s+DAMAGED between/, 'verify: says the WAL is damaged');
like($out, qr/pg_waldump says:.*(invalid|incorrect|error)/is, 'verify: shows what pg_waldump found');
PmwalTest::_rw($ring, $off, 0, $orig);
($rc, $out) = ctl('verify', $ring);
is($rc, 0, 'verify: passes again with the byte put back');

# --- a corrupt header CRC ----------------------------------------------------
my $crc = ring_field($ring, 'crc');
ring_set_static($ring, crc => $crc ^ 1, keep_crc => 1);
($rc, $out) = ctl('verify', $ring);
is($rc, 1, 'verify: a wrong header CRC fails');
like($out, qr/header:\s+NOT USABLE: .*(CRC|checksum)/i, 'verify: says the header is not usable');
($rc, $out) = ctl('inspect', $ring);
is($rc, 1, 'inspect: a wrong header CRC exits 1');
ring_set_static($ring, crc => $crc, keep_crc => 1);

# --- reset -------------------------------------------------------------------
my $before = $sha->();
($rc, $out) = ctl('reset', $ring);
is($rc, 1, 'reset without --discard-wal: refused');
like($out, qr/confirm with --discard-wal/, 'reset without --discard-wal: says how to confirm');
is($sha->(), $before, 'reset without --discard-wal: ring unchanged');

($rc, $out) = ctl('reset', '--discard-wal', $ring);
is($rc, 0, 'reset --discard-wal: exit 0');
like($out,
	qr/discarding WAL \Q${\ $fmt->($tail)}\E to \Q${\ $fmt->($head)}\E \(${\ ($head - $tail)} bytes, acknowledged commits up to \Q${\ $fmt->($last_end)}\E\)/,
	'reset: prints the range, bytes and acknowledged commits it discards');
is(ring_state($ring), RING_STATE_EMPTY, 'reset: the ring is empty');
is(ring_read_u64($ring, 'tail'), ring_read_u64($ring, 'head'), 'reset: tail = head');
($rc, $out) = ctl('inspect', '-D', $pgdata, $ring);
like($out, qr/restore at start:\s+nothing to restore/, 'inspect after reset: nothing to restore');
($rc, $out) = ctl('dump', '--to', "$dumpdir.2", $ring);
like($out, qr/the ring is empty; nothing to dump/, 'dump after reset: nothing to dump');

# The operator chose to discard the ring's WAL: the server starts from pg_wal.
my $offset = -s $node->logfile;
$node->start;
unlike(slurp_file($node->logfile, $offset), qr/pmwal restored WAL/, 'after reset, the start restores nothing');
my $rows = $node->safe_psql('postgres', 'SELECT count(*) FROM t');
note("after reset: $rows of $acked acknowledged rows survive (the kill kept the page cache)");
$node->stop;

done_testing();
