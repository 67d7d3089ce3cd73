# A standby's promotion with archive_mode = on after its walreceiver wrote
# WAL that the ring did not take (review of the standby ring, issue 29).
#
# pmwal counts every WAL write the walreceiver makes (written_end), also
# those that go to pg_wal only, whose syncs PostgreSQL makes for real; it
# moves its own durable point (durable_lsn) only when it syncs, and the
# walreceiver syncs at its exit only when the ring is anchored.  So after
# such writes written_end > durable_lsn.  A promotion with archive_mode = on
# renames the old timeline's last, partial segment to .partial; then the
# startup process writes pg_control (state "in production"), and pmwal
# syncs the WAL written so far, opening that segment by its old name.
#
#  restart        the standby is restarted; its last restartpoint names a
#                 checkpoint inside the segment its walreceiver then streams
#                 again from its start: the write begins before the
#                 checkpoint's page and does not anchor the ring; the
#                 primary writes nothing more, then dies
#  open_datasync  wal_sync_method = open_datasync on the standby: every
#                 walreceiver write goes to pg_wal only (O_DSYNC)
#  disabled       pmwal.enabled = off on the standby
#  stock          the control: a standby without pmwal (restart sequence)
#
# Each: the primary stopped at once, the standby promoted; it must leave
# recovery without a PANIC and hold every row.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PmwalTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $CONF = QUIET_WAL . "pmwal.flush_interval = 60s\nwal_keep_size = 1GB\nhot_standby = on\n";
my $ARCHIVE = "archive_mode = on\narchive_command = '/bin/true'\n";

# name => [standby kind, extra settings, restart the standby onto the
# checkpoint's segment first]
my @cases = (
	[ 'restart', 'pmwal', '', 1 ],
	[ 'open_datasync', 'pmwal', "wal_sync_method = open_datasync\n", 0 ],
	[ 'disabled', 'pmwal', "pmwal.enabled = off\n", 0 ],
	[ 'stock', 'stock', '', 1 ],
);
for my $c (@cases)
{
	my ($case, $kind, $extra, $restart) = @$c;
	my $primary = pmwal_node("${case}_primary", size => '64MB', init => { allows_streaming => 1 },
		conf => $CONF);
	$primary->start;
	$primary->safe_psql('postgres', 'CREATE EXTENSION pmwal; CREATE TABLE t (id bigint PRIMARY KEY)');
	$primary->backup('b');
	my $standby = $kind eq 'pmwal'
	  ? pmwal_standby($primary, "${case}_standby", 'b', size => '64MB', conf => $CONF . $ARCHIVE . $extra)
	  : stock_standby($primary, "${case}_standby", 'b', conf => $CONF . $ARCHIVE . $extra);
	$standby->start;

	# a new segment, a few pages of WAL, then a checkpoint in it (not in
	# its first page), which the standby's restart names
	$primary->safe_psql('postgres', 'SELECT pg_switch_wal()');
	$primary->safe_psql('postgres', 'INSERT INTO t SELECT g FROM generate_series(1, 300) g');
	$primary->safe_psql('postgres', 'CHECKPOINT');
	$primary->safe_psql('postgres', 'INSERT INTO t SELECT g FROM generate_series(301, 400) g');
	my $end = $primary->lsn('flush');
	$primary->wait_for_catchup($standby, 'replay', $end);
	$standby->restart if $restart;
	my $ckpt = control_checkpoint($standby);
	note("$case: the standby's pg_control names the checkpoint at $ckpt; the primary flushed to $end");
	# the walreceiver streams the segment again from its start: one write,
	# before the checkpoint's page (the primary writes nothing more)
	if ($kind eq 'pmwal' && $restart)
	{
		$standby->poll_query_until('postgres', 'SELECT pass_writes >= 1 FROM pmwal_status')
		  or die "$case: the walreceiver writes nothing";
		my $st = pmwal_status($standby);
		note("$case: standby status: " . join(', ', map { "$_=$st->{$_}" } sort keys %$st));
		is($st->{accelerated}, 'false',
			"$case: the walreceiver's write, before the checkpoint's page, did not anchor the ring");
	}
	else
	{
		$standby->poll_query_until('postgres', 'SELECT status = \'streaming\' FROM pg_stat_wal_receiver')
		  or die "$case: the walreceiver does not stream";
		sleep 1;
	}
	if ($kind eq 'pmwal')
	{
		my $st = pmwal_status($standby);
		note("$case: standby status before the promotion: " . join(', ', map { "$_=$st->{$_}" } sort keys %$st));
	}
	note("$case: walreceiver: " . $standby->safe_psql('postgres',
		'SELECT status, written_lsn, flushed_lsn FROM pg_stat_wal_receiver')
		  . "; primary at " . $primary->lsn('insert'));
	# the primary dies; the standby is promoted
	$primary->stop('immediate');
	my $offset = -s $standby->logfile;
	my ($out, $err) = ('', '');
	my $ran = IPC::Run::run([ 'pg_ctl', '-D', $standby->data_dir, '-w', '-t', '60', 'promote' ],
		'>', \$out, '2>', \$err);
	note("$case: pg_ctl promote: $out$err");
	my $promoted = $ran && $standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()');
	my $log = slurp_file($standby->logfile, $offset);
	ok($promoted, "$case: the standby is promoted")
	  or diag(join("\n", $log =~ /((?:PANIC|FATAL|LOG|DETAIL):  .*)/g));
	unlike($log, qr/PANIC/, "$case: no PANIC at the promotion");
	note("$case: " . join(' | ', $log =~ /((?:PANIC):  .*)/g)) if $log =~ /PANIC/;
	if ($promoted)
	{
		is($standby->safe_psql('postgres', 'SELECT count(*) FROM t'), '400',
			"$case: the promoted standby has every row");
		$standby->stop;
	}
	else
	{
		# what the failed promotion left: started again by hand
		$standby->stop('immediate') if system('pg_ctl', 'status', '-s', '-D', $standby->data_dir) == 0;
		$standby->{_pid} = undef;
		my ($up, $again) = try_start($standby);
		note("$case: started again after the failed promotion: " . ($up ? 'up' : 'refused') . '; '
			  . join(' | ', $again =~ /((?:PANIC|FATAL|DETAIL):  .*)/g));
		if ($up)
		{
			note("$case: in recovery: " . $standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()')
				  . ', rows: ' . $standby->safe_psql('postgres', 'SELECT count(*) FROM t'));
			$standby->stop;
		}
	}
}

done_testing();
