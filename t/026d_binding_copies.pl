# Issue 21, cases 3 and 5: copies.  The system identifier does not tell a
# data directory from a file copy of it, nor a ring from an older copy of
# itself; the binding's generation does (binding.c): each start raises the
# ring's generation by two, each flusher pass by one, ring first, and the
# data directory's binding file records it.
#	3a. P stopped cleanly, copied (cp -a) to Q with the same pmwal.path;
#	    P runs under load and loses power; Q started first (the ring's lock
#	    is free) is refused and does not touch the ring; P then restores
#	    every acknowledged commit.
#	3b. the reverse order: the copy Q started and stopped cleanly before P
#	    ran and lost power; Q is refused, P has every commit.
#	3c. the copy Q loses power while it holds the ring: P is refused, Q
#	    restores its own commits.
#	3d. a file copy of P taken while P runs (cp -a of a live data
#	    directory, a crash-consistent snapshot), then P commits and loses
#	    power before the flusher's second pass: Q started first must be
#	    refused, P must restore every commit.
#	5a. the ring replaced by an older copy of itself, taken during the
#	    load, with a flusher pass since: refused ("older than this data
#	    directory's binding"); the real ring back: every commit.
#	5b. an empty copy of the ring taken while the cluster was stopped, put
#	    back after a power cut: refused; also when pmwal.path then names a
#	    new ring (5b'): the ring at the bound path is not the bound ring any
#	    more, only an older copy of it.
#	5c. (known limit, a TODO test) a copy taken after the flusher's last
#	    pass cannot be told from the ring: its WAL is restored, the commits
#	    after the copy are lost.  The README says so.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PmwalTest;
use PmwalTest::OldBuild;
use PmwalTest::Binding;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use PostgreSQL::Test::RecursiveCopy;
use Test::More;
use File::Copy ();
use Time::HiRes ();

my $t0 = Time::HiRes::time();
my @cleanup;
END { unlink @cleanup; }

# Every file in $node's pg_wal, for refused_without_writing's files.
sub wal_files
{
	my ($node) = @_;
	return map { $node->data_dir . "/pg_wal/$_" }
	  grep { -f $node->data_dir . "/pg_wal/$_" }
	  do { opendir my $dh, $node->data_dir . '/pg_wal' or die; readdir $dh };
}

# $node must restore the ring and have every commit of $load.
sub restores_all
{
	my ($node, $load, $case) = @_;
	my ($up, $log) = try_start($node);
	ok($up, "$case: the server starts") or diag($log);
	return unless $up;
	like($log, qr/pmwal restored WAL/, "$case: the ring was restored");
	my ($n, $missing, $how) = acked_missing($node, $load);
	is($missing, 0, "$case: all $n acknowledged commits are present");
	case_line("$case: $missing of $n acknowledged commits missing (counted by $how)");
	$node->stop;
	return;
}

# The copy started on the other's ring: what it did.
sub copy_started
{
	my ($copy, $case) = @_;
	return sub {
		case_line("$case: the copy started on the ring and "
			  . ($copy->log_contains(qr/pmwal restored WAL/) ? 'restored its WAL into its own pg_wal' : 'restored nothing'));
	};
}

my $copy_fatal = sub {
	my ($R) = @_;
	return (fatal => qr/pmwal ring "\Q$R\E" holds WAL of another copy of this data directory; nothing was restored\n/,
		detail => qr/The ring is at generation \d+, this data directory's binding at \d+: the ring was bound since by a copy of this data directory \(\/\S+\)/,
		hint => qr/Start that copy on this ring/);
};

# --- 3a -------------------------------------------------------------------
my $p = binding_node('p');
my $R = $p->{pmwal_ring};
my $q = copy_of($p, 'q');
my ($load) = ring_only_cut($p, tag => 'p');
ok(ring_holds($R), '3a: P\'s ring holds WAL after the cut');
refused_without_writing($q, '3a the copy started first', files => [ $R, wal_files($p) ],
	$copy_fatal->($R), on_started => copy_started($q, '3a'));
restores_all($p, $load, '3a P after the copy\'s attempt');
# both may use the ring in turn, each after the other's clean stop
ok($q->start(fail_ok => 1), '3a: after P\'s clean stop the copy starts on the ring');
$q->stop;
ok($p->start(fail_ok => 1), '3a: and after the copy\'s clean stop, P again');
$p->stop;

# --- 3b -------------------------------------------------------------------
my $p2 = binding_node('p2');
my $R2 = $p2->{pmwal_ring};
my $q2 = copy_of($p2, 'q2');
$q2->start;
$q2->safe_psql('postgres', q{INSERT INTO f VALUES (1, 'the copy ran')});
$q2->stop;
($load) = ring_only_cut($p2, tag => 'p2');
refused_without_writing($q2, '3b the copy that ran before', files => [ $R2, wal_files($p2) ],
	$copy_fatal->($R2), on_started => copy_started($q2, '3b'));
restores_all($p2, $load, '3b P after the copy\'s attempt');

# --- 3c -------------------------------------------------------------------
my ($qload) = ring_only_cut($q2, tag => 'q2');
refused_without_writing($p2, '3c P while the copy\'s WAL is in the ring',
	files => [ $R2, wal_files($q2) ], $copy_fatal->($R2),
	on_started => copy_started($p2, '3c'));
restores_all($q2, $qload, '3c the copy after P\'s attempt');

# --- 3d -------------------------------------------------------------------
my $p4 = binding_node('p4');
my $R4 = $p4->{pmwal_ring};
my $q4;
($load) = ring_only_cut($p4, tag => 'p4', commits => 1500,
	# the copy is taken while P runs, the flusher held (no pass after it)
	before_load => sub {
		stop_server_process($p4, 'flusher');
		$p4->safe_psql('postgres', 'CHECKPOINT');
		$q4 = copy_of($p4, 'q4');
	},
	flusher_runs => 1);
is(ring_gen($R4), binding_current($q4) && binding_current($q4)->{generation},
	'3d: the copy\'s binding is at the ring\'s generation') unless testing_old_build();
refused_without_writing($q4, '3d a copy of the running P started first',
	files => [ $R4, wal_files($p4) ],
	fatal => qr/pmwal ring "\Q$R4\E"/,
	on_started => copy_started($q4, '3d'));
restores_all($p4, $load, '3d P after the copy\'s attempt');

# --- 5a -------------------------------------------------------------------
my $s = binding_node('s', conf => "pmwal.flush_interval = 100ms\n");
my $RS = $s->{pmwal_ring};
my ($Rc, $Rreal, $Rempty) = map { "$RS.$_" } qw(copy real empty);
push @cleanup, $Rc, $Rreal, $Rempty;
File::Copy::copy($RS, $Rempty) or die;
chmod 0600, $Rempty;
my $copy_gen;
($load) = ring_only_cut($s, tag => 's', flusher_runs => 1,
	before_cut => sub {
		# the load runs, the flusher passes: copy the ring, wait for a pass
		# recorded in the binding file, then hold the flusher and let more
		# commits come that only the ring holds
		File::Copy::copy($RS, $Rc) or die "copy: $!";
		chmod 0600, $Rc;
		$copy_gen = ring_gen($Rc);
		for (1 .. 600)
		{
			last if testing_old_build();
			my $b = binding_current($s);
			last if $b && $b->{generation} > $copy_gen;
			Time::HiRes::sleep(0.05);
		}
		stop_server_process($s, 'flusher');
		my $now = $s->safe_psql('postgres', 'SELECT count(*) FROM t');
		$s->poll_query_until('postgres', 'SELECT count(*) >= ' . ($now + 1000) . ' FROM t');
	});
ok(ring_holds($Rc), '5a: the copy holds WAL');
cmp_ok(binding_current($s)->{generation}, '>', $copy_gen,
	'5a: a flusher pass since the copy is recorded in the binding file') unless testing_old_build();
rename $RS, $Rreal or die;
File::Copy::copy($Rc, $RS) or die;
chmod 0600, $RS;
refused_without_writing($s, '5a the ring replaced by an older copy of itself', files => [$RS],
	fatal => qr/pmwal ring "\Q$RS\E" is older than this data directory's binding to it; nothing was restored\n/,
	detail => qr/The ring is at generation \d+, the data directory's binding at \d+/,
	hint => qr/Put the ring that was at "\Q$RS\E" back/,
	on_started => sub {
		my ($n, $missing, $how) = acked_missing($s, $load);
		case_line("5a the older copy: the server started and restored it; $missing of $n acknowledged commits missing (counted by $how)");
	});
unlink $RS;
rename $Rreal, $RS or die;
restores_all($s, $load, '5a the real ring back');

# --- 5b -------------------------------------------------------------------
($load) = ring_only_cut($s, tag => 's5b', base => 100_000_000);
rename $RS, $Rreal or die;
File::Copy::copy($Rempty, $RS) or die;
chmod 0600, $RS;
refused_without_writing($s, '5b the ring replaced by an empty copy taken while stopped', files => [$RS],
	fatal => qr/pmwal ring "\Q$RS\E" is older than this data directory's binding to it\n/,
	detail => qr/The ring is at generation \d+, the data directory's binding at \d+/,
	hint => qr/Put the ring that was at "\Q$RS\E" back/,
	on_started => sub {
		my ($n, $missing, $how) = acked_missing($s, $load);
		case_line("5b the empty copy: the server started; $missing of $n acknowledged commits missing (counted by $how)");
	});
# ... and with pmwal.path naming a new ring: the bound ring's path holds
# an older copy of it, so the ring that held the WAL is gone
my $Rnew = "$RS.new";
push @cleanup, $Rnew;
set_conf($s, 'pmwal.path' => $Rnew);
refused_without_writing($s, '5b\' the empty older copy at the bound path, a new pmwal.path',
	files => [ $RS, $Rnew ],
	fatal => qr/pmwal cannot start: .*\n/,
	detail => qr/\Q$RS\E.*\Q$Rnew\E/,
	hint => qr/pmwal_ctl unbind|Put/,
	on_started => sub {
		my ($n, $missing, $how) = acked_missing($s, $load);
		case_line("5b' the empty older copy, a new path: the server started; $missing of $n acknowledged commits missing (counted by $how)");
	});
if (delete $s->{started_unexpectedly})
{
	# the data directory went on without the ring: give it back its state
	# after the cut (nothing of it was saved): this case ends the 5b checks
	note('5b\': the start went on; 5b\'s real ring is not restored');
	set_conf($s, 'pmwal.path' => $RS);
	unlink $RS;
	rename $Rreal, $RS or die;
	ring_discard($RS);
	unbind($s, force => 1);
}
else
{
	set_conf($s, 'pmwal.path' => $RS);
	unlink $RS;
	rename $Rreal, $RS or die;
	restores_all($s, $load, '5b the real ring back');
}

# --- 5c: the known limit ----------------------------------------------------
($load) = ring_only_cut($s, tag => 's5c', base => 200_000_000,
	before_cut => sub {
		# the flusher is held: no pass after this copy
		File::Copy::copy($RS, $Rc) or die "copy: $!";
		chmod 0600, $Rc;
		my $now = $s->safe_psql('postgres', 'SELECT count(*) FROM t');
		$s->poll_query_until('postgres', 'SELECT count(*) >= ' . ($now + 1000) . ' FROM t');
	});
rename $RS, $Rreal or die;
File::Copy::copy($Rc, $RS) or die;
chmod 0600, $RS;
my ($up, $log) = try_start($s);
my ($n, $missing) = $up ? acked_missing($s, $load) : (0, 0);
case_line("5c a copy taken after the flusher's last pass (undetectable): "
	  . ($up ? "started, $missing of $n acknowledged commits missing" : 'refused'));
TODO:
{
	local $TODO = 'a copy of the ring taken after the flusher\'s last pass cannot be told from the ring (README, Limitations)';
	ok(!$up || $missing == 0, '5c: the stale copy loses no acknowledged commit');
}
$s->stop if $up;

note(sprintf('%.0f s', Time::HiRes::time() - $t0));
done_testing();
