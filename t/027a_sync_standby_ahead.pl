# A synchronous standby is never ahead of its pmwal primary's durable WAL
# (issue 23; the hazard of issue 14 under synchronous replication).
#
# A walsender sends WAL up to PostgreSQL's flush pointer, which PostgreSQL
# moves only after the WAL segment's sync returns; pmwal answers that sync
# once the ring holds the WAL, persisted (wal_ring.c).  So:
#
#  1. A committer held inside its WAL sync before pmwal publishes the
#     ring's head (pause point sync_before_publish: its WAL copied into the
#     ring and written into pg_wal, the flush pointer not moved): its WAL
#     is in pg_wal (pg_waldump reads its COMMIT there) but the walsender
#     has not sent it -- both standbys have received nothing beyond the
#     primary's flush pointer and do not show the row.  Then the primary
#     loses power: it restarts from pg_wal and its ring, every commit it
#     acknowledged is on it and on both standbys, the standbys' WAL is
#     byte for byte the primary's, and they stream from the restarted
#     primary on timeline 1 (no fork, no splice).
#  2. A commit waiting for the standbys (one of them held): its local flush
#     is done, so the walsender sent it and the other standby applied it --
#     a standby may show a commit not yet acknowledged, as in stock
#     PostgreSQL.  The primary loses power: the commit is on the restarted
#     primary too (its WAL was in the ring before the flush pointer moved).
#     Negative control: without its ring the primary lacks it, and the
#     standby would be ahead.
#
# Both standbys are synchronous (FIRST 2): "stock" without pmwal, "pmsb"
# with pmwal on its own ring.  synchronous_commit = on.
#
# How this test fails when the hazard exists: on the build before the sync
# layer (4b36e65, which forced commits asynchronous and copied them into
# the ring after its write had moved the flush pointer), holding a commit at
# its equivalent point (commit_after_write, with synchronous_commit = local
# so that the old build accelerates it) lets the walsender send it: the
# standby shows the row, its received LSN passes what the primary can
# restore, and the restored primary forks.  A build whose head store is not
# persisted (PMWAL_MUTANT=3, with the ring's power cut) fails part 2.
use strict;
use warnings;
use FindBin;
use IPC::Run ();
use Time::HiRes ();
use lib $FindBin::RealBin;

use PmwalTest;
use PmwalTest::Hold;
use PmwalTest::SyncRep;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $started = Time::HiRes::time();

my $primary = syncrep_primary(conf => "synchronous_commit = on\n");
my @standbys = sync_standbys($primary, 1);
my ($stock, $pmsb) = @standbys;
wait_sync_standbys($primary, 2) or die 'the standbys do not stream';

# Commit $from .. $to one by one in one session; each is acknowledged once
# both standbys confirmed it.
sub commit_range
{
	my ($from, $to) = @_;
	my $s = client_session($primary);
	send_and_wait($s, "INSERT INTO t VALUES ($_);\n", qr/INSERT 0 1/) for $from .. $to;
	session_close($s);
	return ($from .. $to);
}

# Where each standby's WAL is: received (written) and flushed.
sub standby_positions
{
	my %p;
	for my $sb (@standbys)
	{
		my ($w, $f) = split /\|/, $sb->safe_psql('postgres',
			'SELECT written_lsn, flushed_lsn FROM pg_stat_wal_receiver');
		$p{ $sb->name } = { written => lsn_num($w), flushed => lsn_num($f) };
	}
	return \%p;
}

# After a power cut of the primary: the standbys are stopped first (so
# that what they hold is compared before they stream again), the primary
# restarts from pg_wal and its ring, and each standby's WAL on timeline 1
# up to what it received must be the primary's, byte for byte.
sub restart_and_compare
{
	my ($tag, $from, $received, $acked) = @_;
	$_->stop('fast') for @standbys;
	my $offset = -s $primary->logfile;
	powercut_start($primary);
	like(slurp_file($primary->logfile, $offset), qr/pmwal restored WAL/,
		"$tag: the primary restored its ring");
	my $end = lsn_num($primary->safe_psql('postgres', 'SELECT pg_current_wal_insert_lsn()'));
	my $list = join(',', @$acked);
	is($primary->safe_psql('postgres', "SELECT count(*) FROM t WHERE id IN ($list)"),
		scalar(@$acked), "$tag: all " . scalar(@$acked) . ' acknowledged commits are on the primary');
	for my $sb (@standbys)
	{
		my $upto = $received->{ $sb->name }{written};
		cmp_ok($upto, '<=', $end,
			"$tag: " . $sb->name . ' received nothing beyond the restored primary\'s WAL');
		my $mine = wal_bytes($sb->data_dir, 1, $from, $upto);
		my $theirs = wal_bytes($primary->data_dir, 1, $from, $upto);
		is(length($mine), $upto - $from, "$tag: " . $sb->name . ' holds the WAL it received');
		my $diff = first_difference($mine, $theirs);
		ok(length($theirs) == $upto - $from && !defined $diff,
			sprintf('%s: %s\'s %d bytes of WAL are the restored primary\'s', $tag, $sb->name, $upto - $from))
		  or diag(defined $diff ? 'first difference at ' . lsn_text($from + $diff) : 'the primary\'s WAL is shorter');
	}
	$_->start for @standbys;
	ok(wait_sync_standbys($primary, 2), "$tag: both standbys stream from the restarted primary");
	my $s = client_session($primary);
	send_and_wait($s, "INSERT INTO t VALUES (-$from);\n", qr/INSERT 0 1/);
	session_close($s);
	for my $sb (@standbys)
	{
		$primary->wait_for_catchup($sb, 'replay');
		is($sb->safe_psql('postgres', "SELECT count(*) FROM t WHERE id IN ($list, -$from)"),
			scalar(@$acked) + 1,
			"$tag: " . $sb->name . ' has every acknowledged commit and follows the restarted primary');
		is($sb->safe_psql('postgres', 'SELECT received_tli FROM pg_stat_wal_receiver'), '1',
			"$tag: " . $sb->name . ' receives timeline 1');
		ok(!$sb->log_contains(qr/forked off|not in this server's history|PANIC/),
			"$tag: " . $sb->name . ' logged no fork and no PANIC');
	}
	is(join(',', history_files($primary)), '', "$tag: the primary stays on timeline 1");
	return;
}

# --- 1. held before the head is published: nothing is sent ------------------
{
	my $tag = 'before publish';
	my $from = lsn_num($primary->safe_psql('postgres', 'SELECT pg_current_wal_insert_lsn()'));
	# neither the WAL writer nor the flusher syncs anything from here on
	stop_server_process($primary, $_) for qw(walwriter flusher);
	my @acked = commit_range(1, 50);
	$primary->wait_for_catchup($_, 'replay') for @standbys;

	my $held_id = 1000;
	my $head_before = pmwal_status($primary)->{head_lsn};
	my $offset = -s $primary->logfile;
	pause_rearm($primary, 'sync_before_publish');
	my $held = client_session($primary);
	send_and_wait($held, "SET pmwal.test_pause = 'sync_before_publish';\n", qr/^SET$/m);
	send_and_wait($held, "INSERT INTO t VALUES ($held_id);\n");
	is(pause_wait($primary, 'sync_before_publish', $offset), $held->{pid},
		"$tag: the commit is held inside its WAL sync, before the ring's head is published");
	my $xid = $primary->safe_psql('postgres',
		"SELECT backend_xid FROM pg_stat_activity WHERE pid = $held->{pid}");
	my $flush = lsn_num($primary->safe_psql('postgres', 'SELECT pg_current_wal_flush_lsn()'));
	my $status = pmwal_status($primary);

	# its COMMIT record is in pg_wal, after the flush pointer
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'pg_waldump', '--path', $primary->data_dir . '/pg_wal', '--timeline', '1',
			'--start', lsn_text($flush) ], '>', \$out, '2>', \$err);
	my ($commit_lsn) = $out =~ /tx:\s+$xid, lsn: ([0-9A-F]+\/[0-9A-F]+),.*desc: COMMIT/;
	ok(defined $commit_lsn && lsn_num($commit_lsn) >= $flush,
		"$tag: its COMMIT record is written in pg_wal after the flush pointer ("
		  . ($commit_lsn // 'not found') . ' >= ' . lsn_text($flush) . ')')
	  or diag("pg_waldump: $err\n$out");
	# (the head covers whole pages: the page the held commit was appended
	# to may be covered already, in its newer version -- more than the
	# flush pointer promises, never less)
	is($status->{head_lsn}, $head_before, "$tag: the ring's head did not move for the held write");

	# the walsender sends nothing beyond the flush pointer: give it time
	my $pos;
	for (1 .. 20)
	{
		Time::HiRes::sleep(0.1);
		$pos = standby_positions();
	}
	my $sent = $primary->safe_psql('postgres',
		q{SELECT string_agg(application_name || '=' || sent_lsn, ' ') FROM pg_stat_replication});
	my ($max_sent) = sort { $b <=> $a } map { lsn_num((split /=/)[1]) } split / /, $sent;
	cmp_ok($max_sent, '<=', $flush, "$tag: no walsender sent beyond the flush pointer ($sent)");
	for my $sb (@standbys)
	{
		cmp_ok($pos->{ $sb->name }{written}, '<=', $flush,
			"$tag: " . $sb->name . ' received nothing beyond the primary\'s flush pointer');
		is($sb->safe_psql('postgres', "SELECT count(*) FROM t WHERE id = $held_id"), '0',
			"$tag: " . $sb->name . ' does not have the held commit');
	}

	my $cut = powercut($primary);
	note("$tag: $cut->{summary}");
	$held->{h}->kill_kill;
	my $lost = without_ring_query($primary, 'SELECT count(*) FROM t WHERE id IN (' . join(',', @acked) . ')');
	ok(!defined $lost || $lost < @acked,
		"$tag: negative control: without its ring the primary lacks acknowledged commits ("
		  . ($lost // 'it cannot start') . ' of ' . scalar(@acked) . ' there)');
	restart_and_compare($tag, $from, $pos, \@acked);
	my $held_on_primary = $primary->safe_psql('postgres', "SELECT count(*) FROM t WHERE id = $held_id");
	note("$tag: the held, never acknowledged commit is "
		  . ($held_on_primary ? 'on' : 'not on') . ' the restarted primary');
	for my $sb (@standbys)
	{
		is($sb->safe_psql('postgres', "SELECT count(*) FROM t WHERE id = $held_id"), $held_on_primary,
			"$tag: " . $sb->name . ' agrees with the primary about the held commit');
	}
}

# --- 2. waiting for a standby: sent, applied by the other, durable here ------
{
	my $tag = 'waiting';
	wait_accelerated($primary, 't');
	my $from = lsn_num($primary->safe_psql('postgres', 'SELECT pg_current_wal_insert_lsn()'));
	stop_server_process($primary, $_) for qw(walwriter flusher);
	my @acked = commit_range(2001, 2050);
	my $waiting_id = 3000;
	my $receiver = hold_proc($pmsb, 'walreceiver');
	my $s = client_session($primary);
	send_and_wait($s, "INSERT INTO t VALUES ($waiting_id);\n");
	wait_syncrep_wait($primary, $s->{pid});
	ok($stock->poll_query_until('postgres', "SELECT count(*) = 1 FROM t WHERE id = $waiting_id"),
		"$tag: the stock standby applied the commit that waits for the other standby");
	unlike(session_output($s), qr/INSERT 0 1/, "$tag: the commit is not acknowledged");
	my $pos = standby_positions();

	my $cut = powercut($primary);
	note("$tag: $cut->{summary}");
	$s->{h}->kill_kill;
	release_proc($receiver);
	my $without = without_ring_query($primary, "SELECT count(*) FROM t WHERE id = $waiting_id");
	is($without // 'no start', '0',
		"$tag: negative control: without its ring the primary lacks the commit the standby applied");
	restart_and_compare($tag, $from, $pos, \@acked);
	is($primary->safe_psql('postgres', "SELECT count(*) FROM t WHERE id = $waiting_id"), '1',
		"$tag: the commit the standby applied is on the restarted primary");
	is($_->safe_psql('postgres', "SELECT count(*) FROM t WHERE id = $waiting_id"), '1',
		"$tag: and on standby " . $_->name)
	  for @standbys;
}

ok(!$primary->log_contains(qr/PANIC/), 'the primary logged no PANIC');
$_->stop for @standbys;
$primary->stop;
note(sprintf('t/027a took %.0f s', Time::HiRes::time() - $started));
done_testing();
