# hF.pm
#		Helpers of the tests converted to the sync layer (t/010, t/012,
#		t/014, t/016, t/017): holding processes at pause points armed for
#		the whole server, interactive sessions, and the invariant every
#		hold checks -- PostgreSQL's flush pointer never ahead of what the
#		ring claims or pmwal synced.
package hF;

use strict;
use warnings;

use Exporter 'import';
use IPC::Run ();
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes ();

use PmwalTest;

our @EXPORT = qw(forget_pauses hold_at flush_covered ring_holds_flush_page
  session rows);

# After a power cut: the next start must not hold anything (a setting
# written by ALTER SYSTEM before the cut would arm the new processes).
sub forget_pauses
{
	my ($node) = @_;
	$node->append_conf('postgresql.auto.conf', "pmwal.test_pause = ''\n");
	unlink glob($node->data_dir . '/pmwal_test_release.*');
	return;
}

# Run SQL in a background psql whose session arms $point, and wait until
# it is held there.  $sql: a list of statements, or a sub that gives them
# for try number N: under load another session's flush may carry a
# commit's WAL, and it never reaches its own sync; then (only with a sub)
# it is tried again, up to 20 times.  Returns the background psql
# (bg_psql), the pid, the try, and the tries that completed (acknowledged)
# before.  Unlike PmwalTest's hold_in_sync, it stops no other process.
sub hold_at
{
	my ($node, $point, @sql) = @_;
	my $name = (split /:/, $point)[0];
	my $gen = ref $sql[0] eq 'CODE' ? $sql[0] : undef;
	my @done;
	for my $try (1 .. ($gen ? 20 : 1))
	{
		my @stmts = $gen ? $gen->($try) : @sql;
		pause_rearm($node, $name);
		my $offset = -s $node->logfile;
		my $bg = bg_psql($node, "SET pmwal.test_pause = '$point'", @stmts);
		my $pid = pause_or_exit($node, $name, $offset, $bg);
		return ($bg, $pid, $try, \@done) if $pid;
		my ($rc, undef, $err) = bg_psql_finish($bg);
		die "hold_at: \"@stmts\" failed: $err" if $rc != 0;
		push @done, $try;
	}
	die "hold_at: no try reached $point";
}

# Is PostgreSQL's flush pointer covered: at most the ring's head or
# pmwal's durable point (its own real syncs)?  Only meaningful while the
# ring is anchored (state "in use"); a retired ring leaves the syncs to
# PostgreSQL.  Returns (ok, text).
sub flush_covered
{
	my ($node) = @_;
	my ($flush, $tail, $head, $durable, $state, $ok) = split /\|/, $node->safe_psql('postgres', q{
SELECT f, tail_lsn, head_lsn, durable_lsn, state, f <= GREATEST(head_lsn, durable_lsn)
  FROM pmwal_status, pg_current_wal_flush_lsn() f});
	my $text = "flush $flush, ring [$tail, $head) $state, pmwal durable $durable";
	return (1, "$text: not anchored") if $state ne 'in use';
	return ($ok eq 't', $text);
}

# Does the ring hold the page in which PostgreSQL's flush pointer lies,
# when nothing is being written?  That page is the one the next WAL write
# rewrites from its start (XLogWrite writes whole pages), adding records
# after the flush pointer: pmwal's real syncs made the page's present
# version durable, only the ring can keep the next one.  A ring whose tail
# lies beyond it cannot (the writer's sync publishes only the end of its
# write).  Returns (ok, text).
sub ring_holds_flush_page
{
	my ($node) = @_;
	my ($flush, $tail, $head, $ok) = split /\|/, $node->safe_psql('postgres', q{
SELECT f, tail_lsn, head_lsn,
       (tail_lsn - '0/0'::pg_lsn) <= floor((f - '0/0'::pg_lsn) / 8192) * 8192
  FROM pmwal_status, pg_current_wal_flush_lsn() f});
	return ($ok eq 't', "flush $flush, ring [$tail, $head)");
}

# An interactive psql session (PmwalTest's psql_session).
sub session
{
	my ($node) = @_;
	return psql_session($node);
}

# Rows of a query as a comma-separated string.
sub rows
{
	my ($node, $sql) = @_;
	return join(',', split /\n/, $node->safe_psql('postgres', $sql));
}

1;
