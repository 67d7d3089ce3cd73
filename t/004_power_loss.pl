# Simulated power loss: every acknowledged commit survives a power cut with
# pmwal, and the same cut proves it can fail.
#
# The cut (tools/powercut) is decided from the write and fsync calls the
# server really made in pg_wal, logged by an LD_PRELOAD library: after all
# server processes are stopped and killed, every write to pg_wal that no
# completed fsync covered is undone and every directory entry that no
# directory fsync covered is removed.  Then the server restarts and every
# id a client saw acknowledged must be there.
#
# Scenarios, under the same load (4 pgbench clients, unique ids, a kill at
# a random moment):
#	(a) pmwal: loses nothing, amcheck clean
#	(b) pmwal, ring removed before the restart: the start is refused;
#	    after pmwal_ctl unbind it must lose commits
#	(c) stock PostgreSQL, synchronous_commit = off: must lose commits
#	(d) stock PostgreSQL, synchronous_commit = on: loses nothing
# (b) and (c) show that the test can fail.  wal_writer_delay = 10s,
# pmwal.flush_interval = 60s and no checkpoints during the load make sure
# that WAL not yet fsynced exists when the power goes.
use strict;
use warnings;
use FindBin;
use Fcntl;
use IO::Handle;
use Time::HiRes ();
use lib $FindBin::RealBin;

use PmwalTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $started = Time::HiRes::time();

# --- the harness itself, on a directory of plain files -------------------
{
	my $dir = PostgreSQL::Test::Utils::tempdir('powercut_self');
	my $d = "$dir/d";
	mkdir $d or die;
	PostgreSQL::Test::Utils::append_to_file("$d/a", 'A' x 8192);
	PostgreSQL::Test::Utils::append_to_file("$d/gone", 'G');
	PostgreSQL::Test::Utils::append_to_file("$d/r1", 'R');
	{
		local $ENV{LD_PRELOAD} = PmwalTest::powercut_lib();
		local $ENV{POWERCUT_LOG} = "$dir/log";
		local $ENV{POWERCUT_DIR} = $d;
		system($^X, '-e', q{
			use strict; use Fcntl; use IO::Handle;
			my $d = shift;
			my $put = sub { sysseek($_[0], $_[1], 0); syswrite($_[0], $_[2]) == length($_[2]) or die };
			sysopen(my $a, "$d/a", O_RDWR) or die;
			$put->($a, 0, 'BBBB'); $a->sync or die;          # durable
			$put->($a, 0, 'CCCC');                           # undone to BBBB
			$put->($a, 8192, 'X' x 100);                     # undone: file shrinks back
			close $a;
			sysopen(my $c, "$d/c", O_RDWR | O_CREAT | O_EXCL) or die;
			$put->($c, 0, 'ccc'); $c->sync; close $c;
			rename("$d/r1", "$d/r2") or die;
			sysopen(my $dh, $d, O_RDONLY) or die; $dh->sync or die;   # c and r2 durable
			sysopen(my $b, "$d/b", O_RDWR | O_CREAT | O_EXCL) or die;
			$put->($b, 0, 'bbb'); $b->sync; close $b;        # entry not durable: removed
			rename("$d/r2", "$d/r3") or die;                 # not durable: undone
			unlink("$d/gone") or die;                        # never undone
		}, $d);
	}
	is($?, 0, 'harness self-check: operations ran under libpowercut');
	my $out = `$^X $FindBin::RealBin/../tools/powercut/powercut_cut $dir/log $d`;
	like($out, qr/^powercut: 2 writes undone \(104 bytes\), 1 files removed, 1 renames undone; 3 writes durable/m,
		'harness self-check: summary');
	is(slurp_file("$d/a"), 'BBBB' . 'A' x 8188, 'harness self-check: unsynced writes undone to the synced content');
	ok(-f "$d/c" && !-e "$d/b", 'harness self-check: created file kept only after a directory fsync');
	ok(-f "$d/r2" && !-e "$d/r3", 'harness self-check: rename after the last directory fsync undone');
	ok(!-e "$d/gone", 'harness self-check: unlink not undone');
}

# --- the harness: a killed write never comes back over later synced bytes --
# A process dies right after its write, before the result is logged (as a
# backend killed by a crash-restart can); the same bytes are then written
# and synced by another process (the restore and the end-of-recovery
# checkpoint).  The cut undoes the killed write only where nothing durable
# came later.
{
	my $dir = PostgreSQL::Test::Utils::tempdir('powercut_killed_write');
	my $d = "$dir/d";
	mkdir $d or die;
	PostgreSQL::Test::Utils::append_to_file("$d/k", 'K' x 100);
	local $ENV{LD_PRELOAD} = PmwalTest::powercut_lib();
	local $ENV{POWERCUT_LOG} = "$dir/log";
	local $ENV{POWERCUT_DIR} = $d;
	my $put = q{
		use strict; use Fcntl;
		my ($f, $at, $bytes, $sync) = @ARGV;
		sysopen(my $fh, $f, O_RDWR) or die;
		sysseek($fh, $at, 0); syswrite($fh, $bytes) == length($bytes) or die;
		$fh->sync or die if $sync;
	};
	{
		local $ENV{POWERCUT_EXIT_AFTER_WRITE} = 1;
		system($^X, '-e', $put, "$d/k", 0, 'AAAAAAAA', 0);
	}
	system($^X, '-e', "use IO::Handle; $put", "$d/k", 0, 'BBBB', 1);
	is($?, 0, 'harness self-check: the later write was synced');
	my $out = `$^X $FindBin::RealBin/../tools/powercut/powercut_cut $dir/log $d`;
	like($out, qr/^powercut: 1 writes undone \(8 bytes\), 0 files removed, 0 renames undone; 1 writes durable.*, 1 undone only around later synced bytes$/m,
		'harness self-check: the killed write is undone, the synced one kept');
	is(slurp_file("$d/k"), 'BBBB' . 'K' x 96,
		'harness self-check: undoing the killed write leaves the later synced bytes');
}

# --- the scenarios ----------------------------------------------------------
my $quiet_wal = QUIET_WAL;

# Load, cut the power at a random moment, restart.  "before_restart" runs
# between the cut and the restart.  Returns what acked_check found.
sub scenario
{
	my ($node, $tag, %opts) = @_;

	$node->{ring_cut} = $opts{ring_cut} // 'durable' if $opts{pmwal};
	powercut_start($node);
	$node->safe_psql('postgres', 'CREATE EXTENSION pmwal') if $opts{pmwal};
	$node->safe_psql('postgres',
		'CREATE TABLE t (id bigint PRIMARY KEY); CREATE EXTENSION amcheck; CHECKPOINT');
	ok(wait_accelerated($node, 't'), "$tag: commits are accelerated") if $opts{pmwal};
	my $load = acked_load_start($node, tag => $tag);
	$node->poll_query_until('postgres', 'SELECT count(*) >= 300 FROM t')
	  or die "$tag: the load does not run: ${ $load->{err} }";
	Time::HiRes::sleep(0.5 + rand(2.0));
	my $cut = powercut($node);
	acked_load_finish($load);
	$opts{before_restart}->() if $opts{before_restart};
	if ($opts{refused})
	{
		my $offset = -s $node->logfile;
		ok(!$node->start(fail_ok => 1), "$tag: the start is refused");
		like(slurp_file($node->logfile, $offset), $opts{refused},
			"$tag: the refusal says why");
		$opts{after_refusal}->();
	}
	$node->start;

	my ($n, $missing, $extra) = acked_check($node, $load);
	my %r = (acked => $n, missing => $missing, extra => $extra, cut => $cut);
	diag(sprintf('%s: %d commits acknowledged before the power cut, %d missing after restart; %s',
			$tag, $n, $missing, $cut->{summary}));
	cmp_ok($n, '>=', 300, "$tag: at least 300 commits were acknowledged");
	# (stock asynchronous commit may not have written its WAL at all: it
	# dies in the WAL buffers, and the cut has nothing to undo)
	cmp_ok($cut->{undone}, '>', 0, "$tag: the power cut undid writes not yet fsynced")
	  unless $opts{sync_commit} || ($opts{expect_loss} && !$opts{pmwal});
	acked_verdict($node, $tag, $load, $n, $missing, $extra, $opts{expect_loss});
	$node->stop;
	return \%r;
}

my %result;

# (a) pmwal: the ring carries what pg_wal lost
my $pm = pmwal_node('pmwal', size => '64MB',
	conf => $quiet_wal . "pmwal.flush_interval = 60s\n");
$result{a} = scenario($pm, 'a_pmwal', pmwal => 1);
ok($pm->log_contains(qr/pmwal restored WAL [0-9A-F\/]+ to [0-9A-F\/]+ from the ring into pg_wal/),
	'a_pmwal: the ring was restored into pg_wal before redo');
is($result{a}{cut}{ring_mode}, 'durable', 'a_pmwal: the ring was cut too: every line not drained reverted');

# (a') the same, the ring cut at random: each line stored but not flushed
# and drained reverted or kept, independently (seeded, noted)
my $pmr = pmwal_node('pmwal_random', size => '64MB',
	conf => $quiet_wal . "pmwal.flush_interval = 60s\n");
$result{ar} = scenario($pmr, 'a_pmwal_random_ring', pmwal => 1, ring_cut => 'random');

# (b) pmwal, but the ring is gone at the restart: the start is refused
# (issue 21: the data directory is bound to the ring, which may hold its
# acknowledged WAL); once the binding is given up (pmwal_ctl unbind, what
# the refusal's hint offers), the start goes on -- and commits are lost
my $pmb = pmwal_node('noring', size => '64MB',
	conf => $quiet_wal . "pmwal.flush_interval = 60s\n");
$result{b} = scenario($pmb, 'b_ring_removed', pmwal => 1, expect_loss => 1,
	before_restart => sub { unlink $pmb->{pmwal_ring} or die "unlink ring: $!" },
	refused => qr/FATAL:  pmwal ring "\Q$pmb->{pmwal_ring}\E" is missing, and it may hold this cluster's acknowledged WAL/,
	after_refusal => sub {
		my ($out, $err) = run_command([ 'pmwal_ctl', 'unbind', '-D', $pmb->data_dir ]);
		note("pmwal_ctl unbind: $out$err");
	});

# (c) and (d): stock PostgreSQL
for my $case ([ 'c_stock_async', 'off', 1 ], [ 'd_stock_sync', 'on', 0 ])
{
	my ($tag, $sc, $loss) = @$case;
	my $node = PostgreSQL::Test::Cluster->new($tag);
	$node->init;
	$node->append_conf('postgresql.conf',
		$quiet_wal . "fsync = on\nsynchronous_commit = $sc\n");
	$result{ substr($tag, 0, 1) } =
	  scenario($node, $tag, expect_loss => $loss, sync_commit => $sc eq 'on');
}

diag(sprintf(
		'acknowledged commits checked: (a) pmwal %d, lost %d; (b) ring removed %d, lost %d; '
		  . '(c) stock async %d, lost %d; (d) stock sync %d, lost %d; %.0f s',
		map({ ($result{$_}{acked}, $result{$_}{missing}) } qw(a b c d)),
		Time::HiRes::time() - $started));

done_testing();
