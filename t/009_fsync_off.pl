# pmwal's own durability points sync for real, whatever fsync says
# (issue 9, item 2).  pg_fsync() and friends do nothing under fsync = off;
# a restore or flusher that "syncs" with them and then empties the ring or
# moves its tail loses the ring's WAL.
#
#	(a) a power cut with acknowledged commits only in the ring; then one
#	    start in single-user mode with -F, as pg_rewind's clean shutdown
#	    does; then a second power cut: nothing acknowledged may be lost and
#	    the server must start.
#	(b) commits acknowledged under fsync = on, then a reload to fsync = off
#	    while the load goes on, then a power cut: nothing acknowledged (before
#	    or after the reload) may be lost.  The flusher warns at the reload.
#
# Each scenario has a negative control: the same data directory after the
# first power cut, started without its ring, lacks acknowledged commits.
use strict;
use warnings;
use FindBin;
use IPC::Run ();
use Time::HiRes ();
use lib $FindBin::RealBin;

use PmwalTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

sub missing_without_ring
{
	my ($node, $load) = @_;
	my $n = without_ring_query($node, 'SELECT count(*) FROM t');
	return defined $n ? $load->{total} - $n : $load->{total};
}

# --- (a) single-user start with -F between two power cuts ------------------
{
	my ($node, $load) = loaded_node('single_user', conf => "pmwal.flush_interval = 60s\n");
	Time::HiRes::sleep(0.5);
	my $cut = powercut($node);
	acked_load_finish($load);
	note("single_user: first cut: $cut->{summary}");
	cmp_ok($cut->{undone}, '>', 0, 'single_user: the first power cut undid WAL writes');
	my $lost = missing_without_ring($node, $load);
	cmp_ok($lost, '>', 0,
		"single_user: negative control: without the ring $lost of $load->{total} acknowledged commits are missing");

	# pg_rewind's ensureCleanShutdown: postgres --single -F, no input
	my $log = $node->basedir . '/powercut.log';
	unlink $log;
	my ($out, $err) = ('', '');
	{
		local $ENV{LD_PRELOAD} = PmwalTest::powercut_lib();
		local $ENV{POWERCUT_LOG} = $log;
		local $ENV{POWERCUT_DIR} = $node->data_dir . '/pg_wal';
		IPC::Run::run([ 'postgres', '--single', '-F', '-c', 'exit_on_error=true',
				'-D', $node->data_dir, 'template1' ], '<', \'', '>', \$out, '2>', \$err);
	}
	is($?, 0, 'single_user: the single-user run with -F ended cleanly');
	like($err, qr/pmwal restored WAL/, 'single_user: it restored the ring');
	$node->{powercut_log} = $log;
	$cut = powercut_cut($node);
	note("single_user: second cut: $cut->{summary}");

	ok($node->start(fail_ok => 1), 'single_user: the server starts after the second power cut')
	  or diag(slurp_file($node->logfile));
	if ($node->{_pid})
	{
		my ($n, $missing) = acked_check($node, $load);
		is($missing, 0, "single_user: all $n acknowledged commits are present");
		$node->stop;
	}
}

# --- (b) reload to fsync = off under load, then a power cut ----------------
{
	my ($node, $load) = loaded_node('reload', conf => "pmwal.flush_interval = 100ms\n");
	my $before = $node->safe_psql('postgres', 'SELECT count(*) FROM t');
	my $offset = -s $node->logfile;
	$node->safe_psql('postgres', 'ALTER SYSTEM SET fsync = off; SELECT pg_reload_conf()');
	my $warned;
	for (1 .. 100)
	{
		last if $warned = slurp_file($node->logfile, $offset) =~
		  /WARNING:  fsync is off, so PostgreSQL's own flushes and checkpoints are no longer durable/;
		Time::HiRes::sleep(0.1);
	}
	ok($warned, 'reload: the flusher warns when fsync is turned off');
	# let the flusher sync (and move the tail) several times under fsync = off
	my $syncs = pmwal_status($node)->{syncs};
	$node->poll_query_until('postgres', "SELECT syncs >= $syncs + 10 FROM pmwal_status")
	  or die 'reload: the flusher does not sync';
	my $cut = powercut($node);
	acked_load_finish($load);
	note("reload: $cut->{summary}");
	cmp_ok($cut->{undone}, '>', 0, 'reload: the power cut undid WAL writes');
	my $lost = missing_without_ring($node, $load);
	cmp_ok($lost, '>', 0,
		"reload: negative control: without the ring $lost of $load->{total} acknowledged commits are missing");
	$node->append_conf('postgresql.auto.conf', "fsync = on\n");
	$node->start;
	my ($n, $missing) = acked_check($node, $load);
	cmp_ok($n, '>', $before, "reload: commits were acknowledged after the reload too ($n in all, $before before)");
	is($missing, 0, "reload: all $n acknowledged commits are present");
	$node->stop;
}

done_testing();
