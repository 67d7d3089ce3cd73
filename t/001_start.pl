# Starting with pmwal: the ring is created 0600 and initialised, bound to
# the data directory, the status view reports it, a clean shutdown leaves
# it empty, and pmwal refuses to work when not preloaded.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;

use PmwalTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = pmwal_node('start');
my $ring = $node->{pmwal_ring};
$node->start;

ok(-f $ring, 'ring file created on first start');
is((stat $ring)[2] & 07777, 0600, 'ring file has mode 0600');
is(-s $ring, 4096 + 8 * 1024 * 1024, 'ring file is header plus pmwal.size');
ok($node->log_contains(qr/LOG:  pmwal created ring file "\Q$ring\E"/),
	'creation is logged');
ok($node->log_contains(qr/WARNING:  pmwal ring "\Q$ring\E" is emulated persistent memory/),
	'emulation is reported with a WARNING');
is(ring_field($ring, 'magic'), 'PMWALRNG', 'ring header carries the magic');
is(ring_field($ring, 'system_identifier'),
	$node->safe_psql('postgres', 'SELECT system_identifier FROM pg_control_system()'),
	'ring header records the system identifier');

ok(-f $node->data_dir . '/pg_wal/pmwal.binding',
	'the data directory records its binding to the ring');
like(ring_field($ring, 'ring_id'), qr/^.{16}$/s, 'the ring has an identity');
cmp_ok(ring_read_u64($ring, 'generation'), '>=', 2, 'the start bound the ring (generation 2 or more)');
ok($node->log_contains(qr/LOG:  pmwal bound ring "\Q$ring\E" \(ring [0-9a-f]{32}\) to this data directory at generation \d+/),
	'the binding is logged');

$node->safe_psql('postgres', 'CREATE EXTENSION pmwal');
ok(wait_accelerated($node, 't'), 'WAL syncs are answered from the ring');
is( $node->safe_psql(
		'postgres',
		'SELECT path, mode, capacity, state FROM pmwal_status'),
	"$ring|emulated|8388608|in use",
	'status view reports the ring in use');
is(ring_state($ring), RING_STATE_IN_USE, 'ring state word says in use');
is($node->safe_psql('postgres', 'SELECT library_version FROM pmwal_status'),
	'2.0.0', 'the status view reports the library version');

# From 17 on, pmwal's waits have wait events of their own (before: the
# generic "Extension").  The flusher has no database connection, so it is
# not in pg_stat_activity; pg_wait_events lists the registered events.
if ($node->safe_psql('postgres', 'SHOW server_version_num') >= 170000)
{
	is( $node->safe_psql(
			'postgres', q{
SELECT string_agg(name, ',' ORDER BY name) FROM pg_wait_events
 WHERE type = 'Extension' AND name LIKE 'Pmwal%'}),
		'PmwalFlusherMain',
		'pmwal registered its wait events');
}

# The emulation warning is repeated at every start.
$node->restart;
my $warnings = () =
  slurp_file($node->logfile) =~ /is emulated persistent memory/g;
is($warnings, 2, 'emulation WARNING at every start');
$node->stop;
is(ring_state($ring), RING_STATE_EMPTY, 'a clean shutdown leaves the ring empty');
ok($node->log_contains(qr/pmwal synced pg_wal at the shutdown checkpoint; the ring is empty/),
	'the sync at the shutdown checkpoint is logged');

# Without shared_preload_libraries, pmwal refuses clearly.
my $plain = PostgreSQL::Test::Cluster->new('plain');
$plain->init;
$plain->start;
my ($ret, $out, $err) = $plain->psql('postgres', 'CREATE EXTENSION pmwal');
isnt($ret, 0, 'CREATE EXTENSION fails without preloading');
like($err, qr/ERROR:  pmwal must be loaded via shared_preload_libraries/,
	'error says pmwal must be preloaded');
like($err, qr/HINT:  Add pmwal to shared_preload_libraries/, 'with a hint');
($ret, $out, $err) = $plain->psql('postgres', q{LOAD 'pmwal'});
like($err, qr/pmwal must be loaded via shared_preload_libraries/,
	'LOAD fails the same way');
$plain->stop;

done_testing();
