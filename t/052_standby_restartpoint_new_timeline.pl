# A restartpoint on a newer timeline than the standby's ring (adversarial
# review 2 of the standby's ring).
#
# A cascading standby s2 (pmwal, with restore_command) streams from s1.
# s1 is promoted (timeline 2 begins at S): s2's walreceiver receives
# timeline 1 up to S and waits for a new start point -- it does not exit,
# so its ring stays anchored on timeline 1, holding the page of S.  s2's
# startup process then finds timeline 2's segment in the archive, replays it
# (s1's checkpoints after S, in S's page) and asks for streaming; before the
# walreceiver writes anything of timeline 2 (s1's walsender does not
# answer), a restartpoint is made at s1's checkpoint C2, on timeline 2.
# ring_on_control_write syncs pg_wal and frees the ring up to the page of
# the last byte written (S's page), and retires the ring only if it begins
# before C2's page: it does not.  pg_control now names C2 on timeline 2 and
# the ring holds S's page on timeline 1, past the point where timeline 2
# left timeline 1.  Power cut.
#
# Case "restartpoint" as above.  Case "minrecovery": no restartpoint; s1
# drops a table on timeline 2, and s2's replay of that commit (from the
# archive) moves minRecoveryPoint, and minRecoveryPointTLI, onto timeline 2
# -- a pg_control write that syncs nothing.  The restore then reads pg_wal
# along timeline 2's history: segment N of timeline 2 (restored from the
# archive) holds timeline 2's records after S, where the ring's page of
# timeline 1 has the walreceiver's zeroes.
#
# The start must not be refused: the ring's WAL is all in pg_wal, and s2 is
# a legitimate standby that stock PostgreSQL starts.  Control: s2's data
# directory started without its ring starts as a standby.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PmwalTest;
use PmwalTest::Hold;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use File::Copy ();

my $CONF = QUIET_WAL . "pmwal.flush_interval = 60s\nwal_keep_size = 1GB\nhot_standby = on\n";

sub run_case
{
	my ($case) = @_;
	my $arch = PostgreSQL::Test::Utils::tempdir;

	my $p = pmwal_node("${case}_p", size => '64MB', init => { allows_streaming => 1 }, conf => $CONF);
	$p->start;
	$p->safe_psql('postgres', 'CREATE EXTENSION pmwal; CREATE TABLE t (id bigint PRIMARY KEY)');
	$p->backup('b');
	my $s1 = pmwal_standby($p, "${case}_s1", 'b', size => '64MB', conf => $CONF);
	$s1->start;
	$p->wait_for_catchup($s1);
	$s1->backup('b1');
	my $s2 = pmwal_standby($s1, "${case}_s2", 'b1', size => '64MB',
		conf => $CONF . "restore_command = 'cp \"$arch/%f\" \"%p\"'\n");
	$s2->{ring_cut} = 'durable';
	powercut_start($s2);

	$p->safe_psql('postgres', 'INSERT INTO t SELECT g FROM generate_series(1, 3000) g');
	# timeline 1 ends early in a page, so that s1's first checkpoints on
	# timeline 2 fall into the page where it begins
	my $x = insert_lsn($p);
	my $page = (int($x / 8192) + 1) * 8192;
	advance_to($p, $page + 200, $page + 1200);
	$p->stop;
	$s1->poll_query_until('postgres',
		"SELECT pg_last_wal_replay_lsn() >= '" . lsn_format($page + 200) . "'::pg_lsn")
	  or die 's1 does not catch up';
	my $s1_end = $s1->safe_psql('postgres', 'SELECT pg_last_wal_replay_lsn()');
	$s2->poll_query_until('postgres', "SELECT pg_last_wal_replay_lsn() >= '$s1_end'::pg_lsn")
	  or die 's2 does not catch up';
	is(pmwal_status($s2)->{accelerated}, 'true', "$case: s2's walreceiver syncs through its ring");

	# s2's replay waits while s1 is promoted and timeline 2's segment archived
	$s2->safe_psql('postgres', 'SELECT pg_wal_replay_pause()');
	$s2->poll_query_until('postgres', q{SELECT pg_get_wal_replay_pause_state() = 'paused'})
	  or die 's2 does not pause';
	$s1->promote;
	$s1->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
	  or die 's1 does not leave recovery';
	$s2->poll_query_until('postgres', q{SELECT status = 'waiting' FROM pg_stat_wal_receiver})
	  or die "s2's walreceiver does not wait for a new timeline";
	$s1->safe_psql('postgres', 'CHECKPOINT');
	$s1->safe_psql('postgres', 'CREATE TABLE d (x int); DROP TABLE d') if $case eq 'minrecovery';
	my $c2 = $s1->safe_psql('postgres', 'SELECT checkpoint_lsn FROM pg_control_checkpoint()');
	my ($switch) = slurp_file($s1->data_dir . '/pg_wal/00000002.history') =~ /^1\s+(\S+)/m;
	my $sw = $s1->safe_psql('postgres', 'SELECT pg_switch_wal()');
	my $segfile = $s1->safe_psql('postgres', "SELECT pg_walfile_name('$sw')");
	note("timeline 2 begins at $switch; s1's checkpoint at $c2; segment $segfile");
	my $same_page = int(lsn_num($c2) / 8192) == int(lsn_num($switch) / 8192);
	ok($same_page, "$case: the checkpoint lies in the page where timeline 2 begins")
	  if $case eq 'restartpoint';
	File::Copy::copy($s1->data_dir . "/pg_wal/$segfile", "$arch/$segfile") or die "copy: $!";
	File::Copy::copy($s1->data_dir . '/pg_wal/00000002.history', "$arch/00000002.history")
	  or die "copy: $!";

	# s1's walsender for s2 stops answering: s2's walreceiver writes nothing of
	# timeline 2, and does not exit
	my $wsnd = $s1->safe_psql('postgres',
		qq{SELECT pid FROM pg_stat_replication WHERE application_name = '${case}_s2'});
	ok($wsnd, "$case: s1's walsender for s2 is $wsnd");
	kill 'STOP', $wsnd;
	$s2->safe_psql('postgres', 'SELECT pg_wal_replay_resume()');
	ok($s2->poll_query_until('postgres', "SELECT pg_last_wal_replay_lsn() >= '$sw'::pg_lsn"),
		"$case: s2 replays the checkpoint of timeline 2 from the archive");
	$s2->safe_psql('postgres', 'CHECKPOINT') if $case eq 'restartpoint';
	if ($case eq 'minrecovery')
	{
		$s2->poll_query_until('postgres', "SELECT min_recovery_end_timeline = 2 FROM pg_control_recovery()")
		  or diag('minRecoveryPointTLI did not move to 2');
	}
	my $cd = controldata($s2);
	note("s2's pg_control: checkpoint $cd->{'Latest checkpoint location'} on timeline "
		  . $cd->{"Latest checkpoint's TimeLineID"} . ", min recovery point "
		  . $cd->{'Minimum recovery ending location'} . ' on timeline '
		  . $cd->{"Min recovery ending loc's timeline"});
	is($cd->{"Latest checkpoint's TimeLineID"}, '2', "$case: s2's restartpoint is on timeline 2")
	  if $case eq 'restartpoint';
	is($cd->{"Min recovery ending loc's timeline"}, '2', "$case: s2's minRecoveryPoint is on timeline 2")
	  if $case eq 'minrecovery';
	my ($tl, $tail, $head) = map { ring_read_u64($s2->{pmwal_ring}, $_) } qw(timeline tail head);
	note('s2 ring: timeline ' . $tl . ', tail ' . lsn_format($tail) . ', head ' . lsn_format($head));
	note($tail < $head && $tl == 1
		? "$case: s2's ring holds WAL of timeline 1 at the cut"
		: "$case: s2's ring holds no WAL of timeline 1 at the cut (retired)");

	my $cut = powercut($s2);
	note($cut->{summary});

	# control: the same data directory without its ring starts and follows s1
	kill 'CONT', $wsnd;
	$s1->safe_psql('postgres', 'INSERT INTO t VALUES (-1)');
	my ($rows) = without_ring_query($s2, 'SELECT count(*) >= 3000 FROM t', fail_ok => 1);
	is($rows, 't', "$case: control: s2's data directory without its ring starts as a standby");

	my ($up, $log) = try_start($s2);
	ok($up, "$case: s2 starts after its power cut")
	  or diag(join("\n", $log =~ /((?:PANIC|FATAL|DETAIL):  .*)/g));
	SKIP:
	{
		skip 's2 did not start', 1 unless $up;
		my $lsn = $s1->lsn('insert');
		ok($s2->poll_query_until('postgres', "SELECT pg_last_wal_replay_lsn() >= '$lsn'::pg_lsn")
			  && $s2->safe_psql('postgres', 'SELECT count(*) FROM t') eq '3001',
			"$case: s2 follows s1 on timeline 2");
		$s2->stop;
	}
	$s1->stop;
	return;
}

for my $case (qw(restartpoint minrecovery))
{
	run_case($case);
}

done_testing();
