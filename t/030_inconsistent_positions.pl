# A ring whose positions are inconsistent still holds the cluster's newest
# acknowledged commits, and pmwal_ctl gets them back.
#
# A short WAL write can leave a head that is not on a page boundary; a start
# then refuses the ring ("has inconsistent positions").  After a power cut
# the commits acknowledged since pg_wal's last real sync are only in that
# ring.  pmwal_ctl used to take the unusable ring for an empty one: unbind
# without --force removed the binding, so the next start ran from pg_wal
# alone and lost them, and dump refused the ring, so they could not be
# gotten out.  Here, after a power cut under load (pg_wal and the ring both
# cut, tools/powercut) and a mid-page head:
#
#	- the start is refused, and unbind without --force refuses too, the
#	  binding file left byte for byte;
#	- dump writes the ring's pages out (exit 0), saying on stderr that the
#	  positions were inconsistent;
#	- the pages go into pg_wal at their own offsets as docs/failures.md
#	  says (dd), unbind --force, the ring moved aside: the start recovers
#	  every acknowledged commit, amcheck clean;
#	- the negative control -- the same data directory started without the
#	  ring -- lacks commits: the cut did take WAL only the ring held.
use strict;
use warnings;
use FindBin;
use Digest::SHA;
use File::Copy ();
use Time::HiRes ();
use lib $FindBin::RealBin;

use PmwalTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $started = Time::HiRes::time();
my $segsize = 16 * 1024 * 1024;

# Run pmwal_ctl: (exit code, stdout, stderr).
sub ctl
{
	my ($stdout, $stderr) = run_command([ 'pmwal_ctl', @_ ]);
	return ($? >> 8, $stdout, $stderr);
}

sub fmt_lsn { return lsn_format($_[0]); }
sub sha { return Digest::SHA->new(256)->addfile($_[0])->hexdigest; }

my $node = pmwal_node('positions', size => '64MB',
	conf => QUIET_WAL . "pmwal.flush_interval = 60s\n");
$node->{ring_cut} = 'durable';
my $ring = $node->{pmwal_ring};
my $pgdata = $node->data_dir;
my $binding = "$pgdata/pg_wal/pmwal.binding";

# --- load, then a power cut --------------------------------------------------
powercut_start($node);
$node->safe_psql('postgres',
	'CREATE EXTENSION pmwal; CREATE TABLE t (id bigint PRIMARY KEY); CREATE EXTENSION amcheck; CHECKPOINT');
ok(wait_accelerated($node, 't'), 'commits are accelerated');
my $load = acked_load_start($node, tag => 'positions');
$node->poll_query_until('postgres', 'SELECT count(*) >= 300 FROM t')
  or die "the load does not run: ${ $load->{err} }";
Time::HiRes::sleep(0.5 + rand(1.0));
my $cut = powercut($node);
my $acked = acked_load_finish($load);
cmp_ok($acked, '>=', 300, "$acked commits were acknowledged before the power cut");
cmp_ok($cut->{undone}, '>', 0, 'the power cut undid writes to pg_wal that no sync covered');

my ($tail, $head) = map { ring_read_u64($ring, $_) } qw(tail head);
ok(ring_state($ring) == RING_STATE_IN_USE && $head > $tail, 'the ring holds WAL: ' . fmt_lsn($tail) . ' to ' . fmt_lsn($head));

# --- a head inside a page: the ring is refused ---------------------------------
my $mid_head = $head - 8192 + 1000;
ring_write_u64($ring, 'head', $mid_head);
my $ring_sha = sha($ring);
my $binding_sha = sha($binding);
my $offset = -s $node->logfile;
ok(!$node->start(fail_ok => 1), 'a mid-page head: the start is refused');
like(slurp_file($node->logfile, $offset), qr/FATAL:  pmwal ring "\Q$ring\E" has inconsistent positions/,
	'a mid-page head: the server refuses the ring for its positions');
is(sha($ring), $ring_sha, 'the refused start left the ring as it was');

# pmwal.path pointed elsewhere: the bound ring is not "gone", it cannot be
# read, and the hint says how to get its WAL out
$node->append_conf('postgresql.conf', "pmwal.path = '$ring.elsewhere'\n");
$offset = -s $node->logfile;
ok(!$node->start(fail_ok => 1), 'pmwal.path changed: the start is refused');
my $log = slurp_file($node->logfile, $offset);
like($log, qr/FATAL:  pmwal cannot start: the ring that may hold this cluster's acknowledged WAL cannot be read/,
	'pmwal.path changed: the bound ring cannot be read (not "gone")');
like($log, qr/HINT:  .*pmwal_ctl dump/, 'pmwal.path changed: the hint names pmwal_ctl dump');
unlike($log, qr/acknowledged WAL is gone/, 'pmwal.path changed: the bound ring is not called gone');
ok(!-e "$ring.elsewhere", 'pmwal.path changed: no ring was created elsewhere');
is(sha($ring), $ring_sha, 'pmwal.path changed: the bound ring is as it was');
$node->append_conf('postgresql.conf', "pmwal.path = '$ring'\n");

# the negative control: pg_wal alone lacks acknowledged commits
my $noring = without_ring_query($node, 'SELECT count(*) FROM t');
ok(defined $noring && $noring < $acked,
	'without the ring the data directory lacks acknowledged commits (' . ($noring // 'no start') . " rows of $acked)");

# --- pmwal_ctl: unbind refuses, inspect says why, dump gets the WAL out -------
my ($rc, $stdout, $stderr) = ctl('unbind', '-D', $pgdata);
is($rc, 1, 'unbind without --force: refused');
like($stderr, qr/refusing to unbind .*: its ring "\Q$ring\E" cannot be read, so it may hold acknowledged WAL/,
	'unbind without --force: says the ring may hold acknowledged WAL');
is(-f $binding ? sha($binding) : 'gone', $binding_sha,
	'unbind without --force: the binding file is there, byte for byte');

($rc, $stdout, $stderr) = ctl('inspect', '-D', $pgdata, $ring);
is($rc, 2, 'inspect: exit 2 (a start refuses the ring)');
like($stdout, qr/positions:\s+INCONSISTENT: the head \Q${\ fmt_lsn($mid_head)}\E is not on a page boundary/,
	'inspect: names the check that failed');
like($stdout, qr/WAL pages:\s+\d+ pages from \Q${\ fmt_lsn($tail)}\E to [0-9A-F\/]+ read as this ring's WAL/,
	'inspect: the data area holds WAL pages from the tail on');
like($stdout, qr/binding matches:\s+yes: the same ring/, 'inspect -D: it is the bound ring');

my $dump = $node->basedir . '/ringwal';
($rc, $stdout, $stderr) = ctl('dump', "--to=$dump", $ring);
is($rc, 0, 'dump: exit 0') or diag("$stdout$stderr");
like($stderr, qr/warning: the ring's positions are inconsistent: the head \Q${\ fmt_lsn($mid_head)}\E is not on a page boundary/,
	'dump: says on stderr that the positions are inconsistent');
my ($from, $to, $tli) = $stdout =~ m{wrote WAL ([0-9A-F/]+) to ([0-9A-F/]+) of timeline (\d+) into};
ok(defined $to && lsn_num($from) == $tail && lsn_num($to) >= $head,
	'dump: wrote the pages from the tail through the page of the head (' . ($from // '?') . ' to ' . ($to // '?') . ')');
is(sha($ring), $ring_sha, 'dump: the ring is unchanged');

# --- the pages into pg_wal, as docs/failures.md says ---------------------------
# For each segment file S of the dump: pages F to T of it are the ring's
# (the dump holds zeros before the ring's first page); they go into
# pg_wal/S at the same offsets.  A segment pg_wal lacks is copied whole (the
# dump then holds it from its first page: everything before the ring's
# tail is durable in pg_wal, directory entries included).
($from, $to) = (lsn_num($from // '0/0'), lsn_num($to // '0/0'));
my $pages_in = 0;
for my $file (sort glob("$dump/*"))
{
	my $name = (split m{/}, $file)[-1];
	my $segstart = hex(substr($name, 8, 8)) * 2**32 + hex(substr($name, 16, 8)) * $segsize;
	my $f = (($from > $segstart ? $from : $segstart) - $segstart) / 8192;
	my $t = (($to < $segstart + $segsize ? $to : $segstart + $segsize) - $segstart) / 8192;
	if (-e "$pgdata/pg_wal/$name")
	{
		my @dd = ('dd', "if=$file", "of=$pgdata/pg_wal/$name", 'bs=8192', "skip=$f", "seek=$f",
			'count=' . ($t - $f), 'conv=notrunc', 'status=none');
		note("@dd");
		is(system(@dd), 0, "dd the ring's pages $f to $t of $name into pg_wal");
	}
	else
	{
		is($f, 0, "pg_wal lacks $name: the dump holds it from its first page");
		note("cp $file $pgdata/pg_wal/$name");
		File::Copy::copy($file, "$pgdata/pg_wal/$name") or die "copy $file: $!";
		chmod(0600, "$pgdata/pg_wal/$name") or die "chmod: $!";
	}
	$pages_in += $t - $f;
}
is($pages_in, ($to - $from) / 8192, "every page the dump wrote went into pg_wal ($pages_in)");

# --- give the ring up, start: every acknowledged commit is there ---------------
($rc, $stdout, $stderr) = ctl('unbind', '-D', $pgdata, '--force');
is($rc, 0, 'unbind --force: exit 0') or diag("$stdout$stderr");
like($stderr, qr/warning: unbinding with --force/, 'unbind --force: warns what is lost');
rename($ring, "$ring.inconsistent") or die "rename $ring: $!";
$node->start;
my ($n, $missing, $extra) = acked_check($node, $load);
is($missing, 0, "every acknowledged commit is back ($n)");
cmp_ok($extra, '<=', $load->{clients}, "at most one unacknowledged commit per client is present ($extra)");
is($node->safe_psql('postgres', q{SELECT bt_index_check('t_pkey', heapallindexed => true)}),
	'', 'amcheck finds the primary key and the table consistent');
$node->stop;
unlink "$ring.inconsistent";

note(sprintf('runtime %.1f s', Time::HiRes::time() - $started));
done_testing();
