# The end of a promotion (found by the last adversarial review).
#
# StartupXLOG (15 to 18) ends with
#
#	LWLockAcquire(ControlFileLock, LW_EXCLUSIVE);
#	ControlFile->state = DB_IN_PRODUCTION;
#	XLogCtl->SharedRecoveryState = RECOVERY_STATE_DONE;	<- backends may write WAL
#	UpdateControlFile();									<- pg_control says so
#
# From the moment SharedRecoveryState is DONE, RecoveryInProgress() is false
# everywhere: a backend of the promoted standby commits, pmwal anchors its
# ring at that commit's WAL write and answers its WAL sync from the ring
# (wal_ring.c).  The commit is acknowledged while pg_control on disk still
# says "in archive recovery".  A power cut there leaves a ring holding
# acknowledged WAL and a pg_control in recovery; binding.c refused exactly
# that ("holds WAL, but the cluster was in recovery; nothing was restored"):
# the legitimate start was refused, and the only way on that the hint gave
# (pmwal_ctl reset --discard-wal) threw the acknowledged commit away.  Now
# a ring is restored into a cluster in crash or archive recovery as into
# one in production, after the same binding checks and proof of history.
# Stock PostgreSQL starts from that state (crash recovery, following
# minRecoveryPointTLI onto the new timeline) and keeps the commit.
#
# The startup process is held by gdb at the entry of update_controlfile()
# when the ControlFileData it writes says DB_IN_PRODUCTION (6, at offset
# 16): that is, exactly inside the window, holding ControlFileLock.
#
#	window_commit: a commit acknowledged in the window, then the power cut:
#	   the start must restore the ring and the commit must be there.
#	no_commit (control): the same hold and cut without a commit: the ring
#	   holds nothing, the start goes on.
#	stock (control): the same on a node without pmwal (pmwal.path = ''):
#	   the commit is fsynced by PostgreSQL and survives.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PmwalTest;
use PmwalTest::Hold;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes ();

my $primary = pmwal_node('primary', size => '16MB', init => { allows_streaming => 1 });
$primary->start;
$primary->safe_psql('postgres', 'CREATE EXTENSION pmwal; CREATE TABLE t (id bigint PRIMARY KEY)');
$primary->backup('b');
$primary->safe_psql('postgres', 'INSERT INTO t VALUES (1)');

my $DB_IN_PRODUCTION = 6;

# Promote the standby with its startup process held by gdb at
# update_controlfile() writing DB_IN_PRODUCTION (leave_stopped): recovery
# has ended for backends, pg_control on disk still says in recovery.
sub promote_held
{
	my ($standby, $case) = @_;
	my $startup = $standby->safe_psql('postgres',
		q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'startup'});
	my $gdb = gdb_break($startup,
		"*update_controlfile if *(int *)(\$rsi + 16) == $DB_IN_PRODUCTION",
		leave_stopped => 1);
	# pg_ctl promote would wait for pg_control to say "in production"
	$standby->safe_psql('postgres', 'SELECT pg_promote(false)');
	ok(gdb_wait_hit($gdb, 120), "$case: the startup process is held writing DB_IN_PRODUCTION");
	$gdb->{h}->finish;
	$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
	  or die "$case: recovery does not end";
	return;
}

sub scenario
{
	my ($case, %o) = @_;
	my $standby = pmwal_standby($primary, $case, 'b', size => '64MB',
		conf => QUIET_WAL . ($o{stock} ? "pmwal.path = ''\n" : ''));
	powercut_start($standby);
	$primary->wait_for_catchup($standby);

	promote_held($standby, $case);
	like(`pg_controldata -D ${\ $standby->data_dir }`, qr/Database cluster state:\s+in archive recovery/,
		"$case: pg_control on disk still says in archive recovery");

	my @acked;
	if ($o{commit})
	{
		for my $id (100 .. 104)
		{
			$standby->safe_psql('postgres', "INSERT INTO t VALUES ($id)");
			push @acked, $id;
		}
		note("$case: acknowledged " . scalar(@acked) . ' commits after the promotion');
		unless ($o{stock})
		{
			my $st = pmwal_status($standby);
			note("$case: ring [$st->{tail_lsn}, $st->{head_lsn}) $st->{state}, sync_rounds $st->{sync_rounds}");
			ok(lsn_num($st->{head_lsn}) > lsn_num($st->{tail_lsn}),
				"$case: the ring holds the acknowledged WAL");
		}
	}
	my $cut = powercut($standby);
	note("$case: $cut->{summary}");

	if ($o{commit} && !$o{stock})
	{
		my $without = without_ring_query($standby,
			'SELECT count(*) FROM t WHERE id BETWEEN 100 AND 104') // 'no start';
		isnt($without, '5',
			"$case: negative control: without the ring the acknowledged commits are lost ($without of 5)");
	}

	forget_pauses($standby);
	my $offset = -s $standby->logfile;
	my $started = $standby->start(fail_ok => 1);
	ok($started, "$case: the promoted standby starts after the power cut")
	  or diag(join '', grep { /FATAL|DETAIL|PANIC/ } split /^/, slurp_file($standby->logfile, $offset));
	return unless $started;
	$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
	  or die "$case: recovery does not end";
	is($standby->safe_psql('postgres', 'SELECT count(*) FROM t WHERE id BETWEEN 100 AND 104'),
		scalar(@acked), "$case: all " . scalar(@acked) . ' acknowledged commits are there');
	like(slurp_file($standby->logfile, $offset), qr/pmwal restored WAL/, "$case: the ring was restored")
	  if $o{commit} && !$o{stock};
	$standby->safe_psql('postgres', 'INSERT INTO t VALUES (200)');
	$standby->stop;
	return;
}

# restart_after_crash = on, no power cut: a backend dies after a commit in
# the window; the postmaster's crash-restart restores the ring before redo
# (pmwal_shmem_startup_hook) -- and refused, taking the server down.
sub crash_restart
{
	my $case = 'crash_restart';
	my $standby = pmwal_standby($primary, $case, 'b', size => '64MB',
		conf => QUIET_WAL . "restart_after_crash = on\n");
	$standby->start;
	$primary->wait_for_catchup($standby);
	promote_held($standby, $case);
	$standby->safe_psql('postgres', "INSERT INTO t VALUES ($_)") for 100 .. 104;
	my $s = psql_session($standby);
	my $victim = session_pid($s);
	my $offset = -s $standby->logfile;
	kill 'KILL', $victim;
	session_end($s);
	my $pm = $standby->{_pid};
	my $back;
	for (1 .. 600)
	{
		last unless kill 0, $pm;
		my ($rc, $out) = (1, undef);
		eval {
			($rc, $out) = $standby->psql('postgres',
				'SELECT count(*) FROM t WHERE id BETWEEN 100 AND 104');
		};
		if (!$@ && $rc == 0) { $back = $out; last; }
		Time::HiRes::usleep(100_000);
	}
	my $log = slurp_file($standby->logfile, $offset);
	ok(defined $back, "$case: the server is back after the crash-restart")
	  or diag(join "", grep { /FATAL|DETAIL|PANIC/ && !/recovery mode/ } split /^/, $log);
	is($back // 'server gone', '5', "$case: the 5 acknowledged commits are there");
	if (kill 0, $pm) { $standby->stop('immediate'); }
	else { $standby->{_pid} = undef; }
	return;
}

scenario('stock', commit => 1, stock => 1);
scenario('no_commit');
scenario('window_commit', commit => 1);
crash_restart();

done_testing();
