# pmwal_ctl, the offline tool for a stopped cluster's ring (format 2): init,
# inspect, verify, dump (read back with pg_waldump), reset (only when
# confirmed) and unbind, and their refusals: usage errors, a ring or data
# directory in use by a running server.
#
# init: the server adopts no file it did not create (an all-zero header
# included); init makes a missing path, an empty or all-zero file or a
# devdax device an empty ring of the cluster, and overwrites anything else
# (other data, a ring and its WAL) only with --force, saying what it was.
# dump writes only files it creates itself, in a directory of its own
# (issue 9 item 6); a character device is sized from sysfs (item 7).
#
# verify agrees with the restore on what can be checked without pg_wal:
# it fails on a bad header, a bad page header anywhere in [tail, head) and
# records that stop reading before the last page, and it accepts what the
# restore accepts -- WAL that ends in the last page, a head that cuts a
# record off, a tail inside a record.
#
# Issue 21 item 7: verify without pg_waldump says it could not check (exit
# 3), not that the ring is damaged; a header with an impossible WAL segment
# size is refused by every command before any arithmetic; init without
# --force takes nothing that is not provably empty (a zero first page is
# not); a FIFO or a symbolic link is refused, never opened through.
use strict;
use warnings;
use FindBin;
use Cwd ();
use Digest::SHA;
use File::Copy ();
use IPC::Run ();
use Time::HiRes ();
use lib $FindBin::RealBin;

use PmwalTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use constant EXIT_ERROR => 1;
use constant EXIT_UNUSABLE => 2;
use constant EXIT_UNCHECKED => 3;

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
my $binding = "$pgdata/pg_wal/pmwal.binding";
my $sha = sub { Digest::SHA->new(256)->addfile($_[0] // $ring)->hexdigest };
my ($pg_major) = `pg_config --version` =~ /PostgreSQL (\d+)/;

# Run pmwal_ctl; returns (exit code, stdout + stderr, signal that ended it).
sub ctl
{
	my ($stdout, $stderr) = run_command([ 'pmwal_ctl', @_ ]);
	return ($? >> 8, "$stdout$stderr", $? & 127);
}

# The same, with the outputs apart: (exit code, stdout, stderr).
sub ctl_apart
{
	my ($stdout, $stderr) = run_command([ 'pmwal_ctl', @_ ]);
	return ($? >> 8, $stdout, $stderr);
}

# The same, given up after $secs seconds: (exit code or undef, output).
sub ctl_within
{
	my ($secs, @args) = @_;
	my ($stdout, $stderr) = ('', '');
	my $h = IPC::Run::start([ 'pmwal_ctl', @args ], '<', \undef, '>', \$stdout,
		'2>', \$stderr, IPC::Run::timeout($secs));
	my $rc = eval { $h->finish; $? >> 8 };
	$h->kill_kill if !defined $rc;
	return ($rc, "$stdout$stderr");
}

sub fmt_lsn { return lsn_format($_[0]); }
sub parse_lsn { my ($hi, $lo) = split m{/}, $_[0]; return (hex($hi) << 32) | hex($lo); }
sub page_of { return $_[0] - $_[0] % 8192; }

# Where the record after the one of $tot bytes at $lsn begins: its bytes
# continue after the header of every page they cross (24 bytes, 40 at a
# segment's start), and records begin at 8-byte boundaries, never at a
# page's start.
sub next_record
{
	my ($lsn, $tot) = @_;
	my $hdr = sub { return $_[0] % (16 * 1024 * 1024) == 0 ? 40 : 24 };
	while ($tot > page_of($lsn) + 8192 - $lsn)
	{
		$tot -= page_of($lsn) + 8192 - $lsn;
		$lsn = page_of($lsn) + 8192;
		$lsn += $hdr->($lsn);
	}
	$lsn += $tot;
	$lsn += 7 - ($lsn + 7) % 8;
	$lsn += $hdr->($lsn) if $lsn % 8192 == 0;
	return $lsn;
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

# Read or write (when $bytes is given) $len bytes at file offset $off.
sub file_bytes
{
	my ($path, $off, $len, $bytes) = @_;
	open my $fh, '+<:raw', $path or die "could not open $path: $!";
	sysseek($fh, $off, 0) or die "seek: $!";
	my $buf;
	if (defined $bytes) { syswrite($fh, $bytes) == length($bytes) or die "write: $!"; }
	else { sysread($fh, $buf, $len) == $len or die "read: $!"; }
	close $fh;
	return $buf;
}

# Read or write (when $bytes is given) ring data at LSN $lsn.
sub ring_lsn_bytes
{
	my ($lsn, $len, $bytes) = @_;
	return file_bytes($ring, 4096 + $lsn % ring_field($ring, 'capacity'), $len, $bytes);
}

# Flip every bit of the byte at $lsn; returns the original byte.
sub flip
{
	my ($lsn) = @_;
	my $orig = ring_lsn_bytes($lsn, 1);
	ring_lsn_bytes($lsn, 1, chr(ord($orig) ^ 0xff));
	return $orig;
}

# The binding file's valid slot with the higher generation, as a hash
# (ring_format.h: BindingSlot), or undef.
sub read_binding
{
	my ($path) = @_;
	return undef unless -f $path;
	my $file = slurp_file($path);
	my $best;
	for my $i (0, 1)
	{
		my $slot = substr($file, $i * 2048, 2048);
		next if length($slot) < 2048;
		my ($magic, $version, $size, $sysid, $gen, $id, $rpath, $crc) =
		  unpack('a8 L< L< Q< Q< a16 Z1984 L<', $slot);
		next unless $magic eq 'PMWALBND' && $gen != 0 && crc32c(substr($slot, 0, 2032)) == $crc;
		$best = { sysid => $sysid, generation => $gen, ring_id => unpack('H*', $id), path => $rpath }
		  if !$best || $gen > $best->{generation};
	}
	return $best;
}

# --- usage -----------------------------------------------------------------
my ($rc, $out, $sig) = ctl();
is($rc, EXIT_ERROR, 'no arguments: exit 1');
like($out, qr/Usage:.*pmwal_ctl inspect/s, 'no arguments: usage is shown');
($rc, $out) = ctl('--help');
is($rc, 0, '--help: exit 0');
like($out, qr/reset --discard-wal RING/, '--help: usage is shown');
like($out, qr/unbind -D DATADIR \[--force\]/, '--help: names unbind');
like($out, qr/Exit status:\n  0  success.*\n  1  error.*\n(?:.*\n)*  2  the ring is not usable or its WAL is damaged.*\n(?:.*\n)*  3  verify could not check/,
	'--help: documents the exit statuses');
my ($version) = slurp_file("$FindBin::RealBin/../src/pmwal_version.h") =~ /#define PMWAL_VERSION\s+"([^"]+)"/;
($rc, $out) = ctl('--version');
is($rc, 0, '--version: exit 0');
is($out, "pmwal_ctl (pmwal) $version", "--version: pmwal_ctl (pmwal) $version, from pmwal_version.h");
($rc, $out) = ctl('frobnicate', $ring);
is($rc, EXIT_ERROR, 'unknown command: exit 1');
like($out, qr/unknown command "frobnicate"/, 'unknown command: named');
($rc, $out) = ctl('inspect', '--bogus', $ring);
is($rc, EXIT_ERROR, 'unknown option: exit 1');
like($out, qr/Try "pmwal_ctl --help"/, 'unknown option: points to --help');
($rc, $out) = ctl('inspect');
is($rc, EXIT_ERROR, 'no ring path: exit 1');
like($out, qr/expected exactly one ring path/, 'no ring path: said so');
($rc, $out) = ctl('dump', $ring);
is($rc, EXIT_ERROR, 'dump without --to: exit 1');
like($out, qr/dump needs --to DIR/, 'dump without --to: said so');
($rc, $out) = ctl('inspect', '/nonexistent/pmwal.ring');
is($rc, EXIT_ERROR, 'missing ring: exit 1');
like($out, qr{could not open ring "/nonexistent/pmwal.ring": No such file or directory},
	'missing ring: the error names the file and the cause');
($rc, $out) = ctl('unbind');
is($rc, EXIT_ERROR, 'unbind without -D: exit 1');
like($out, qr/unbind needs -D DATADIR/, 'unbind without -D: said so');
($rc, $out) = ctl('unbind', '-D', $pgdata, $ring);
is($rc, EXIT_ERROR, 'unbind with a ring path: exit 1');
like($out, qr/unbind takes no ring path/, 'unbind with a ring path: said so');
($rc, $out) = ctl('inspect', '--size=16', $ring);
is($rc, EXIT_ERROR, '--size with inspect: refused');
like($out, qr/--size is only for init/, '--size with inspect: says so');

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
	is($rc, EXIT_ERROR, "$cmd->[0] on a running server: refused");
	like($out, qr/is in use by a running server; stop the server first/,
		"$cmd->[0] on a running server: says why");
	is($sha->(), $before, "$cmd->[0] on a running server: ring unchanged")
	  if $cmd->[0] eq 'reset' || $cmd->[0] eq 'init';
}
ok(!-e $node->basedir . '/nodump', 'dump on a running server: wrote nothing');
ok(-f $binding, 'the running server has bound the data directory to its ring');
my $binding_sha = $sha->($binding);
($rc, $out) = ctl('unbind', '-D', $pgdata);
is($rc, EXIT_ERROR, 'unbind while the server runs: refused');
like($out, qr/a server is running in "\Q$pgdata\E" \(PID ${\ $node->{_pid}}, postmaster.pid\)/,
	'unbind while the server runs: names the server');
is($sha->($binding), $binding_sha, 'unbind while the server runs: the binding file is unchanged');

# --- a ring holding WAL: commits, then every server process killed ---------
# Rows, a record of 20,000 bytes (a logical message, which needs no
# transaction) that spans three pages or more, more rows: the big record
# lets the cases below cut the ring inside a record.
my $acked = 200;
my $insert = sub {
	my ($from, $to) = @_;
	$node->safe_psql('postgres',
		join("\n", map { "INSERT INTO t VALUES ($_, 'pmwal_ctl test row $_');" } $from .. $to));
};
$insert->(1, $acked / 2);
$node->safe_psql('postgres', q{SELECT pg_logical_emit_message(false, 'big', repeat('b', 20000))});
$insert->($acked / 2 + 1, $acked);
# the transaction of the newest acknowledged commit, to find in dumps
my $last_xid = $node->safe_psql('postgres', "SELECT xmin FROM t WHERE id = $acked");
powercut_kill($node);

my ($tail, $head) = map { ring_read_u64($ring, $_) } qw(tail head);
my $generation = ring_read_u64($ring, 'generation');
my $ring_id = unpack('H*', ring_field($ring, 'ring_id'));
is(ring_state($ring), RING_STATE_IN_USE, 'the killed server left the ring in use');
cmp_ok($head, '>', $tail, 'the killed server left WAL in the ring');
ok($tail % 8192 == 0 && $head % 8192 == 0, 'tail and head are page-aligned');
is(ring_read_u64($ring, 'timeline'), 1, 'the ring holds WAL of timeline 1');
note(sprintf('ring %s: tail %s, head %s, generation %d', $ring_id, fmt_lsn($tail), fmt_lsn($head), $generation));
my ($sysid) = (run_command([ 'pg_controldata', $pgdata ]))[0] =~ /Database system identifier:\s+(\d+)/;
ok(defined $sysid, "pg_controldata gives the system identifier");
$sysid //= 'none';
my $bound = read_binding($binding);
ok($bound && $bound->{ring_id} eq $ring_id && $bound->{path} eq $ring,
	'the binding file names the ring');
my $ring_sha = $sha->();
$binding_sha = $sha->($binding);
my $npages = ($head - $tail) / 8192;

# --- inspect -------------------------------------------------------------------
($rc, $out) = ctl('inspect', '-D', $pgdata, $ring);
is($rc, 0, 'inspect: exit 0');
like($out, qr/lock:\s+free/, 'inspect: the lock is free');
like($out, qr/header:\s+ok\n/, 'inspect: header ok');
like($out, qr/format version:\s+2\n/, 'inspect: format version 2');
like($out, qr/ring id:\s+$ring_id\n/, "inspect: the ring id in hex ($ring_id)");
like($out, qr/system identifier:\s+$sysid \(matches the cluster\)/,
	"inspect: system identifier is pg_controldata's");
like($out, qr/WAL segment size:\s+16777216\n/, 'inspect: WAL segment size');
like($out, qr/capacity:\s+16777216 bytes \(16 MB\)/, 'inspect: capacity');
like($out, qr/state:\s+in use/, 'inspect: state in use');
like($out, qr/timeline:\s+1\n/, 'inspect: the timeline word');
like($out, qr/generation:\s+$generation\n/, 'inspect: the generation word');
like($out, qr/tail:\s+\Q${\ fmt_lsn($tail)}\E\n/, 'inspect: tail');
like($out, qr/head:\s+\Q${\ fmt_lsn($head)}\E\n/, 'inspect: head');
unlike($out, qr/last acknowledged|exposed/, 'inspect: no words of format 1');
my $realdata = Cwd::realpath($pgdata);
like($out, qr/owner:\s+data directory "\Q$realdata\E", bound at generation \d+ on \d{4}-\d\d-\d\d \d\d:\d\d:\d\d/,
	'inspect: the owner block: data directory, generation, date');
like($out, qr/holds:\s+${\ ($head - $tail)} bytes of WAL \($npages pages\) of timeline 1/,
	'inspect: bytes held');
like($out, qr/binding:\s+ring $ring_id at "\Q$ring\E", generation $bound->{generation}\n/,
	"inspect -D: the data directory's binding");
like($out, qr/binding matches:\s+yes/, 'inspect -D: the binding matches the ring');
like($out, qr/restore at start:\s+yes: \Q${\ fmt_lsn($tail)}\E to \Q${\ fmt_lsn($head)}\E/,
	'inspect: a start would restore it');
($rc, $out) = ctl('inspect', $ring);
is($rc, 0, 'inspect without -D: exit 0');
like($out, qr/system identifier:\s+$sysid\n/, 'inspect without -D: system identifier');
unlike($out, qr/binding/, 'inspect without -D: no binding');
like($out, qr/restore at start:\s+yes, if the data directory bound to it .*give -D to check/,
	'inspect without -D: restore if the bound data directory still names it');
is($sha->(), $ring_sha, 'inspect changes nothing');

# the binding as a start judges it: another ring's, a stale or a damaged file
my $other_binding = $node->basedir . '/other_datadir';
mkdir $other_binding;
mkdir "$other_binding/pg_wal";
File::Copy::copy("$pgdata/global/pg_control", "$other_binding/global/pg_control")
  if mkdir "$other_binding/global";
($rc, $out) = ctl('inspect', '-D', $other_binding, $ring);
like($out, qr/binding:\s+none: ".*pmwal.binding" is absent/, 'inspect -D: an absent binding');
like($out, qr/restore at start:\s+REFUSED: the ring holds WAL of another data directory: this one's binding is absent/,
	'inspect -D without a binding: a start refuses the ring');
append_to_file("$other_binding/pg_wal/pmwal.binding", 'x' x 4096);
($rc, $out) = ctl('inspect', '-D', $other_binding, $ring);
like($out, qr/binding:\s+DAMAGED: .*neither of its two slots is valid/, 'inspect -D: a damaged binding');
like($out, qr/restore at start:\s+REFUSED: .*this one's binding is damaged/, 'inspect -D with a damaged binding: a start refuses the ring');
ring_write_u64($ring, 'generation', $bound->{generation} + 2);
($rc, $out) = ctl('inspect', '-D', $pgdata, $ring);
like($out, qr/binding matches:\s+NO: the ring is at generation ${\ ($bound->{generation} + 2)}, more than one ahead/,
	'inspect -D: a ring two generations ahead does not match (another copy bound it)');
like($out, qr/restore at start:\s+REFUSED: the ring is at generation/, 'inspect -D: ... and a start refuses it');
ring_write_u64($ring, 'generation', $generation);

# --- verify a good ring ----------------------------------------------------------
($rc, $out) = ctl('verify', '-D', $pgdata, $ring);
is($rc, 0, 'verify: a good ring verifies') or diag($out);
like($out, qr/header:\s+ok\n/, 'verify: header ok');
like($out, qr/pages:\s+$npages pages from \Q${\ fmt_lsn($tail)}\E to \Q${\ fmt_lsn($head)}\E, every page header valid/,
	'verify: every page header checked');
like($out, qr/WAL:\s+ok: \Q${\ fmt_lsn($tail)}\E to \Q${\ fmt_lsn($head)}\E: \d+ records from [0-9A-F\/]+ read cleanly/,
	'verify: says ok, with the range');
is($sha->(), $ring_sha, 'verify changes nothing');

# --- verify without pg_waldump (issue 21 item 7) ---------------------------------
# It used to say "WAL: DAMAGED ... a start would refuse to restore it", and
# exit 1, for a good ring when pg_waldump was not next to pmwal_ctl or on
# PATH: an operator could then discard the ring's WAL with reset.
my $lonely = $node->basedir . '/lonely_bin';
mkdir $lonely or die "mkdir $lonely: $!";
my $ctl_path = (grep { -x "$_/pmwal_ctl" } split /:/, $ENV{PATH})[0] . '/pmwal_ctl';
File::Copy::copy($ctl_path, "$lonely/pmwal_ctl") or die "copy $ctl_path: $!";
chmod 0755, "$lonely/pmwal_ctl";
my $run_lonely = sub {
	my ($path) = @_;
	local $ENV{PATH} = $path;
	my ($stdout, $stderr) = run_command([ "$lonely/pmwal_ctl", 'verify', $ring ]);
	return ($? >> 8, "$stdout$stderr");
};
($rc, $out) = $run_lonely->($lonely);
is($rc, EXIT_UNCHECKED, 'verify without pg_waldump: exit 3 (could not check), not 2 (damaged)');
like($out, qr/WAL:\s+NOT CHECKED: no pg_waldump of PostgreSQL $pg_major was found next to pmwal_ctl .*nothing is known to be wrong/,
	'verify without pg_waldump: says it could not check the records');
unlike($out, qr/DAMAGED|refuse/, 'verify without pg_waldump: does not call the ring damaged');
like($out, qr/pages:\s+\d+ pages .* every page header valid/, 'verify without pg_waldump: still checks the page headers');
# a pg_waldump of another major version cannot read this WAL
my $wrong = $node->basedir . '/wrong_bin';
mkdir $wrong or die "mkdir $wrong: $!";
append_to_file("$wrong/pg_waldump",
	"#!/bin/sh\n[ \"\$1\" = --version ] && echo 'pg_waldump (PostgreSQL) 99.1' && exit 0\necho 'pg_waldump: error: invalid magic number' >&2; exit 1\n");
chmod 0755, "$wrong/pg_waldump";
($rc, $out) = $run_lonely->("$lonely:$wrong");
is($rc, EXIT_UNCHECKED, 'verify with a pg_waldump of another version: exit 3');
like($out, qr/NOT CHECKED: .*"\Q$wrong\E\/pg_waldump" is of PostgreSQL 99/, 'verify: names the pg_waldump of another version');
# a pg_waldump that fails for a reason of its own, not over the WAL
my $failing = $node->basedir . '/failing_bin';
mkdir $failing or die "mkdir $failing: $!";
append_to_file("$failing/pg_waldump",
	"#!/bin/sh\n[ \"\$1\" = --version ] && echo 'pg_waldump (PostgreSQL) $pg_major.1' && exit 0\necho 'pg_waldump: error: out of memory' >&2; exit 1\n");
chmod 0755, "$failing/pg_waldump";
($rc, $out) = $run_lonely->("$lonely:$failing");
is($rc, EXIT_UNCHECKED, 'verify with a pg_waldump that fails on its own: exit 3');
like($out, qr/NOT CHECKED: .*failed: pg_waldump: error: out of memory/, 'verify: shows why pg_waldump failed');
is($sha->(), $ring_sha, 'the ring is as the kill left it');

# --- dump, read back with pg_waldump ---------------------------------------
my $dumpdir = $node->basedir . '/dump';
($rc, $out) = ctl('dump', '--to', $dumpdir, $ring);
is($rc, 0, 'dump: exit 0');
like($out, qr/wrote WAL \Q${\ fmt_lsn($tail)}\E to \Q${\ fmt_lsn($head)}\E of timeline 1 into \d+ segment file\(s\)/,
	'dump: says what it wrote');
my @segs = glob("$dumpdir/*");
ok(@segs >= 1 && !grep({ !m{/[0-9A-F]{24}$} } @segs), 'dump: files are named like WAL segments');
ok(!grep({ -s $_ != 16777216 } @segs), 'dump: segment files have the segment size');
ok((grep { m{/000000010000000000000001$} } @segs), 'dump: names the segment of the tail on timeline 1')
  if $tail >> 24 == 1;
my ($hint) = $out =~ /read it with: (pg_waldump .*)$/m;
my ($first) = ($hint // '') =~ /--start=([0-9A-F]+\/[0-9A-F]+)/;
ok(defined $hint && $hint =~ m{^pg_waldump --path=\Q$dumpdir\E --timeline=1 --start=\S+ --end=\Q${\ fmt_lsn($head)}\E$},
	'dump: prints the pg_waldump command for the range');
ok(defined $first && parse_lsn($first) > $tail && parse_lsn($first) < $head,
	'dump: the command starts at the first record after the tail (' . ($first // 'none') . ')');
my ($wd_out, $wd_err) = run_command([ split / /, $hint // 'false' ]);
like($wd_err, qr/^(|pg_waldump: error: error in WAL record at [0-9A-F\/]+: .*)$/,
	'pg_waldump reads the dump from the first record on, at most complaining at the end: ' . ($wd_err || 'no complaint'));
unlike($wd_out, qr/first record is after/, 'pg_waldump: the first record is where dump said');
my $commits = () = $wd_out =~ /desc: COMMIT /g;
cmp_ok($commits, '>=', $acked / 2, "pg_waldump finds $commits commit records in the dump");
like($wd_out, qr/rmgr: Heap .*desc: INSERT/, 'pg_waldump finds the inserts in the dump');
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
is($rc, EXIT_ERROR, 'dump: a symlink named like a segment in --to: refused');
like($out, qr{"\Q$trap/$segname\E" already exists}, 'dump: the refusal names the file');
is($sha->($victim), $victim_sha, "dump: the symlink's target is unchanged");
ok(-l "$trap/$segname", 'dump: the symlink is left as it was');

my $stale = $node->basedir . '/dump_stale';
mkdir($stale, 0700) or die "mkdir $stale: $!";
append_to_file("$stale/$segname", "not WAL\n");
chmod(0666, "$stale/$segname") or die "chmod: $!";
($rc, $out) = ctl('dump', '--to', $stale, $ring);
is($rc, EXIT_ERROR, 'dump: a file named like a segment in --to: refused');
like($out, qr{"\Q$stale/$segname\E" already exists}, 'dump: the refusal names the existing file');
is(slurp_file("$stale/$segname"), "not WAL\n", 'dump: the existing file is unchanged');
is(file_mode("$stale/$segname"), '0666', "dump: the existing file's mode is unchanged");
is(scalar(my @in_stale = glob("$stale/*")), 1, 'dump: the refusal wrote no other file');

my $open_dir = $node->basedir . '/dump_0777';
mkdir($open_dir) or die "mkdir $open_dir: $!";
chmod(0777, $open_dir) or die "chmod: $!";
($rc, $out) = ctl('dump', '--to', $open_dir, $ring);
is($rc, EXIT_ERROR, 'dump: a --to directory writable by others: refused');
like($out, qr{"\Q$open_dir\E" is writable by group or others \(permissions 0777\)},
	'dump: says the directory is writable by others');
is(scalar(my @in_open = glob("$open_dir/*")), 0, 'dump: wrote nothing into it');

my $real_dir = $node->basedir . '/dump_real';
mkdir($real_dir, 0700) or die "mkdir $real_dir: $!";
symlink($real_dir, $node->basedir . '/dump_link') or die "symlink: $!";
($rc, $out) = ctl('dump', '--to', $node->basedir . '/dump_link', $ring);
is($rc, EXIT_ERROR, 'dump: a --to that is a symbolic link: refused');
like($out, qr{"\Q${\ $node->basedir}/dump_link\E" is a symbolic link}, 'dump: says --to is a symbolic link');
is(scalar(my @in_real = glob("$real_dir/*")), 0, "dump: wrote nothing into the link's target");

SKIP:
{
	skip 'run as root: / is the user\'s own', 2 if $> == 0;
	($rc, $out) = ctl('dump', '--to', '/', $ring);
	is($rc, EXIT_ERROR, 'dump: a --to directory of another user: refused');
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
my ($mid) = grep { $_->{desc} eq 'INSERT' && $_->{tot} > 48 && $_->{lsn} % 8192 + $_->{tot} < 8192 && $_->{lsn} < $head - 2 * 8192 }
  @records[ int(@records / 2) .. $#records ];
ok(defined $mid, 'an INSERT record in the middle of the ring') or BAIL_OUT('no INSERT record to damage');
my $orig = flip($mid->{lsn} + 40);
($rc, $out) = ctl('verify', '-D', $pgdata, $ring);
is($rc, EXIT_UNUSABLE, 'verify: a flipped byte mid-ring fails verification (exit 2)');
like($out, qr/WAL:\s+DAMAGED: reading from [0-9A-F\/]+ stopped at the record at \Q${\ fmt_lsn($mid->{lsn})}\E, before the last page at \Q${\ fmt_lsn($head - 8192)}\E; a start would refuse/,
	'verify: says the WAL is damaged, and where reading stopped');
like($out, qr/pg_waldump says:.*incorrect resource manager data checksum in record at \Q${\ fmt_lsn($mid->{lsn})}\E/,
	'verify: names the damaged record (' . fmt_lsn($mid->{lsn}) . ')');
ring_lsn_bytes($mid->{lsn} + 40, 1, $orig);
($rc, $out) = ctl('verify', '-D', $pgdata, $ring);
is($rc, 0, 'verify: passes again with the byte put back');

# (b) a page header in the middle: no pg_waldump needed to see it
my $bad_page = page_of($tail + ($head - $tail) / 2);
$orig = flip($bad_page + 8);		# xlp_pageaddr
($rc, $out) = ctl('verify', $ring);
is($rc, EXIT_UNUSABLE, 'verify: a damaged page header fails verification');
like($out, qr/WAL:\s+DAMAGED: the ring's page at \Q${\ fmt_lsn($bad_page)}\E has the page header of /,
	'verify: names the page whose header is wrong');
($rc, $out) = $run_lonely->($lonely);
is($rc, EXIT_UNUSABLE, 'verify without pg_waldump: a damaged page header is still damage (exit 2)');
ring_lsn_bytes($bad_page + 8, 1, $orig);

# (c) damage in the last page: the WAL ends there, as the restore accepts
# (the server may have been writing that page); cut the ring after the
# page of an INSERT that is not the first record on it
my ($late) = grep { $_->{desc} eq 'INSERT' && $_->{lsn} % 8192 >= 256 && $_->{lsn} % 8192 + $_->{tot} < 8192 && page_of($_->{lsn}) + 8192 < $head }
  reverse @records;
ok(defined $late, 'an INSERT record inside a page') or BAIL_OUT('no INSERT record to damage');
ring_write_u64($ring, 'head', page_of($late->{lsn}) + 8192);
$orig = flip($late->{lsn} + 40);
($rc, $out) = ctl('verify', $ring);
is($rc, 0, 'verify: damage in the last page is where the WAL ends') or diag($out);
like($out, qr/WAL:\s+ok: .* read cleanly up to [0-9A-F\/]+, in the last page, where the WAL ends/,
	'verify: says the WAL ends in the last page');
ring_lsn_bytes($late->{lsn} + 40, 1, $orig);
ring_write_u64($ring, 'head', $head);

# (d) a head that cuts a record off (the server's last page ends inside
# it): the restore takes the cut-off record as the end, and so does
# verify, as long as what the ring holds of it reads cleanly
my ($big) = grep { $_->{desc} eq 'MESSAGE' && $_->{tot} > 20000 } @records;
ok(defined $big && page_of($big->{lsn}) >= $tail && page_of($big->{lsn}) + 3 * 8192 < $head,
	'the record of 20,000 bytes is in the ring (' . ($big ? fmt_lsn($big->{lsn}) : 'none') . ')')
  or BAIL_OUT('no big record to cut');
my $big_page = page_of($big->{lsn});
ring_write_u64($ring, 'head', $big_page + 2 * 8192);
($rc, $out) = ctl('verify', $ring);
is($rc, 0, 'verify: a head inside a record verifies') or diag($out);
like($out, qr/WAL:\s+ok: .* read cleanly to the head, and the record after them continues past it/,
	'verify: says the last record continues past the head');
# ...but its header is still checked, as the restore's reader does
SKIP:
{
	skip 'the big record\'s header is split across two pages', 2 if $big->{lsn} % 8192 > 8192 - 24;
	$orig = flip($big->{lsn} + 8);		# xl_prev
	($rc, $out) = ctl('verify', $ring);
	is($rc, EXIT_UNUSABLE, 'verify: a damaged header of the cut-off record fails');
	like($out, qr/pg_waldump says:.*incorrect prev-link .* at \Q${\ fmt_lsn($big->{lsn})}\E/, 'verify: names the bad prev-link');
	ring_lsn_bytes($big->{lsn} + 8, 1, $orig);
}

# (e) a tail inside a record: the ring starts with the rest of it, and
# the records start after it; and a ring that holds only the middle of a
# record
ring_write_u64($ring, 'tail', $big_page + 8192);
ring_write_u64($ring, 'head', $head);
($rc, $out) = ctl('verify', $ring);
is($rc, 0, 'verify: a tail inside a record verifies') or diag($out);
my ($after_big) = $out =~ /records from ([0-9A-F]+\/[0-9A-F]+) read cleanly/;
is($after_big, fmt_lsn(next_record($big->{lsn}, $big->{tot})),
	'verify: reads from the first record after the one the tail is in');
ring_write_u64($ring, 'head', $big_page + 2 * 8192);
($rc, $out) = ctl('verify', $ring);
is($rc, 0, 'verify: a ring holding only the middle of a record verifies') or diag($out);
like($out, qr/holds only the middle of one record/, 'verify: says it holds only the middle of a record');
# a page that does not continue the record the page before it leaves
# unfinished is damage
ring_write_u64($ring, 'head', $big_page + 3 * 8192);
$orig = flip($big_page + 8192 + 16);		# xlp_rem_len
($rc, $out) = ctl('verify', $ring);
is($rc, EXIT_UNUSABLE, 'verify: a continuation page with the wrong remaining length fails');
like($out, qr/DAMAGED: the ring's page at \Q${\ fmt_lsn($big_page + 2 * 8192)}\E does not continue the record of the page before it/,
	'verify: names the page that does not continue the record');
ring_lsn_bytes($big_page + 8192 + 16, 1, $orig);
ring_write_u64($ring, 'tail', $tail);
ring_write_u64($ring, 'head', $head);
is($sha->(), $ring_sha, 'the ring is as the kill left it');

# --- a bad header ----------------------------------------------------------------
my $crc = ring_field($ring, 'crc');
ring_set_static($ring, crc => $crc ^ 1, keep_crc => 1);
($rc, $out) = ctl('verify', $ring);
is($rc, EXIT_UNUSABLE, 'verify: a wrong header CRC fails');
like($out, qr/header:\s+NOT USABLE: The header checksum is/, 'verify: says the header checksum is wrong');
($rc, $out) = ctl('inspect', $ring);
is($rc, EXIT_UNUSABLE, 'inspect: a wrong header CRC exits 2');
like($out, qr/header:\s+NOT USABLE/, 'inspect: says the header is not usable');
like($out, qr/ring id:\s+$ring_id\n/, 'inspect: still shows what the header records');
ring_set_static($ring, crc => $crc, keep_crc => 1);

my $ring_sysid = ring_field($ring, 'system_identifier');
ring_set_static($ring, system_identifier => $ring_sysid ^ 1);
($rc, $out) = ctl('verify', '-D', $pgdata, $ring);
is($rc, EXIT_UNUSABLE, "verify -D: a ring of another cluster fails");
like($out, qr/NOT USABLE: The ring belongs to the cluster with system identifier ${\ ($ring_sysid ^ 1)}; this cluster's is $sysid/,
	'verify -D: names both system identifiers');
ring_set_static($ring, system_identifier => $ring_sysid);

# Issue 21 item 7: a WAL segment size of 0 made dump and verify die of a
# division by zero ("Floating point exception"), and a size of 1 made dump
# write 8,192 one-byte files; inspect showed it.  Every command now checks
# every field, with or without -D, before any arithmetic.
for my $segsize (0, 1, 3 * 1024 * 1024, 4096)
{
	ring_set_static($ring, wal_segment_size => $segsize);
	my $dir = $node->basedir . "/dump_segsize_$segsize";
	($rc, $out, $sig) = ctl('dump', '--to', $dir, $ring);
	is("$rc/$sig", EXIT_UNUSABLE . '/0', "dump, segment size $segsize: refused (exit 2), no signal");
	like($out, qr/NOT USABLE: The header names a WAL segment size of $segsize bytes, which PostgreSQL does not allow/,
		"dump, segment size $segsize: says why");
	ok(!-e $dir, "dump, segment size $segsize: wrote nothing");
	($rc, $out, $sig) = ctl('verify', $ring);
	is("$rc/$sig", EXIT_UNUSABLE . '/0', "verify, segment size $segsize: fails (exit 2), no signal");
	($rc, $out, $sig) = ctl('inspect', $ring);
	is("$rc/$sig", EXIT_UNUSABLE . '/0', "inspect, segment size $segsize: not usable (exit 2)");
	like($out, qr/WAL segment size:\s+$segsize\n/, "inspect, segment size $segsize: shows it");
	($rc, $out, $sig) = ctl('reset', '--discard-wal', $ring);
	is("$rc/$sig", EXIT_ERROR . '/0', "reset, segment size $segsize: refused");
}
ring_set_static($ring, wal_segment_size => 16 * 1024 * 1024);
for my $case ([ capacity => 0 ], [ capacity => 1 << 40 ], [ capacity => 4096 ], [ wal_block_size => 4096 ],
	[ header_size => 8192 ])
{
	my ($field, $value) = @$case;
	my $was = ring_field($ring, $field);
	ring_set_static($ring, $field => $value);
	($rc, $out, $sig) = ctl('dump', '--to', $node->basedir . '/dump_bad', $ring);
	is("$rc/$sig", EXIT_UNUSABLE . '/0', "dump, $field $value: refused (exit 2)");
	($rc, $out, $sig) = ctl('verify', $ring);
	is("$rc/$sig", EXIT_UNUSABLE . '/0', "verify, $field $value: fails (exit 2)");
	ring_set_static($ring, $field => $was);
}
ok(!-e $node->basedir . '/dump_bad', 'dump of a bad header wrote nothing');
ok(!-e $node->basedir . '/dump_bad', 'dump of a bad static header wrote nothing');
is($sha->(), $ring_sha, 'the ring is as the kill left it');

# --- inconsistent positions: what cannot be read is not empty ------------------
# A short WAL write can leave a head that is not on a page boundary; a start
# then refuses the ring ("has inconsistent positions"), while the ring holds
# the cluster's newest acknowledged commits.  pmwal_ctl used to treat the
# ring as holding nothing: unbind without --force removed the binding ("is
# not a usable ring"), so the next start ran without those commits, and dump
# refused (exit 2), so they could not be gotten out.  Now unbind refuses
# every bound ring it cannot prove empty, dump writes out the pages from the
# tail on that read as this ring's WAL, and inspect says which check failed
# and what the data area still holds.
my $binding_bytes = slurp_file($binding);
my $binding_mode = file_mode($binding);
my $put_back_binding = sub {
	open my $fh, '>:raw', $binding or die "could not write $binding: $!";
	print $fh $binding_bytes;
	close $fh or die "close: $!";
	chmod(oct($binding_mode), $binding) or die "chmod: $!";
	is($sha->($binding), $binding_sha, 'the binding file is put back');
};
my $mid_head = $head - 8192 + 100;
ring_write_u64($ring, 'head', $mid_head);
my $bad_sha = $sha->();
my $log_at = -s $node->logfile;
ok(!$node->start(fail_ok => 1), 'a mid-page head: the start is refused');
like(slurp_file($node->logfile, $log_at), qr/FATAL:  pmwal ring "\Q$ring\E" has inconsistent positions/,
	'a mid-page head: the server refuses the ring for its inconsistent positions');
is($sha->(), $bad_sha, 'a mid-page head: the refused start left the ring as it was');
is($sha->($binding), $binding_sha, 'a mid-page head: the refused start left the binding as it was');

# inspect: why the header is not usable, and what the data area holds
($rc, $out) = ctl('inspect', '-D', $pgdata, $ring);
note("inspect -D, a mid-page head:\n$out");
is($rc, EXIT_UNUSABLE, 'inspect, a mid-page head: exit 2 (a start refuses the ring)');
like($out, qr/header:\s+NOT USABLE: /, 'inspect, a mid-page head: the header is not usable');
like($out, qr/positions:\s+INCONSISTENT: the head \Q${\ fmt_lsn($mid_head)}\E is not on a page boundary\n/,
	'inspect, a mid-page head: names the check that failed');
my ($i_pages, $i_from, $i_to) =
  $out =~ /WAL pages:\s+(\d+) pages from ([0-9A-F]+\/[0-9A-F]+) to ([0-9A-F]+\/[0-9A-F]+) read as this ring's WAL/;
is($i_from // 'none', fmt_lsn($tail), 'inspect, a mid-page head: the data area holds WAL pages from the tail on');
ok(defined $i_to && parse_lsn($i_to) >= $head && $i_pages == (parse_lsn($i_to) - $tail) / 8192,
	'inspect, a mid-page head: ... through the page of the head (' . ($i_to // 'none') . ')');
like($out, qr/WAL pages:.*"pmwal_ctl dump" writes them out/, 'inspect, a mid-page head: says dump gets them out');
like($out, qr/binding matches:\s+yes: the same ring, at the binding's generation; but a start refuses its positions/,
	'inspect -D, a mid-page head: it is the bound ring');
like($out, qr/what to do:\s+the ring may hold acknowledged WAL: save it with "pmwal_ctl dump" before anything else/,
	'inspect, a mid-page head: says what to do');

# unbind refuses: the binding is what keeps the next start from running
# without the ring's commits
($rc, $out) = ctl('unbind', '-D', $pgdata);
note("unbind, a mid-page head:\n$out");
is($rc, EXIT_ERROR, 'unbind, the bound ring has a mid-page head: refused without --force');
like($out, qr/error: refusing to unbind "\Q$pgdata\E": its ring "\Q$ring\E" cannot be read, so it may hold acknowledged WAL/,
	'unbind, a mid-page head: says the ring cannot be read and may hold acknowledged WAL');
like($out, qr/detail: "\Q$ring\E" is not a usable ring: .*the head \Q${\ fmt_lsn($mid_head)}\E is not on a page boundary/,
	'unbind, a mid-page head: says why');
like($out, qr/hint: Save what it holds first with "pmwal_ctl dump --to=DIR \Q$ring\E".*; then --force unbinds/,
	'unbind, a mid-page head: says to dump first, then --force');
is(-f $binding ? $sha->($binding) : 'gone', $binding_sha, 'unbind refused: the binding file is there, byte for byte');
$put_back_binding->() unless -f $binding;

# dump gets the WAL out: every commit of the consistent ring's dump, and the
# newest acknowledged one
my $salvage = $node->basedir . '/dump_mid_head';
my ($stdout, $stderr);
($rc, $stdout, $stderr) = ctl_apart('dump', '--to', $salvage, $ring);
note("dump, a mid-page head:\n$stdout\nstderr:\n$stderr");
is($rc, 0, 'dump, a mid-page head: exit 0 (it dumped the pages that read as WAL)') or diag("$stdout$stderr");
like($stderr, qr/warning: the ring's positions are inconsistent: the head \Q${\ fmt_lsn($mid_head)}\E is not on a page boundary/,
	'dump, a mid-page head: says on stderr that the positions are inconsistent, and why');
like($stderr, qr/detail: A start refuses this ring\.  Dumped instead: the \d+ pages from the page of the tail, \Q${\ fmt_lsn($tail)}\E, on/,
	'dump, a mid-page head: says on stderr what it dumped instead');
my ($s_from, $s_to) = $stdout =~ /wrote WAL (\S+) to (\S+) of timeline 1 into \d+ segment file\(s\) in "\Q$salvage\E"/;
is($s_from // 'none', fmt_lsn($tail), 'dump, a mid-page head: from the tail');
ok(defined $s_to && parse_lsn($s_to) >= $head, 'dump, a mid-page head: through the page of the head (' . ($s_to // 'none') . ')');
my ($s_hint) = $stdout =~ /read it with: (pg_waldump .*)$/m;
ok(defined $s_hint && $s_hint =~ m{^pg_waldump --path=\Q$salvage\E --timeline=1 --start=\Q$first\E --end=\Q${\ ($s_to // '')}\E$},
	'dump, a mid-page head: prints the pg_waldump command for what it wrote') or diag($stdout);
my ($s_wd, $s_err) = run_command([ split / /, $s_hint // 'false' ]);
like($s_err, qr/^(|pg_waldump: error: error in WAL record at [0-9A-F\/]+: .*)$/,
	'pg_waldump reads the dump of a ring with a mid-page head: ' . ($s_err || 'no complaint'));
my @ring_commits = $wd_out =~ /(tx:\s+\d+, lsn: [0-9A-F\/]+), prev [0-9A-F\/]+, desc: COMMIT /g;
my %salvaged = map { $_ => 1 } $s_wd =~ /(tx:\s+\d+, lsn: [0-9A-F\/]+), prev [0-9A-F\/]+, desc: COMMIT /g;
cmp_ok(scalar(@ring_commits), '>=', $acked / 2, scalar(@ring_commits) . ' commits in the dump of the consistent ring');
is(join(', ', grep { !$salvaged{$_} } @ring_commits), '',
	'the dump of a ring with a mid-page head holds every commit the consistent ring held');
like($s_wd, qr/tx:\s+$last_xid, lsn: [0-9A-F\/]+, prev [0-9A-F\/]+, desc: COMMIT /,
	"... among them the newest acknowledged one (transaction $last_xid)");
is($sha->(), $bad_sha, 'dump, a mid-page head: the ring is unchanged');

# --force unbinds, saying what is lost
($rc, $out) = ctl('unbind', '-D', $pgdata, '--force');
is($rc, 0, 'unbind --force, a mid-page head: exit 0') or diag($out);
like($out, qr/warning: unbinding with --force: the commits only ring "\Q$ring\E" holds are lost/,
	'unbind --force, a mid-page head: warns what is lost');
ok(!-e $binding, 'unbind --force, a mid-page head: the binding file is gone');
$put_back_binding->();
ring_write_u64($ring, 'head', $head);

# every other header a start refuses is refused by unbind too: a wrong checksum
ring_set_static($ring, crc => ring_field($ring, 'crc') ^ 1, keep_crc => 1);
($rc, $out) = ctl('unbind', '-D', $pgdata);
is($rc, EXIT_ERROR, 'unbind, the bound ring has a wrong header checksum: refused without --force');
like($out, qr/its ring "\Q$ring\E" cannot be read, so it may hold acknowledged WAL.*\n.*detail: .*The header checksum is/,
	'unbind, a wrong header checksum: says why');
is(-f $binding ? $sha->($binding) : 'gone', $binding_sha, 'unbind, a wrong header checksum: the binding file is unchanged');
$put_back_binding->() unless -f $binding;
ring_set_static($ring, crc => $crc, keep_crc => 1);

# the controls: a ring proven to hold nothing still unbinds without --force
ring_write_u64($ring, 'state', RING_STATE_EMPTY);
($rc, $out) = ctl('unbind', '-D', $pgdata);
is($rc, 0, 'unbind, the bound ring proven empty: exit 0 without --force') or diag($out);
like($out, qr/ring "\Q$ring\E" is there and holds no WAL\n/, 'unbind, the bound ring proven empty: says so');
ok(!-e $binding, 'unbind, the bound ring proven empty: the binding file is gone');
$put_back_binding->();
ring_write_u64($ring, 'state', RING_STATE_REINIT);
($rc, $out) = ctl('unbind', '-D', $pgdata);
is($rc, 0, 'unbind, the bound ring\'s initialisation interrupted (it holds nothing): exit 0') or diag($out);
like($out, qr/ring "\Q$ring\E" holds no WAL: An initialisation of the empty ring was interrupted/,
	'unbind, an interrupted initialisation: says the ring holds no WAL');
$put_back_binding->();
ring_write_u64($ring, 'state', RING_STATE_IN_USE);
is($sha->(), $ring_sha, 'the ring is as the kill left it');

# the other dynamic words: each inconsistency named, the WAL still dumped
my $segsize = 16 * 1024 * 1024;
for my $case ([ timeline => 0, qr/the timeline word holds 0, which is no timeline/ ],
	[ timeline => 1 << 33, qr/the timeline word holds 8589934592, which is no timeline/ ],
	[ tail => $tail + 100, qr/the tail \Q${\ fmt_lsn($tail + 100)}\E is not on a page boundary/ ],
	[ head => $tail + $segsize + 8192,
		qr/the tail \Q${\ fmt_lsn($tail)}\E and the head \Q${\ fmt_lsn($tail + $segsize + 8192)}\E are ${\ ($segsize + 8192)} bytes apart, more than the capacity $segsize/ ],
	[ state => 0x1234, qr/the state word holds the unknown value 0x0000000000001234/ ])
{
	my ($word, $value, $why) = @$case;
	ring_write_u64($ring, $word, $value);
	my $dir = $node->basedir . "/dump_${word}_$value";
	($rc, $stdout, $stderr) = ctl_apart('dump', '--to', $dir, $ring);
	is($rc, 0, "dump, $word $value: exit 0, the pages that read as WAL dumped") or diag("$stdout$stderr");
	like($stdout, qr/NOT USABLE: /, "dump, $word $value: the header is not usable");
	like($stderr, qr/warning: the ring's positions are inconsistent: $why/, "dump, $word $value: names the inconsistency");
	like($stdout, qr/wrote WAL \Q${\ fmt_lsn($tail)}\E to [0-9A-F\/]+ of timeline 1 into \d+ segment file\(s\)/,
		"dump, $word $value: from the page of the tail, on the timeline of its pages");
	like($stderr, qr/that is short of the head, \Q${\ fmt_lsn($value)}\E: they end where the ring's page at /,
		"dump, $word $value: says the pages that read as WAL end before the head, and why")
	  if $word eq 'head';
	($rc, $out) = ctl('inspect', $ring);
	like($out, qr/positions:\s+INCONSISTENT: $why/, "inspect, $word $value: names the inconsistency");
	ring_write_u64($ring, $word, $word eq 'timeline' ? 1 : $word eq 'tail' ? $tail : $word eq 'head' ? $head : RING_STATE_IN_USE);
}

# a page that does not read as this ring's WAL is never dumped: a tail one
# lap on names the slot of the tail's page, which holds the page of the
# lap before
ring_write_u64($ring, 'tail', $tail + $segsize);
ring_write_u64($ring, 'head', $tail + $segsize + 100);
($rc, $stdout, $stderr) = ctl_apart('dump', '--to', $node->basedir . '/dump_lap', $ring);
is($rc, EXIT_UNUSABLE, 'dump, a tail whose page holds the lap before: exit 2, nothing reads as WAL');
like($stderr, qr/error: the ring's positions are inconsistent, and not even the page of its tail, \Q${\ fmt_lsn($tail + $segsize)}\E, reads as this ring's WAL: the ring's page at \Q${\ fmt_lsn($tail + $segsize)}\E has the page header of \Q${\ fmt_lsn($tail)}\E/,
	'dump, a tail whose page holds the lap before: says why');
ok(!-e $node->basedir . '/dump_lap', 'dump, a tail whose page holds the lap before: wrote nothing');
($rc, $out) = ctl('inspect', $ring);
like($out, qr/WAL pages:\s+none: the ring's page at \Q${\ fmt_lsn($tail + $segsize)}\E has the page header of/,
	'inspect, a tail whose page holds the lap before: no WAL pages');
ring_write_u64($ring, 'tail', $tail);
ring_write_u64($ring, 'head', $head);
is($sha->(), $ring_sha, 'the ring is as the kill left it');

# --- symbolic links and FIFOs (issue 21 item 7) ------------------------------
# reset --discard-wal followed a symbolic link to the ring, and inspect of a
# FIFO blocked for ever: every ring path is opened with O_NOFOLLOW, and
# only once it is known to be a regular file or a character device.
my $link = $node->basedir . '/ring.link';
symlink($ring, $link) or die "symlink: $!";
for my $cmd ([ 'reset', '--discard-wal' ], ['inspect'], ['verify'], [ 'dump', '--to', $node->basedir . '/dump_via_link' ],
	[ 'init', '-D', $pgdata, '--force' ])
{
	($rc, $out) = ctl(@$cmd, $link);
	is($rc, EXIT_ERROR, "$cmd->[0] through a symbolic link: refused");
	like($out, qr/"\Q$link\E" is a symbolic link.*\n.*hint: pmwal_ctl, like the server, does not follow a symbolic link/,
		"$cmd->[0] through a symbolic link: says so");
}
is($sha->(), $ring_sha, 'the commands through a link left the ring as it was');
is(ring_state($ring), RING_STATE_IN_USE, 'reset through a link: the ring still holds its WAL');
my $fifo = $node->basedir . '/ring.fifo';
system('mkfifo', $fifo) == 0 or die "mkfifo: $?";
for my $cmd (['inspect'], ['verify'], [ 'dump', '--to', $node->basedir . '/dump_fifo' ], [ 'reset', '--discard-wal' ],
	[ 'init', '-D', $pgdata, '--force' ])
{
	($rc, $out) = ctl_within(20, @$cmd, $fifo);
	is($rc, EXIT_ERROR, "$cmd->[0] of a FIFO: refused at once (no block)");
	like($out, qr/"\Q$fifo\E" is a FIFO, neither a regular file nor a devdax device/, "$cmd->[0] of a FIFO: says so");
}
($rc, $out) = ctl('inspect', $node->basedir);
like($out, qr/is a directory, neither a regular file nor a devdax device.*\n.*hint: Give the ring file in that directory/,
	'inspect of a directory: says so, and what to give');

# --- unbind while the bound ring holds WAL -----------------------------------
($rc, $out) = ctl('unbind', '-D', $pgdata);
is($rc, EXIT_ERROR, 'unbind while the bound ring holds WAL: refused');
like($out, qr/binds the data directory to ring $ring_id at "\Q$ring\E", generation $bound->{generation}/,
	'unbind: says what the binding names');
like($out, qr/refusing to unbind .*\n.*detail: ring "\Q$ring\E" holds WAL \Q${\ fmt_lsn($tail)}\E to \Q${\ fmt_lsn($head)}\E/,
	'unbind: says the ring holds WAL');
like($out, qr/hint: Set pmwal.path = '\Q$ring\E' and start the server once/, 'unbind: says to start on the ring once instead');
is($sha->($binding), $binding_sha, 'unbind refused: the binding file is unchanged');

# --- reset -------------------------------------------------------------------
($rc, $out) = ctl('reset', $ring);
is($rc, EXIT_ERROR, 'reset without --discard-wal: refused');
like($out, qr/confirm with --discard-wal/, 'reset without --discard-wal: says how to confirm');
is($sha->(), $ring_sha, 'reset without --discard-wal: ring unchanged');
($rc, $out) = ctl('reset', '--force', '--discard-wal', $ring);
is($rc, EXIT_ERROR, '--force with reset: refused');
like($out, qr/--force is only for init and unbind/, '--force with reset: says so');

($rc, $out) = ctl('reset', '--discard-wal', $ring);
is($rc, 0, 'reset --discard-wal: exit 0');
like($out, qr/discarding WAL \Q${\ fmt_lsn($tail)}\E to \Q${\ fmt_lsn($head)}\E \(${\ ($head - $tail)} bytes\) of timeline 1/,
	'reset: prints the range and bytes it discards');
like($out, qr/commits acknowledged in it that data directory "\Q$realdata\E" lacks are lost/,
	'reset: names the data directory that may lack them');
is(ring_state($ring), RING_STATE_EMPTY, 'reset: the ring is empty');
is(ring_read_u64($ring, 'tail'), ring_read_u64($ring, 'head'), 'reset: tail = head');
is(ring_read_u64($ring, 'generation'), $generation, 'reset: the generation is kept (the binding still matches)');
($rc, $out) = ctl('inspect', '-D', $pgdata, $ring);
is($rc, 0, 'inspect after reset: exit 0');
like($out, qr/holds:\s+no WAL \(empty\)\n(?:.*\n)*restore at start:\s+nothing to restore/,
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
like($out, qr/holds:\s+no WAL \(empty\)\n(?:.*\n)*restore at start:\s+nothing to restore/,
	'inspect after a clean stop: nothing to restore');

# --- unbind: the way out when the bound ring is lost ------------------------
# After a crash the server refuses to start without the ring bound to the
# data directory; pmwal_ctl unbind, which its hint names, gives it up.
$node->start;
$insert->(1001, 1010);
powercut_kill($node);
ok(ring_read_u64($ring, 'head') > ring_read_u64($ring, 'tail'), 'a second kill left WAL in the ring');
my $lost = "$ring.lost";
rename($ring, $lost) or die "rename: $!";
$offset = -s $node->logfile;
ok(!$node->start(fail_ok => 1), 'the ring is gone: the start is refused');
my $log = slurp_file($node->logfile, $offset);
like($log, qr/FATAL:  pmwal ring "\Q$ring\E" is missing, and it may hold this cluster's acknowledged WAL/,
	'the refusal says the bound ring is missing');
like($log, qr/pmwal_ctl unbind -D/, "the refusal's hint names pmwal_ctl unbind");
$bound = read_binding($binding);
($rc, $out) = ctl('unbind', '-D', $pgdata);
is($rc, 0, 'unbind, the bound ring missing: exit 0') or diag($out);
like($out, qr/binds the data directory to ring $bound->{ring_id} at "\Q$ring\E", generation $bound->{generation}\nring "\Q$ring\E" is missing\n/,
	'unbind: prints what the binding names, and that the ring is missing');
like($out, qr/removed "\Q$binding\E": the data directory is no longer bound to a ring/, 'unbind: says it removed the binding');
ok(!-e $binding, 'unbind: the binding file is gone');
($rc, $out) = ctl('unbind', '-D', $pgdata);
is($rc, 0, 'unbind again: exit 0');
like($out, qr/is not bound to a ring .* nothing to do/, 'unbind again: nothing to do');
$offset = -s $node->logfile;
ok($node->start(fail_ok => 1), 'after unbind, the server starts without the lost ring');
like(slurp_file($node->logfile, $offset), qr/pmwal created ring file "\Q$ring\E"/, 'after unbind, the server makes a new ring');
isnt(unpack('H*', ring_field($ring, 'ring_id')), $bound->{ring_id}, 'the new ring has a ring id of its own');

# --force: unbind although the bound ring holds WAL (the operator gives it up)
$insert->(1011, 1020);
powercut_kill($node);
$bound = read_binding($binding);
($rc, $out) = ctl('unbind', '-D', $pgdata, '--force');
is($rc, 0, 'unbind --force, the bound ring holding WAL: exit 0') or diag($out);
like($out, qr/warning: unbinding with --force: the commits only ring "\Q$ring\E" holds are lost/,
	'unbind --force: warns what is lost');
ok(!-e $binding, 'unbind --force: the binding file is gone');
($rc, $out) = ctl('reset', '--discard-wal', $ring);
is($rc, 0, 'reset of the ring given up');
ok($node->start(fail_ok => 1), 'the server starts');
$node->stop;

# a damaged binding file: which ring holds the WAL cannot be told
ok(-f $binding, 'the start bound the data directory again');
file_bytes($binding, 0, 0, 'x' x 4096);
$binding_sha = $sha->($binding);
($rc, $out) = ctl('unbind', '-D', $pgdata);
is($rc, EXIT_ERROR, 'unbind a damaged binding: refused without --force');
like($out, qr/"\Q$binding\E" is damaged: neither of its two slots is valid/, 'unbind a damaged binding: says so');
is($sha->($binding), $binding_sha, 'unbind a damaged binding: the file is unchanged');
($rc, $out) = ctl('unbind', '-D', $pgdata, '--force');
is($rc, 0, 'unbind --force a damaged binding: exit 0');
ok(!-e $binding, 'unbind --force a damaged binding: the file is gone');
unlink $lost;

# --- an uninitialised (all zero) ring, e.g. a fresh devdax device ---------------
my $zero = zero_file($node->basedir . '/zero.ring', 4096 + 1024 * 1024);
my $zero_sha = $sha->($zero);
($rc, $out) = ctl('inspect', $zero);
is($rc, EXIT_UNUSABLE, 'inspect an all-zero ring: exit 2 (a server refuses it)');
like($out, qr/uninitialised \(all zero\): not a pmwal ring, a server refuses it; "pmwal_ctl init" makes it one/,
	'inspect an all-zero ring: says so, and points at init');
($rc, $out) = ctl('verify', $zero);
is($rc, EXIT_UNUSABLE, 'verify an all-zero ring: exit 2 (a server refuses it)');
($rc, $out) = ctl('reset', '--discard-wal', $zero);
is($rc, 0, 'reset an all-zero ring: exit 0');
like($out, qr/the ring holds no WAL/, 'reset an all-zero ring: nothing discarded');
is($sha->($zero), $zero_sha, 'reset an all-zero ring: left all zero (a server would refuse a header without magic)');
my $tiny = zero_file($node->basedir . '/tiny.ring', 100);
($rc, $out) = ctl('inspect', $tiny);
is($rc, EXIT_UNUSABLE, 'inspect a file smaller than a header: exit 2');
like($out, qr/NOT USABLE: The file is 100 bytes, smaller than the 4096-byte ring header/, 'inspect a tiny file: says so');

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
is($rc, EXIT_ERROR, 'inspect a character device without a sysfs size: exit 1');
like($out, qr{could not determine the size of character device "/dev/null" from "\Q$null_sysfs\E"},
	'inspect a character device: its size is read from sysfs, and the failure names the file');

# --- init ------------------------------------------------------------------------
# The server adopts no file it did not create: it refuses an all-zero
# header itself, pointing at pmwal_ctl init, which makes such a file (or a
# missing path, or a devdax device) an empty ring of the cluster.
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
$log = slurp_file($node->logfile, $offset);
like($log, qr/file "\Q$zero2\E" is not a pmwal ring/, 'the server says the all-zero file is not a pmwal ring');
like($log, qr/pmwal_ctl init/, 'the server\'s hint points at pmwal_ctl init');
is($sha->($zero2), $zero2_sha, 'the server left the all-zero file as it was');

($rc, $out) = ctl('init', '-D', $pgdata, $zero2);
is($rc, 0, 'init an all-zero file: exit 0') or diag($out);
like($out, qr/reading all of "\Q$zero2\E" \(${\ (4096 + 16 * $mb)} bytes\) to prove it empty/,
	'init: reads the whole file to prove it empty');
like($out, qr/initialised ring "\Q$zero2\E" \(all zero\): capacity 16 MB \(16777216 bytes\), ring [0-9a-f]{32}, system identifier $sysid; it is empty/,
	'init: says what it initialised');
is(ring_field($zero2, 'magic'), 'PMWALRNG', 'init: the magic is written');
is(ring_field($zero2, 'format_version'), 2, 'init: format 2');
is(ring_field($zero2, 'system_identifier'), $sysid, "init: the cluster's system identifier");
is(ring_field($zero2, 'wal_segment_size'), 16 * $mb, "init: the cluster's WAL segment size");
is(ring_field($zero2, 'capacity'), 16 * $mb, 'init: capacity is the file size less the header');
my $zero2_id = unpack('H*', ring_field($zero2, 'ring_id'));
isnt($zero2_id, '0' x 32, 'init: a ring id');
is(ring_state($zero2), RING_STATE_EMPTY, 'init: the ring is empty');
is(join(',', map { ring_read_u64($zero2, $_) } qw(tail head timeline generation)), '0,0,0,0',
	'init: the dynamic words are zero');
is(file_bytes($zero2, 1024, 3072), "\0" x 3072, 'init: no owner block');
($rc, $out) = ctl('inspect', '-D', $pgdata, $zero2);
is($rc, 0, 'inspect after init: exit 0');
like($out, qr/state:\s+empty\n.*owner:\s+none recorded.*holds:\s+no WAL/s, 'inspect after init: an empty ring, no owner');
ok($node->start(fail_ok => 1), 'the server starts on the initialised file');
$log = slurp_file($node->logfile, $offset);
like($log, qr/pmwal attached ring "\Q$zero2\E": 16 MB, mode \w+, empty/, 'the server attaches the initialised ring');
unlike($log, qr/initialising|created ring file/, 'the server uses the ring as init wrote it');
is(unpack('H*', ring_field($zero2, 'ring_id')), $zero2_id, 'the server keeps the ring id init made');
$node->stop;

my $new = $node->basedir . '/new.ring';
($rc, $out) = ctl('init', '-D', $pgdata, $new);
is($rc, EXIT_ERROR, 'init a missing path without --size: refused');
like($out, qr/does not exist; give its size with --size/, 'init a missing path without --size: says so');
for my $size (qw(1 65537 0 -2 16kB 65GB))
{
	($rc, $out) = ctl('init', '-D', $pgdata, "--size=$size", $new);
	is($rc, EXIT_ERROR, "init --size=$size: refused");
	like($out, qr/--size must be between 2 and 65536 MB, like pmwal.size/, "init --size=$size: names the range");
}
ok(!-e $new, 'the refusals created nothing');
($rc, $out) = ctl('init', '--size=16', $new);
is($rc, EXIT_ERROR, 'init without -D: refused');
like($out, qr/init needs -D DATADIR/, 'init without -D: says so');
($rc, $out) = ctl('init', '-D', $pgdata, '--size=16MB', $new);
is($rc, 0, 'init a missing path: exit 0') or diag($out);
like($out, qr/initialised ring "\Q$new\E" \(a new file\): capacity 16 MB/, 'init a missing path: says so');
is(file_mode($new), '0600', 'init: the new file has mode 0600');
is(-s $new, 4096 + 16 * $mb, 'init: the new file holds the header and the capacity');
isnt(unpack('H*', ring_field($new, 'ring_id')), $zero2_id, 'init: each ring gets a ring id of its own');
$use_ring->($new);
ok($node->start(fail_ok => 1), 'the server starts on a ring made by init');
$log = slurp_file($node->logfile, $offset);
like($log, qr/pmwal attached ring "\Q$new\E": 16 MB, mode \w+, empty/, 'the server attaches the ring made by init');
unlike($log, qr/initialising|created ring file/, 'the server uses the ring as init wrote it');
$node->safe_psql('postgres', 'INSERT INTO t VALUES (0)');
$node->stop;

my $new_sha = $sha->($new);
($rc, $out) = ctl('init', '-D', $pgdata, $new);
is($rc, EXIT_ERROR, 'init an existing ring: refused');
like($out, qr/"\Q$new\E" already holds a pmwal ring/, 'init an existing ring: says so');
like($out, qr/pmwal_ctl reset --discard-wal/, 'init an existing ring: points at reset');
is($sha->($new), $new_sha, 'init an existing ring: unchanged');

my $foreign = $node->basedir . '/foreign.ring';
append_to_file($foreign, 'somebody else\'s data ' x 1000);
chmod(0600, $foreign) or die "chmod: $!";
my $foreign_sha = $sha->($foreign);
($rc, $out) = ctl('init', '-D', $pgdata, '--size=2', $foreign);
is($rc, EXIT_ERROR, 'init a file that is not a ring: refused');
like($out, qr/"\Q$foreign\E" is not a pmwal ring and not empty, refusing to overwrite it/, 'init a file that is not a ring: says so');
like($out, qr/detail: Its byte at offset 0 is not zero\./, 'init a file that is not a ring: says where');
unlike($out, qr/reading all of/, 'init a file whose first page is not zero: does not read the rest');
is($sha->($foreign), $foreign_sha, 'init a file that is not a ring: unchanged');
like($out, qr/--force overwrites it/, 'init a file that is not a ring: points at --force');

# Issue 21 item 7: init took a file whose first 4 kB were zero -- an 8 MB
# file of someone's, with data at 6 MB -- and that data was gone.  Only a
# file every byte of which is zero is empty.
my $sparse = zero_file($node->basedir . '/sparse.ring', 8 * $mb);
file_bytes($sparse, 6 * $mb, 0, 'precious data at 6 MB');
my $sparse_sha = $sha->($sparse);
for my $args ([], ['--size=2'], ['--size=16'])
{
	($rc, $out) = ctl('init', '-D', $pgdata, @$args, $sparse);
	is($rc, EXIT_ERROR, "init @$args a file with data after a zero first page: refused");
	like($out, qr/reading all of "\Q$sparse\E" \(${\ (8 * $mb)} bytes\) to prove it empty/,
		"init @$args a file with a zero first page: reads all of it");
	like($out, qr/detail: Its byte at offset ${\ (6 * $mb)} is not zero \(its first 4096 bytes are, which proves nothing\)/,
		"init @$args a file with data after a zero first page: says where the data is");
	is($sha->($sparse), $sparse_sha, "init @$args a file with data after a zero first page: unchanged");
}

# --force: other data (a devdax device that held a file system), or a ring
# and the WAL it holds, after saying what it overwrites
($rc, $out) = ctl('init', '-D', $pgdata, '--force', '--size=2', $foreign);
is($rc, 0, 'init --force a file that is not a ring: exit 0') or diag($out);
like($out, qr/^overwriting "\Q$foreign\E", which holds data that was not a pmwal ring \(its first byte that is not zero is at offset 0: 73 6f 6d 65 /m,
	'init --force a file that is not a ring: says what it overwrites');
like($out, qr/initialised ring "\Q$foreign\E" \(overwritten with --force\): capacity 2 MB/,
	'init --force a file that is not a ring: initialised with the size given');
is(ring_state($foreign), RING_STATE_EMPTY, 'init --force a file that is not a ring: the ring is empty');
($rc, $out) = ctl('init', '-D', $pgdata, '--force', $sparse);
is($rc, 0, 'init --force a file with data after a zero first page: exit 0') or diag($out);
like($out, qr/^overwriting "\Q$sparse\E", which holds data that was not a pmwal ring \(its first byte that is not zero is at offset ${\ (6 * $mb)}: 70 72 65 63 /m,
	'init --force a file with data after a zero first page: says where the data was');
my $new_id = unpack('H*', ring_field($new, 'ring_id'));
($rc, $out) = ctl('init', '-D', $pgdata, '--force', $new);
is($rc, 0, 'init --force a ring: exit 0') or diag($out);
like($out, qr/^overwriting "\Q$new\E", which holds empty pmwal ring $new_id of system identifier $sysid/m,
	'init --force a ring: says which ring it overwrites');
is(ring_state($new), RING_STATE_EMPTY, 'init --force a ring: the ring is empty');
isnt(unpack('H*', ring_field($new, 'ring_id')), $new_id, 'init --force a ring: a new ring id');
ring_write_u64($new, 'timeline', 1);
ring_write_u64($new, 'tail', 8192 * 1000);
ring_write_u64($new, 'head', 8192 * 1001);
ring_write_u64($new, 'state', RING_STATE_IN_USE);
($rc, $out) = ctl('init', '-D', $pgdata, $new);
is($rc, EXIT_ERROR, 'init a ring in use: refused');
($rc, $out) = ctl('init', '-D', $pgdata, '--force', $new);
like($out, qr/which holds pmwal ring [0-9a-f]{32} of system identifier $sysid, with WAL \Q@{[ fmt_lsn(8192 * 1000) ]} to @{[ fmt_lsn(8192 * 1001) ]}\E \(8192 bytes\) of timeline 1 that is discarded/,
	'init --force a ring holding WAL: says what WAL it discards');
is(ring_state($new), RING_STATE_EMPTY, 'init --force a ring holding WAL: the ring is empty');

my $target = zero_file($node->basedir . '/target.ring', 4096 + 2 * $mb);
my $target_sha = $sha->($target);
symlink($target, $node->basedir . '/link.ring') or die "symlink: $!";
($rc, $out) = ctl('init', '-D', $pgdata, $node->basedir . '/link.ring');
is($rc, EXIT_ERROR, 'init a symbolic link: refused');
like($out, qr/"\Q${\ $node->basedir}\E\/link.ring" is a symbolic link/, 'init a symbolic link: says so');
is($sha->($target), $target_sha, "init a symbolic link: the link's target is unchanged");

my $shared = zero_file($node->basedir . '/shared.ring', 4096 + 2 * $mb, 0644);
($rc, $out) = ctl('init', '-D', $pgdata, $shared);
is($rc, EXIT_ERROR, 'init a file with group or other access: refused');
like($out, qr/"\Q$shared\E" has group or other access \(permissions 0644\)/, 'init a 0644 file: says so');
is($sha->($shared), $sha->($target), 'init a 0644 file: unchanged');

SKIP:
{
	skip 'run as root: /dev/null is the user\'s own', 2 if $> == 0;
	($rc, $out) = ctl('init', '-D', $pgdata, '/dev/null');
	is($rc, EXIT_ERROR, 'init a device of another user: refused');
	like($out, qr{"/dev/null" is owned by another user}, 'init a device of another user: says so');
}

my $empty = zero_file($node->basedir . '/empty.ring', 0);
($rc, $out) = ctl('init', '-D', $pgdata, $empty);
is($rc, EXIT_ERROR, 'init an empty file without --size: refused');
like($out, qr/"\Q$empty\E" is empty; give the ring's size with --size/, 'init an empty file without --size: says so');
($rc, $out) = ctl('init', '-D', $pgdata, '--size=2', $empty);
is($rc, 0, 'init an empty file with --size: exit 0') or diag($out);
like($out, qr/\(an empty file\)/, 'init an empty file: says so');
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
