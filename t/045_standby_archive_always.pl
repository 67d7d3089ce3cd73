# The standby's ring and its archive (issue 29): a synchronous standby
# running pmwal with archive_mode = always archives each segment its
# walreceiver completed -- after the walreceiver's sync of it, which pmwal
# answers from the ring.  So the archive takes segments that, at that
# moment, only the ring holds durably; a power cut must then cost neither
# an acknowledged commit nor the archive's truth.
#
# Each case: a pmwal primary (1 MB segments) whose every commit waits for
# one synchronous standby archiving with archive_mode = always, a base
# backup of the primary for point-in-time recovery taken before the load
# (pg_basebackup -X none: every WAL byte after it must come from the
# standby's archive), committing load (one transaction in ten writes some
# 15 kB more; some 5 MB in all, well below the quarter of the standby's
# ring at which its flusher would sync pg_wal) until the standby archived several segments, then:
#
#  after_publish  the standby's walreceiver held inside its sync, the
#                 ring's head published, its flush not yet reported (the
#                 archiver runs on; the standby's flusher held throughout,
#                 as one inside its pmwal.flush_interval: it syncs pg_wal
#                 at its first wakeup after a segment completed); the
#                 standby's power cut, the primary lost; the standby
#                 restored and promoted
#  behind         the same, the archive down throughout the load (the
#                 archive_command fails): the completed segments, only in
#                 the ring, wait with .ready; the archive back after the
#                 restart.  (The power-cut harness does not see a .ready
#                 created: PostgreSQL creates it with fopen, whose open is
#                 glibc's own call.  A real power cut can lose one created
#                 after the last sync of archive_status, stock or not;
#                 PostgreSQL then archives that segment only when a
#                 checkpoint finds it without a status file.)
#  both           the same hold, then the power cut of both nodes at once;
#                 both restarted (each ring restored), the standby streams
#                 and archives on, then the primary is lost and the
#                 standby promoted
#  stock          the control: a standby without pmwal, its walreceiver held
#                 by gdb inside its fdatasync
#  segment_end    the walreceiver held after the ring answered the sync of
#                 a segment's end (sync_after_publish_segment_end), before
#                 it marks the segment .ready; then as in both (the standby
#                 must stream on after its restart: promoted at once, the
#                 segment would hold the switch point and be archived as
#                 .partial).  The restore writes that segment back
#                 whole, so the walreceiver streams on from the next one
#                 and the segment has no archive status: as in stock
#                 PostgreSQL when the power fails between fdatasync's
#                 return and XLogArchiveNotify, and PostgreSQL marks it
#                 when a checkpoint would remove it (XLogArchiveCheckDone)
#  stock_segment_end  its control: a stock standby's walreceiver held by
#                 gdb in XLogArchiveNotify (its fdatasync of the segment
#                 returned), then the same
#
# Then, on the promoted standby: every acknowledged commit is there; it
# switches WAL and archives everything pending.  (From 16 on, stock
# PostgreSQL too archives the segments of timeline 1 it archived before
# the cut once more after the restart: with pmwal those are the bytes the
# ring restored, compared with the archive's by the archive_command.)  The archive: the
# archive_command (checked first: it refuses a different file of the same
# name, and says so in a log of its own) never met a segment archived
# before with other bytes; every segment the promoted standby's history
# needs, from the backup's start to its last switch, is there; each reads
# cleanly with pg_waldump; each of timeline 1 is byte for byte the
# primary's.  A new cluster from the base backup and only that archive
# (restore_command, to the end of the archive, the latest timeline) has
# every acknowledged commit and exactly the promoted standby's rows.
# With pmwal, some segments the archive took before the cut were undone in
# pg_wal by it (only the ring held them: the test's danger is real); on
# the stock standby none was (it archives only what it fsynced).
# Negative control: the standby's data directory promoted without its ring
# lacks acknowledged commits.
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

my $SEG_MB = 1;
my $SEGS_PER_ID = 4096 / $SEG_MB;    # segments per 4 GB ("xlogid")

sub seg_name
{
	my ($tli, $segno) = @_;
	return sprintf('%08X%08X%08X', $tli, int($segno / $SEGS_PER_ID), $segno % $SEGS_PER_ID);
}

sub seg_of_lsn { return int(lsn_num($_[0]) / ($SEG_MB * 1024 * 1024)); }

sub segno_of_name
{
	my ($name) = @_;
	return hex(substr($name, 8, 8)) * $SEGS_PER_ID + hex(substr($name, 16, 8));
}

# An archive_command that never overwrites: a file of the same name is
# accepted only with the same bytes (logged "again"), else the command
# fails and logs the name in $dir.conflicts; each archived file is logged
# in $dir.archived.  While $dir.closed exists it fails (an archive that is
# down).
sub archive_command
{
	my ($dir) = @_;
	return qq{test ! -f "$dir.closed" || exit 1; f="$dir/%f"; if test -f "\$f"; then if cmp -s "%p" "\$f"; then echo "%f again" >> "$dir.archived"; }
	  . qq{else echo "%f" >> "$dir.conflicts"; exit 1; fi; }
	  . qq{else cp "%p" "\$f.tmp" && mv "\$f.tmp" "\$f" && echo "%f" >> "$dir.archived"; fi};
}

# The command itself: it refuses another file's bytes under a name taken
# (and logs it), accepts the same bytes again, copies a new one.
sub archive_command_works
{
	my ($dir) = @_;
	my $cmd = archive_command($dir);
	my $run = sub {
		my ($content, $name) = @_;
		PostgreSQL::Test::Utils::append_to_file("$dir.src", $content);
		my $c = $cmd =~ s/%p/$dir.src/gr =~ s/%f/$name/gr;
		my $rc = system('sh', '-c', $c);
		unlink "$dir.src";
		return $rc == 0;
	};
	my $ok = $run->('a', 'self') && !$run->('b', 'self') && $run->('a', 'self')
	  && slurp_file("$dir.conflicts") eq "self\n" && slurp_file("$dir.archived") eq "self\nself again\n";
	unlink "$dir/self", "$dir.conflicts", "$dir.archived";
	return $ok;
}

sub archived
{
	my ($dir) = @_;
	return -f "$dir.archived" ? grep { !/ again$/ } split /\n/, slurp_file("$dir.archived") : ();
}

sub pending
{
	my ($node) = @_;
	return map { m{/([^/]+)\.ready$} } glob($node->data_dir . '/pg_wal/archive_status/*.ready');
}

sub scenario
{
	my ($case, %opts) = @_;
	my $archive = PostgreSQL::Test::Utils::tempdir("${case}_archive");
	ok(archive_command_works($archive), "$case: the archive_command refuses other bytes under a name taken");
	my ($primary, $standby) = standby_pair($case, stock => $opts{stock}, cut_primary => $opts{both},
		init => { extra => ["--wal-segsize=$SEG_MB"] },
		sql => 'CREATE TABLE filler (id int, v text);',
		standby_conf => "archive_mode = always\narchive_command = '" . archive_command($archive) . "'\n");
	$primary->backup('pitr', backup_options => [ '-X', 'none' ]);
	my ($start) = slurp_file($primary->backup_dir . '/pitr/backup_label') =~ /START WAL LOCATION: ([0-9A-F\/]+)/
	  or die "$case: no start in the backup's label";

	# the standby's flusher held (stop_server_process) as one that sleeps
	# out its interval: it syncs pg_wal for real once it finds a segment
	# completed, at any wakeup (the reload that arms a pause point is one),
	# and the archive would then take only what pg_wal holds durably anyway
	stop_server_process($standby, 'flusher') unless $opts{stock};
	PostgreSQL::Test::Utils::append_to_file("$archive.closed", '') if $opts{behind};
	my $load = standby_load_until($case, $primary, $standby, 2000, big => 10, big_rows => 100);
	my $deadline = time + 120;
	if ($opts{behind})
	{
		sleep 1 while pending($standby) < 4 && time < $deadline;
		cmp_ok(scalar pending($standby), '>=', 4, "$case: segments the standby completed wait for the archive (.ready)");
	}
	else
	{
		sleep 1 while archived($archive) < 4 && time < $deadline;
		cmp_ok(scalar archived($archive), '>=', 4, "$case: the standby archives the segments it completes under the load");
	}

	if ($opts{stock})
	{
		gdb_hold_walreceiver($standby, $case, $opts{segment_end} ? 'XLogArchiveNotify' : 'fdatasync');
	}
	else
	{
		my $st = pmwal_status($standby);
		is($st->{commit_path}, 'standby: received WAL synced through the ring',
			"$case: the standby's walreceiver syncs through the ring");
		my $offset = -s $standby->logfile;
		my $point = $opts{segment_end} ? 'sync_after_publish_segment_end' : 'sync_after_publish';
		arm_all($standby, $point);
		my $pid = pause_wait($standby, $point, $offset);
		note("$case: walreceiver $pid held at $point");
	}
	# the archiver goes on meanwhile
	sleep 2;
	my @before = archived($archive);
	my @ready = pending($standby);
	my $cut;
	if ($opts{both})
	{
		powercut_kill($standby);
		powercut_kill($primary);
		$cut = powercut_cut($standby);
		note("$case: primary: " . powercut_cut($primary)->{summary});
		acked_load_finish($load);
	}
	else
	{
		$cut = powercut($standby);
		lose_primary($primary, $load);
	}
	note("$case: standby: $cut->{summary}");
	my @undone = grep { $cut->{undone_range}{$_} } @before, @ready;
	note("$case: at the cut " . scalar(@before) . ' segments were archived, ' . scalar(@ready)
		  . ' waited (.ready: ' . join(' ', @ready) . '); the cut undid writes in pg_wal of '
		  . scalar(@undone) . ' of them (' . join(' ', @undone) . ')');
	if ($opts{stock})
	{
		is(scalar @undone, 0, "$case: the stock standby archived only segments it had synced");
	}
	else
	{
		cmp_ok(scalar @undone, '>', 0, "$case: the archive took (or was to take) segments that only the ring held durably ("
			  . scalar(@undone) . ')');
		standby_without_ring($case, $standby, $load);
	}

	$primary->start if $opts{both};
	standby_restart($case, $standby, stock => $opts{stock});
	if ($opts{behind})
	{
		my %now = map { $_ => 1 } pending($standby);
		my @lost = grep { !$now{$_} } @ready;
		is(join(' ', @lost), '', "$case: after the restart the " . scalar(@ready) . ' segments still wait for the archive');
		unlink "$archive.closed";
	}
	if ($opts{both})
	{
		# the standby streams on, and archives what it completes
		$primary->safe_psql('postgres', 'INSERT INTO t VALUES (-2); SELECT pg_switch_wal()');
		$primary->wait_for_catchup($standby);
		my ($n, $missing) = acked_check($primary, $load);
		is($missing, 0, "$case: all $n acknowledged commits are on the primary");
		$primary->stop('immediate');
	}
	promote_and_verdict($case, $standby, $load);

	# A segment whose closing sync was the one held (the ring answered it,
	# the power was cut before the walreceiver marked it .ready) has no
	# archive status after the restart, and the walreceiver streams on from
	# the next segment: as in stock PostgreSQL when the power fails between
	# fdatasync's return and XLogArchiveNotify.  PostgreSQL marks such a
	# segment when a checkpoint would remove it (XLogArchiveCheckDone), and
	# archives it before it removes it.  Let it: wal_keep_size (1 GB, the
	# primary's, copied with the base backup) to 0, so that the checkpoint
	# below considers timeline 1's segments.  (Seen on 16: the held sync
	# closed 0/C00000-0/D00000, the restore wrote it back whole, and it was
	# archived only through this.)
	my @unmarked = grep {
		my $seg = $_;
		!grep { -e $standby->data_dir . "/pg_wal/archive_status/$seg.$_" } qw(ready done)
	} map { m{/([0-9A-F]{24})$} } glob($standby->data_dir . '/pg_wal/00000001*');
	note("$case: segments of timeline 1 in pg_wal with no archive status after the restart: "
		  . (join(' ', @unmarked) || 'none'));
	if ($opts{segment_end})
	{
		my @since_backup = grep { segno_of_name($_) >= seg_of_lsn($start) } @unmarked;
		cmp_ok(scalar @since_backup, '>', 0,
			"$case: the segment whose end was synced before the cut has no archive status after the restart ("
			  . join(' ', @since_backup) . ')');
	}
	$standby->safe_psql('postgres', 'ALTER SYSTEM SET wal_keep_size = 0');
	$standby->safe_psql('postgres', 'SELECT pg_reload_conf()');
	sleep 1;    # the checkpointer reads it before the CHECKPOINT below

	# everything archived: the last segment switched, nothing pending
	my $last = $standby->safe_psql('postgres',
		'INSERT INTO t VALUES (-1); CHECKPOINT; SELECT pg_walfile_name(pg_switch_wal())');
	$deadline = time + 120;
	sleep 1 while (!-f "$archive/$last" || pending($standby)) && time < $deadline;
	ok(-f "$archive/$last" && !pending($standby), "$case: the promoted standby archived everything, up to $last");
	my $rows = $standby->safe_psql('postgres', 'SELECT count(*) FROM t');

	# the archive
	ok(!-e "$archive.conflicts",
		"$case: no segment was archived twice with other bytes"
		  . (-e "$archive.conflicts" ? ': ' . slurp_file("$archive.conflicts") : ''));
	my @again = map { / again$/ ? s/ again$//r : () } split /\n/, slurp_file("$archive.archived");
	note("$case: archived " . scalar(archived($archive)) . ' files, ' . scalar(@again)
		  . ' of them again with the same bytes (' . join(' ', @again) . ')');
	my ($switch) = slurp_file("$archive/00000002.history") =~ /^1\t([0-9A-F\/]+)/m
	  or die "$case: no timeline history in the archive";
	my @needed = (map { seg_name(1, $_) } seg_of_lsn($start) .. seg_of_lsn($switch) - 1),
	  (map { seg_name(2, $_) } seg_of_lsn($switch) .. segno_of_name($last));
	my @lacking = grep { !-f "$archive/$_" } @needed;
	is(join(' ', @lacking), '', "$case: the archive holds the " . scalar(@needed)
		  . " segments from the backup's start ($start) through the switch to timeline 2 ($switch) to $last");
	my @segs = grep { /^[0-9A-F]{24}$/ } map { s{.*/}{}r } glob("$archive/*");
	my @unreadable = grep {
		system("pg_waldump -p '$archive' $_ $_ >/dev/null 2>'$archive.waldump' ") != 0
	} @segs;
	is(join(' ', @unreadable), '', "$case: pg_waldump reads each of the " . scalar(@segs) . ' archived segments'
		  . (@unreadable ? ': ' . slurp_file("$archive.waldump") : ''));
	my @tl1 = grep { /^00000001/ && -f $primary->data_dir . "/pg_wal/$_" } @segs;
	my @differ = grep { system('cmp', '-s', "$archive/$_", $primary->data_dir . "/pg_wal/$_") != 0 } @tl1;
	is(join(' ', @differ), '', "$case: each of the " . scalar(@tl1)
		  . " archived segments of timeline 1 the primary still has is byte for byte the primary's");

	# point-in-time recovery from the base backup and the archive only
	my $pitr = PostgreSQL::Test::Cluster->new("${case}_pitr");
	$pitr->init_from_backup($primary, 'pitr');
	$pitr->append_conf('postgresql.conf', qq{shared_preload_libraries = ''
archive_mode = off
restore_command = 'cp "$archive/%f" "%p"'
});
	$pitr->append_conf('postgresql.auto.conf', "synchronous_standby_names = ''\n");
	$pitr->set_recovery_mode;
	$pitr->start;
	$pitr->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
	  or die "$case: the recovery from the archive does not end";
	like(slurp_file($pitr->logfile), qr/restored log file "\Q$last\E" from archive/,
		"$case: the recovery from the archive replayed up to $last");
	my ($n, $missing) = acked_check($pitr, $load);
	is($missing, 0, "$case: recovery from the backup and the standby's archive has all $n acknowledged commits");
	is($pitr->safe_psql('postgres', 'SELECT count(*) FROM t'), $rows,
		"$case: and exactly the promoted standby's $rows rows");
	$pitr->stop;
	$standby->stop;
	return;
}

scenario('after_publish');
scenario('behind', behind => 1);
scenario('both', both => 1);
scenario('stock', stock => 1);
scenario('segment_end', segment_end => 1, both => 1);
scenario('stock_segment_end', stock => 1, segment_end => 1, both => 1);

done_testing();
