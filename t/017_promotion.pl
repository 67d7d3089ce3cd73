# Promotion (issue 11): a standby that runs pmwal on a ring of its own is
# promoted, takes committing load, and loses power.
#
#	1. before its first checkpoint on the new timeline: the checkpoint the
#	   promotion requests is held by gdb, so pg_control still names the old
#	   timeline while the ring holds WAL of the new one.  The restore must
#	   put that WAL back on the new timeline (the code before issue 11
#	   refused to start: "holds WAL of timeline 2, but the cluster is on
#	   timeline 1").
#	2. after that checkpoint completed.
#
# Each counts the commits acknowledged on the new primary; none may be
# lost.  Negative control: a copy started without the ring loses some.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PmwalTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes ();

my $primary = pmwal_node('primary', size => '16MB', init => { allows_streaming => 1 });
$primary->start;
$primary->safe_psql('postgres', 'CREATE EXTENSION pmwal; CREATE TABLE t (id bigint PRIMARY KEY)');
$primary->backup('b');

for my $case ('before_checkpoint', 'after_checkpoint')
{
	my $standby = pmwal_standby($primary, $case, 'b', size => '64MB', conf => QUIET_WAL);
	powercut_start($standby);
	$primary->wait_for_catchup($standby);

	my $gdb;
	if ($case eq 'before_checkpoint')
	{
		my $ckpt_pid = $standby->safe_psql('postgres',
			q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'});
		$gdb = gdb_break($ckpt_pid, 'CreateCheckPoint', leave_stopped => 1);
	}
	$standby->promote;
	$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
	  or die "$case: the standby does not leave recovery";
	if ($gdb)
	{
		ok(gdb_wait_hit($gdb, 60), "$case: the checkpoint after the promotion is held");
		$gdb->{h}->finish;
	}
	else
	{
		$standby->poll_query_until('postgres',
			'SELECT timeline_id = 2 FROM pg_control_checkpoint()')
		  or die "$case: no checkpoint on the new timeline";
	}
	wait_accelerated($standby, 't')
	  or die "$case: commits on the new primary are not accelerated";
	is(ring_field($standby->{pmwal_ring}, 'timeline'), 2,
		"$case: the ring holds WAL of timeline 2");

	my $load = acked_load_start($standby, tag => $case);
	$standby->poll_query_until('postgres', 'SELECT count(*) >= 2000 FROM t')
	  or die "$case: the load does not run: ${ $load->{err} }";
	# the new primary has walsenders: a committer held in its write window
	# at the cut makes recovery end on yet another timeline.  The load goes
	# on meanwhile, through the ring alone (the flusher is held too).
	my ($held) = hold_in_write_window($standby, 't', 9_000_000_000);
	Time::HiRes::sleep(0.5);
	my $cut = powercut($standby);
	note("$case: $cut->{summary}");
	acked_load_finish($load);
	bg_psql_finish($held);

	my $pg_control = `pg_controldata -D ${\ $standby->data_dir }`;
	my ($ckpt_tli) = $pg_control =~ /Latest checkpoint's TimeLineID:\s+(\d+)/;
	is($ckpt_tli, $case eq 'before_checkpoint' ? 1 : 2,
		"$case: at the cut pg_control names the checkpoint of timeline $ckpt_tli");

	# negative control: what the ring alone held
	my $without = without_ring_query($standby, 'SELECT count(*) FROM t') // 0;
	cmp_ok($without, '<', $load->{total},
		"$case: without the ring, acknowledged commits are lost ($without rows for $load->{total} acknowledged)");

	my $offset = -s $standby->logfile;
	ok($standby->start(fail_ok => 1), "$case: the new primary starts after the power cut")
	  or diag(slurp_file($standby->logfile, $offset));
	next unless $standby->{_pid};
	# archive recovery (a write window was open): pg_ctl returned once it
	# had begun, before replay ended
	$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
	  or die "$case: recovery does not end";
	my $log = slurp_file($standby->logfile, $offset);
	like($log, qr/pmwal ring "[^"]+" holds WAL of timeline 2, which descends from the checkpoint's timeline 1/,
		"$case: the ring's WAL is restored on timeline 2")
	  if $case eq 'before_checkpoint';
	my ($n, $missing) = acked_check($standby, $load);
	is($missing, 0, "$case: all $n commits acknowledged on the new primary are present");
	# a write window was open at the cut: recovery ends on a new timeline,
	# leaving 3 to a promotion of a standby of this node
	like($log, qr/recovery will end on a new timeline/, "$case: a write window was open at the cut");
	like($log, qr/pmwal clears the minimum recovery point/,
		"$case: the minimum recovery point the promotion left is cleared first")
	  if $case eq 'before_checkpoint';
	like($log, qr/pmwal leaves timeline 3 to a standby's promotion/, "$case: timeline 3 is left to a promotion");
	is($standby->safe_psql('postgres', 'SELECT timeline_id FROM pg_control_checkpoint()'), '4',
		"$case: the server goes on on timeline 4");
	$standby->stop;
}

done_testing();
