# Identity changes of a data directory that stock PostgreSQL starts after,
# with nothing at stake in the ring (issue 28, item 2).  pg_resetwal
# --wal-segsize gives the cluster another WAL segment size, and
# pg_createsubscriber (17+) a new system identifier; both stop the server
# cleanly first and leave pg_wal/pmwal.binding in place.  The ring is then
# empty and this data directory's binding names it, at its generation: it
# follows the new identity.  Anything else keeps refusing, writing nothing.
#
#	seg_follow: a clean stop, pg_resetwal --wal-segsize=32: the start
#	   follows (the ring's header says 32 MB, same ring_id); then a power
#	   cut under load on the followed ring: every acknowledged commit is
#	   restored with the new segment size.
#	seg_holds_wal (control): a power cut leaves acknowledged WAL only in the
#	   ring; pg_resetwal -f --wal-segsize=32: refused ("was written with
#	   another WAL segment size", the ring holds WAL), ring and pg_wal byte
#	   for byte; the data directory put back as it was, the ring restores
#	   every commit.
#	seg_copy (control): a file copy of the stopped data directory at another
#	   path, pg_resetwal --wal-segsize on the copy: refused (the ring was
#	   bound by the original); the original started since: refused (the
#	   copy's binding is two generations behind).
#	seg_stock (control): stock PostgreSQL starts after the same pg_resetwal.
#	sub_follow (17+): a standby running pmwal on a ring of its own, turned
#	   into a logical subscriber by pg_createsubscriber (new system
#	   identifier, pg_resetwal): the start follows; the subscription
#	   replicates.
#	sub_holds_wal (control, 17+): the same, with the ring's header made to
#	   claim WAL: refused ("belongs to another database cluster").
#	sub_copy (control, 17+): a file copy of the subscriber's data directory
#	   at another path, on the same ring: refused (another data directory).
#	sub_stock (control, 17+): a standby without pmwal, the same
#	   pg_createsubscriber: it starts.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PmwalTest;
use PmwalTest::Binding;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use PostgreSQL::Test::RecursiveCopy;
use Test::More;
use Time::HiRes ();

my $t0 = Time::HiRes::time();
my $MB = 1024 * 1024;
my ($major) = `pg_config --version` =~ /PostgreSQL (\d+)/;

sub ring_id { return unpack('H*', ring_field($_[0], 'ring_id')); }
sub sysid { return controldata($_[0])->{'Database system identifier'}; }

sub pg_resetwal
{
	my ($node, @opts) = @_;
	unlink $node->data_dir . '/postmaster.pid';
	command_ok([ 'pg_resetwal', @opts, '-D', $node->data_dir ],
		'pg_resetwal ' . join(' ', @opts) . ' on ' . $node->name);
	return;
}

# The server must start; returns the log of the start.
sub starts
{
	my ($node, $case) = @_;
	my ($up, $log) = try_start($node);
	ok($up, "$case: the server starts") or diag("log of the attempt:\n$log");
	return ($up, $log);
}

# --- seg_follow -------------------------------------------------------------
my $node = binding_node('seg');
my $R = $node->{pmwal_ring};
my $id = ring_id($R);
$node->start;
$node->safe_psql('postgres', q{INSERT INTO f VALUES (1, 'before')});
$node->stop;
my $gen = ring_gen($R);
pg_resetwal($node, '--wal-segsize=32');
is(controldata($node)->{'Bytes per WAL segment'}, 32 * $MB, 'seg_follow: pg_control says 32 MB segments');
my ($up, $log) = starts($node, 'seg_follow');
if ($up)
{
	like($log, qr/LOG:  pmwal ring "\Q$R\E" follows the new identity of this data directory\n.*DETAIL:  .*WAL segment size changed from 16777216 to 33554432 bytes/,
		'seg_follow: the log says the ring follows, and from what to what');
	is(ring_field($R, 'wal_segment_size'), 32 * $MB, 'seg_follow: the ring\'s header says 32 MB segments');
	is(ring_id($R), $id, 'seg_follow: the ring keeps its ring_id');
	cmp_ok(ring_gen($R), '>', $gen, 'seg_follow: the ring was bound again');
	is(binding_current($node)->{ring_id}, $id, 'seg_follow: the binding names the ring');
	is($node->safe_psql('postgres', q{SELECT v FROM f WHERE id = 1}), 'before', 'seg_follow: the data is there');
	wait_accelerated($node, 't');
	$node->stop;
	# commits on the followed ring, a power cut: all restored
	my ($load) = ring_only_cut($node, tag => 'seg_follow');
	ok(ring_holds($R), 'seg_follow: the ring holds WAL after the cut');
	($up, $log) = starts($node, 'seg_follow after a power cut');
	if ($up)
	{
		like($log, qr/pmwal restored WAL/, 'seg_follow: the ring was restored');
		my ($n, $missing) = acked_missing($node, $load);
		is($missing, 0, "seg_follow: all $n acknowledged commits are present (32 MB segments)");
		case_line("seg_follow: pg_resetwal --wal-segsize=32, then a power cut: $missing of $n missing");
		$node->stop;
	}
}
else
{
	case_line('seg_follow: refused: ' . (($log =~ /(FATAL:  .*)/)[0] // '?'));
}

# --- seg_copy (control) -----------------------------------------------------
SKIP:
{
	skip 'seg_copy needs the followed ring of seg_follow', 1 unless $up;
	my $copy = copy_of($node, 'seg_copy');
	pg_resetwal($copy, '--wal-segsize=16');
	refused_without_writing($copy, 'seg_copy the copy, the original not started since', files => [$R],
		fatal => qr/pmwal ring "\Q$R\E" was written with another WAL segment size\n/,
		detail => qr/The ring was bound last by the data directory \S+, not by this one/);
	$node->start;
	$node->stop;
	refused_without_writing($copy, 'seg_copy the copy, the original started since', files => [$R],
		fatal => qr/pmwal ring "\Q$R\E" was written with another WAL segment size\n/,
		detail => qr/The ring is at generation \d+, this data directory's binding at \d+: another copy of this data directory has used the ring since/);
	case_line('seg_copy: ' . (($copy->{hd_started_unexpectedly} ? 'NOT refused' : 'refused')));
}

# --- seg_holds_wal (control) ------------------------------------------------
{
	my $w = binding_node('segwal');
	my $RW = $w->{pmwal_ring};
	my ($load) = ring_only_cut($w, tag => 'segwal');
	ok(ring_holds($RW), 'seg_holds_wal: the ring holds WAL after the cut');
	unlink $w->data_dir . '/postmaster.pid';
	scene_save($w, 'before_reset', $RW);
	pg_resetwal($w, '-f', '--wal-segsize=32');
	my $refused = refused_without_writing($w, 'seg_holds_wal pg_resetwal -f --wal-segsize=32 after a power cut',
		files => [$RW],
		fatal => qr/pmwal ring "\Q$RW\E" was written with another WAL segment size\n/,
		detail => qr/The ring holds WAL from [0-9A-F]+\/[0-9A-F]+ to [0-9A-F]+\/[0-9A-F]+, written under the old identity/);
	my ($msg) = slurp_file($w->logfile) =~ /.*(FATAL:  pmwal ring .*\n(?:.*(?:DETAIL|HINT):  .*\n)*)/;
	case_line("seg_holds_wal: " . ($refused ? "refused:\n" . ($msg // '?') : 'NOT refused'));
	# nothing was lost: the data directory as it was before pg_resetwal
	# restores every acknowledged commit from the ring
	scene_restore($w, 'before_reset');
	my ($wup, $wlog) = starts($w, 'seg_holds_wal, put back as it was');
	if ($wup)
	{
		like($wlog, qr/pmwal restored WAL/, 'seg_holds_wal: the ring was restored');
		my ($n, $missing) = acked_missing($w, $load);
		is($missing, 0, "seg_holds_wal: all $n acknowledged commits are present");
		$w->stop;
	}
}

# --- seg_stock (control) ----------------------------------------------------
{
	my $s = PostgreSQL::Test::Cluster->new('segstock');
	$s->init;
	$s->start;
	$s->safe_psql('postgres', 'CREATE TABLE f (id int); INSERT INTO f VALUES (1)');
	$s->stop;
	pg_resetwal($s, '--wal-segsize=32');
	my ($sup) = starts($s, 'seg_stock');
	is($s->safe_psql('postgres', 'SELECT count(*) FROM f'), 1, 'seg_stock: the data is there') if $sup;
	$s->stop if $sup;
}

# --- pg_createsubscriber (17+) ----------------------------------------------
SKIP:
{
	skip "pg_createsubscriber is new in PostgreSQL 17 (this is $major)", 1 if $major < 17;

	# pg_createsubscriber writes primary_conninfo with every option its
	# libpq knows (sslnegotiation, 17+).  The walreceiver of the fetched
	# 16-18 builds (tools/pg-versions.sh) finds libpq through the RUNPATH
	# /opt/postgresql/lib, that is Debian's older libpq in /lib, which
	# rejects them: the servers of this block get their own libpq first.
	local $ENV{LD_LIBRARY_PATH} = join(':', grep { defined && length }
		  (`pg_config --libdir` =~ s/\s+\z//r), $ENV{LD_LIBRARY_PATH});

	my $p = pmwal_node('pub', init => { allows_streaming => 'logical' });
	$p->start;
	$p->safe_psql('postgres',
		'CREATE EXTENSION pmwal; CREATE TABLE tab (id int PRIMARY KEY); '
		  . 'INSERT INTO tab SELECT generate_series(1, 10)');
	$p->backup('bk');

	# Make the standby $name from the backup and turn it into a subscriber
	# (it must be stopped for pg_createsubscriber).
	my $subscriber = sub {
		my ($name, %o) = @_;
		my $s = $o{stock}
		  ? PostgreSQL::Test::Cluster->new($name)
		  : pmwal_standby($p, $name, 'bk');
		if ($o{stock})
		{
			$s->init_from_backup($p, 'bk', has_streaming => 1);
			$s->append_conf('postgresql.conf', "shared_preload_libraries = ''\n");
		}
		$s->start;
		$p->wait_for_replay_catchup($s);
		$s->stop;
		command_ok(
			[ 'pg_createsubscriber', '--verbose', '--recovery-timeout' => 180,
			  '--pgdata' => $s->data_dir,
			  '--publisher-server' => $p->connstr('postgres'),
			  '--socketdir' => $s->host,
			  '--subscriber-port' => $s->port,
			  '--database' => 'postgres',
			  '--publication' => "pub_$name",
			  '--subscription' => "sub_$name",
			  '--replication-slot' => "slot_$name" ],
			"$name: pg_createsubscriber")
		  or system('pg_ctl', '-D', $s->data_dir, '-m', 'immediate', 'stop');
		isnt(sysid($s), sysid($p), "$name: the subscriber has a new system identifier");
		return $s;
	};

	my $s = $subscriber->('sub');
	my $RS = $s->{pmwal_ring};
	my $old_sysid = ring_field($RS, 'system_identifier');
	isnt($old_sysid, sysid($s), 'sub: the ring still has the old system identifier');

	# sub_holds_wal: the ring's header claims WAL (as if a crash had left
	# it): the identity does not follow
	scene_save($s, 'after_createsubscriber', $RS);
	my $tail = 0x7000000;
	ring_write_u64($RS, 'timeline', 2);
	ring_write_u64($RS, 'tail', $tail);
	ring_write_u64($RS, 'head', $tail + 8192);
	ring_write_u64($RS, 'state', RING_STATE_IN_USE);
	my $refused = refused_without_writing($s, 'sub_holds_wal', files => [$RS],
		fatal => qr/pmwal ring "\Q$RS\E" belongs to another database cluster\n/,
		detail => qr/The ring holds WAL from 0\/0?7000000 to 0\/0?7002000, written under the old identity/);
	my ($msg) = slurp_file($s->logfile) =~ /.*(FATAL:  pmwal ring .*\n(?:.*(?:DETAIL|HINT):  .*\n)*)/;
	case_line("sub_holds_wal: " . ($refused ? "refused:\n" . ($msg // '?') : 'NOT refused'));
	scene_restore($s, 'after_createsubscriber');

	# sub_copy: a copy of the subscriber at another path, on the same ring
	my $copy = copy_of($s, 'sub_copy');
	$refused = refused_without_writing($copy, 'sub_copy', files => [$RS],
		fatal => qr/pmwal ring "\Q$RS\E" belongs to another database cluster\n/,
		detail => qr/The ring was bound last by the data directory \S+, not by this one/);
	($msg) = slurp_file($copy->logfile) =~ /.*(FATAL:  pmwal ring .*\n(?:.*(?:DETAIL|HINT):  .*\n)*)/;
	case_line("sub_copy: " . ($refused ? "refused:\n" . ($msg // '?') : 'NOT refused'));

	# sub_follow
	my ($sup, $slog) = starts($s, 'sub_follow');
	if ($sup)
	{
		like($slog, qr/LOG:  pmwal ring "\Q$RS\E" follows the new identity of this data directory\n.*DETAIL:  .*system identifier changed from $old_sysid to \d+/,
			'sub_follow: the log says the ring follows');
		is(ring_field($RS, 'system_identifier'), sysid($s), 'sub_follow: the ring has the new system identifier');
		is(binding_current($s)->{system_identifier}, sysid($s), 'sub_follow: the binding has the new system identifier');
		$p->safe_psql('postgres', 'INSERT INTO tab VALUES (11)');
		$p->wait_for_catchup('sub_sub');
		is($s->safe_psql('postgres', 'SELECT count(*) FROM tab'), 11, 'sub_follow: the subscription replicates');
		wait_accelerated($s, 't');
		$s->safe_psql('postgres', 'CREATE TABLE local (id int); INSERT INTO local VALUES (1)');
		is(pmwal_status($s)->{accelerated}, 'true', 'sub_follow: commits go through the ring');
		$s->stop;
		case_line('sub_follow: started');
	}
	else
	{
		case_line('sub_follow: refused: ' . (($slog =~ /(FATAL:  .*)/)[0] // '?'));
	}

	# sub_stock
	my $st = $subscriber->('sub_stock', stock => 1);
	my ($stup) = starts($st, 'sub_stock');
	$st->stop if $stup;
}

note(sprintf('%.0f s', Time::HiRes::time() - $t0));
done_testing();
