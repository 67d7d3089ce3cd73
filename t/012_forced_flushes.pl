# Flushes PostgreSQL forces itself, then acts on (issue 9, item 4).
#
# Some statements flush their WAL and then take an irreversible step:
#	- a commit that drops relations flushes its commit record even under
#	  synchronous_commit = off, and unlinks the files after the commit;
#	- COMMIT PREPARED flushes its record and, inside the statement, unlinks
#	  the prepared transaction's state file and the files of relations it
#	  dropped;
#	- DROP DATABASE flushes and then removes the database's directories.
# Another backend's write without fsync can turn such a flush into a no-op
# (the flush pointer is already past it) while only the page cache holds
# the record.  Each scenario makes that happen deterministically: gdb holds
# the statement's backend at XLogFlush, another commit writes without fsync
# meanwhile and is held (pause points), the statement goes on; then the
# power goes.  The WAL writer and the flusher are stopped, standing for
# processes the scheduler leaves off the CPU (either could otherwise flush
# or copy the WAL by chance).
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

# An interactive psql session: send SQL, wait for output.
sub session
{
	my ($node) = @_;
	my ($in, $out) = ('', '');
	my $h = IPC::Run::start(
		[ 'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres'), '-f', '-' ],
		'<', \$in, '>&', \$out);
	return { h => $h, in => \$in, out => \$out };
}

sub send_and_wait
{
	my ($s, $sql, $re, $timeout) = @_;
	${ $s->{out} } = '';
	${ $s->{in} } .= $sql;
	my $deadline = Time::HiRes::time() + ($timeout // 60);
	while (${ $s->{out} } !~ $re)
	{
		die "session: no match for $re in: ${ $s->{out} }"
		  if Time::HiRes::time() > $deadline || !$s->{h}->pumpable;
		$s->{h}->pump_nb;
		Time::HiRes::usleep(10_000);
	}
	return ${ $s->{out} };
}

sub quiet_node
{
	my ($name, $conf) = @_;
	my $node = pmwal_node($name, size => '16MB',
		conf => QUIET_WAL . "pmwal.flush_interval = 60s\nmax_prepared_transactions = 5\n" . ($conf // ''));
	powercut_start($node);
	$node->safe_psql('postgres', 'CREATE EXTENSION pmwal; CREATE TABLE t (id int)');
	wait_accelerated($node, 't') or die "$name: commits are not accelerated";
	return $node;
}

# --- A. DROP TABLE under synchronous_commit = off ----------------------------
{
	my $node = quiet_node('droptable');
	$node->safe_psql('postgres',
		"CREATE TABLE d (id int); INSERT INTO d VALUES (1); CHECKPOINT");
	my $file = $node->data_dir . '/'
	  . $node->safe_psql('postgres', q{SELECT pg_relation_filepath('d')});
	stop_server_process($node, $_) for qw(walwriter flusher);

	# D: the dropping session, held by gdb at its commit's XLogFlush
	my $d = session($node);
	my ($dpid) = send_and_wait($d, "SET synchronous_commit = off;\nSELECT pg_backend_pid();\n",
		qr/^(\d+)$/m) =~ /^(\d+)$/m;
	my $gdb = gdb_break($dpid, 'XLogFlush');

	# L: a commit that will write without fsync, held just before its write
	my $offset = -s $node->logfile;
	my $l = bg_psql($node, "SET pmwal.test_pause = 'commit_before_write,commit_after_write'",
		'INSERT INTO t VALUES (1)');
	pause_wait($node, 'commit_before_write', $offset);

	${ $d->{in} } .= "DROP TABLE d;\n";
	ok(gdb_wait_hit($gdb, 60, $d->{h}), 'droptable: the DROP TABLE commit is held at its XLogFlush');
	# L writes everything inserted so far -- the DROP's commit record too
	pause_release($node, 'commit_before_write');
	pause_wait($node, 'commit_after_write', $offset);
	gdb_release($gdb);
	send_and_wait($d, "SELECT 'dropped';\n", qr/^dropped$/m);
	# PostgreSQL truncates the dropped relation's first segment at once and
	# unlinks it at the next checkpoint
	is(-s $file // 0, 0, 'droptable: the DROP TABLE returned and its data file is truncated');

	my $cut = powercut($node);
	note("droptable: $cut->{summary}");
	$d->{h}->kill_kill;
	bg_psql_finish($l);
	is(without_ring_query($node, q{SELECT count(*) FROM d}) // 'no start', '0',
		'droptable: negative control: without the ring the DROP is lost, and d is back without its row');
	$node->start;
	my $gone = $node->safe_psql('postgres', q{SELECT to_regclass('d') IS NULL}) eq 't';
	ok($gone || $node->safe_psql('postgres', 'SELECT count(*) FROM d') eq '1',
		'droptable: after the power cut the table is either dropped or whole ('
		  . ($gone ? 'dropped' : 'present') . ')');
	$node->stop;
}

# --- B. COMMIT PREPARED --------------------------------------------------------
{
	my $node = quiet_node('prepared');
	$node->safe_psql('postgres', q{
CREATE TABLE x (id int); CREATE TABLE victim (id int); INSERT INTO victim VALUES (1);
BEGIN; INSERT INTO x VALUES (7); DROP TABLE victim; PREPARE TRANSACTION 'p1';
CHECKPOINT});
	ok(twophase_state_file($node, 'p1'),
		'prepared: the prepared transaction has its state file (PREPARE acknowledged)');
	stop_server_process($node, $_) for qw(walwriter flusher);

	my $p = session($node);
	# hold at the third commit callback from now: the SET's own and the
	# next SELECT's come first, then COMMIT PREPARED's
	my ($ppid) = send_and_wait($p, "SELECT pg_backend_pid();\nSET pmwal.test_pause = 'commit_callback:3';\nSELECT 'armed';\n",
		qr/^armed$/m) =~ /^(\d+)$/m;
	my $gdb = gdb_break($ppid, 'XLogFlush');
	my $offset = -s $node->logfile;
	${ $p->{in} } .= "COMMIT PREPARED 'p1';\n";
	ok(gdb_wait_hit($gdb, 60, $p->{h}), 'prepared: COMMIT PREPARED is held at its XLogFlush');

	# L commits meanwhile: a write without fsync would cover the record
	my $l = bg_psql($node, "SET pmwal.test_pause = 'commit_after_write'", 'INSERT INTO t VALUES (2)');
	my $deadline = Time::HiRes::time() + 30;
	until (pause_seen($node, 'commit_after_write', $offset) || !$l->{h}->pumpable)
	{
		die 'prepared: the commit neither finishes nor pauses' if Time::HiRes::time() > $deadline;
		$l->{h}->pump_nb;
		Time::HiRes::usleep(20_000);
	}
	note('prepared: the commit meanwhile '
		  . (pause_seen($node, 'commit_after_write', $offset) ? 'wrote without fsync and is held' : 'finished'));
	gdb_release($gdb);
	# COMMIT PREPARED unlinks the state file and the dropped table's file,
	# then its transaction's commit callback is held
	pause_wait($node, 'commit_callback', $offset);

	my $cut = powercut($node);
	note("prepared: $cut->{summary}");
	$p->{h}->kill_kill;
	bg_psql_finish($l);
	$node->start;
	my $committed = $node->safe_psql('postgres', 'SELECT count(*) FROM x WHERE id = 7') eq '1';
	my $prepared = $node->safe_psql('postgres',
		q{SELECT count(*) FROM pg_prepared_xacts WHERE gid = 'p1'}) eq '1';
	ok($committed || $prepared,
		'prepared: after the power cut the prepared transaction is committed or still prepared ('
		  . ($committed ? 'committed' : $prepared ? 'prepared' : 'lost') . ')');
	my ($rc) = $node->psql('postgres', 'SELECT count(*) FROM victim');
	ok($committed ? $node->safe_psql('postgres', q{SELECT to_regclass('victim') IS NULL}) eq 't' : $rc == 0,
		'prepared: the table it dropped is gone with it, or still readable');
	$node->safe_psql('postgres', q{COMMIT PREPARED 'p1'}) if $prepared;
	$node->stop;
}

# --- C. DROP DATABASE: no write window opens while it runs -------------------
{
	my $node = quiet_node('dropdb');
	$node->safe_psql('postgres', 'CREATE DATABASE doomed');
	my $before = pmwal_status($node)->{fallback_paused} // 0;
	my $offset = -s $node->logfile;
	my $dd = bg_psql($node, "SET pmwal.test_pause = 'gate_paused'", 'DROP DATABASE doomed');
	my $held = eval { pause_wait($node, 'gate_paused', $offset, 30) };
	ok($held, 'dropdb: DROP DATABASE holds after pausing write windows');
	my $c = bg_psql($node, "SET pmwal.test_pause = 'commit_after_write'", 'INSERT INTO t VALUES (3)');
	my ($rc) = bg_psql_finish($c);
	is($rc, 0, 'dropdb: a commit meanwhile completes');
	ok(!pause_seen($node, 'commit_after_write', $offset),
		'dropdb: it did not write without fsync');
	is((pmwal_status($node)->{fallback_paused} // 0) - $before, 1,
		'dropdb: it was flushed the ordinary way (fallback_paused)');
	pause_release($node, 'gate_paused');
	pause_release($node, 'commit_after_write');
	bg_psql_finish($dd);
	is($node->safe_psql('postgres', q{SELECT count(*) FROM pg_database WHERE datname = 'doomed'}),
		'0', 'dropdb: the database is dropped');
	$node->stop;
}

done_testing();
