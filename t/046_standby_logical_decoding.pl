# The standby's ring and logical decoding on the standby (issue 29;
# PostgreSQL 16+): a logical slot on a synchronous standby running pmwal
# decodes what the startup process replayed -- WAL the walreceiver's sync
# made durable in the ring only -- and saves its confirmed position to disk
# (when its restart point moves, and at every restartpoint).  A power cut
# must then lose no acknowledged commit, and the slot must go on without a
# gap: its saved position is never beyond the WAL the standby has after the
# restore.
#
# Each case: a pmwal primary (wal_level = logical) whose every commit waits
# for one synchronous standby (hot_standby_feedback = on) with a
# test_decoding slot, committing load on the primary; the slot consumed
# with pg_logical_slot_get_changes four times under the load, each time
# followed by a checkpoint on the primary and a restartpoint on the standby
# (the slot saved); then a snapshot of running transactions logged on the
# primary (pg_log_standby_snapshot) and decoded, so that the slot's restart
# point moves and the slot is saved with a confirmed position in WAL that
# only the ring holds; then:
#
#  after_publish  the walreceiver held inside its sync after the head's
#                 move (sync_after_publish), the slot consumed and saved
#                 once more meanwhile
#  restartpoint_presync
#                 a restartpoint held in its sync phase, after it saved the
#                 slot and synced the data files, before pmwal's early real
#                 sync of pg_wal (checkpointer_before_presync)
#  restartpoint_control
#                 a restartpoint held at its pg_control write before its
#                 real sync of pg_wal (control_before_sync), the walreceiver
#                 going on through the ring meanwhile: the slot is within
#                 what the early sync made durable, the commits received
#                 since are not
#  stock          the control: the same standby without pmwal, its
#                 walreceiver held by gdb inside its fdatasync
#
# then the standby's power cut, the primary lost, the standby restored and
# promoted, and the rest consumed from the slot.  Every acknowledged commit
# is decoded, before the cut or after it, and is on the standby.  What the
# slot returns again after the restart is decided as PostgreSQL decides it:
# pg_logical_slot_get_changes confirms in memory, the slot reaches the disk
# only when saved, and a transaction whose commit lies after the saved
# confirmed position is sent again (decoding skips only commits before it).
# So a transaction decoded twice must be exactly one of those, with the
# same commit position and content both times, and every one of those must
# come again; nothing is decoded twice after the restart.  The slot's saved
# position lies within the restored WAL (the end of timeline 1), and with
# pmwal (but at control_before_sync, where it cannot be asked) beyond what
# pg_wal held durably at the cut (the danger is real).  The slot decodes 30 commits made after the promotion.
# Negative control: the standby's data directory promoted without its ring
# lacks acknowledged commits (the slot's position and the WAL's end there
# are noted).
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PmwalTest;
use PmwalTest::Hold;
use PmwalTest::SyncRep;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes;

plan skip_all => 'logical decoding on a standby came with PostgreSQL 16' if server_major() < 16;

my $SLOT_SQL = q{SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 's'};

# Consume the slot: for each transaction of the load (one id in t each),
# its id and the position of its commit (the end of its commit record, as
# test_decoding's COMMIT row says).  Returns a list of [id, commit] in the
# order decoded; with $all also the test's own rows (negative ids), else
# only the load's.
sub consume
{
	my ($node, $all) = @_;
	my $out = $node->safe_psql('postgres',
		q{SELECT lsn, data FROM pg_logical_slot_get_changes('s', NULL, NULL, 'skip-empty-xacts', '1', 'include-xids', '0')});
	my (@got, @ids);
	for my $line (split /\n/, $out)
	{
		my ($lsn, $data) = split /\|/, $line, 2;
		if ($data eq 'BEGIN') { @ids = (); }
		elsif ($data =~ /^table public\.t: INSERT: id\[bigint\]:(-?\d+)$/) { push @ids, $1; }
		elsif ($data eq 'COMMIT') { push @got, map { [ $_, $lsn ] } @ids; }
	}
	return $all ? @got : grep { $_->[0] > 0 } @got;
}

# Wait until the standby replayed what the primary wrote so far.
sub replayed
{
	my ($primary, $standby) = @_;
	my $lsn = $primary->safe_psql('postgres', 'SELECT pg_current_wal_insert_lsn()');
	$standby->poll_query_until('postgres', "SELECT pg_last_wal_replay_lsn() >= '$lsn'::pg_lsn")
	  or die 'the standby does not replay ' . $lsn;
	return;
}

sub scenario
{
	my ($case, %opts) = @_;
	my ($primary, $standby) = standby_pair($case, stock => $opts{stock},
		init => { allows_streaming => 'logical' }, standby_conf => "hot_standby_feedback = on\n");

	# the slot, created on the standby once it replays a snapshot of
	# running transactions from the primary (the commit flushes it)
	my $bg = bg_psql($standby, q{SELECT 1 FROM pg_create_logical_replication_slot('s', 'test_decoding')});
	for my $i (1 .. 600)
	{
		last unless $bg->{h}->pumpable;
		$primary->safe_psql('postgres', "SELECT pg_log_standby_snapshot(); INSERT INTO t VALUES (-$i)");
		Time::HiRes::sleep(0.1);
		eval { $bg->{h}->pump_nb };
	}
	my ($rc, undef, $err) = bg_psql_finish($bg);
	die "$case: no slot on the standby: $err" if $rc != 0;

	my $load = standby_load_until($case, $primary, $standby, 500);
	my @before;
	for my $round (1 .. 4)
	{
		push @before, consume($standby);
		$primary->safe_psql('postgres', 'CHECKPOINT');
		replayed($primary, $standby);
		$standby->safe_psql('postgres', 'CHECKPOINT');
	}
	# the slot's restart point moves: the next consume saves the slot
	$primary->safe_psql('postgres', 'SELECT pg_log_standby_snapshot()');
	Time::HiRes::sleep(0.3);
	$primary->safe_psql('postgres', 'SELECT pg_log_standby_snapshot()');
	replayed($primary, $standby);
	push @before, consume($standby);
	my ($durable, $confirmed, $ckpt);
	if ($opts{stock})
	{
		gdb_hold_walreceiver($standby, $case);
		push @before, consume($standby);
	}
	elsif ($opts{point} eq 'sync_after_publish')
	{
		my $offset = -s $standby->logfile;
		arm_all($standby, 'sync_after_publish');
		my $pid = pause_wait($standby, 'sync_after_publish', $offset);
		note("$case: walreceiver $pid held at sync_after_publish");
		push @before, consume($standby);
		$durable = pmwal_status($standby)->{durable_lsn};
	}
	else
	{
		# a checkpoint to restart at, replayed; the slot consumed up to it
		$primary->safe_psql('postgres', 'CHECKPOINT');
		replayed($primary, $standby);
		push @before, consume($standby);
		$confirmed = $standby->safe_psql('postgres', $SLOT_SQL);
		my $offset = -s $standby->logfile;
		arm_all($standby, $opts{point});
		$ckpt = bg_psql($standby, 'CHECKPOINT');
		my $pid = pause_wait($standby, $opts{point}, $offset);
		note("$case: process $pid held at $opts{point}");
		# before the presync the checkpointer holds no lock: what pg_wal
		# holds durably can be asked (at control_before_sync it cannot,
		# below, and the presync has moved it past the slot)
		$durable = pmwal_status($standby)->{durable_lsn} if $opts{point} eq 'checkpointer_before_presync';
		# the walreceiver goes on through the ring meanwhile (no query
		# here: with 1 MB of shared buffers any may evict a page and wait
		# to move minRecoveryPoint, for the ControlFileLock the held
		# process holds)
		Time::HiRes::sleep(2);
	}
	$confirmed //= $standby->safe_psql('postgres', $SLOT_SQL);
	note("$case: at the cut the slot is confirmed at $confirmed (in memory), "
		  . scalar(@before) . ' transactions consumed' . ($durable ? ", pg_wal durable to $durable" : ''));
	my $cut = powercut($standby);
	note("$case: $cut->{summary}");
	bg_psql_finish($ckpt) if $ckpt;
	lose_primary($primary, $load);

	unless ($opts{stock})
	{
		my (undef, $slot) = standby_without_ring($case, $standby, $load,
			"($SLOT_SQL)::text || ' of the slot, WAL to ' || pg_current_wal_insert_lsn()::text");
		note("$case: without the ring: " . ($slot // 'no answer'));
	}
	standby_restart($case, $standby, stock => $opts{stock});
	my $saved = $standby->safe_psql('postgres', $SLOT_SQL);
	my $n = promote_and_verdict($case, $standby, $load);
	my ($end) = slurp_file($standby->data_dir . '/pg_wal/00000002.history') =~ /^1\t([0-9A-F\/]+)/m;
	cmp_ok(lsn_num($saved), '<=', lsn_num($end),
		"$case: the slot's saved position ($saved) lies within the restored WAL (timeline 1 ends at $end)");
	cmp_ok(lsn_num($saved), '>', lsn_num($durable),
		"$case: and beyond what pg_wal held durably at the cut ($durable): only the ring held it")
	  if $durable;

	my @after = consume($standby);
	my (%first, %again, @twice_before, @twice_after, @changed);
	for (@before)
	{
		push @twice_before, $_->[0] if exists $first{ $_->[0] };
		$first{ $_->[0] } = $_->[1];
	}
	my %later;
	for (@after)
	{
		my ($id, $lsn) = @$_;
		push @twice_after, $id if exists $later{$id};
		$later{$id} = $lsn;
		next unless exists $first{$id};
		$again{$id} = 1;
		push @changed, "$id at $first{$id}, then at $lsn" if $first{$id} ne $lsn;
	}
	is(join(' ', @twice_before), '', "$case: before the cut no transaction was decoded twice");
	is(join(' ', @twice_after), '', "$case: after the restart no transaction is decoded twice");
	is(join('; ', @changed), '', "$case: a transaction decoded again has its commit where it had it");
	my @resent = grep { lsn_num($first{$_}) > lsn_num($saved) } keys %first;
	my @early = grep { lsn_num($first{$_}) <= lsn_num($saved) } keys %again;
	is(scalar(@early), 0, "$case: nothing committed before the slot's saved position comes again");
	is(scalar(keys %again), scalar(@resent),
		"$case: every transaction committed after it comes again, as PostgreSQL sends it ("
		  . scalar(@resent) . ')');
	my $list = join(',', keys %first, keys %later) || 'NULL';
	is($standby->safe_psql('postgres', "SELECT count(*) FROM t WHERE id IN ($list)"),
		scalar(keys %{ { %first, %later } }), "$case: every transaction decoded is on the standby");

	# every acknowledged commit decoded, before the cut or after
	my $lacking = 0;
	for my $c (keys %{ $load->{acked} })
	{
		my $lo = $load->{base} + $c * 1_000_000_000;
		$lacking += grep { !exists $first{$_} && !exists $later{$_} } $lo + 1 .. $lo + $load->{acked}{$c};
	}
	is($lacking, 0, "$case: every one of the $n acknowledged commits is decoded ("
		  . scalar(keys %first) . ' before the cut, ' . scalar(@after) . ' after it, '
		  . scalar(keys %again) . ' of them again)');

	$standby->safe_psql('postgres', "INSERT INTO t VALUES (-$_)") for 100_001 .. 100_030;
	is(scalar(grep { $_->[0] <= -100_001 } consume($standby, 1)), 30,
		"$case: the slot decodes the 30 commits made after the promotion");
	$standby->stop;
	return;
}

scenario('after_publish', point => 'sync_after_publish');
scenario('restartpoint_presync', point => 'checkpointer_before_presync');
scenario('restartpoint_control', point => 'control_before_sync');
scenario('stock', stock => 1);

done_testing();
