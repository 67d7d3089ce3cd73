# pmwal's own syncs are real, whatever fsync says (issue 9, item 2).
# pg_fsync() and friends do nothing under fsync = off; a restore, flusher
# or pg_control sync that "syncs" with them and then empties the ring or
# moves its tail loses the ring's WAL.  With the sync layer there is a
# second side to it: under fsync = off PostgreSQL never calls fdatasync on
# WAL (issue_xlog_fsync returns at once), so no sync is there for pmwal to
# answer; pmwal then publishes the ring's head at each WAL write instead
# (wal_ring.c), before XLogWrite returns and the flush pointer moves.
#
#	(a) a power cut with acknowledged commits only in the ring; then one
#	    start in single-user mode with -F, as pg_rewind's clean shutdown
#	    does (the restore's syncs and the shutdown checkpoint's sync of
#	    pg_wal are pmwal's); then a second power cut: nothing acknowledged
#	    may be lost and the server must start.
#	(b) commits acknowledged under fsync = on, then a reload to fsync = off
#	    while the load goes on: the flusher warns; PostgreSQL stops asking
#	    for syncs (the ring answers none: ring_syncs stands still) while
#	    the ring's head keeps following the commits; the flusher's passes
#	    go on with real syncs (sync_rounds); then a power cut: nothing
#	    acknowledged (before or after the reload) may be lost.
#	(c) under fsync = off, commits, a CHECKPOINT (pmwal syncs pg_wal for
#	    real before pg_control is written and frees the ring), more
#	    commits, a power cut: the server finds its checkpoint record and
#	    nothing acknowledged is lost.
#
# Each scenario has a negative control: the same data directory after the
# (first) power cut, started without its ring, lacks acknowledged commits.
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

my $started = Time::HiRes::time();

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
	like($err, qr/pmwal synced pg_wal at the shutdown checkpoint; the ring is empty/,
		'single_user: its shutdown checkpoint synced pg_wal through pmwal');
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
	$node->wait_for_log(
		qr/WARNING:  fsync is off, so PostgreSQL's own flushes and checkpoints are no longer durable/,
		$offset);
	ok(1, 'reload: the flusher warns when fsync is turned off');
	# every process reads the setting at its next command or loop: then no
	# WAL sync is asked for any more, while WAL writes go on
	my ($syncs, $writes, $head);
	my $quiet = 0;
	for (1 .. 300)
	{
		my $st = pmwal_status($node);
		if (defined $syncs && $st->{ring_syncs} == $syncs && $st->{ring_writes} >= $writes + 500)
		{
			$quiet = 1;
			cmp_ok(lsn_num($st->{head_lsn}), '>', $head,
				"reload: the ring's head follows the commits without any sync ($st->{head_lsn})");
			last;
		}
		($syncs, $writes, $head) = ($st->{ring_syncs}, $st->{ring_writes}, lsn_num($st->{head_lsn}));
		Time::HiRes::sleep(0.2);
	}
	ok($quiet, "reload: under fsync = off no WAL sync reaches the ring ($syncs answered before)");
	# the flusher's passes go on, with real syncs
	my $rounds = pmwal_status($node)->{sync_rounds};
	$node->poll_query_until('postgres', "SELECT sync_rounds >= $rounds + 10 FROM pmwal_status")
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

# --- (c) a checkpoint under fsync = off --------------------------------------
{
	my $tag = 'checkpoint';
	my $node = quiet_node($tag);
	my $offset = -s $node->logfile;
	$node->safe_psql('postgres', 'ALTER SYSTEM SET fsync = off; SELECT pg_reload_conf()');
	$node->wait_for_log(qr/WARNING:  fsync is off/, $offset);
	my $load = short_load($node, $tag);
	my $ckpt_syncs = pmwal_status($node)->{control_syncs};
	$node->safe_psql('postgres', 'CHECKPOINT');
	cmp_ok(pmwal_status($node)->{control_syncs}, '>', $ckpt_syncs,
		"$tag: pmwal synced pg_wal before the checkpoint's pg_control write");
	my $load2 = short_load($node, "${tag}_2", base => 500_000_000, duration => 1);
	my $cut = powercut($node);
	note("$tag: $cut->{summary}");
	my $n = without_ring_query($node, 'SELECT count(*) FROM t WHERE id % 1000000000 > 500000000');
	my $lost = $load2->{total} - ($n // 0);
	cmp_ok($lost, '>', 0,
		"$tag: negative control: without the ring $lost of the $load2->{total} commits acknowledged after the checkpoint are missing");
	$node->append_conf('postgresql.auto.conf', "fsync = on\n");
	ok($node->start(fail_ok => 1), "$tag: the server starts after the power cut")
	  or diag(join("\n", grep { /FATAL|PANIC/ } split /\n/, slurp_file($node->logfile, $offset)));
	if ($node->{_pid})
	{
		for my $l ($load, $load2)
		{
			my ($acked, $missing) = acked_check($node, $l);
			is($missing, 0, "$tag: all $acked acknowledged commits are present");
		}
		$node->stop;
	}
}

note(sprintf('%.0f s', Time::HiRes::time() - $started));
done_testing();
