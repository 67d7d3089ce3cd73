# PmwalTest.pm
#		What every pmwal TAP test needs: a node that preloads pmwal on an
#		emulated ring of its own in /dev/shm, and access to the ring's bytes.
#
# The ring layout used here is documented in ring_format.h and README.md.
package PmwalTest;

use strict;
use warnings;

use Exporter 'import';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

our @EXPORT = qw(pmwal_node ring_bytes crc32c ring_read_u64 ring_write_u64
  ring_set_static ring_field ring_state RING_STATE_EMPTY RING_STATE_IN_USE
  RING_STATE_REINIT pmwal_status wait_accelerated);

# Every server these tests start treats /dev/shm as persistent memory.
$ENV{PMEM_IS_PMEM_FORCE} = '1';

# Offsets in the ring header (ring_format.h).
my %static = (
	magic => [ 0, 'a8' ],
	format_version => [ 8, 'L<' ],
	header_size => [ 12, 'L<' ],
	system_identifier => [ 16, 'Q<' ],
	timeline => [ 24, 'L<' ],
	wal_segment_size => [ 28, 'L<' ],
	wal_block_size => [ 32, 'L<' ],
	capacity => [ 40, 'Q<' ],
	crc => [ 48, 'L<' ],);
my %word = (tail => 64, last_end => 128, head => 192, state => 256);

no warnings 'portable';
use constant RING_STATE_EMPTY => 0x454d505459000001;
use constant RING_STATE_IN_USE => 0x494e555345000002;
use constant RING_STATE_REINIT => 0x5245494e49000003;
use warnings 'portable';

my @rings;

# A node with pmwal preloaded and fsync on.  Options: ring => path (default:
# a fresh one in /dev/shm), size => pmwal.size, conf => extra settings,
# init => hash of PostgreSQL::Test::Cluster::init parameters.
sub pmwal_node
{
	my ($name, %opts) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	my $ring = $opts{ring} // "/dev/shm/pmwal_tap_${name}_$$.ring";

	$node->init(%{ $opts{init} // {} });
	unless ($opts{ring})
	{
		unlink $ring;
		push @rings, $ring;
	}
	$node->append_conf(
		'postgresql.conf', qq{
shared_preload_libraries = 'pmwal'
pmwal.path = '$ring'
pmwal.size = } . ($opts{size} // '8MB') . qq{
fsync = on
} . ($opts{conf} // ''));
	$node->{pmwal_ring} = $ring;
	return $node;
}

# One row of pmwal_status as a hash (CREATE EXTENSION pmwal must be done).
sub pmwal_status
{
	my ($node) = @_;
	my $rows = $node->safe_psql('postgres',
		q{SELECT key, coalesce(value, '') FROM pmwal_status s, json_each_text(row_to_json(s))});
	my %h = map { split(/\|/, $_, 2) } split(/\n/, $rows);
	return \%h;
}

# Wait until pmwal_status.accelerated is $want ('t' or 'f').
sub wait_accelerated
{
	my ($node, $want) = @_;
	return $node->poll_query_until('postgres',
		'SELECT accelerated FROM pmwal_status', $want);
}

# The whole ring file, as bytes.
sub ring_bytes
{
	my ($path) = @_;
	open my $fh, '<:raw', $path or die "could not open $path: $!";
	local $/;
	my $bytes = <$fh>;
	close $fh;
	return $bytes;
}

# CRC-32C (Castagnoli), as PostgreSQL's pg_crc32c computes it.
my @crc_table;
sub crc32c
{
	my ($data) = @_;
	unless (@crc_table)
	{
		for my $i (0 .. 255)
		{
			my $c = $i;
			$c = ($c & 1) ? (($c >> 1) ^ 0x82F63B78) : ($c >> 1) for 1 .. 8;
			push @crc_table, $c;
		}
	}
	my $crc = 0xFFFFFFFF;
	$crc = $crc_table[ ($crc ^ $_) & 0xFF ] ^ ($crc >> 8)
	  for unpack('C*', $data);
	return $crc ^ 0xFFFFFFFF;
}

sub _rw
{
	my ($path, $offset, $len, $bytes) = @_;
	open my $fh, '+<:raw', $path or die "could not open $path: $!";
	sysseek($fh, $offset, 0) or die "seek: $!";
	my $buf;
	if (defined $bytes)
	{
		syswrite($fh, $bytes) == length($bytes) or die "write: $!";
	}
	else
	{
		sysread($fh, $buf, $len) == $len or die "read: $!";
	}
	close $fh;
	return $buf;
}

# Read or write one dynamic header word (tail, last_end, head, state).
sub ring_read_u64
{
	my ($path, $name) = @_;
	return unpack('Q<', _rw($path, $word{$name}, 8));
}

sub ring_write_u64
{
	my ($path, $name, $value) = @_;
	_rw($path, $word{$name}, 8, pack('Q<', $value));
	return;
}

sub ring_state { return ring_read_u64($_[0], 'state'); }

# Read a static header field.
sub ring_field
{
	my ($path, $name) = @_;
	my ($off, $fmt) = @{ $static{$name} };
	return unpack($fmt, _rw($path, $off, $fmt eq 'Q<' ? 8 : $fmt eq 'a8' ? 8 : 4));
}

# Change static header fields and, unless keep_crc => 1, recompute the CRC
# so that the header is valid again.
sub ring_set_static
{
	my ($path, %fields) = @_;
	my $keep_crc = delete $fields{keep_crc};
	for my $name (keys %fields)
	{
		my ($off, $fmt) = @{ $static{$name} };
		_rw($path, $off, 0, pack($fmt, $fields{$name}));
	}
	_rw($path, 48, 0, pack('L<', crc32c(_rw($path, 0, 48)))) unless $keep_crc;
	return;
}

END
{
	unlink @rings;
}

1;
