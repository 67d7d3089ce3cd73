# PmwalTest::Patroni
#		pmwal under Patroni (t/038): one etcd, three PostgreSQL nodes each
#		run by its own Patroni on this machine, the power cut of a node
#		(its Patroni and every server process SIGKILLed, then pg_wal and
#		the ring cut as PmwalTest's power cut does), and the cluster's
#		roles and rows as a client sees them.
#
# Each node is a PostgreSQL::Test::Cluster that is never init'ed or
# started by it: it gives the node its port, socket directory and base
# directory, and psql; Patroni makes the data directory (initdb on the
# first node, pg_basebackup on the others) and starts and stops the server.
# Patroni runs the server from a bin directory of the node's own: links to
# the server's programs, except
#	postgres   a script that puts the server under the power-cut log
#	           (libpowercut.so, POWERCUT_LOG/DIR/RING) and, in single-user
#	           mode (Patroni's crash recovery before pg_rewind), appends its
#	           stderr to a log of its own (Patroni logs it only on failure);
#	pg_rewind  a script that, once the real pg_rewind succeeded, starts the
#	           power-cut log anew: pg_rewind ends by fsyncing the whole data
#	           directory, so what pg_wal holds then is durable -- the log's
#	           baseline -- while its own writes (unlogged: pg_rewind runs
#	           the real server's programs) would confuse the replay of the
#	           log.  The ring's durable image is taken anew then too.
# Per-node logs: tmp_check/log/038_patroni_<node>.log (Patroni and the
# server's stderr) and 038_patroni_<node>_single_user.log; the node's base
# directory has its patroni.yml and power-cut logs (removed with it when
# the test passes).
package PmwalTest::Patroni;

use strict;
use warnings;

use Exporter 'import';
use File::Copy ();
use HTTP::Tiny;
use IPC::Run ();
use JSON::PP ();
use Time::HiRes ();
use Test::More;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use PmwalTest;

our @EXPORT = qw(patroni_missing etcd_start patroni_cluster patroni_start cut_nodes
  wait_leader leader_of sync_standby_of wait_sync_standby wait_streaming wait_converged
  log_offsets patroni_log_has cluster_teardown);

my @etcd;        # harnesses
my @all_nodes;   # every node of every cluster, for the teardown

# What is missing to run the test, or ''.
sub patroni_missing
{
	my @missing = grep { system("command -v $_ >/dev/null 2>&1") != 0 } qw(patroni etcd);
	return @missing ? 'not installed: ' . join(', ', @missing) : '';
}

# One etcd on loopback ports, its data and log in the test's directories.
# Returns its client address (host:port).
sub etcd_start
{
	my $client = PostgreSQL::Test::Cluster::get_free_port();
	my $peer = PostgreSQL::Test::Cluster::get_free_port();
	my $dir = PostgreSQL::Test::Utils::tempdir('etcd');
	my $log = "$PostgreSQL::Test::Utils::log_path/038_patroni_etcd.log";
	my $h = IPC::Run::start(
		[ 'etcd', '--name', 'e1', '--data-dir', "$dir/data",
		  '--listen-client-urls', "http://127.0.0.1:$client",
		  '--advertise-client-urls', "http://127.0.0.1:$client",
		  '--listen-peer-urls', "http://127.0.0.1:$peer",
		  '--initial-advertise-peer-urls', "http://127.0.0.1:$peer",
		  '--initial-cluster', "e1=http://127.0.0.1:$peer" ],
		'<', \undef, '>', $log, '2>&1');
	push @etcd, $h;
	my $http = HTTP::Tiny->new(timeout => 2);
	my $deadline = time + 60;
	until (($http->get("http://127.0.0.1:$client/health")->{content} // '') =~ /"health":\s*"true"/)
	{
		die "etcd does not come up (see $log)" if time > $deadline || !$h->pumpable;
		Time::HiRes::sleep(0.2);
	}
	return "127.0.0.1:$client";
}

# Three nodes of Patroni scope $scope (not started).  Options: pmwal (each
# node preloads pmwal on a ring of its own), sync (synchronous_mode),
# params (more server settings for every node), etcd (host:port).
sub patroni_cluster
{
	my ($scope, %o) = @_;
	my @nodes;
	my $bindir = `pg_config --bindir`;
	chomp $bindir;
	my $lib = PmwalTest::powercut_lib();
	my $user = getpwuid($<);
	for my $i (1 .. 3)
	{
		my $name = "${scope}_n$i";
		my $pg = PostgreSQL::Test::Cluster->new($name);
		my $base = $pg->basedir;
		my $n = { name => $name, pg => $pg, scope => $scope,
			log => "$PostgreSQL::Test::Utils::log_path/038_patroni_$name.log",
			api => PostgreSQL::Test::Cluster::get_free_port(),
			single => "$PostgreSQL::Test::Utils::log_path/038_patroni_${name}_single_user.log",
			yml => "$base/patroni.yml", pclog => "$base/powercut.log" };
		$pg->{powercut_log} = $n->{pclog};
		my %params = (
			unix_socket_directories => $pg->host,
			fsync => 'on',
			synchronous_commit => 'on',
			shared_buffers => '64MB',
			max_connections => 40,
			wal_keep_size => '1GB',
			checkpoint_timeout => '1h',
			max_wal_size => '1GB',
			# only the commits sync WAL: a power cut has WAL to take
			wal_writer_delay => '10s',
			wal_writer_flush_after => '1GB',
			shared_preload_libraries => '',
			log_line_prefix => '%m [%p] %b ',
			%{ $o{params} // {} });
		if ($o{pmwal})
		{
			my $ring = "/dev/shm/pmwal_tap_${name}_$$.ring";
			unlink $ring, map { "$ring$_" } qw(.durable .durable.ts .durable.lock .hazards .stops);
			$pg->{pmwal_ring} = $ring;
			$pg->{ring_cut} = 'durable';
			$pg->{ring_recorded} = 1;
			%params = (%params, shared_preload_libraries => 'pmwal', 'pmwal.path' => $ring,
				'pmwal.size' => '32MB', 'pmwal.flush_interval' => '60s');
		}
		# the node's programs: links, and the two scripts
		my $bin = "$base/bin";
		mkdir $bin or die "mkdir $bin: $!";
		opendir my $dh, $bindir or die "$bindir: $!";
		for my $f (grep { !/^\./ } readdir $dh)
		{
			next if $f eq 'postgres' || $f eq 'pg_rewind';
			symlink("$bindir/$f", "$bin/$f") or die "symlink $f: $!";
		}
		closedir $dh;
		my $ring = $pg->{pmwal_ring} // '';
		my $pgwal = $pg->data_dir . '/pg_wal';
		_script("$bin/postgres", qq{#!/bin/sh
# postgres under the power-cut log of node $name (PmwalTest::Patroni)
[ "\$1" = --single ] && exec 2>>'$n->{single}'
LD_PRELOAD='$lib' POWERCUT_LOG='$n->{pclog}' POWERCUT_DIR='$pgwal' POWERCUT_RING='$ring' \\
	exec '$bindir/postgres' "\$@"
});
		_script("$bin/pg_rewind", qq{#!/bin/sh
# pg_rewind, then the power-cut log begins anew: pg_rewind synced the whole
# data directory (PmwalTest::Patroni)
'$bindir/pg_rewind' "\$@"
rc=\$?
if [ \$rc = 0 ]; then
	echo "pg_rewind wrapper: pg_rewind succeeded, the power-cut log starts anew" >&2
	[ -e '$n->{pclog}' ] && mv '$n->{pclog}' '$n->{pclog}.rewound'
	if [ -n '$ring' ] && [ -e '$ring' ]; then
		cp '$ring' '$ring.durable' && : > '$ring.durable.ts'
	fi
fi
exit \$rc
});
		my $hba = [ 'local all all trust', 'local replication all trust',
			'host all all 127.0.0.1/32 trust', 'host replication all 127.0.0.1/32 trust' ];
		my $conf = {
			scope => $scope,
			name => $name,
			log => { level => 'INFO' },
			restapi => { listen => "127.0.0.1:$n->{api}", connect_address => "127.0.0.1:$n->{api}" },
			etcd3 => { hosts => [ $o{etcd} ] },
			bootstrap => {
				dcs => {
					ttl => 10, loop_wait => 2, retry_timeout => 4,
					maximum_lag_on_failover => 1024 * 1024 * 1024,
					synchronous_mode => $o{sync} ? JSON::PP::true : JSON::PP::false,
					postgresql => { use_pg_rewind => JSON::PP::true, use_slots => JSON::PP::true },
				},
				initdb => [ { encoding => 'UTF8' }, { locale => 'C' } ],
				pg_hba => $hba,
			},
			postgresql => {
				listen => '127.0.0.1:' . $pg->port,
				connect_address => '127.0.0.1:' . $pg->port,
				data_dir => $pg->data_dir,
				bin_dir => $bin,
				pgpass => "$base/pgpass",
				use_unix_socket => JSON::PP::true,
				authentication => {
					superuser => { username => $user },
					replication => { username => $user },
					rewind => { username => $user },
				},
				parameters => \%params,
				pg_hba => $hba,
			},
		};
		PostgreSQL::Test::Utils::append_to_file($n->{yml},
			JSON::PP->new->canonical->pretty->encode($conf));
		push @nodes, $n;
		push @all_nodes, $n;
	}
	return \@nodes;
}

sub _script
{
	my ($path, $text) = @_;
	PostgreSQL::Test::Utils::append_to_file($path, $text);
	chmod 0755, $path or die "chmod $path: $!";
	return;
}

# Start node $n's Patroni, with a fresh power-cut log and the ring's
# durable image as the ring file is now (a node after a cut: pg_wal and the
# ring as the cut left them).
sub patroni_start
{
	my ($n) = @_;
	my $pg = $n->{pg};
	unlink $n->{pclog};
	$pg->{powercut_log} = $n->{pclog};
	if (my $ring = $pg->{pmwal_ring})
	{
		unlink map { "$ring$_" } qw(.durable .durable.ts .durable.lock .hazards .stops);
		if (-f $ring)
		{
			File::Copy::copy($ring, "$ring.durable") or die "copy $ring: $!";
			PostgreSQL::Test::Utils::append_to_file("$ring.durable.ts", '');
		}
	}
	PostgreSQL::Test::Utils::append_to_file($n->{log},
		"\n==== " . localtime() . ": the test starts Patroni of $n->{name}\n");
	$n->{h} = IPC::Run::start([ 'patroni', $n->{yml} ], '<', \undef, '>>', $n->{log}, '2>&1');
	$n->{patroni_pid} = $n->{h}{KIDS}[0]{PID};
	return;
}

# The postmaster's pid from postmaster.pid, if it runs.
sub _postmaster
{
	my ($n) = @_;
	open my $fh, '<', $n->{pg}->data_dir . '/postmaster.pid' or return undef;
	my $pid = <$fh>;
	close $fh;
	return undef unless defined $pid && $pid =~ /^(\d+)/;
	$pid = $1;
	return PmwalTest::_proc_state($pid) ne '' ? $pid : undef;
}

sub _descendants
{
	my ($pid) = @_;
	# (PmwalTest's readers of /proc clobber $_: no map here)
	my @kids = PmwalTest::_children_of($pid);
	my @all = @kids;
	for my $kid (@kids)
	{
		push @all, _descendants($kid);
	}
	return @all;
}

# The power cut of the machines of @nodes, at one moment: every Patroni
# (it would start its server again) and then every server process is
# SIGSTOPped -- a stopped process is inside no system call, so the
# power-cut logs are whole -- then all are SIGKILLed; then each node's
# pg_wal is cut from its log, and its ring to its durable image
# (PmwalTest's powercut_cut).  The ring file is kept.  Returns the cut
# summaries by node name.
sub cut_nodes
{
	my (@nodes) = @_;
	my (%stopped, @patroni, @server);
	for my $n (@nodes)
	{
		my $p = $n->{patroni_pid} or next;
		kill 'STOP', $p;
		push @patroni, $p;
	}
	for my $n (@nodes)
	{
		my @below = $n->{patroni_pid} ? _descendants($n->{patroni_pid}) : ();
		for my $p (@below)
		{
			kill 'STOP', $p;
			$stopped{$p} = 1;
		}
		my $pm = _postmaster($n);
		if ($pm)
		{
			kill 'STOP', $pm;
			$stopped{$pm} = 1;
			$n->{pm} = $pm;
		}
	}
	my $deadline = time + 60;
	while (1)
	{
		for my $n (@nodes)
		{
			my @more = $n->{pm} ? _descendants($n->{pm}) : ();
			push @more, PmwalTest::_mapping($n->{pg}{pmwal_ring}) if $n->{pg}{pmwal_ring};
			for my $p (grep { !$stopped{$_} } @more)
			{
				kill 'STOP', $p;
				$stopped{$p} = 1;
			}
		}
		my @running = grep { !PmwalTest::_stopped_or_gone($_) } (@patroni, keys %stopped);
		last unless @running;
		die "cut_nodes: processes @running do not stop" if time > $deadline;
		Time::HiRes::usleep(5_000);
	}
	# every one stopped: this is the moment of the power cut
	for my $n (@nodes)
	{
		next unless $n->{h};
		kill 'KILL', $n->{patroni_pid};
		eval { $n->{h}->finish };
		delete $n->{h};
		delete $n->{patroni_pid};
		delete $n->{pm};
	}
	PmwalTest::_kill_stopped('cut_nodes', $deadline, 0, keys %stopped) if %stopped;
	note('power cut of ' . join(', ', map { $_->{name} } @nodes) . ': '
		  . scalar(@patroni) . ' Patroni and ' . scalar(keys %stopped) . ' server processes killed');
	my %cuts;
	for my $n (@nodes)
	{
		PostgreSQL::Test::Utils::append_to_file($n->{log},
			"\n==== " . localtime() . ": the test cut the power of $n->{name}\n");
		$cuts{ $n->{name} } = PmwalTest::powercut_cut($n->{pg});
		note("$n->{name}: $cuts{ $n->{name} }{summary}");
	}
	return \%cuts;
}

# Patroni's view of the cluster (GET /cluster on the first node of @nodes
# whose API answers), as the decoded JSON, or undef.
sub _cluster_view
{
	my (@nodes) = @_;
	my $http = HTTP::Tiny->new(timeout => 2);
	for my $n (grep { $_->{h} } @nodes)
	{
		my $r = $http->get("http://127.0.0.1:$n->{api}/cluster");
		next unless $r->{success};
		my $v = eval { JSON::PP::decode_json($r->{content}) };
		return $v if $v;
	}
	return undef;
}

# Is node $n's server up and a primary (not in recovery)?
sub _is_primary
{
	my ($n) = @_;
	my ($rc, $out) = $n->{pg}->psql('postgres', 'SELECT pg_is_in_recovery()');
	return $rc == 0 && $out eq 'f';
}

# Wait until one of @nodes (except those in %$not) is the leader in
# Patroni's view and its server runs as a primary; returns it, or undef
# (and, unless $quiet, Patroni's view as a diagnostic) after $timeout s.
sub wait_leader
{
	my ($nodes, $timeout, $not, $quiet) = @_;
	my $deadline = time + ($timeout // 120);
	while (time < $deadline)
	{
		my $v = _cluster_view(@$nodes);
		if ($v)
		{
			for my $m (@{ $v->{members} // [] })
			{
				next unless ($m->{role} // '') eq 'leader' && ($m->{state} // '') eq 'running';
				next if $not && $not->{ $m->{name} };
				my ($n) = grep { $_->{name} eq $m->{name} } @$nodes;
				return $n if $n && _is_primary($n);
			}
		}
		Time::HiRes::sleep(0.5);
	}
	diag('no leader: ' . JSON::PP->new->canonical->encode(_cluster_view(@$nodes) // {}))
	  unless $quiet;
	return undef;
}

# The leader of @nodes now, or undef.
sub leader_of
{
	my ($nodes) = @_;
	return wait_leader($nodes, 1, undef, 1);
}

# The synchronous standby of $leader: the node Patroni's view names
# sync_standby (its /sync key: the only node it may promote) and that
# streams to $leader as its synchronous standby; undef if none is both.
sub sync_standby_of
{
	my ($nodes, $leader) = @_;
	my $v = _cluster_view(@$nodes) or return undef;
	my @named = map { $_->{name} } grep { ($_->{role} // '') eq 'sync_standby' } @{ $v->{members} // [] };
	return undef unless @named == 1;
	my ($rc, $name) = $leader->{pg}->psql('postgres',
		q{SELECT application_name FROM pg_stat_replication WHERE sync_state = 'sync' AND state = 'streaming'});
	return undef unless $rc == 0 && $name eq $named[0];
	my ($n) = grep { $_->{name} eq $name } @$nodes;
	return $n;
}

# Wait (up to $timeout seconds, 60) until $leader has a synchronous
# standby (sync_standby_of), other than those in %$not; returns it.
sub wait_sync_standby
{
	my ($nodes, $leader, $timeout, $not) = @_;
	my $deadline = time + ($timeout // 60);
	while (time < $deadline)
	{
		my $n = sync_standby_of($nodes, $leader);
		return $n if $n && !($not && $not->{ $n->{name} });
		Time::HiRes::sleep(0.5);
	}
	diag('no synchronous standby: ' . JSON::PP->new->canonical->encode(_cluster_view(@$nodes) // {}));
	return undef;
}

# Wait until every node of @$nodes but $leader streams from it (with
# $sync, one of them as its synchronous standby in Patroni's view too).
sub wait_streaming
{
	my ($leader, $nodes, $sync, $timeout) = @_;
	my @names = map { "'$_->{name}'" } grep { $_ != $leader } @$nodes;
	my $want = scalar @names;
	my $deadline = time + ($timeout // 180);
	my $q = "SELECT count(*) = $want"
	  . ($sync ? " AND count(*) FILTER (WHERE sync_state = 'sync') = 1" : '')
	  . ' FROM pg_stat_replication WHERE state = \'streaming\' AND application_name IN ('
	  . join(',', @names) . ')';
	while (time < $deadline)
	{
		my ($rc, $out) = $leader->{pg}->psql('postgres', $q);
		return 1 if $rc == 0 && $out eq 't' && (!$sync || sync_standby_of($nodes, $leader));
		Time::HiRes::sleep(0.5);
	}
	diag('pg_stat_replication: ' . $leader->{pg}->safe_psql('postgres',
		'SELECT application_name, state, sync_state FROM pg_stat_replication'));
	return 0;
}

# A row the leader commits now is replayed on every other node; then
# every node's "count(*), sum(id), min(id), max(id)" of t.  Returns them
# by node name.
sub wait_converged
{
	my ($leader, $nodes, $marker) = @_;
	$leader->{pg}->safe_psql('postgres', "INSERT INTO t VALUES ($marker)");
	my %rows;
	for my $n (@$nodes)
	{
		$n->{pg}->poll_query_until('postgres', "SELECT count(*) = 1 FROM t WHERE id = $marker")
		  or diag("$n->{name} does not replay the marker $marker");
		$rows{ $n->{name} } = $n->{pg}->safe_psql('postgres',
			'SELECT count(*), sum(id), min(id), max(id) FROM t');
	}
	return \%rows;
}

# Where node $n's logs end now (for patroni_log_has): its Patroni log
# (Patroni and its server) and its single-user runs' log.
sub log_offsets
{
	my ($n) = @_;
	return [ map { -s $_ // 0 } $n->{log}, $n->{single} ];
}

# Node $n's logs after $offsets (log_offsets; default: all of them) match
# $re: returns the first group or the match, else undef.
sub patroni_log_has
{
	my ($n, $re, $offsets) = @_;
	my @files = ($n->{log}, $n->{single});
	my $text = '';
	for my $i (0, 1)
	{
		$text .= PostgreSQL::Test::Utils::slurp_file($files[$i], $offsets ? $offsets->[$i] : 0)
		  if -e $files[$i];
	}
	return $text =~ $re ? ($1 // $&) : undef;
}

# Stop everything a cluster runs: Patroni (SIGKILL: a test that failed
# may have left it anywhere), then each server (immediate), and whatever
# still maps a node's ring.
sub cluster_teardown
{
	my ($nodes) = @_;
	for my $n (@$nodes)
	{
		if ($n->{h})
		{
			kill 'KILL', $n->{patroni_pid};
			eval { $n->{h}->finish };
			delete $n->{h};
		}
	}
	for my $n (@$nodes)
	{
		my $pm = _postmaster($n);
		if ($pm)
		{
			my @pids = ($pm, _descendants($pm));
			kill 'KILL', @pids;
		}
		if (my $ring = $n->{pg}{pmwal_ring})
		{
			my @pids = PmwalTest::_mapping($ring);
			kill 'KILL', @pids if @pids;
		}
	}
	return;
}

# A test that dies leaves nothing running: every Patroni, server and etcd.
END
{
	local $?;
	eval { cluster_teardown(\@all_nodes); 1 } or print STDERR "cluster_teardown: $@";
	for my $h (@etcd)
	{
		eval { $h->kill_kill(grace => 5) };
	}
	# the rings and their records (PmwalTest's END removes only its own)
	for my $n (@all_nodes)
	{
		my $ring = $n->{pg}{pmwal_ring} or next;
		unlink $ring, map { "$ring$_" } qw(.durable .durable.ts .durable.lock .hazards .stops);
	}
}

1;
