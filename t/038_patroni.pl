# pmwal under Patroni through failovers after power cuts (issue 29, part 2).
#
# One etcd and three PostgreSQL nodes, each run by its own Patroni,
# synchronous_mode: true, use_pg_rewind: true.  Each node is a machine of
# its own: its power cut SIGKILLs its Patroni and every process of its
# server, then undoes in its pg_wal whatever no completed sync covered
# (tools/powercut, from the system calls the server made) and cuts its ring
# to what libpmem drained; the ring file is kept.
#
# Run twice, on a stock cluster (no pmwal) and on one that preloads pmwal on
# every node, each node on a ring of its own; the same steps, the same
# checks:
#  1. Under committing load (pgbench, every acknowledged commit logged with
#     its unique id), the primary's power is cut; Patroni fails over to the
#     synchronous standby.  Every commit acknowledged to the client is on
#     the new primary.  With pmwal: the old primary's data directory
#     started without its ring lacks acknowledged commits (the ring held
#     them, not pg_wal).
#  2. The old primary's Patroni is started again: crash recovery (with
#     pmwal: the ring restored into pg_wal first), pg_rewind if its WAL
#     went past the new timeline's start, then it streams from the new
#     primary; every node has the same rows, every acknowledged one.
#  3. Under load, the power of the synchronous standby is cut; Patroni
#     moves the synchronous standby to the other replica; every acknowledged
#     commit is on the primary; the cut node comes back and catches up.
#  4. Under load, the power of the primary and of the synchronous standby
#     is cut at once; both come back, a leader is elected, every
#     acknowledged commit is on it and then on every node.
#
# Negative control: the same cluster and steps 1's cut, with an
# acknowledgement rule that is wrong -- synchronous_mode off and
# synchronous_commit = off (the WAL writer syncs every 10 s): the harness
# finds acknowledged commits missing on the new primary.
use strict;
use warnings;
use FindBin;
use Time::HiRes ();
use lib $FindBin::RealBin;

use PmwalTest;
use PmwalTest::Patroni;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

if (my $why = patroni_missing())
{
	plan skip_all => "Patroni and etcd are needed ($why; tools/common.sh installs them)";
}

my $started = Time::HiRes::time();
my $etcd = etcd_start();
note("etcd at $etcd");

# Bring up a three-node cluster; returns (nodes, leader).
sub bring_up
{
	my ($scope, %o) = @_;
	my $nodes = patroni_cluster($scope, etcd => $etcd, %o);
	patroni_start($nodes->[0]);
	my $leader = wait_leader($nodes, 120) or die "$scope: the first node does not become leader";
	patroni_start($_) for @$nodes[ 1, 2 ];
	wait_streaming($leader, $nodes, $o{sync}, 180)
	  or die "$scope: the replicas do not stream";
	# the table is on every node before the load (a CHECKPOINT flushes its
	# WAL for the negative control's asynchronous commits)
	$leader->{pg}->safe_psql('postgres', 'CREATE TABLE t (id bigint PRIMARY KEY); CREATE EXTENSION amcheck;'
		  . ($o{pmwal} ? ' CREATE EXTENSION pmwal;' : '') . ' CHECKPOINT');
	$_->{pg}->poll_query_until('postgres', q{SELECT to_regclass('t') IS NOT NULL})
	  or die "$scope: table t does not reach $_->{name}"
	  for @$nodes;
	return ($nodes, $leader);
}

# Load on $leader until it has committed $rows rows of this load.
sub load_on
{
	my ($leader, $tag, $base, %o) = @_;
	my $load = acked_load_start($leader->{pg}, tag => $tag, base => $base, %o);
	$leader->{pg}->poll_query_until('postgres',
		"SELECT count(*) >= " . ($o{rows} // 300) . " FROM t WHERE id > $base AND id < $base + 100000000000")
	  or die "$tag: the load does not run: ${ $load->{err} }";
	return $load;
}

# Every acknowledged commit of $load is on $node, at most one more per
# client; returns the number acknowledged.
sub all_acked_on
{
	my ($node, $load, $tag) = @_;
	my ($acked, $missing, $extra) = acked_check($node->{pg}, $load);
	is($missing, 0, "$tag: all $acked acknowledged commits are on $node->{name}");
	cmp_ok($extra, '<=', $load->{clients},
		"$tag: at most one unacknowledged commit per client is there too ($extra)");
	return $acked;
}

# Every node has the same rows, and every acknowledged commit of @loads.
sub converged
{
	my ($leader, $nodes, $marker, $tag, @loads) = @_;
	my $rows = wait_converged($leader, $nodes, $marker);
	my %distinct = map { $_ => 1 } values %$rows;
	is(scalar(keys %distinct), 1, "$tag: every node has the same rows (count, sum, min, max)")
	  or diag(explain($rows));
	for my $n (@$nodes)
	{
		my $missing = 0;
		$missing += (acked_check($n->{pg}, $_))[1] for @loads;
		is($missing, 0, "$tag: no acknowledged commit is missing on $n->{name}");
	}
	is($leader->{pg}->safe_psql('postgres',
			q{SELECT bt_index_check('t_pkey', heapallindexed => true)}),
		'', "$tag: amcheck finds the primary key and the table consistent");
	return;
}

my %summary;

# The whole scenario on one cluster: stock (pmwal => 0) or pmwal.
sub scenario
{
	my ($mode, $pmwal) = @_;
	my ($nodes, $leader) = bring_up($mode, pmwal => $pmwal, sync => 1);
	my @loads;
	my $sync = sync_standby_of($nodes, $leader);
	ok($sync, "$mode: Patroni made " . ($sync // {})->{name} . " the synchronous standby of $leader->{name}");
	is($leader->{pg}->safe_psql('postgres', 'SHOW shared_preload_libraries'),
		$pmwal ? 'pmwal' : '', "$mode: shared_preload_libraries as configured");
	if ($pmwal)
	{
		for my $n (@$nodes)
		{
			is($n->{pg}->safe_psql('postgres', 'SELECT pmwal.path FROM (SELECT current_setting(\'pmwal.path\') AS path) pmwal'),
				$n->{pg}{pmwal_ring}, "$mode: $n->{name} runs pmwal on its own ring");
		}
		is(pmwal_status($leader->{pg})->{commit_path}, 'ring, then synchronous standby',
			"$mode: the primary's commits take the ring, then the synchronous standby");
	}

	# --- 1. the primary's power cut under load, a failover ---------------
	my $old = $leader;
	my $before = $pmwal ? pmwal_status($old->{pg}) : undef;
	my $load = load_on($old, "${mode}_primary", 100_000_000_000);
	push @loads, $load;
	$sync = wait_sync_standby($nodes, $leader) or BAIL_OUT("$mode: no synchronous standby");
	my $cuts = cut_nodes($old);
	my $acked = acked_load_finish($load);
	cmp_ok($acked, '>=', 300, "$mode, primary cut: $acked commits were acknowledged before the power cut");
	# stock PostgreSQL fsyncs every commit's WAL; pmwal answers the syncs
	# from the ring, so its pg_wal has unsynced writes the cut takes
	cmp_ok($cuts->{ $old->{name} }{undone}, '>', 0,
		"$mode, primary cut: the cut undid unsynced WAL writes of $old->{name}")
	  if $pmwal;
	$leader = wait_leader($nodes, 120, { $old->{name} => 1 })
	  or BAIL_OUT("$mode: no failover after the primary's power cut");
	is($leader->{name}, $sync->{name}, "$mode, primary cut: Patroni failed over to the synchronous standby");
	all_acked_on($leader, $load, "$mode, primary cut");
	$summary{$mode}{primary} = $acked;
	if ($pmwal)
	{
		# the ring held them: without it the old primary lacks some
		# (the copy may lack even table t: then it lacks all of them)
		my ($lost, $err) = without_ring_query($old->{pg}, acked_missing_sql($load), fail_ok => 1);
		$lost = $acked if !defined $lost && $err =~ /relation "t" does not exist/;
		note("$mode: without its ring: " . ($lost // "no answer: $err"));
		ok(!defined $lost || $lost > 0,
			"$mode, primary cut: negative control: without its ring $old->{name} lacks "
			  . ($lost // 'all (it cannot start)') . ' acknowledged commits');
		$summary{$mode}{without_ring} = $lost // 'all';
	}

	# --- 2. the old primary rejoins ----------------------------------------
	my $offset = log_offsets($old);
	patroni_start($old);
	ok(wait_streaming($leader, $nodes, 1, 240), "$mode: $old->{name} rejoins and streams from $leader->{name}");
	my $rewind = patroni_log_has($old, qr/pg_rewind exit code=(\d+)/, $offset);
	note("$mode: $old->{name}: pg_rewind " . (defined $rewind ? "ran, exit code $rewind" : 'was not needed'));
	ok(!defined $rewind || $rewind == 0, "$mode: $old->{name}: pg_rewind, if it ran, succeeded");
	ok(!patroni_log_has($old, qr/reinitializ|Removing data directory/i, $offset),
		"$mode: $old->{name} was not reinitialized from a new base backup");
	if ($pmwal)
	{
		ok(patroni_log_has($old, qr/pmwal restored WAL/, $offset),
			"$mode: $old->{name}'s crash recovery restored its ring");
		my $single = -e $old->{single} ? slurp_file($old->{single}, $offset->[1]) : '';
		note("$mode: $old->{name}: the ring was restored "
			  . ($single =~ /pmwal restored WAL/ ? "in Patroni's single-user crash recovery (before pg_rewind)" : 'at a normal start'));
	}
	converged($leader, $nodes, 1, "$mode, after the old primary rejoined", @loads);

	# --- 3. the synchronous standby's power cut under load ------------------
	$sync = wait_sync_standby($nodes, $leader) or BAIL_OUT("$mode: no synchronous standby");
	my ($other) = grep { $_ != $leader && $_ != $sync } @$nodes;
	$load = load_on($leader, "${mode}_replica", 200_000_000_000, duration => 12);
	push @loads, $load;
	cut_nodes($sync);
	$acked = acked_load_finish($load);
	cmp_ok($acked, '>=', 300, "$mode, replica cut: $acked commits acknowledged");
	all_acked_on($leader, $load, "$mode, replica cut");
	is((wait_sync_standby($nodes, $leader, 60, { $sync->{name} => 1 }) // {})->{name}, $other->{name},
		"$mode, replica cut: Patroni made $other->{name} the synchronous standby");
	$summary{$mode}{replica} = $acked;
	$offset = log_offsets($sync);
	patroni_start($sync);
	ok(wait_streaming($leader, $nodes, 1, 240), "$mode: $sync->{name} comes back and streams");
	note("$mode: $sync->{name}, a standby when cut, logged: " . (patroni_log_has($sync, qr/(pmwal restored WAL[^\n]*|pmwal[^\n]*ring[^\n]*)/, $offset) // 'nothing of pmwal')) if $pmwal;
	converged($leader, $nodes, 2, "$mode, after the replica came back", @loads);

	# --- 4. the primary and the synchronous standby at once ----------------
	$sync = wait_sync_standby($nodes, $leader) or BAIL_OUT("$mode: no synchronous standby");
	($other) = grep { $_ != $leader && $_ != $sync } @$nodes;
	$load = load_on($leader, "${mode}_both", 300_000_000_000);
	push @loads, $load;
	my @cut = ($leader, $sync);
	cut_nodes(@cut);
	$acked = acked_load_finish($load);
	cmp_ok($acked, '>=', 300, "$mode, both cut: $acked commits acknowledged");
	# synchronous_mode: the asynchronous replica is not promoted
	Time::HiRes::sleep(12);
	ok(!leader_of([$other]), "$mode, both cut: $other->{name}, not synchronous, was not promoted");
	my %off = map { $_->{name} => log_offsets($_) } @cut;
	patroni_start($_) for @cut;
	$leader = wait_leader($nodes, 180) or BAIL_OUT("$mode: no leader after both came back");
	note("$mode, both cut: $leader->{name} is the leader");
	isnt($leader->{name}, $other->{name}, "$mode, both cut: a node of the synchronous pair leads");
	all_acked_on($leader, $load, "$mode, both cut");
	$summary{$mode}{both} = $acked;
	ok(wait_streaming($leader, $nodes, 1, 240), "$mode, both cut: the others stream from $leader->{name}");
	# the primary's ring held the WAL of its last commits; a standby's
	# ring holds nothing (pmwal copies no WAL in recovery)
	if ($pmwal)
	{
		ok(patroni_log_has($cut[0], qr/pmwal restored WAL/, $off{ $cut[0]{name} }),
			"$mode, both cut: the primary $cut[0]{name} restored its ring");
		note("$mode, both cut: the standby $cut[1]{name} logged: "
			  . (patroni_log_has($cut[1], qr/(pmwal restored WAL[^\n]*|pmwal[^\n]*ring[^\n]*)/, $off{ $cut[1]{name} }) // 'nothing of pmwal'));
	}
	converged($leader, $nodes, 3, "$mode, after both came back", @loads);

	for my $n (@$nodes)
	{
		# ("new timeline N forked off current database system timeline"
		# is expected: an old primary ahead of the new timeline's start
		# says so before Patroni runs pg_rewind)
		ok(!patroni_log_has($n, qr/PANIC/), "$mode: $n->{name}: no PANIC in its log");
	}
	cluster_teardown($nodes);
	return;
}

scenario('stock', 0);
scenario('pmwal', 1);

# --- the negative control: a wrong acknowledgement rule ---------------------
{
	my $mode = 'async';
	my ($nodes, $leader) = bring_up($mode, pmwal => 0, sync => 0,
		params => { synchronous_commit => 'off' });
	my $old = $leader;
	my $load = load_on($old, "${mode}_primary", 100_000_000_000);
	cut_nodes($old);
	my $acked = acked_load_finish($load);
	$leader = wait_leader($nodes, 120, { $old->{name} => 1 })
	  or BAIL_OUT("$mode: no failover after the primary's power cut");
	my ($n, $missing) = acked_check($leader->{pg}, $load);
	cmp_ok($missing, '>', 0,
		"negative control (synchronous_mode off, synchronous_commit = off): the harness finds $missing of $n acknowledged commits missing on the new primary $leader->{name}");
	$summary{$mode}{primary} = "$n acknowledged, $missing missing";
	cluster_teardown($nodes);
}

note("acknowledged commits checked per cut:\n" . join("\n",
		map { my $m = $_; "  $m: " . join(', ', map { "$_ $summary{$m}{$_}" } sort keys %{ $summary{$m} }) }
		  sort keys %summary));
note(sprintf('t/038 took %.0f s', Time::HiRes::time() - $started));
done_testing();
