# pmwal_ctl, the offline tool for a stopped cluster's ring: init, inspect,
# verify, dump (read back with pg_waldump) and reset (only when confirmed),
# and its refusals: usage errors, a ring in use by a running server.
#
# init: the server adopts no file it did not create (an all-zero header
# included); init makes a missing path, an empty or all-zero file or a
# devdax device an empty ring of the cluster, and overwrites anything else
# (other data, a ring and its WAL) only with --force, saying what it was.
# dump writes only files it creates itself, in a directory of its own
# (issue 9 item 6); a character device is sized from sysfs (item 7).
#
# verify must agree with the server's restore (restore.c): it fails on
# damage anywhere in [tail, head) and on a bad header, and it accepts what
# the restore accepts -- a tail at a page boundary, a head that cuts off
# the record after the last acknowledged commit.
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

my $started = Time::HiRes::time();
my $node = pmwal_node('ctl', size => '16MB', conf => q{
wal_writer_delay = 10s
checkpoint_timeout = 1h
pmwal.flush_interval = 60s
restart_after_crash = off
autovacuum = off
});
my $ring = $node->{pmwal_ring};
my $pgdata = $node->data_dir;
my $sha = sub { Digest::SHA->new(256)->addfile($_[0] // $ring)->hexdigest };

# Run pmwal_ctl; returns (exit code, stdout + stderr).
sub ctl
{
	my ($stdout, $stderr) = run_command([ 'pmwal_ctl', @_ ]);
	return ($? >> 8, "$stdout$stderr");
}

sub fmt_lsn { return sprintf('%X/%X', $_[0] >> 32, $_[0] & 0xffffffff); }
sub parse_lsn { my ($hi, $lo) = split m{/}, $_[0]; return (hex($hi) << 32) | hex($lo); }

# Read, or write when $value is given, the ring's "exposed" word (offset 320,
# ring_format.h); PmwalTest's ring_read_u64 knows the first four words only.
sub exposed_word
{
	my ($path, $value) = @_;
	open my $fh, '+<:raw', $path or die "could not open $path: $!";
	sysseek($fh, 320, 0) or die "seek: $!";
	my $buf;
	if (defined $value) { syswrite($fh, pack('Q<', $value)) == 8 or die "write: $!"; }
	else { sysread($fh, $buf, 8) == 8 or die "read: $!"; }
	close $fh;
	return defined $buf ? unpack('Q<', $buf) : undef;
}

# A file of $size zero bytes with mode $mode (default 0600).
sub zero_file
{
	my ($path, $size, $mode) = @_;
	open my $fh, '>:raw', $path or die "could not create $path: $!";
	truncate($fh, $size) or die "truncate: $!";
	close $fh;
	chmod($mode // 0600, $path) or die "chmod: $!";
	return $path;
}

sub file_mode { return sprintf('%04o', (lstat $_[0])[2] & 07777); }

# Read or write (when $byte is given) the data-area byte that holds LSN $lsn.
sub ring_lsn_byte
{
	my ($lsn, $byte) = @_;
	my $off = 4096 + $lsn % ring_field($ring, 'capacity');
	open my $fh, '+<:raw', $ring or die "could not open $ring: $!";
	sysseek($fh, $off, 0) or die "seek: $!";
	my $buf;
	if (defined $byte) { syswrite($fh, $byte) == 1 or die "write: $!"; }
	else { sysread($fh, $buf, 1) == 1 or die "read: $!"; }
	close $fh;
	return $buf;
}

# Flip every bit of the byte at $lsn; returns the original byte.
sub flip
{
	my ($lsn) = @_;
	my $orig = ring_lsn_byte($lsn);
	ring_lsn_byte($lsn, chr(ord($orig) ^ 0xff));
	return $orig;
}

# The first LSN named "at X/Y" in pmwal_ctl's output, undef if none.
sub named_lsn
{
	my ($out) = @_;
	return $out =~ m{ at ([0-9A-F]+/[0-9A-F]+)} ? parse_lsn($1) : undef;
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
($rc, $out) = ctl('dump', $ring);
is($rc, 1, 'dump without --to: exit 1');
like($out, qr/dump needs --to DIR/, 'dump without --to: said so');
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
	[ 'reset', '--discard-wal', $ring ], [ 'init', '-D', $pgdata, '--size=16', $ring ])
{
	my $before = $sha->();
	($rc, $out) = ctl(@$cmd);
	is($rc, 1, "$cmd->[0] on a running server: refused");
	like($out, qr/is in use by a running server; stop the server first/,
		"$cmd->[0] on a running server: says why");
	is($sha->(), $before, "$cmd->[0] on a running server: ring unchanged")
	  if $cmd->[0] eq 'reset' || $cmd->[0] eq 'init';
}
ok(!-e $node->basedir . '/nodump', 'dump on a running server: wrote nothing');

# --- a ring holding WAL: commits, then every server process killed ---------
# Half the rows, then a record that ends exactly at a page boundary (sized
# with logical messages, which need no transaction), then the rest: the
# boundary is a record boundary inside the ring, where a tail may stand.
my $acked = 200;
my $insert = sub {
	my ($from, $to) = @_;
	$node->safe_psql('postgres',
		join("\n", map { "INSERT INTO t VALUES ($_, 'pmwal_ctl test row $_');" } $from .. $to));
};
$insert->(1, $acked / 2);
my $after_boundary = parse_lsn($node->safe_psql('postgres', q{
DO $$
DECLARE r int;
BEGIN
	FOR i IN 1..20 LOOP
		r := ((pg_current_wal_insert_lsn() - '0/0'::pg_lsn) % 8192)::int;
		EXIT WHEN r = 24;	-- the next record starts right after a page header
		r := 8192 - r;
		-- 55 bytes of record and message headers, prefix 'p'
		PERFORM pg_logical_emit_message(false, 'p', repeat('x', CASE WHEN r < 400 THEN 500 ELSE r - 55 END));
	END LOOP;
END $$;
SELECT pg_current_wal_insert_lsn();}));
my $boundary = $after_boundary - 24;
$insert->($acked / 2 + 1, $acked);
my $last_xid = $node->safe_psql('postgres', "SELECT xmin FROM t WHERE id = $acked");
powercut_kill($node);

my ($tail, $last_end, $head) = map { ring_read_u64($ring, $_) } qw(tail last_end head);
my $capacity = ring_field($ring, 'capacity');
is(ring_state($ring), RING_STATE_IN_USE, 'the killed server left the ring in use');
cmp_ok($head, '>', $tail, 'the killed server left WAL in the ring');
note(sprintf('ring: tail %s, last_end %s, head %s; page boundary %s', fmt_lsn($tail),
		fmt_lsn($last_end), fmt_lsn($head), fmt_lsn($boundary)));
my ($sysid) = (run_command([ 'pg_controldata', $pgdata ]))[0] =~ /Database system identifier:\s+(\d+)/;
ok(defined $sysid, "pg_controldata gives the system identifier");
$sysid //= 'none';
my $ring_sha = $sha->();

# --- inspect -------------------------------------------------------------------
($rc, $out) = ctl('inspect', '-D', $pgdata, $ring);
is($rc, 0, 'inspect: exit 0');
like($out, qr/lock:\s+free/, 'inspect: the lock is free');
like($out, qr/format version:\s+1\n/, 'inspect: format version');
like($out, qr/system identifier:\s+$sysid \(matches the cluster\)/,
	"inspect: system identifier is pg_controldata's");
like($out, qr/timeline:\s+1\n/, 'inspect: timeline');
like($out, qr/WAL segment size:\s+16777216\n/, 'inspect: WAL segment size');
like($out, qr/capacity:\s+16777216 bytes \(16 MB\)/, 'inspect: capacity');
like($out, qr/state:\s+in use/, 'inspect: state in use');
like($out, qr/tail:\s+\Q${\ fmt_lsn($tail)}\E\n/, 'inspect: tail');
like($out, qr/last acknowledged:\s+\Q${\ fmt_lsn($last_end)}\E\n/, 'inspect: last acknowledged commit');
like($out, qr/head:\s+\Q${\ fmt_lsn($head)}\E\n/, 'inspect: head');
like($out, qr/holds:\s+${\ ($head - $tail)} bytes of WAL/, 'inspect: bytes held');
like($out, qr/restore at start:\s+yes: [0-9A-F\/]+ to \Q${\ fmt_lsn($head)}\E/, 'inspect: a start would restore it');
($rc, $out) = ctl('inspect', $ring);
is($rc, 0, 'inspect without -D: exit 0');
like($out, qr/system identifier:\s+$sysid\n/, 'inspect without -D: system identifier');
like($out, qr/restore at start:\s+yes, unless .*give -D to check/, 'inspect without -D: restore unless the checkpoint is past it');
is($sha->(), $ring_sha, 'inspect changes nothing');

# The "exposed" word (pmwal 1.1): shown as the kill left it, then set and
# cleared by hand; a set word makes the start end recovery on a new timeline.
my $exposed = exposed_word($ring);
($rc, $out) = ctl('inspect', $ring);
like($out, $exposed ? qr/exposed:\s+yes \(since \Q${\ fmt_lsn($exposed)}\E\)/ : qr/exposed:\s+no\n/,
	'inspect: shows the exposed word as the kill left it (' . ($exposed ? fmt_lsn($exposed) : 'clear') . ')');
exposed_word($ring, $head);
($rc, $out) = ctl('inspect', $ring);
like($out, qr/exposed:\s+yes \(since \Q${\ fmt_lsn($head)}\E\): .*new timeline/,
	'inspect: a set exposed word: yes, since that LSN, and a start ends recovery on a new timeline');
exposed_word($ring, 0);
($rc, $out) = ctl('inspect', $ring);
like($out, qr/head:\s+\S+\nexposed:\s+no\n/, 'inspect: a clear exposed word: no');
exposed_word($ring, $exposed);
is($sha->(), $ring_sha, 'the ring is as the kill left it');

# --- verify a good ring ----------------------------------------------------------
($rc, $out) = ctl('verify', '-D', $pgdata, $ring);
is($rc, 0, 'verify: a good ring verifies');
like($out, qr/header:\s+ok\n/, 'verify: header ok');
like($out, qr/WAL:\s+ok: \Q${\ fmt_lsn($tail)}\E to \Q${\ fmt_lsn($head)}\E reads cleanly through the last acknowledged commit at \Q${\ fmt_lsn($last_end)}\E/,
	'verify: says ok, with the range');
is($sha->(), $ring_sha, 'verify changes nothing');

# --- dump, read back with pg_waldump ---------------------------------------
my $dumpdir = $node->basedir . '/dump';
($rc, $out) = ctl('dump', '--to', $dumpdir, $ring);
is($rc, 0, 'dump: exit 0');
like($out, qr/wrote WAL \Q${\ fmt_lsn($tail)}\E to \Q${\ fmt_lsn($head)}\E into \d+ segment file\(s\)/,
	'dump: says what it wrote');
my @segs = glob("$dumpdir/*");
ok(@segs >= 1 && !grep({ !m{/[0-9A-F]{24}$} } @segs), 'dump: files are named like WAL segments');
ok(!grep({ -s $_ != 16777216 } @segs), 'dump: segment files have the segment size');
ok((grep { m{/000000010000000000000001$} } @segs), 'dump: names the segment of the tail on timeline 1')
  if $tail >> 24 == 1;
my ($hint) = $out =~ /read it with: (pg_waldump .*)$/m;
ok(defined $hint && $hint eq "pg_waldump --path=$dumpdir --start=" . fmt_lsn($tail) . ' --end=' . fmt_lsn($head),
	'dump: prints the pg_waldump command for the range');
my ($wd_out, $wd_err) = run_command([ split / /, $hint // 'false' ]);
is($?, 0, 'pg_waldump reads the dump from the tail to the head, as dump suggests');
is($wd_err, '', 'pg_waldump: no complaint');
my $commits = () = $wd_out =~ /desc: COMMIT /g;
cmp_ok($commits, '>=', $acked / 2, "pg_waldump finds $commits commit records in the dump");
like($wd_out, qr/rmgr: Heap .*desc: INSERT/, 'pg_waldump finds the inserts in the dump');
like($wd_out, qr/rmgr: Transaction .*tx:\s+$last_xid, .*desc: COMMIT /,
	"pg_waldump finds the commit of the last acknowledged transaction ($last_xid)");
($wd_out, $wd_err) = run_command([ 'pg_waldump', "--path=$dumpdir",
		'--start=' . fmt_lsn($tail), '--end=' . fmt_lsn($last_end) ]);
is($?, 0, 'pg_waldump reads the dump to the last acknowledged commit');

# --- dump writes only files it creates, in a directory of its own ---------------
# Issue 9 item 6: dump followed a symlink named like a segment (overwriting
# its target with WAL) and kept a pre-existing file's mode; it wrote into any
# directory.  Now every file is created exclusively (O_EXCL|O_NOFOLLOW, 0600)
# and --to must be the user's own directory, writable by no one else.
is(file_mode($dumpdir), '0700', 'dump: creates a missing --to directory with mode 0700');
ok(!grep({ file_mode($_) ne '0600' } @segs), 'dump: segment files have mode 0600');
my $segname = (split m{/}, $segs[0])[-1];
my $victim = $node->basedir . '/victim';
append_to_file($victim, "the victim's own bytes\n");
my $victim_sha = $sha->($victim);
my $trap = $node->basedir . '/dump_trap';
mkdir($trap, 0700) or die "mkdir $trap: $!";
symlink($victim, "$trap/$segname") or die "symlink: $!";
($rc, $out) = ctl('dump', '--to', $trap, $ring);
is($rc, 1, 'dump: a symlink named like a segment in --to: refused');
like($out, qr{"\Q$trap/$segname\E" already exists}, 'dump: the refusal names the file');
is($sha->($victim), $victim_sha, "dump: the symlink's target is unchanged");
ok(-l "$trap/$segname", 'dump: the symlink is left as it was');

my $stale = $node->basedir . '/dump_stale';
mkdir($stale, 0700) or die "mkdir $stale: $!";
append_to_file("$stale/$segname", "not WAL\n");
chmod(0666, "$stale/$segname") or die "chmod: $!";
($rc, $out) = ctl('dump', '--to', $stale, $ring);
is($rc, 1, 'dump: a file named like a segment in --to: refused');
like($out, qr{"\Q$stale/$segname\E" already exists}, 'dump: the refusal names the existing file');
is(slurp_file("$stale/$segname"), "not WAL\n", 'dump: the existing file is unchanged');
is(file_mode("$stale/$segname"), '0666', "dump: the existing file's mode is unchanged");
is(scalar(my @in_stale = glob("$stale/*")), 1, 'dump: the refusal wrote no other file');

my $open_dir = $node->basedir . '/dump_0777';
mkdir($open_dir) or die "mkdir $open_dir: $!";
chmod(0777, $open_dir) or die "chmod: $!";
($rc, $out) = ctl('dump', '--to', $open_dir, $ring);
is($rc, 1, 'dump: a --to directory writable by others: refused');
like($out, qr{"\Q$open_dir\E" is writable by group or others \(permissions 0777\)},
	'dump: says the directory is writable by others');
is(scalar(my @in_open = glob("$open_dir/*")), 0, 'dump: wrote nothing into it');

my $real_dir = $node->basedir . '/dump_real';
mkdir($real_dir, 0700) or die "mkdir $real_dir: $!";
symlink($real_dir, $node->basedir . '/dump_link') or die "symlink: $!";
($rc, $out) = ctl('dump', '--to', $node->basedir . '/dump_link', $ring);
is($rc, 1, 'dump: a --to that is a symbolic link: refused');
like($out, qr{"\Q${\ $node->basedir}/dump_link\E" is a symbolic link}, 'dump: says --to is a symbolic link');
is(scalar(my @in_real = glob("$real_dir/*")), 0, "dump: wrote nothing into the link's target");

SKIP:
{
	skip 'run as root: / is the user\'s own', 2 if $> == 0;
	($rc, $out) = ctl('dump', '--to', '/', $ring);
	is($rc, 1, 'dump: a --to directory of another user: refused');
	like($out, qr{dump directory "/" is owned by another user}, 'dump: says the directory is not the user\'s');
}

# The records of the ring, for the cases below.
my @records;
for (split /\n/, $wd_out)
{
	push @records, { tot => $1, xid => $2, lsn => parse_lsn($3), desc => $4 }
	  if m{len \(rec/tot\):\s*\d+/\s*(\d+), tx:\s*(\d+), lsn: ([0-9A-F/]+), prev [0-9A-F/]+, desc: (\S+)};
}
cmp_ok(scalar(@records), '>=', $acked * 2, scalar(@records) . ' records parsed from pg_waldump');

# --- damage: verify fails, naming where; passes again once repaired -----------
# (a) a byte in the data of an INSERT in the middle of the ring
my ($mid) = grep { $_->{desc} eq 'INSERT' && $_->{tot} > 48 && $_->{lsn} % 8192 + $_->{tot} < 8192 }
  @records[ int(@records / 2) .. $#records ];
ok(defined $mid, 'an INSERT record in the middle of the ring') or BAIL_OUT('no INSERT record to damage');
my $orig = flip($mid->{lsn} + 40);
($rc, $out) = ctl('verify', '-D', $pgdata, $ring);
is($rc, 1, 'verify: a flipped byte mid-ring fails verification');
like($out, qr/WAL:\s+DAMAGED between \Q${\ fmt_lsn($tail)}\E and \Q${\ fmt_lsn($head)}\E; a start would refuse/,
	'verify: says the WAL is damaged');
like($out, qr/pg_waldump says:.*incorrect resource manager data checksum in record at \Q${\ fmt_lsn($mid->{lsn})}\E/,
	'verify: names the damaged record (' . fmt_lsn($mid->{lsn}) . ')');
ring_lsn_byte($mid->{lsn} + 40, $orig);
($rc, $out) = ctl('verify', '-D', $pgdata, $ring);
is($rc, 0, 'verify: passes again with the byte put back');

# (b) a byte inside the last acknowledged commit record
my $at = $last_end - 20;
$orig = flip($at);
($rc, $out) = ctl('verify', '-D', $pgdata, $ring);
is($rc, 1, 'verify: a flipped byte in the last commit fails verification');
like($out, qr/WAL:\s+DAMAGED between/, 'verify: says the WAL is damaged');
my $named = named_lsn($out =~ /pg_waldump says:(.*)/s ? $1 : '');
ok(defined $named && $named >= $tail && $named < $head,
	'verify: the failure names an LSN in the ring (' . ($named ? fmt_lsn($named) : 'none') . ')');
ring_lsn_byte($at, $orig);
($rc, $out) = ctl('verify', $ring);
is($rc, 0, 'verify: passes again with the byte put back');
is($sha->(), $ring_sha, 'the ring is as the kill left it');

# --- what the restore accepts, verify accepts too ------------------------------
# (c) a tail at a page boundary: the flusher moves the tail to the end of a
# commit, which can be one.  pg_waldump started at the boundary reports
# "first record is after"; verify must start after the page header.
ok($boundary > $tail && $boundary < $last_end && (grep { $_->{lsn} == $boundary + 24 } @records),
	'a record starts right after the page header at ' . fmt_lsn($boundary));
ring_write_u64($ring, 'tail', $boundary);
($rc, $out) = ctl('verify', '-D', $pgdata, $ring);
is($rc, 0, 'verify: a tail at a page boundary verifies') or diag($out);
ring_write_u64($ring, 'tail', $tail);

# (d) a head that cuts off the record after last_end (the flush pointer can
# stop mid-record): the restore takes the cut-off record as the end.  Make
# the last commit the cut-off one: last_end at its start, the head inside it.
my ($cut) = grep { $_->{desc} eq 'COMMIT' && $_->{lsn} % 8192 >= 64 && $_->{lsn} % 8192 < 8100 } reverse @records;
ok(defined $cut, 'a COMMIT record inside a page') or BAIL_OUT('no COMMIT record to cut off');
ring_write_u64($ring, 'last_end', $cut->{lsn});
ring_write_u64($ring, 'head', $cut->{lsn} + 28);
($rc, $out) = ctl('verify', '-D', $pgdata, $ring);
is($rc, 0, 'verify: a head inside the record after the last acknowledged commit verifies') or diag($out);
like($out, qr/reads cleanly through the last acknowledged commit at \Q${\ fmt_lsn($cut->{lsn})}\E/,
	'verify: says ok up to last_end');
# ...but the cut-off record's header is still checked, as the restore does
$orig = flip($cut->{lsn} + 8);		# xl_prev
($rc, $out) = ctl('verify', '-D', $pgdata, $ring);
is($rc, 1, 'verify: a damaged header of the cut-off record fails');
like($out, qr/incorrect prev-link .* at \Q${\ fmt_lsn($cut->{lsn})}\E/, 'verify: names the bad prev-link');
ring_lsn_byte($cut->{lsn} + 8, $orig);
ring_write_u64($ring, 'head', $head);
ring_write_u64($ring, 'last_end', $last_end);
is($sha->(), $ring_sha, 'the ring is as the kill left it');

# --- a bad header ----------------------------------------------------------------
my $crc = ring_field($ring, 'crc');
ring_set_static($ring, crc => $crc ^ 1, keep_crc => 1);
($rc, $out) = ctl('verify', $ring);
is($rc, 1, 'verify: a wrong header CRC fails');
like($out, qr/header:\s+NOT USABLE: The header checksum is/, 'verify: says the header checksum is wrong');
($rc, $out) = ctl('inspect', $ring);
is($rc, 1, 'inspect: a wrong header CRC exits 1');
like($out, qr/header:\s+NOT USABLE/, 'inspect: says the header is not usable');
ring_set_static($ring, crc => $crc, keep_crc => 1);

my $ring_sysid = ring_field($ring, 'system_identifier');
ring_set_static($ring, system_identifier => $ring_sysid ^ 1);
($rc, $out) = ctl('verify', '-D', $pgdata, $ring);
is($rc, 1, "verify -D: a ring of another cluster fails");
like($out, qr/NOT USABLE: The ring belongs to the cluster with system identifier ${\ ($ring_sysid ^ 1)}; this cluster's is $sysid/,
	'verify -D: names both system identifiers');
ring_set_static($ring, system_identifier => $ring_sysid);
is($sha->(), $ring_sha, 'the ring is as the kill left it');

# --- reset -------------------------------------------------------------------
($rc, $out) = ctl('reset', $ring);
is($rc, 1, 'reset without --discard-wal: refused');
like($out, qr/confirm with --discard-wal/, 'reset without --discard-wal: says how to confirm');
is($sha->(), $ring_sha, 'reset without --discard-wal: ring unchanged');

# a set exposed word is cleared by the reset too (and a warning says what
# the reset gives up: the start does not end recovery on a new timeline)
exposed_word($ring, $head);
($rc, $out) = ctl('reset', '--discard-wal', $ring);
is($rc, 0, 'reset --discard-wal: exit 0');
is(exposed_word($ring), 0, 'reset: clears the exposed word');
like($out, qr/warning: the ring was exposed since \Q${\ fmt_lsn($head)}\E/,
	'reset: warns that the ring was exposed');
like($out,
	qr/discarding WAL \Q${\ fmt_lsn($tail)}\E to \Q${\ fmt_lsn($head)}\E \(${\ ($head - $tail)} bytes, acknowledged commits up to \Q${\ fmt_lsn($last_end)}\E\)/,
	'reset: prints the range, bytes and acknowledged commits it discards');
is(ring_state($ring), RING_STATE_EMPTY, 'reset: the ring is empty');
is(ring_read_u64($ring, 'tail'), ring_read_u64($ring, 'head'), 'reset: tail = head');
($rc, $out) = ctl('inspect', '-D', $pgdata, $ring);
is($rc, 0, 'inspect after reset: exit 0');
like($out, qr/holds:\s+no WAL \(empty\)\nrestore at start:\s+nothing to restore/,
	'inspect after reset: empty, nothing to restore');
($rc, $out) = ctl('dump', '--to', "$dumpdir.2", $ring);
like($out, qr/the ring is empty; nothing to dump/, 'dump after reset: nothing to dump');
($rc, $out) = ctl('verify', '-D', $pgdata, $ring);
is($rc, 0, 'verify after reset: exit 0');
like($out, qr/WAL:\s+none \(the ring is empty\)/, 'verify after reset: nothing to check');

# The operator chose to discard the ring's WAL: the server starts from pg_wal.
my $offset = -s $node->logfile;
ok($node->start(fail_ok => 1), 'after reset, the server starts');
unlike(slurp_file($node->logfile, $offset), qr/pmwal restored WAL/, 'after reset, the start restores nothing');
my $rows = $node->safe_psql('postgres', 'SELECT count(*) FROM t');
note("after reset: $rows of $acked acknowledged rows survive (the kill kept the page cache)");

# --- a ring after a clean stop: empty ------------------------------------------
$node->stop;
is(ring_state($ring), RING_STATE_EMPTY, 'clean stop: the ring is empty');
is(ring_read_u64($ring, 'tail'), ring_read_u64($ring, 'head'), 'clean stop: tail = head');
($rc, $out) = ctl('inspect', '-D', $pgdata, $ring);
is($rc, 0, 'inspect after a clean stop: exit 0');
like($out, qr/state:\s+empty\n/, 'inspect after a clean stop: state empty');
like($out, qr/holds:\s+no WAL \(empty\)\nrestore at start:\s+nothing to restore/,
	'inspect after a clean stop: nothing to restore');

# --- an uninitialised (all zero) ring, e.g. a fresh devdax device ---------------
my $zero = $node->basedir . '/zero.ring';
open my $zfh, '>:raw', $zero or die "could not create $zero: $!";
truncate($zfh, 4096 + 1024 * 1024) or die "truncate: $!";
close $zfh;
my $zero_sha = $sha->($zero);
($rc, $out) = ctl('inspect', $zero);
is($rc, 1, 'inspect an all-zero ring: exit 1 (a server refuses it)');
like($out, qr/uninitialised \(all zero\): not a pmwal ring, a server refuses it; "pmwal_ctl init" makes it one/,
	'inspect an all-zero ring: says so, and points at init');
($rc, $out) = ctl('verify', $zero);
is($rc, 1, 'verify an all-zero ring: exit 1 (a server refuses it)');
($rc, $out) = ctl('reset', '--discard-wal', $zero);
is($rc, 0, 'reset an all-zero ring: exit 0');
like($out, qr/the ring holds no WAL/, 'reset an all-zero ring: nothing discarded');
is($sha->($zero), $zero_sha, 'reset an all-zero ring: left all zero (a server would refuse a header without magic)');

# --- a character device is a devdax device, sized from sysfs ------------------
# Issue 9 item 7: pmwal_ctl sized a character device with lseek(SEEK_END),
# which gives 0 on device-dax; it now reads /sys/dev/char/MAJOR:MINOR/size,
# as the server does.  There is no devdax device here, so the sizing of a
# real one is not tested; /dev/null is a character device without a sysfs
# size, which tests that the sysfs path is taken and its failure reported
# (before, the message said the ring was 0 bytes).
my $rdev = (stat '/dev/null')[6];
my $null_sysfs = sprintf('/sys/dev/char/%d:%d/size', ($rdev >> 8) & 0xfff, ($rdev & 0xff) | (($rdev >> 12) & 0xfff00));
($rc, $out) = ctl('inspect', '/dev/null');
is($rc, 1, 'inspect a character device without a sysfs size: exit 1');
like($out, qr{could not determine the size of character device "/dev/null" from "\Q$null_sysfs\E"},
	'inspect a character device: its size is read from sysfs, and the failure names the file');

# --- init ------------------------------------------------------------------------
# The server adopts no file it did not create: it refuses an all-zero
# header itself, pointing at pmwal_ctl init, which makes such a file (or a
# missing path, or a devdax device) an empty ring of the cluster.
my ($tli) = (run_command([ 'pg_controldata', $pgdata ]))[0] =~ /Latest checkpoint's TimeLineID:\s+(\d+)/;
my $mb = 1024 * 1024;
my $use_ring = sub {
	my ($path) = @_;
	$node->append_conf('postgresql.conf', "pmwal.path = '$path'\n");
	$offset = -s $node->logfile;
};
my $zero2 = zero_file($node->basedir . '/zero2.ring', 4096 + 16 * $mb);
my $zero2_sha = $sha->($zero2);
$use_ring->($zero2);
ok(!$node->start(fail_ok => 1), 'the server refuses an all-zero file');
my $log = slurp_file($node->logfile, $offset);
like($log, qr/file "\Q$zero2\E" is not a pmwal ring/, 'the server says the all-zero file is not a pmwal ring');
like($log, qr/pmwal_ctl init/, 'the server\'s hint points at pmwal_ctl init');
is($sha->($zero2), $zero2_sha, 'the server left the all-zero file as it was');

($rc, $out) = ctl('init', '-D', $pgdata, $zero2);
is($rc, 0, 'init an all-zero file: exit 0') or diag($out);
like($out, qr/initialised ring "\Q$zero2\E" \(its header was all zero\): capacity 16 MB \(16777216 bytes\), system identifier $sysid, timeline $tli/,
	'init: says what it initialised');
is(ring_field($zero2, 'magic'), 'PMWALRNG', 'init: the magic is written');
is(ring_field($zero2, 'system_identifier'), $sysid, "init: the cluster's system identifier");
is(ring_field($zero2, 'timeline'), $tli, "init: the cluster's timeline");
is(ring_field($zero2, 'wal_segment_size'), 16 * $mb, "init: the cluster's WAL segment size");
is(ring_field($zero2, 'capacity'), 16 * $mb, 'init: capacity is the file size less the header');
is(ring_state($zero2), RING_STATE_EMPTY, 'init: the ring is empty');
is(join(',', (map { ring_read_u64($zero2, $_) } qw(tail last_end head)), exposed_word($zero2)), '0,0,0,0',
	'init: the dynamic words are zero');
($rc, $out) = ctl('inspect', '-D', $pgdata, $zero2);
is($rc, 0, 'inspect after init: exit 0');
like($out, qr/state:\s+empty\n.*holds:\s+no WAL/s, 'inspect after init: an empty ring');
ok($node->start(fail_ok => 1), 'the server starts on the initialised file');
$log = slurp_file($node->logfile, $offset);
like($log, qr/pmwal attached ring "\Q$zero2\E": 16 MB, mode \w+, empty/, 'the server attaches the initialised ring');
unlike($log, qr/initialising|created ring file/, 'the server uses the ring as init wrote it');
$node->stop;

my $new = $node->basedir . '/new.ring';
($rc, $out) = ctl('init', '-D', $pgdata, $new);
is($rc, 1, 'init a missing path without --size: refused');
like($out, qr/does not exist; give its size with --size/, 'init a missing path without --size: says so');
for my $size (qw(1 65537 0 -2 16kB 65GB))
{
	($rc, $out) = ctl('init', '-D', $pgdata, "--size=$size", $new);
	is($rc, 1, "init --size=$size: refused");
	like($out, qr/--size must be between 2 and 65536 MB, like pmwal.size/, "init --size=$size: names the range");
}
ok(!-e $new, 'the refusals created nothing');
($rc, $out) = ctl('init', '--size=16', $new);
is($rc, 1, 'init without -D: refused');
like($out, qr/init needs -D DATADIR/, 'init without -D: says so');
($rc, $out) = ctl('init', '-D', $pgdata, '--size=16MB', $new);
is($rc, 0, 'init a missing path: exit 0') or diag($out);
like($out, qr/initialised ring "\Q$new\E" \(a new file\): capacity 16 MB/, 'init a missing path: says so');
is(file_mode($new), '0600', 'init: the new file has mode 0600');
is(-s $new, 4096 + 16 * $mb, 'init: the new file holds the header and the capacity');
$use_ring->($new);
ok($node->start(fail_ok => 1), 'the server starts on a ring made by init');
$log = slurp_file($node->logfile, $offset);
like($log, qr/pmwal attached ring "\Q$new\E": 16 MB, mode \w+, empty/, 'the server attaches the ring made by init');
unlike($log, qr/initialising|created ring file/, 'the server uses the ring as init wrote it');
$node->safe_psql('postgres', 'INSERT INTO t VALUES (0)');
$node->stop;

my $new_sha = $sha->($new);
($rc, $out) = ctl('init', '-D', $pgdata, $new);
is($rc, 1, 'init an existing ring: refused');
like($out, qr/"\Q$new\E" already holds a pmwal ring/, 'init an existing ring: says so');
like($out, qr/pmwal_ctl reset --discard-wal/, 'init an existing ring: points at reset');
is($sha->($new), $new_sha, 'init an existing ring: unchanged');

my $foreign = $node->basedir . '/foreign.ring';
append_to_file($foreign, 'somebody else\'s data ' x 1000);
chmod(0600, $foreign) or die "chmod: $!";
my $foreign_sha = $sha->($foreign);
($rc, $out) = ctl('init', '-D', $pgdata, '--size=2', $foreign);
is($rc, 1, 'init a file that is not a ring: refused');
like($out, qr/"\Q$foreign\E" is not a pmwal ring, refusing to overwrite it/, 'init a file that is not a ring: says so');
is($sha->($foreign), $foreign_sha, 'init a file that is not a ring: unchanged');
like($out, qr/--force overwrites it/, 'init a file that is not a ring: points at --force');

# --force: other data (a devdax device that held a file system), or a ring
# and the WAL it holds, after saying what it overwrites
($rc, $out) = ctl('init', '-D', $pgdata, '--force', '--size=2', $foreign);
is($rc, 0, 'init --force a file that is not a ring: exit 0') or diag($out);
like($out, qr/^overwriting "\Q$foreign\E", which holds data that was not a pmwal ring \(4096 of its first 4096 bytes are not zero; at offset 0: 73 6f 6d 65 /m,
	'init --force a file that is not a ring: says what it overwrites');
like($out, qr/initialised ring "\Q$foreign\E" \(overwritten with --force\): capacity 2 MB/,
	'init --force a file that is not a ring: initialised with the size given');
is(ring_state($foreign), RING_STATE_EMPTY, 'init --force a file that is not a ring: the ring is empty');
($rc, $out) = ctl('init', '-D', $pgdata, '--force', $new);
is($rc, 0, 'init --force a ring: exit 0') or diag($out);
like($out, qr/^overwriting "\Q$new\E", which holds (an empty pmwal ring|a pmwal ring) of system identifier $sysid/m,
	'init --force a ring: says which ring it overwrites');
is(ring_state($new), RING_STATE_EMPTY, 'init --force a ring: the ring is empty');
ring_write_u64($new, 'head', ring_read_u64($new, 'tail') + 8192);
ring_write_u64($new, 'state', RING_STATE_IN_USE);
($rc, $out) = ctl('init', '-D', $pgdata, $new);
is($rc, 1, 'init a ring in use: refused');
($rc, $out) = ctl('init', '-D', $pgdata, '--force', $new);
like($out, qr/which holds a pmwal ring of system identifier $sysid, timeline $tli, with WAL \S+ to \S+ \(8192 bytes, acknowledged commits up to \S+\) that is discarded/,
	'init --force a ring holding WAL: says what WAL it discards');
is(ring_state($new), RING_STATE_EMPTY, 'init --force a ring holding WAL: the ring is empty');
($rc, $out) = ctl('reset', '--force', '--discard-wal', $new);
is($rc, 1, '--force with another command: refused');
like($out, qr/--force is only for init/, '--force with another command: says so');

my $target = zero_file($node->basedir . '/target.ring', 4096 + 2 * $mb);
my $target_sha = $sha->($target);
symlink($target, $node->basedir . '/link.ring') or die "symlink: $!";
($rc, $out) = ctl('init', '-D', $pgdata, $node->basedir . '/link.ring');
is($rc, 1, 'init a symbolic link: refused');
like($out, qr/"\Q${\ $node->basedir}\E\/link.ring" is a symbolic link/, 'init a symbolic link: says so');
is($sha->($target), $target_sha, "init a symbolic link: the link's target is unchanged");

my $shared = zero_file($node->basedir . '/shared.ring', 4096 + 2 * $mb, 0644);
($rc, $out) = ctl('init', '-D', $pgdata, $shared);
is($rc, 1, 'init a file with group or other access: refused');
like($out, qr/"\Q$shared\E" has group or other access \(permissions 0644\)/, 'init a 0644 file: says so');
is($sha->($shared), $sha->($target), 'init a 0644 file: unchanged');

SKIP:
{
	skip 'run as root: /dev/null is the user\'s own', 2 if $> == 0;
	($rc, $out) = ctl('init', '-D', $pgdata, '/dev/null');
	is($rc, 1, 'init a device of another user: refused');
	like($out, qr{"/dev/null" is owned by another user}, 'init a device of another user: says so');
}

my $empty = zero_file($node->basedir . '/empty.ring', 0);
($rc, $out) = ctl('init', '-D', $pgdata, $empty);
is($rc, 1, 'init an empty file without --size: refused');
like($out, qr/"\Q$empty\E" is empty; give the ring's size with --size/, 'init an empty file without --size: says so');
($rc, $out) = ctl('init', '-D', $pgdata, '--size=2', $empty);
is($rc, 0, 'init an empty file with --size: exit 0') or diag($out);
is(-s $empty, 4096 + 2 * $mb, 'init an empty file: resized to the header and the capacity');
is(ring_field($empty, 'capacity'), 2 * $mb, 'init an empty file: capacity as given');

# an interrupted initialisation (state REINIT) is initialised again, with
# the size given; inspect says what it is
ring_write_u64($zero2, 'state', RING_STATE_REINIT);
($rc, $out) = ctl('inspect', $zero2);
is($rc, 0, 'inspect an interrupted initialisation: exit 0 (a server initialises it again)');
like($out, qr/an initialisation was interrupted/, 'inspect an interrupted initialisation: says so');
($rc, $out) = ctl('init', '-D', $pgdata, '--size=4', $zero2);
is($rc, 0, 'init an interrupted initialisation: exit 0') or diag($out);
like($out, qr/\(an interrupted initialisation\): capacity 4 MB/, 'init an interrupted initialisation: says so');
is(-s $zero2, 4096 + 4 * $mb, 'init with --size: the file is resized');
is(ring_state($zero2), RING_STATE_EMPTY, 'init an interrupted initialisation: the ring is empty');

note(sprintf('runtime %.1f s', Time::HiRes::time() - $started));
done_testing();
