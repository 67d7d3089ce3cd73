# PmwalTest::SyncRep
#		Synchronous replication with pmwal (t/027*): a pmwal primary and its
#		synchronous standbys, sessions that see what a committing client
#		sees, waits for the standbys and for a commit's SyncRep wait, and the
#		primary-and-standby pair of the WAL-before-data tests (t/027b,
#		t/027c) with its load, power cut and restart.
package PmwalTest::SyncRep;

use strict;
use warnings;

use Exporter 'import';
use Time::HiRes ();
use Test::More;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use PmwalTest;
use PmwalTest::Hold qw(forget_pauses);

our @EXPORT = qw(client_session wait_syncrep_wait wait_sync_standbys
  syncrep_primary sync_standbys
  sync_pair pair_load_start pair_wait_rows pair_cut pair_restart_and_check
  copy_broken make_sync_standby standby_without_ring
  STANDBY_CONF standby_pair standby_load_until lose_primary standby_cut_and_start standby_restart
  promote_and_verdict);

# Make $primary's every commit wait for its standby named $name, and wait
# until that standby streams as its synchronous standby.
sub make_sync_standby
{
	my ($primary, $name) = @_;
	$primary->safe_psql('postgres',
		qq{ALTER SYSTEM SET synchronous_standby_names = '"$name"'; SELECT pg_reload_conf()});
	$primary->poll_query_until('postgres',
		q{SELECT count(*) = 1 FROM pg_stat_replication WHERE sync_state = 'sync'})
	  or die "$name is not the synchronous standby";
	return;
}

# The negative control of a standby's power cut: its data directory promoted
# without its ring must lack commits of $load (acked_load_finish done) --
# counted by a sequential scan, as the index may point at heap pages whose
# WAL only the ring held -- or fail to start.  $extra_sql: a query whose
# answer is returned too (noted; undef when the copy fails).  Returns the
# number missing (undef when the copy fails) and that answer.
sub standby_without_ring
{
	my ($tag, $standby, $load, $extra_sql) = @_;
	my $sql = acked_missing_sql($load);
	$sql = "SELECT ($sql)::text || '|' || ($extra_sql)::text" if $extra_sql;
	my ($out, $err) = without_ring_query($standby,
		"SET enable_indexscan = off; SET enable_bitmapscan = off; SET enable_indexonlyscan = off;\n"
		  . $sql,
		promote => 1, fail_ok => 1);
	my ($missing, $extra) = defined $out ? split(/\|/, $out, 2) : ();
	ok(!defined $missing || $missing > 0,
		"$tag: negative control: the standby without its ring "
		  . (defined $missing ? "lacks $missing of $load->{total} acknowledged commits"
			: "fails ($err)"));
	return ($missing, $extra);
}

# The standby's ring tests (t/040-t/053): the flusher every minute.
use constant STANDBY_CONF => QUIET_WAL . "pmwal.flush_interval = 60s\nhot_standby = on\n";

# A pmwal primary (64 MB ring, the power cut of its ring 'durable'; started
# under the power-cut log with $opts{cut_primary}) whose every commit waits
# for one synchronous standby: pmwal on a 64 MB ring of its own, or with
# $opts{stock} without pmwal, started under the power-cut log, streaming.
# Table t, then $opts{sql}, on the primary before its backup 'b'.  Options
# init (more init parameters of the primary), conf (more settings of the
# primary), standby_conf (of the standby, after STANDBY_CONF), and
# busy_startup (default 1): the standby's shared_buffers 1 MB, so that its
# startup process evicts pages all the time and minRecoveryPoint moves in
# pg_control (t/040, t/045, t/046).
sub standby_pair
{
	my ($case, %opts) = @_;
	my $primary = pmwal_node("${case}_primary", size => '64MB',
		init => { allows_streaming => 1, %{ $opts{init} // {} } },
		conf => QUIET_WAL . "pmwal.flush_interval = 60s\nwal_keep_size = 1GB\n" . ($opts{conf} // ''));
	$primary->{ring_cut} = 'durable';
	$opts{cut_primary} ? powercut_start($primary) : $primary->start;
	$primary->safe_psql('postgres',
		'CREATE EXTENSION pmwal; CREATE EXTENSION amcheck; CREATE TABLE t (id bigint PRIMARY KEY);'
		  . ($opts{sql} // ''));
	$primary->backup('b');
	my $conf = STANDBY_CONF . (($opts{busy_startup} // 1) ? "shared_buffers = 1MB\n" : '')
	  . ($opts{standby_conf} // '');
	my $standby;
	if ($opts{stock})
	{
		$standby = stock_standby($primary, "${case}_standby", 'b', conf => $conf);
	}
	else
	{
		$standby = pmwal_standby($primary, "${case}_standby", 'b', size => '64MB', conf => $conf);
		$standby->{ring_cut} = 'durable';
	}
	powercut_start($standby);
	make_sync_standby($primary, "${case}_standby");
	return ($primary, $standby);
}

# Load on the primary (acked_load_start, 4 clients, then %load) until the
# standby shows $rows of it.
sub standby_load_until
{
	my ($case, $primary, $standby, $rows, %load) = @_;
	my $load = acked_load_start($primary, tag => $case, clients => 4, %load);
	$standby->poll_query_until('postgres', "SELECT count(*) >= $rows FROM t")
	  or die "$case: the standby does not follow: ${ $load->{err} }";
	return $load;
}

# The primary is lost: stopped at once (the clients waiting for the
# standby hear nothing), the load counted.
sub lose_primary
{
	my ($primary, $load) = @_;
	$primary->stop('immediate');
	acked_load_finish($load);
	return;
}

# The standby's power cut with its walreceiver held, the primary lost, the
# negative control (standby_without_ring), then the standby started:
# returns whether it came up and the log of its start.
sub standby_cut_and_start
{
	my ($case, $primary, $standby, $load) = @_;
	my $cut = powercut($standby);
	note("$case: $cut->{summary}");
	lose_primary($primary, $load);
	standby_without_ring($case, $standby, $load);
	forget_pauses($standby);
	my ($up, $startlog) = try_start($standby);
	ok($up, "$case: the standby starts after its power cut")
	  or diag(join("\n", $startlog =~ /((?:PANIC|FATAL|DETAIL):  .*)/g));
	return ($up, $startlog);
}

# An interactive session (PmwalTest's psql_session) that sees what a client
# sees: command tags (COMMIT), WARNINGs, and errors that do not end it; its
# backend's pid in {pid}.
sub client_session
{
	my ($node) = @_;
	return psql_session($node, on_error_stop => 0, tags => 1, pid => 1);
}

# Wait until backend $pid of $node waits for synchronous replication (wait
# event SyncRep); dies after $timeout seconds.
sub wait_syncrep_wait
{
	my ($node, $pid, $timeout) = @_;
	my $deadline = Time::HiRes::time() + ($timeout // 120);
	while (1)
	{
		return 1 if $node->safe_psql('postgres',
			"SELECT wait_event FROM pg_stat_activity WHERE pid = $pid") eq 'SyncRep';
		die "backend $pid does not wait for synchronous replication"
		  if Time::HiRes::time() > $deadline;
		Time::HiRes::usleep(20_000);
	}
}

# Wait until $n standbys stream to $primary as synchronous standbys.
sub wait_sync_standbys
{
	my ($primary, $n) = @_;
	return $primary->poll_query_until('postgres',
		"SELECT count(*) >= $n FROM pg_stat_replication WHERE state = 'streaming' AND sync_state IN ('sync', 'quorum')");
}

# A pmwal primary (64 MB ring, QUIET_WAL, the flusher every 60 s, WAL kept
# for the standbys, then $opts{conf}) under the power-cut log, the ring's
# power cut on (what libpmem did not drain is lost), with pmwal and table t
# (bigint primary key) and then $opts{sql}, committing through the ring,
# and a backup 'b' for its standbys.
sub syncrep_primary
{
	my (%opts) = @_;
	my $primary = pmwal_node('primary', size => '64MB', init => { allows_streaming => 1 },
		conf => QUIET_WAL . "pmwal.flush_interval = 60s\nwal_keep_size = 1GB\n" . ($opts{conf} // ''));
	$primary->{ring_cut} = 'durable';
	powercut_start($primary);
	$primary->safe_psql('postgres',
		'CREATE EXTENSION pmwal; CREATE TABLE t (id bigint PRIMARY KEY);' . ($opts{sql} // ''));
	wait_accelerated($primary, 't') or die 'commits are not accelerated';
	$primary->backup('b');
	return $primary;
}

# The synchronous standbys of a syncrep_primary, started from its backup
# 'b': "stock", without pmwal, and with $with_pmwal also "pmsb", running
# pmwal on a (16 MB) ring of its own; every commit waits for all of them
# (synchronous_standby_names = 'FIRST n (...)').  Returns them; wait for
# them with wait_sync_standbys.
sub sync_standbys
{
	my ($primary, $with_pmwal) = @_;
	my @standbys = (stock_standby($primary, 'stock', 'b',
		conf => "wal_retrieve_retry_interval = 200ms\n"));
	push @standbys, pmwal_standby($primary, 'pmsb', 'b', size => '16MB',
		conf => "wal_retrieve_retry_interval = 200ms\n") if $with_pmwal;
	$_->start for @standbys;
	$primary->safe_psql('postgres',
		"ALTER SYSTEM SET synchronous_standby_names = 'FIRST " . scalar(@standbys) . ' ('
		  . join(', ', map { $_->name } @standbys) . ")'; SELECT pg_reload_conf()");
	return @standbys;
}

# ---------------------------------------------------------------------------
# The WAL-before-data tests (t/027b, t/027c): a pmwal primary with a stock
# synchronous standby, synchronous_commit = on, 2 MB of shared buffers and
# an eager bgwriter (data pages go to disk outside checkpoints), table w
# (id int, pad text) and amcheck.  Returns a context hash for the pair_*
# helpers.
# ---------------------------------------------------------------------------
sub sync_pair
{
	my $primary = syncrep_primary(conf => qq{
synchronous_commit = on
max_connections = 30
shared_buffers = 2MB
bgwriter_delay = 10ms
bgwriter_lru_maxpages = 1000
bgwriter_lru_multiplier = 10
}, sql => 'CREATE EXTENSION amcheck; CREATE TABLE w (id int, pad text); CHECKPOINT');
	my ($standby) = sync_standbys($primary);
	wait_sync_standbys($primary, 1) or die 'the standby does not stream';
	return { primary => $primary, standby => $standby, base => 0 };
}

# A load of acknowledged commits into t (acked_load_start), with the WAL
# writer and the flusher stopped: from here on only the ring holds the WAL
# they write, until something syncs it for real (a pg_control write).
sub pair_load_start
{
	my ($pair, $tag) = @_;
	stop_server_process($pair->{primary}, $_) for qw(walwriter flusher);
	$pair->{base} += 100_000_000_000;
	my $load = acked_load_start($pair->{primary}, tag => $tag =~ s/\W+/_/gr, base => $pair->{base});
	pair_wait_rows($pair, $load, 200);
	return $load;
}

# Wait until the load has committed $n more rows.
sub pair_wait_rows
{
	my ($pair, $load, $n) = @_;
	my $range = "id > $load->{base} AND id < $load->{base} + 100000000000";
	my $have = $pair->{primary}->safe_psql('postgres', "SELECT count(*) FROM t WHERE $range");
	$pair->{primary}->poll_query_until('postgres', "SELECT count(*) >= $have + $n FROM t WHERE $range")
	  or die "the load does not run: ${ $load->{err} }";
	return;
}

# Power cut of the primary.  Returns how many commits the load saw
# acknowledged, the negative control's answer (without_ring_query, the
# copy given shared buffers enough not to evict) to the count of missing
# acknowledged commits followed by '|' and $extra_sql's answer, and its
# error output.
sub pair_cut
{
	my ($pair, $tag, $load, $extra_sql) = @_;
	my $c = powercut($pair->{primary});
	note("$tag: $c->{summary}");
	my $acked = acked_load_finish($load);
	my $sql = acked_missing_sql($load);
	$sql = "SELECT ($sql)::text || '|' || ($extra_sql)::text" if $extra_sql;
	my ($without, $err) = without_ring_query($pair->{primary}, $sql,
		fail_ok => 1, conf => "shared_buffers = 128MB\nmax_connections = 30\n");
	note("$tag: without the ring: " . ($without // "no answer: $err"));
	return ($acked, $without, $err);
}

# The negative control's query failed because the copy is inconsistent:
# a data page on disk is ahead of its WAL (writing it out needs a flush
# beyond the WAL's end) or refers to pages the lost WAL would have written.
sub copy_broken
{
	my ($err) = @_;
	return defined $err
	  && $err =~ /xlog flush request [0-9A-F\/]+ is not satisfied|unexpected zero page|could not read block|invalid page in block|could not access status of transaction/;
}

# Restart after the cut: the ring is restored, every acknowledged commit is
# on the primary and, once it streams again, on the standby; no new
# timeline.  Returns false (after a failed test) if the primary does not
# start.
sub pair_restart_and_check
{
	my ($pair, $tag, $load, $acked) = @_;
	my ($primary, $standby) = @$pair{qw(primary standby)};
	my $offset = -s $primary->logfile;
	unless (powercut_start($primary, fail_ok => 1))
	{
		my ($why) = slurp_file($primary->logfile, $offset) =~ /((?:FATAL|PANIC): .*)/;
		fail("$tag: the primary restarts after the power cut (" . ($why // 'no FATAL logged') . ')');
		return 0;
	}
	like(slurp_file($primary->logfile, $offset), qr/pmwal restored WAL/,
		"$tag: the primary restored its ring");
	is((acked_missing($primary, $load))[1], 0,
		"$tag: all $acked acknowledged commits are on the primary after the power cut");
	ok(wait_sync_standbys($primary, 1), "$tag: the standby streams again");
	my $s = client_session($primary);
	send_and_wait($s, "INSERT INTO t VALUES (-$load->{base});\n", qr/INSERT 0 1/);
	session_close($s);
	$primary->wait_for_catchup($standby, 'replay');
	is((acked_missing($standby, $load))[1], 0, "$tag: and on the standby");
	is(join(',', history_files($primary)), '', "$tag: no new timeline");
	return 1;
}

# After a standby's power cut: start it again, the pause points forgotten,
# its ring restored (unless $opts{stock}).
sub standby_restart
{
	my ($case, $standby, %opts) = @_;
	forget_pauses($standby);
	my $offset = -s $standby->logfile;
	$standby->start;
	like(slurp_file($standby->logfile, $offset), qr/pmwal restored WAL/,
		"$case: the standby's ring was restored")
	  unless $opts{stock};
	return;
}

# Promote the standby: every commit of $load (acked_load_finish done) is
# on it (acked_verdict), and more than $opts{min} (500) were acknowledged.
# Returns how many.
sub promote_and_verdict
{
	my ($case, $standby, $load, %opts) = @_;
	my $min = $opts{min} // 500;
	$standby->promote;
	$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
	  or die "$case: the standby does not leave recovery";
	my ($n, $missing, $extra) = acked_check($standby, $load);
	cmp_ok($n, '>', $min, "$case: $n commits were acknowledged");
	acked_verdict($standby, $case, $load, $n, $missing, $extra);
	return $n;
}

1;
