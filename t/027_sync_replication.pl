# Synchronous replication with pmwal (issue 23): PostgreSQL's own order is
# kept -- the commit's local WAL flush (answered from the ring), then the
# wait for the synchronous standbys (SyncRepWaitForLSN), then visibility
# (ProcArrayEndTransaction) -- and nothing acknowledged or visible is weaker
# than in stock PostgreSQL.
#
# A pmwal primary with two real synchronous standbys,
# synchronous_standby_names = 'FIRST 2 (stock, pmsb)': "stock" loads no
# pmwal, "pmsb" runs pmwal on a ring of its own.  Every commit waits for
# both, so each check below holds for both kinds of standby.  For
# synchronous_commit = remote_write, on and remote_apply:
#
#  A. Under committing load, then a power cut of the primary (pg_wal from
#     the system calls it made, the ring from what libpmem drained): every
#     commit the primary acknowledged is on both standbys, and on the
#     primary after its restore; the standbys stream from the restarted
#     primary on the same timeline.  Negative control: the same data
#     directory started without its ring lacks acknowledged commits.  And
#     the commits' local flushes were answered from the ring (ring_syncs
#     grows, pass_syncs does not): pmwal does not stand aside.
#  B. A commit is never acknowledged before the standby confirms it: with
#     one standby held (its walreceiver stopped for remote_write and on,
#     its startup process for remote_apply) the commit's local flush went
#     through the ring, and it waits (wait event SyncRep) without an answer
#     to the client; once the standby goes on, the client hears COMMIT
#     (remote_apply: and the standby shows the row at that moment).  That
#     such a waiting commit is durable on the primary is t/027a.
#  C. While a commit waits for the standby, it is invisible to other
#     sessions on the primary, as in stock PostgreSQL: RecordTransactionCommit
#     marks clog, then waits in SyncRepWaitForLSN "at this stage we have
#     marked clog, but still show as running in the procarray and continue
#     to hold locks" (xact.c, the same in 15 and 18); CommitTransaction calls
#     ProcArrayEndTransaction only after RecordTransactionCommit returns.
#     A cancelled wait (pg_cancel_backend) gives the client the WARNING
#     "canceling wait for synchronous replication due to user request" with
#     the DETAIL "The transaction has already committed locally, ...", and
#     COMMIT; a terminated one the WARNING "canceling the wait for
#     synchronous replication and terminating connection ..." and no COMMIT;
#     both leave the row committed and visible locally.  The same
#     observations are made on a stock primary (no pmwal, a stock standby
#     held the same way) and must be the same.
#
# How it fails when the guarantees are broken (checked by hand against
# modified builds, not kept): pmwal 1.x's mechanism without its stand-aside
# (the commit forced asynchronous, so SyncRepWaitForLSN is skipped) fails
# A (acknowledged commits missing on the standbys, the restored primary
# forks) and B (the commit never waits); the direction the issue sketched
# as an alternative (the standby wait in the commit callback, after
# ProcArrayEndTransaction) fails C: the row is visible, and the xid no
# longer running, while the commit waits.
#
# The standby-ahead hazard (a primary holding WAL written but not durable
# while a standby streams) is t/027a; WAL before data (the relation map,
# the checkpoint record, data pages) is t/027b, a checkpoint's real sync
# racing commits t/027c.
use strict;
use warnings;
use FindBin;
use Time::HiRes ();
use lib $FindBin::RealBin;

use PmwalTest;
use PmwalTest::Hold;
use PmwalTest::SyncRep;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $started = Time::HiRes::time();
my @levels = qw(remote_write on remote_apply);

# --- the pmwal primary and its two synchronous standbys ---------------------
# (the ring's power cut too: what libpmem did not drain is lost); "stock"
# loads no pmwal, "pmsb" runs it on a ring of its own
my $primary = syncrep_primary();
my @standbys = sync_standbys($primary, 1);
my ($stock, $pmsb) = @standbys;
ok(wait_sync_standbys($primary, 2), 'both standbys stream as synchronous standbys');
is(pmwal_status($primary)->{accelerated}, 'true',
	'synchronous standbys: pmwal still answers the WAL syncs (no stand-aside)');
is(pmwal_status($primary)->{commit_path}, 'ring, then synchronous standby',
	'pmwal_status says commits take the ring, then the synchronous standby wait');

sub set_level
{
	my ($node, $level) = @_;
	$node->safe_psql('postgres',
		"ALTER SYSTEM SET synchronous_commit = '$level'; SELECT pg_reload_conf()");
	$node->poll_query_until('postgres', 'SHOW synchronous_commit', $level)
	  or die "synchronous_commit does not become $level";
	return;
}

# --- A. acknowledged commits survive a power cut, on every node ---------------
my $n = 0;
for my $level (@levels)
{
	$n++;
	my $base = $n * 100_000_000_000;
	set_level($primary, $level);
	# from here on only the ring holds the WAL of the commits (the WAL
	# writer's syncs are answered from it too): the negative control loses
	# some for certain
	stop_server_process($primary, 'flusher');
	my $before = pmwal_status($primary);
	my $load = acked_load_start($primary, tag => "load_$level", base => $base);
	$primary->poll_query_until('postgres',
		"SELECT count(*) >= 400 FROM t WHERE id > $base AND id < $base + 100000000000")
	  or die "$level: the load does not run: ${ $load->{err} }";
	my $during = pmwal_status($primary);
	cmp_ok($during->{ring_syncs} - $before->{ring_syncs}, '>=', 100,
		"$level: the commits' WAL syncs were answered from the ring");
	is($during->{pass_syncs} - $before->{pass_syncs}, 0,
		"$level: no WAL sync was left to the file system");

	my $cut = powercut($primary);
	note("$level: $cut->{summary}");
	my $acked = acked_load_finish($load);
	cmp_ok($acked, '>=', 400, "$level: $acked commits were acknowledged before the power cut");

	# each standby confirmed every acknowledged commit: it has (or, for
	# remote_write, will replay from its pg_wal) all of them
	for my $sb (@standbys)
	{
		$sb->poll_query_until('postgres',
			'SELECT pg_last_wal_replay_lsn() >= pg_last_wal_receive_lsn()')
		  or die "$level: " . $sb->name . ' does not replay what it received';
		is((acked_missing($sb, $load))[1], 0,
			"$level: every acknowledged commit is on standby " . $sb->name);
	}

	# negative control: without the ring the primary loses some of them
	my $lost = without_ring_query($primary, acked_missing_sql($load));
	ok(!defined $lost || $lost > 0,
		"$level: negative control: without its ring the primary lacks "
		  . ($lost // 'all (it cannot start)') . ' acknowledged commits');

	my $offset = -s $primary->logfile;
	powercut_start($primary);
	like(slurp_file($primary->logfile, $offset), qr/pmwal restored WAL/,
		"$level: the primary restored its ring");
	is((acked_missing($primary, $load))[1], 0,
		"$level: every acknowledged commit is on the primary after the power cut");
	ok(wait_sync_standbys($primary, 2),
		"$level: both standbys stream from the restarted primary again");
	is(join(',', history_files($primary)), '', "$level: the primary stays on timeline 1");
	for my $sb (@standbys)
	{
		is($sb->safe_psql('postgres', 'SELECT received_tli FROM pg_stat_wal_receiver'), '1',
			"$level: " . $sb->name . ' receives timeline 1');
	}
}
ok(!$_->log_contains(qr/forked off|not in this server's history|PANIC/),
	$_->name . ': no timeline fork or PANIC in the log')
  for @standbys;
wait_accelerated($primary, 't');

# --- B. never acknowledged before the standby confirms -------------------------
#
# observe(): while session $s's commit of $id waits, what the client and
# the other sessions of $node see: acked (the client heard COMMIT), visible
# (another session's count of the row), status (pg_xact_status: 'in
# progress' while the procarray still shows the xid, although clog already
# says committed), running (a new snapshot does not see the xid as
# completed), locked (its xid lock is still held), still_waiting (its
# wait event a second later).
sub observe
{
	my ($node, $s, $id, $level) = @_;
	send_and_wait($s, "SET synchronous_commit = '$level';\n", qr/^SET$/m);
	send_and_wait($s, "INSERT INTO t VALUES ($id);\n");
	wait_syncrep_wait($node, $s->{pid});
	my $xid = $node->safe_psql('postgres',
		"SELECT backend_xid FROM pg_stat_activity WHERE pid = $s->{pid}");
	my %r;
	$r{visible} = $node->safe_psql('postgres', "SELECT count(*) FROM t WHERE id = $id");
	$r{status} = $node->safe_psql('postgres', "SELECT pg_xact_status('$xid'::xid8)");
	$r{running} = $node->safe_psql('postgres',
		"SELECT NOT pg_visible_in_snapshot('$xid'::xid8, pg_current_snapshot())");
	$r{locked} = $node->safe_psql('postgres',
		"SELECT count(*) FROM pg_locks WHERE pid = $s->{pid} AND locktype = 'transactionid' AND transactionid = '$xid' AND granted");
	# a moment later: still waiting, still no answer
	Time::HiRes::sleep(1);
	$r{still_waiting} = $node->safe_psql('postgres',
		"SELECT wait_event FROM pg_stat_activity WHERE pid = $s->{pid}");
	$r{acked} = session_output($s) =~ /INSERT 0 1/ ? 1 : 0;
	return (\%r, $xid);
}

my %waiting = (visible => 0, status => 'in progress', running => 't', locked => 1,
	still_waiting => 'SyncRep', acked => 0);

# which standby process each level's test holds
my %hold = (
	remote_write => [ $stock, 'walreceiver' ],
	on => [ $pmsb, 'walreceiver' ],
	remote_apply => [ $pmsb, 'startup' ]);
my $id = 900_000_000_000;
for my $level (@levels)
{
	$id++;
	my ($sb, $what) = @{ $hold{$level} };
	my $s = client_session($primary);
	my $before = pmwal_status($primary);
	my $pid = hold_proc($sb, $what);
	my ($r, $xid) = observe($primary, $s, $id, $level);
	my $during = pmwal_status($primary);
	is_deeply($r, \%waiting,
		"$level, " . $sb->name . "'s $what held: the commit is committed locally, waits for the standby, is not acknowledged and not visible")
	  or diag(explain($r));
	cmp_ok($during->{ring_syncs}, '>', $before->{ring_syncs},
		"$level: its local WAL flush was answered from the ring");
	is($during->{pass_syncs}, $before->{pass_syncs}, "$level: no WAL sync went to the file system");
	cmp_ok(lsn_num($during->{head_lsn}), '>=', lsn_num($before->{head_lsn}), "$level: the ring's head moved on");

	release_proc($pid);
	send_and_wait($s, '', qr/INSERT 0 1/);
	pass("$level: the standby went on and the client heard COMMIT");
	if ($level eq 'remote_apply')
	{
		is($_->safe_psql('postgres', "SELECT count(*) FROM t WHERE id = $id"), '1',
			"remote_apply: standby " . $_->name . ' shows the row when the commit is acknowledged')
		  for @standbys;
	}
	is($primary->safe_psql('postgres', "SELECT count(*) FROM t WHERE id = $id"), '1',
		"$level: visible on the primary after the acknowledgement");
	session_close($s);
}

# --- C. cancelled and terminated waits, and visibility, against stock ---------
#
# On $node (standby $sb streams to it as its synchronous standby): a commit
# waits with $sb's walreceiver held, and is released by the standby
# ('release'), pg_cancel_backend ('cancel') or pg_terminate_backend
# ('terminate').  Returns what was observed while it waited and after.
sub wait_case
{
	my ($node, $sb, $id, $how) = @_;
	my $s = client_session($node);
	my $pid = hold_proc($sb, 'walreceiver');
	my ($r, $xid) = observe($node, $s, $id, 'on');
	my %after;
	if ($how eq 'release')
	{
		release_proc($pid);
		send_and_wait($s, '', qr/INSERT 0 1/);
	}
	elsif ($how eq 'cancel')
	{
		$node->safe_psql('postgres', "SELECT pg_cancel_backend($s->{pid})");
		send_and_wait($s, '', qr/INSERT 0 1/);
	}
	else
	{
		$node->safe_psql('postgres', "SELECT pg_terminate_backend($s->{pid})");
		my $deadline = Time::HiRes::time() + 60;
		Time::HiRes::usleep(20_000) while session_pumpable($s) && Time::HiRes::time() < $deadline
		  && session_output($s) !~ /connection to server was lost|terminating connection/;
	}
	my $out = session_output($s);
	$after{acked} = $out =~ /INSERT 0 1/ ? 1 : 0;
	$after{cancel_warning} = $out =~ /WARNING:  canceling wait for synchronous replication due to user request/ ? 1 : 0;
	$after{terminate_warning} = $out =~ /WARNING:  canceling the wait for synchronous replication and terminating connection due to administrator command/ ? 1 : 0;
	$after{detail} = $out =~ /DETAIL:  The transaction has already committed locally, but might not have been replicated to the standby\./ ? 1 : 0;
	$after{visible} = $node->safe_psql('postgres', "SELECT count(*) FROM t WHERE id = $id");
	$after{status} = $node->safe_psql('postgres', "SELECT pg_xact_status('$xid'::xid8)");
	$after{running} = $node->safe_psql('postgres',
		"SELECT NOT pg_visible_in_snapshot('$xid'::xid8, pg_current_snapshot())");
	release_proc($pid);
	session_close($s);
	note("$how on " . $node->name . ": the client saw:\n$out");
	return { waiting => $r, after => \%after };
}

my %expect_after = (
	release => { acked => 1, cancel_warning => 0, terminate_warning => 0, detail => 0,
		visible => 1, status => 'committed', running => 'f' },
	cancel => { acked => 1, cancel_warning => 1, terminate_warning => 0, detail => 1,
		visible => 1, status => 'committed', running => 'f' },
	terminate => { acked => 0, cancel_warning => 0, terminate_warning => 1, detail => 1,
		visible => 1, status => 'committed', running => 'f' });

# the control: a primary without pmwal and its stock synchronous standby
my $ctl = stock_node('control', init => { allows_streaming => 1 }, quiet_wal => 0);
$ctl->start;
$ctl->safe_psql('postgres', 'CREATE TABLE t (id bigint PRIMARY KEY)');
$ctl->backup('cb');
my $ctl_sb = stock_standby($ctl, 'control_sb', 'cb');
$ctl_sb->start;
$ctl->safe_psql('postgres',
	"ALTER SYSTEM SET synchronous_standby_names = 'control_sb'; SELECT pg_reload_conf()");
wait_sync_standbys($ctl, 1) or die 'the control standby does not stream';

set_level($primary, 'on');
my $cid = 800_000_000_000;
for my $how (qw(release cancel terminate))
{
	$cid++;
	my $before = pmwal_status($primary);
	my $mine = wait_case($primary, $stock, $cid, $how);
	my $after = pmwal_status($primary);
	my $theirs = wait_case($ctl, $ctl_sb, $cid, $how);
	is_deeply($theirs->{waiting}, \%waiting, "$how: stock PostgreSQL, while the commit waits")
	  or diag(explain($theirs->{waiting}));
	is_deeply($theirs->{after}, $expect_after{$how}, "$how: stock PostgreSQL, after")
	  or diag(explain($theirs->{after}));
	is_deeply($mine, $theirs, "$how: pmwal's primary behaves as stock PostgreSQL's")
	  or diag(explain($mine));
	cmp_ok($after->{ring_syncs}, '>', $before->{ring_syncs},
		"$how: pmwal answered the commit's local WAL sync from the ring");
	is($after->{pass_syncs}, $before->{pass_syncs}, "$how: no WAL sync went to the file system");
	# what was committed locally reaches the standby
	$primary->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE wait_event = 'SyncRep'");
	$primary->wait_for_catchup($stock, 'replay');
	is($stock->safe_psql('postgres', "SELECT count(*) FROM t WHERE id = $cid"), '1',
		"$how: the standby has the row once it goes on");
}

ok(!$primary->log_contains(qr/PANIC/), 'the primary logged no PANIC');
$ctl_sb->stop;
$ctl->stop;
$_->stop for @standbys;
$primary->stop;
note(sprintf('t/027 took %.0f s', Time::HiRes::time() - $started));
done_testing();
