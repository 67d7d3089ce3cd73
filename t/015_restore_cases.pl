# Restore decisions for rings whose WAL must not (or not all) be written
# into pg_wal (restore.c).  Each case runs on a node of its own, with a
# ring holding WAL after the server was killed (by a simulated power cut,
# tools/powercut, unless said otherwise), and checks what the next start
# does with it:
#
#	1. issue 9 item 7, last bullet: "Restore verification accepts damage
#	   after last_end as 'end of WAL' when it makes XLogReader read past
#	   head, and then writes those bytes over pg_wal."  A committer held at
#	   copy_before_last_end (head published, last_end not yet), every
#	   server process killed without a power cut (pg_wal keeps every byte),
#	   then the first record after last_end in the ring given an
#	   xl_tot_len that sends the reader past the head: the restore writes
#	   only up to the end of the last record that read cleanly, pg_wal's
#	   good bytes after it stay and are replayed.  The same with the
#	   record's CRC damaged instead (the reader fails inside the ring): the
#	   restore also ends there, with a WARNING.
#	2. issue 14 item 1, last part: "Restore must never empty a ring while
#	   the checkpoint record that pg_control names is unreadable."  A
#	   checkpoint after the ring's head (the flusher stopped, no commit
#	   after it), a power cut, then the checkpoint record's page zeroed in
#	   pg_wal: the start is refused and the ring keeps its WAL; with the
#	   page put back, the start goes on.  Once with the redo point in the
#	   segment of the ring's head, once in a later one (the ring then
#	   looks stale).
#	3. issue 9 item 7, "Restore ignores backup_label ... Decide what is
#	   right": a ring holding WAL and a backup_label (from a base backup of
#	   the same node) in the data directory: refused, nothing touched; with
#	   backup_label gone, the start restores everything.
#	4. issue 9 item 7, "After pg_resetwal, a ring whose head is beyond the
#	   newest segment can be written over the new checkpoint's segment":
#	   the ring spans a segment boundary, pg_wal loses the segments from
#	   the boundary on, pg_resetwal puts its checkpoint at that boundary,
#	   inside the ring's range: refused, nothing touched.
#
# Each case fails on the code before the fixes
# (PMWAL_TEST_LIBDIR pointing at that build, with the test pause points
# copy_before_head and copy_before_last_end added to it at the same
# places).
use strict;
use warnings;
use FindBin;
use Digest::SHA;
use File::Copy ();
use Time::HiRes ();
use lib $FindBin::RealBin;

use PmwalTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $SEG = 16 * 1024 * 1024;
my $started = Time::HiRes::time();
my $checked = 0;

# No WAL sync but pmwal's during the load: the power cut has WAL to take.
my $quiet_wal = QUIET_WAL . "pmwal.flush_interval = 60s\nautovacuum = off\n";

# A build given with PMWAL_TEST_LIBDIR (the code before the fixes) knows
# only version 1.0 of the extension's SQL.
my $create_ext =
  $ENV{PMWAL_TEST_LIBDIR}
  ? q{CREATE EXTENSION pmwal VERSION '1.0'}
  : q{CREATE EXTENSION pmwal};

my $restored_re =
  qr/pmwal restored WAL ([0-9A-F]+\/[0-9A-F]+) to ([0-9A-F]+\/[0-9A-F]+) from the ring into pg_wal: (\d+) bytes, (\d+) records, (\d+) segments/;

sub lsn { return lsn_num($_[0]); }

sub lsn_text { return sprintf('%X/%X', int($_[0] / 2**32), $_[0] % 2**32); }

# A fresh node (under the power-cut log unless plain => 1) with table t.
sub fresh_node
{
	my ($name, %opts) = @_;
	my $node = pmwal_node($name, size => '64MB', conf => $quiet_wal,
		init => $opts{init} // {});
	if   ($opts{plain}) { $node->start; }
	else                { powercut_start($node); }
	$node->safe_psql('postgres',
		"$create_ext; CREATE TABLE t (id bigint PRIMARY KEY); CHECKPOINT");
	wait_accelerated($node, 't') or die "$name: commits are not accelerated";
	return $node;
}

# Start acknowledged load and wait until 300 commits are in.
sub start_load
{
	my ($node, $tag, %opts) = @_;
	my $load = acked_load_start($node, tag => $tag, %opts);
	$node->poll_query_until('postgres', 'SELECT count(*) >= 300 FROM t')
	  or die "$tag: the load does not run: ${ $load->{err} }";
	return $load;
}

# All acknowledged ids present.
sub check_acked
{
	my ($node, $load, $tag) = @_;
	my ($n, $missing) = acked_check($node, $load);
	diag("$tag: $n acknowledged commits checked, $missing missing");
	cmp_ok($n, '>=', 300, "$tag: at least 300 commits were acknowledged");
	is($missing, 0, "$tag: all $n acknowledged commits are present");
	$checked += $n;
	return;
}

# The ring's dynamic words, as one string.
sub ring_words
{
	my ($node) = @_;
	my $ring = $node->{pmwal_ring};
	return join(' ', map { sprintf('%s=%X', $_, ring_read_u64($ring, $_)) }
		  qw(tail last_end head state));
}

# Path of the pg_wal segment that holds LSN $x (timeline 1, 16MB segments).
sub segment_of
{
	my ($node, $x) = @_;
	my $seg = int($x / $SEG);
	return sprintf('%s/pg_wal/%08X%08X%08X', $node->data_dir, 1, int($seg / 256), $seg % 256);
}

# Read or (with $bytes) write pg_wal's bytes from LSN $from on (the
# segment files must exist).
sub wal_rw
{
	my ($node, $from, $len, $bytes) = @_;
	my $out = '';
	while ($len > 0)
	{
		my $n = $SEG - $from % $SEG;
		$n = $len if $n > $len;
		my $path = segment_of($node, $from);
		open my $fh, '+<:raw', $path or die "open $path: $!";
		sysseek($fh, $from % $SEG, 0) or die "seek $path: $!";
		if (defined $bytes)
		{
			syswrite($fh, substr($bytes, length($out), $n)) == $n or die "write $path: $!";
			$out .= substr($bytes, length($out), $n);
		}
		else
		{
			my $buf = '';
			sysread($fh, $buf, $n) == $n or die "short read of $path";
			$out .= $buf;
		}
		close $fh;
		$from += $n;
		$len -= $n;
	}
	return $out;
}

# Read or (with $bytes) write the ring's bytes of LSNs from $from on.
sub ring_rw
{
	my ($node, $from, $len, $bytes) = @_;
	my $cap = ring_field($node->{pmwal_ring}, 'capacity');
	my $out = '';
	open my $fh, '+<:raw', $node->{pmwal_ring} or die "open ring: $!";
	while ($len > 0)
	{
		my $n = $cap - $from % $cap;
		$n = $len if $n > $len;
		sysseek($fh, 4096 + $from % $cap, 0) or die "seek ring: $!";
		if (defined $bytes)
		{
			syswrite($fh, substr($bytes, length($out), $n)) == $n or die "write ring: $!";
			$out .= substr($bytes, length($out), $n);
		}
		else
		{
			my $buf = '';
			sysread($fh, $buf, $n) == $n or die 'short read of the ring';
			$out .= $buf;
		}
		$from += $n;
		$len -= $n;
	}
	close $fh;
	return $out;
}

# Start that is expected to be refused; returns the log it wrote.  If the
# server came up after all, it is stopped again, so that the case goes on.
sub start_refused
{
	my ($node, $tag, $what) = @_;
	my $offset = -s $node->logfile;
	my $up = $node->start(fail_ok => 1);
	ok(!$up, "$tag: the server refuses to start ($what)");
	$node->stop('immediate') if $up;
	my $log = slurp_file($node->logfile, $offset);
	my @why = $log =~ /((?:PANIC|FATAL):  .*)/g;
	diag("$tag: the start ended with: " . join(' | ', @why)) if @why;
	return $log;
}

# --- 1. damage after last_end (issue 9 item 7, last bullet) -----------------
# 'xl_tot_len': the first record after last_end claims 1 MB, so XLogReader
# asks for pages past the head.  'xl_crc': the same record's CRC damaged,
# which the reader reports without reading past the head.
for my $damage ('xl_tot_len', 'xl_crc')
{
	my $tag = $damage eq 'xl_tot_len' ? 'beyond_last_end' : 'beyond_last_end_crc';
	# README ("When the ring cannot be restored"): "Damage after the last
	# acknowledged commit only ends the restore there: those bytes are not
	# written."
	my $node = fresh_node($tag, plain => 1);
	my $ring = $node->{pmwal_ring};
	my $load = start_load($node, $tag);

	# a committer held after publishing head, before moving last_end: the
	# ring then holds WAL after the last acknowledged record.  It holds
	# ring_lock there, so the load's commits wait behind it.  Each -c is a
	# transaction of its own: the first whose copy moves last_end stops.
	my $offset = -s $node->logfile;
	my $held = bg_psql($node, "SET pmwal.test_pause = 'copy_before_last_end'",
		map { "INSERT INTO t VALUES (-$_)" } 1 .. 50);
	my $pid = pause_wait($node, 'copy_before_last_end', $offset);
	ok($pid, "$tag: a committer is held before it moves last_end (pid $pid)");

	# kill every server process; no power cut: pg_wal keeps every byte
	powercut_kill($node);
	acked_load_finish($load);
	bg_psql_finish($held);
	my $last_end = ring_read_u64($ring, 'last_end');
	my $head = ring_read_u64($ring, 'head');
	note("$tag: ring after the kill: " . ring_words($node));
	cmp_ok($head, '>', $last_end,
		"$tag: the ring holds WAL after last_end (" . lsn_text($last_end) . ' to ' . lsn_text($head) . ')');

	# the first record after last_end (after the page header if last_end
	# is a page boundary)
	my $rec = $last_end;
	$rec += ($rec % $SEG == 0 ? 40 : 24) if $rec % 8192 == 0;
	cmp_ok($rec + 24, '<=', $head, "$tag: the record at " . lsn_text($rec) . ' starts before the head');
	my $good = wal_rw($node, $last_end, $head - $last_end);
	is(unpack('H*', ring_rw($node, $last_end, $head - $last_end)), unpack('H*', $good),
		"$tag: pg_wal holds the ring's bytes of [last_end, head)");
	note("$tag: xl_tot_len of the record at " . lsn_text($rec) . ': ' . unpack('L<', ring_rw($node, $rec, 4)));
	my ($at, $bytes);
	if ($damage eq 'xl_tot_len')
	{
		# 1 MB: the record would go on in pages past the head, none of
		# which the reader gets from the ring (the rest of [rec, head) is
		# a few hundred bytes)
		cmp_ok($head, '<', $rec - $rec % 8192 + 2 * 8192,
			"$tag: the head lies within the damaged record's page or the next");
		($at, $bytes) = ($rec, pack('L<', 1024 * 1024));
	}
	else
	{
		# the first byte of xl_crc (offset 20 in the record header; a
		# header cut by a page boundary goes on after the next page's
		# short header)
		$at = $rec + 20;
		$at += 24 if $at % 8192 < $rec % 8192;
		$bytes = chr(ord(ring_rw($node, $at, 1)) ^ 0xff);
	}
	my $saved = ring_rw($node, $at, length $bytes);
	ring_rw($node, $at, length $bytes, $bytes);
	my $before = Digest::SHA::sha256_hex($good);

	$offset = -s $node->logfile;
	my $up = $node->start(fail_ok => 1);
	my $log = slurp_file($node->logfile, $offset);
	{
		ok($up, "$tag: the server starts");
		my ($from, $to) = $log =~ $restored_re;
		ok(defined $to, "$tag: the restore is logged");
		$to //= '0/0';
		cmp_ok(lsn($to), '<=', $rec,
			"$tag: the restore ends at or before the damaged record (restored to $to, record at "
			  . lsn_text($rec) . ', head ' . lsn_text($head) . ')');
		is(Digest::SHA::sha256_hex(wal_rw($node, $last_end, $head - $last_end)), $before,
			"$tag: pg_wal's bytes of [last_end, head) are unchanged");
		# recovery replays pg_wal's good records there (the held commit's too)
		my ($redo_done) = $log =~ /redo done at ([0-9A-F]+\/[0-9A-F]+)/;
		cmp_ok(lsn($redo_done // '0/0'), '>=', $rec,
			"$tag: redo replays pg_wal's record at " . lsn_text($rec) . ' (redo done at ' . ($redo_done // '?') . ')');
	}
	unless ($up)
	{
		my @why = grep { !/PMEM_IS_PMEM_FORCE/ } $log =~ /((?:PANIC|FATAL|DETAIL):  .*)/g;
		diag("$tag: the start ended with: " . join(' | ', @why));
		# the damage undone, the start restores (nothing acknowledged lost)
		ring_rw($node, $at, length $saved, $saved);
		$node->start;
	}
	check_acked($node, $load, $tag);
	$node->stop;
}

# --- 2. the checkpoint record pg_control names is unreadable (issue 14 item 1)
# Twice: with the checkpoint's redo point in the segment of the ring's head
# (the restore verifies and writes, then must not empty the ring), and in a
# later segment (pg_switch_wal() first: the ring looks stale, all of it
# before the redo point's segment, and must not be dropped either).
for my $variant ('same_segment', 'later_segment')
{
	my $tag = "ckpt_unreadable_$variant";
	my $node = fresh_node($tag);
	my $ring = $node->{pmwal_ring};
	my $load = start_load($node, $tag, duration => 4);
	# the flusher stopped (no sync moves the tail; nothing copies the
	# checkpoint into the ring); the load ends; then a checkpoint that no
	# commit follows: its record lies after the ring's head
	my $flusher = pmwal_status($node)->{flusher_pid};
	kill('STOP', $flusher) or die "$tag: cannot stop the flusher ($flusher): $!";
	acked_load_finish($load);
	$node->safe_psql('postgres', 'SELECT pg_switch_wal()') if $variant eq 'later_segment';
	$node->safe_psql('postgres', 'CHECKPOINT');
	my ($ckpt, $redo) = split /\|/,
	  $node->safe_psql('postgres', 'SELECT checkpoint_lsn, redo_lsn FROM pg_control_checkpoint()');
	my $cut = powercut($node);
	note("$tag: $cut->{summary}");
	my $tail = ring_read_u64($ring, 'tail');
	my $head = ring_read_u64($ring, 'head');
	cmp_ok($head, '>', $tail, "$tag: the ring holds WAL (" . lsn_text($tail) . ' to ' . lsn_text($head) . ')');
	cmp_ok(lsn($ckpt), '>=', $head, "$tag: the checkpoint record ($ckpt, redo $redo) is after the ring's head");
	if ($variant eq 'later_segment')
	{
		cmp_ok(int(lsn($redo) / $SEG), '>', int(($head - 1) / $SEG),
			"$tag: the redo point lies in a later segment than all the ring holds");
	}
	else
	{
		note("$tag: redo point in segment " . int(lsn($redo) / $SEG)
			  . ', ring head in segment ' . int(($head - 1) / $SEG));
	}

	# the page holding the checkpoint record, zeroed in pg_wal
	my $page = lsn($ckpt) - lsn($ckpt) % 8192;
	my $saved = wal_rw($node, $page, 8192);
	wal_rw($node, $page, 8192, "\0" x 8192);
	my $words = ring_words($node);
	my $log = start_refused($node, $tag, 'checkpoint record unreadable');
	like($log,
		qr/FATAL:  pmwal ring "[^"]+" was kept: the checkpoint record at \Q$ckpt\E that pg_control names is in neither the ring nor pg_wal/,
		"$tag: FATAL says the ring was kept and why");
	unlike($log, qr/holds only WAL older than the last checkpoint/,
		"$tag: the ring is not dropped as a stale one");
	is(ring_words($node), $words, "$tag: the ring's header is unchanged (it was not emptied)");

	# with the page back, the start restores the ring (or, where all of
	# it lies before the redo point's segment, drops it as stale)
	wal_rw($node, $page, 8192, $saved);
	my $offset = -s $node->logfile;
	ok($node->start(fail_ok => 1), "$tag: with the checkpoint record's page back, the server starts");
	like(slurp_file($node->logfile, $offset),
		$variant eq 'later_segment' ? qr/holds only WAL older than the last checkpoint; not restored/ : $restored_re,
		"$tag: and " . ($variant eq 'later_segment' ? 'drops the stale ring' : 'restores the ring'));
	if ($node->{_pid})
	{
		check_acked($node, $load, $tag);
		$node->stop;
	}
}

# --- 3. backup_label in the data directory (issue 9 item 7) ------------------
{
	my $tag = 'backup_label';
	my $node = fresh_node($tag, init => { allows_streaming => 1 });
	my $ring = $node->{pmwal_ring};
	$node->backup('base');
	my $label = $node->backup_dir . '/base/backup_label';
	ok(-f $label, "$tag: a base backup of the node, with its backup_label");
	my $load = start_load($node, $tag);
	Time::HiRes::sleep(0.3 + rand(0.5));
	my $cut = powercut($node);
	acked_load_finish($load);
	note("$tag: $cut->{summary}");
	cmp_ok(ring_read_u64($ring, 'head'), '>', ring_read_u64($ring, 'tail'),
		"$tag: the ring holds WAL after the power cut");

	File::Copy::copy($label, $node->data_dir . '/backup_label') or die "copy: $!";
	my $before = wal_fingerprint($node);
	my $log = start_refused($node, $tag, 'backup_label present');
	like($log,
		qr/FATAL:  pmwal ring "[^"]+" holds WAL, but this data directory is being restored from a base backup; nothing was restored/,
		"$tag: FATAL says the data directory is being restored from a base backup");
	like($log, qr/HINT:  .*pmwal_ctl dump.*pmwal_ctl reset --discard-wal/,
		"$tag: HINT names pmwal_ctl dump and reset");
	unlike($log, $restored_re, "$tag: nothing was restored");
	is(wal_fingerprint($node), $before, "$tag: pg_wal and the ring are unchanged");

	# without backup_label, the ring is this server's own
	unlink $node->data_dir . '/backup_label';
	unlink $node->data_dir . '/backup_label.old';
	my $offset = -s $node->logfile;
	ok($node->start(fail_ok => 1), "$tag: without backup_label the server starts");
	like(slurp_file($node->logfile, $offset), $restored_re, "$tag: and restores the ring");
	if ($node->{_pid})
	{
		check_acked($node, $load, $tag);
		$node->stop;
	}
}

# --- 4. pg_resetwal with a checkpoint inside the ring's range (issue 9 item 7)
{
	my $tag = 'resetwal';
	my $node = fresh_node($tag);
	my $ring = $node->{pmwal_ring};
	my $load = start_load($node, $tag);
	# with the flusher stopped the tail stays in this segment while the
	# load goes on into the next one: the ring spans the boundary
	my $flusher = pmwal_status($node)->{flusher_pid};
	kill('STOP', $flusher) or die "$tag: cannot stop the flusher ($flusher): $!";
	my $seg = $node->safe_psql('postgres', 'SELECT pg_walfile_name(pg_current_wal_insert_lsn())');
	$node->poll_query_until('postgres',
		"SELECT pg_walfile_name(pg_current_wal_insert_lsn()) > '$seg'")
	  or die "$tag: the load does not reach the next segment";
	Time::HiRes::sleep(0.2 + rand(0.3));
	my $cut = powercut($node);
	acked_load_finish($load);
	note("$tag: $cut->{summary}");
	my $tail = ring_read_u64($ring, 'tail');
	my $head = ring_read_u64($ring, 'head');
	my $boundary = ($tail - $tail % $SEG) + $SEG;
	note("$tag: ring after the cut: " . ring_words($node));
	cmp_ok($head, '>', $boundary,
		"$tag: the ring spans a segment boundary (" . lsn_text($tail) . ' to ' . lsn_text($head) . ')');

	# pg_wal lost the segments from that boundary on (the newest ones);
	# pg_resetwal then puts its checkpoint at the start of the next
	# segment after the newest file left: the boundary, which the ring
	# holds
	my $dir = $node->data_dir . '/pg_wal';
	opendir my $dh, $dir or die "could not read $dir: $!";
	my @gone = grep { /^[0-9A-F]{24}$/ && hex(substr($_, 8, 8)) * 256 + hex(substr($_, 16, 8)) >= $boundary / $SEG }
	  readdir $dh;
	closedir $dh;
	unlink map { "$dir/$_" } @gone;
	note("$tag: removed from pg_wal: @gone");
	# every process is gone; pg_resetwal refuses while the lock file exists
	unlink $node->data_dir . '/postmaster.pid';
	command_ok([ 'pg_resetwal', '-f', '-D', $node->data_dir ], "$tag: pg_resetwal -f");
	my ($control) = run_command([ 'pg_controldata', '-D', $node->data_dir ]);
	my ($ckpt) = $control =~ /^Latest checkpoint location:\s+(\S+)$/m;
	ok(defined $ckpt && lsn($ckpt) >= $tail && lsn($ckpt) < $head,
		"$tag: the new checkpoint (" . ($ckpt // '?') . ') lies inside the ring\'s range');

	my $before = wal_fingerprint($node);
	my $log = start_refused($node, $tag, 'after pg_resetwal');
	like($log,
		qr/FATAL:  pmwal ring "[^"]+" holds WAL of another history than pg_wal; nothing was restored/,
		"$tag: FATAL says the ring holds WAL of another history");
	like($log, qr/DETAIL:  .*has no predecessor \(pg_resetwal was run\)/,
		"$tag: DETAIL names pg_resetwal");
	unlike($log, $restored_re, "$tag: nothing was restored");
	is(wal_fingerprint($node), $before, "$tag: pg_wal and the ring are unchanged");
}

diag(sprintf('%d acknowledged commits checked present; %.0f s',
		$checked, Time::HiRes::time() - $started));

done_testing();
