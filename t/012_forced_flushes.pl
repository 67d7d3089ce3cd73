# Flushes PostgreSQL forces itself, then acts on (issue 9, item 4;
# converted to the sync layer).
#
# Some statements flush their WAL and then take an irreversible step:
#	- a commit that drops relations flushes its commit record even under
#	  synchronous_commit = off, then truncates and unlinks the files;
#	- COMMIT PREPARED and ROLLBACK PREPARED flush their record, then
#	  unlink the files of the relations the transaction dropped (or
#	  created) and the prepared transaction's state file;
#	- DROP DATABASE marks the database invalid in place and flushes that,
#	  checkpoints, removes the database's directories, and commits with a
#	  forced synchronous flush.
# The code before the sync layer had to keep another backend's write
# without fsync from turning such a flush into a no-op (the gate, gate.c).
# Now the flush is PostgreSQL's own, and its sync is answered from the
# ring: PostgreSQL goes on only after the ring's head covers the record.
# Each statement is cut at its dangerous moments, on a node whose WAL only
# pmwal syncs (the flusher stopped; the WAL writer stopped except for DROP
# DATABASE, which waits for every process to absorb a barrier):
#
#	held_sync     the statement's own WAL sync held at sync_before_publish
#	              (record written and copied, head not yet published,
#	              nothing unlinked): afterwards the statement may be done
#	              or not, but files and catalog must agree (it is usually
#	              done: the ring keeps the page the next write rewrites,
#	              and the held write's copy of it is complete);
#	irreversible  held by gdb at the first irreversible step, its flush
#	              answered (smgrdounlinkall for DROP TABLE,
#	              DropRelationFiles for COMMIT/ROLLBACK PREPARED, rmtree
#	              for DROP DATABASE): afterwards the statement must be done
#	              (DROP DATABASE: the database marked invalid, as stock
#	              PostgreSQL leaves an interrupted drop);
#	held_commit   DROP DATABASE only: its commit's sync held, directories
#	              already removed: the database is invalid or gone;
#	returned      the statement returned, its files are gone: it must be
#	              done.  Negative control: the data directory started
#	              without its ring shows WAL and files disagreeing -- the
#	              dropped table back without its row, the prepared
#	              transaction neither committed nor prepared, the dropped
#	              database still in pg_database.  ROLLBACK PREPARED has no
#	              such control: its abort lost with its state file reads as
#	              the abort it was.
use strict;
use warnings;
use FindBin;
use Time::HiRes ();
use lib $FindBin::RealBin;

use PmwalTest;
use PmwalTest::Hold;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $started = Time::HiRes::time();

# Path under the data directory, or undef.
sub relfile
{
	my ($node, $rel, $db) = @_;
	my $p = $node->safe_psql($db // 'postgres', "SELECT pg_relation_filepath('$rel')");
	return $node->data_dir . "/$p";
}

my %statements = (
	droptable => {
		sql => [ 'SET synchronous_commit = off', 'DROP TABLE d' ],
		gdb => 'smgrdounlinkall',
		setup => sub {
			my ($node) = @_;
			$node->safe_psql('postgres', 'CREATE TABLE d (id int); INSERT INTO d VALUES (1)');
			return { file => relfile($node, 'd') };
		},
		intact => sub {
			my ($node, $c) = @_;
			return -s $c->{file} ? '' : "$c->{file} is empty or gone";
		},
		# done: d dropped and its file gone; undone: d whole
		state => sub {
			my ($node, $c) = @_;
			if ($node->safe_psql('postgres', q{SELECT to_regclass('d') IS NULL}) eq 't')
			{
				return ('done', -e $c->{file} ? "dropped, but $c->{file} is still there" : '');
			}
			my $n = $node->safe_psql('postgres', 'SELECT count(*) FROM d');
			my $why = $n eq '1' ? '' : "d is there with $n rows instead of 1";
			$node->safe_psql('postgres', 'DROP TABLE d');
			return ('undone', $why);
		},
		control => [ 'SELECT count(*) FROM d', '0', 'd is back without its row' ],
	},
	commit_prepared => {
		sql => [ q{COMMIT PREPARED 'p1'} ],
		gdb => 'DropRelationFiles',
		setup => sub {
			my ($node, $round) = @_;
			$node->safe_psql('postgres',
				'CREATE TABLE IF NOT EXISTS x (id int); CREATE TABLE victim (id int); INSERT INTO victim VALUES (1)');
			my $file = relfile($node, 'victim');
			$node->safe_psql('postgres', qq{
BEGIN; INSERT INTO x VALUES ($round); DROP TABLE victim; PREPARE TRANSACTION 'p1'});
			return { file => $file, gid => 'p1', round => $round };
		},
		intact => sub {
			my ($node, $c) = @_;
			return !-s $c->{file} ? "$c->{file} is empty or gone"
			  : !-e $c->{state} ? "$c->{state} is gone" : '';
		},
		# done: committed (x has the row, victim and both files gone);
		# undone: still prepared with its state file and victim's file
		state => sub {
			my ($node, $c) = @_;
			my ($x, $prepared) = split /\|/, $node->safe_psql('postgres',
				"SELECT (SELECT count(*) FROM x WHERE id = $c->{round}), "
				  . q{(SELECT count(*) FROM pg_prepared_xacts WHERE gid = 'p1')});
			if ($x eq '1' && $prepared eq '0')
			{
				my $left = join(', ', grep { -e $_ } $c->{file}, $c->{state});
				my $victim = $node->safe_psql('postgres', q{SELECT to_regclass('victim') IS NULL});
				return ('done', $left ? "committed, but $left still there"
					  : $victim ne 't' ? 'committed, but victim is still there' : '');
			}
			if ($x eq '0' && $prepared eq '1')
			{
				my $why = !-s $c->{file} ? "still prepared, but $c->{file} is empty or gone"
				  : !-e $c->{state} ? "still prepared, but $c->{state} is gone" : '';
				$node->safe_psql('postgres', q{COMMIT PREPARED 'p1'});
				return ('undone', $why);
			}
			return ('lost', "x has $x rows of the transaction, $prepared prepared");
		},
		control => [ sub { "SELECT (SELECT count(*) FROM x WHERE id = $_[0]{round}) + (SELECT count(*) FROM pg_prepared_xacts)" },
			'0', 'the transaction is neither committed nor prepared' ],
	},
	rollback_prepared => {
		sql => [ q{ROLLBACK PREPARED 'p2'} ],
		gdb => 'DropRelationFiles',
		setup => sub {
			my ($node, $round) = @_;
			my $out = $node->safe_psql('postgres', qq{
CREATE TABLE IF NOT EXISTS x (id int);
BEGIN; CREATE TABLE newborn (id int); INSERT INTO newborn VALUES (1);
INSERT INTO x VALUES (100 + $round); SELECT pg_relation_filepath('newborn');
PREPARE TRANSACTION 'p2'});
			return { file => $node->data_dir . '/' . (split /\n/, $out)[-1],
				gid => 'p2', round => $round };
		},
		intact => sub {
			my ($node, $c) = @_;
			return !-s $c->{file} ? "$c->{file} is empty or gone"
			  : !-e $c->{state} ? "$c->{state} is gone" : '';
		},
		state => sub {
			my ($node, $c) = @_;
			my ($x, $prepared, $newborn) = split /\|/, $node->safe_psql('postgres',
				'SELECT (SELECT count(*) FROM x WHERE id = 100 + ' . $c->{round} . '), '
				  . q{(SELECT count(*) FROM pg_prepared_xacts WHERE gid = 'p2'), to_regclass('newborn') IS NULL});
			if ($x eq '0' && $prepared eq '0')
			{
				my $left = join(', ', grep { -e $_ } $c->{file}, $c->{state});
				return ('done', $left ? "rolled back, but $left still there"
					  : $newborn ne 't' ? 'rolled back, but newborn is visible' : '');
			}
			if ($x eq '0' && $prepared eq '1')
			{
				my $why = !-s $c->{file} ? "still prepared, but $c->{file} is empty or gone"
				  : !-e $c->{state} ? "still prepared, but $c->{state} is gone" : '';
				$node->safe_psql('postgres', q{ROLLBACK PREPARED 'p2'});
				return ('undone', $why);
			}
			return ('lost', "x has $x rows of the transaction, $prepared prepared");
		},
	},
	dropdb => {
		sql => [ 'DROP DATABASE doomed' ],
		gdb => 'rmtree',
		keep_walwriter => 1,
		setup => sub {
			my ($node) = @_;
			$node->safe_psql('postgres', 'CREATE DATABASE doomed');
			my $oid = $node->safe_psql('postgres', q{SELECT oid FROM pg_database WHERE datname = 'doomed'});
			return { dir => $node->data_dir . "/base/$oid" };
		},
		intact => sub {
			my ($node, $c) = @_;
			return -d $c->{dir} && -e "$c->{dir}/PG_VERSION" ? '' : "$c->{dir} is (partly) gone";
		},
		# done: gone with its directory; invalid: marked invalid (as stock
		# PostgreSQL leaves an interrupted DROP DATABASE), refused, and
		# dropped by another DROP DATABASE; undone: valid and whole
		state => sub {
			my ($node, $c) = @_;
			my $limit = $node->safe_psql('postgres',
				q{SELECT datconnlimit FROM pg_database WHERE datname = 'doomed'});
			return ('done', -e $c->{dir} ? "dropped, but $c->{dir} is still there" : '') if $limit eq '';
			my ($rc, $out, $err) = $node->psql('doomed', 'SELECT 1');
			my $why = '';
			if ($limit eq '-2')
			{
				$why = 'invalid, but a connection to it succeeds' if $rc == 0;
				$node->safe_psql('postgres', 'DROP DATABASE doomed');
				return ('invalid', $why);
			}
			$why = "valid, but it cannot be used: $err" if $rc != 0 || !-e "$c->{dir}/PG_VERSION";
			$node->safe_psql('postgres', 'DROP DATABASE doomed');
			return ('undone', $why);
		},
		control => [ q{SELECT count(*) FROM pg_database WHERE datname = 'doomed'}, '1',
			'the dropped database is still in pg_database' ],
	},
);

# What each moment allows after the power cut.
my %allowed = (
	held_sync => { done => 1, undone => 1, invalid => 1 },
	irreversible => { done => 1 },
	held_commit => { done => 1, invalid => 1 },
	returned => { done => 1 },);
# DROP DATABASE at rmtree: its in-place update was flushed and checkpointed,
# its commit not yet written
my %allowed_dropdb_irreversible = (invalid => 1);

for my $what (qw(droptable commit_prepared rollback_prepared dropdb))
{
	my $s = $statements{$what};
	my $node = pmwal_node($what, size => '16MB',
		conf => QUIET_WAL . "pmwal.flush_interval = 60s\nmax_prepared_transactions = 5\nautovacuum = off\n");
	powercut_start($node);
	$node->safe_psql('postgres', 'CREATE EXTENSION pmwal; CREATE TABLE t (id int)');
	wait_accelerated($node, 't') or die "$what: commits are not accelerated";
	my @moments = ('held_sync', 'irreversible', ($what eq 'dropdb' ? 'held_commit' : ()), 'returned');
	my $round = 0;
	for my $moment (@moments)
	{
		$round++;
		my $tag = "$what/$moment";
		my $c = $s->{setup}->($node, $round);
		$node->safe_psql('postgres', 'INSERT INTO t VALUES (' . $round . '); CHECKPOINT');
		# the checkpoint wrote the prepared transaction's state file
		$c->{state} = twophase_state_file($node, $c->{gid}) // 'none' if $c->{gid};
		is($s->{intact}->($node, $c), '', "$tag: set up, files in place");
		stop_server_process($node, $_) for ('flusher', $s->{keep_walwriter} ? () : 'walwriter');

		my ($bg, $sess);
		if ($moment eq 'held_sync' || $moment eq 'held_commit')
		{
			my $point = $moment eq 'held_sync' ? 'sync_before_publish' : 'sync_before_publish:2';
			($bg) = hold_at($node, $point, $s->{sql});
			is($s->{intact}->($node, $c), '', "$tag: held in its own WAL sync, files still in place")
			  if $moment eq 'held_sync';
			ok(!-e $c->{dir}, "$tag: held in its commit's sync, its directory already removed")
			  if $moment eq 'held_commit';
			is($node->safe_psql('postgres', q{SELECT datconnlimit FROM pg_database WHERE datname = 'doomed'}),
				'-2', "$tag: the sync held is that of the in-place update marking it invalid")
			  if $what eq 'dropdb' && $moment eq 'held_sync';
		}
		elsif ($moment eq 'irreversible')
		{
			$sess = psql_session($node);
			my $pid = session_pid($sess);
			send_and_wait($sess, "$_;\nSELECT 'did';\n", qr/^did$/m)
			  for @{ $s->{sql} }[ 0 .. $#{ $s->{sql} } - 1 ];
			my $gdb = gdb_break($pid, $s->{gdb}, leave_stopped => 1);
			send_and_wait($sess, "$s->{sql}[-1];\n");
			ok(gdb_wait_hit($gdb, 120, $sess->{h}), "$tag: held by gdb at $s->{gdb}");
			$gdb->{h}->finish;
			is($s->{intact}->($node, $c), '', "$tag: nothing unlinked yet");
		}
		else
		{
			my ($rc, undef, $err) = bg_psql_finish(bg_psql($node, @{ $s->{sql} }));
			is($rc, 0, "$tag: the statement returned $err");
			isnt($s->{intact}->($node, $c), '', "$tag: its files are gone");
		}
		my ($ok, $txt) = flush_covered($node);
		ok($ok, "$tag: the flush pointer is covered ($txt)");

		my $cut = powercut($node);
		note("$tag: $cut->{summary}");
		session_end($sess) if $sess;
		bg_psql_finish($bg) if $bg;
		if ($moment eq 'returned' && $s->{control})
		{
			my ($sql, $want, $what_it_means) = @{ $s->{control} };
			$sql = $sql->($c) if ref $sql;
			is(without_ring_query($node, $sql) // 'no start', $want,
				"$tag: negative control: without the ring, $what_it_means");
		}
		forget_pauses($node);
		my $offset = -s $node->logfile;
		ok(powercut_start($node, fail_ok => 1), "$tag: the server starts after the power cut")
		  or diag(slurp_file($node->logfile, $offset));
		last unless $node->{_pid};
		my ($state, $why) = $s->{state}->($node, $c);
		my $allow = $what eq 'dropdb' && $moment eq 'irreversible'
		  ? \%allowed_dropdb_irreversible : $allowed{$moment};
		ok($allow->{$state} && $why eq '',
			"$tag: after the power cut the statement is $state, and files and catalog agree"
			  . ($why ? " -- $why" : ''));
		is($node->safe_psql('postgres', 'SELECT string_agg(id::text, \',\' ORDER BY id) FROM t'),
			join(',', 1 .. $round), "$tag: the commits before it are there");
	}
	$node->stop if $node->{_pid};
}

diag(sprintf('%.0f s', Time::HiRes::time() - $started));
done_testing();
