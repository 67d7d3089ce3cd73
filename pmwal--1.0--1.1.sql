/* pmwal--1.0--1.1.sql */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "ALTER EXTENSION pmwal UPDATE TO '1.1'" to load this file. \quit

-- pmwal_status gains the segments the flusher prepared and three fallback
-- reasons: the WAL would enter a segment not prepared yet, a statement that
-- needs real flushes (2PC, DROP DATABASE) was running, and WAL inserted by
-- others during a commit's write did not fit the ring.
DROP VIEW pmwal_status;
DROP FUNCTION pmwal_status();

CREATE FUNCTION pmwal_status(
    OUT path text,
    OUT mode text,
    OUT capacity bigint,
    OUT tail_lsn pg_lsn,
    OUT head_lsn pg_lsn,
    OUT bytes_in_use bigint,
    OUT state text,
    OUT durable_lsn pg_lsn,
    OUT accelerated boolean,
    OUT reason text,
    OUT flusher_pid integer,
    OUT ring_commits bigint,
    OUT ring_copies bigint,
    OUT bytes_copied bigint,
    OUT gap_copies bigint,
    OUT space_waits bigint,
    OUT syncs bigint,
    OUT segments_synced bigint,
    OUT dir_syncs bigint,
    OUT fallback_inactive bigint,
    OUT fallback_full bigint,
    OUT fallback_large bigint,
    OUT fallback_read_error bigint,
    OUT fallback_recycled bigint,
    OUT fallback_persist_error bigint,
    OUT segments_prepared bigint,
    OUT fallback_segment bigint,
    OUT fallback_paused bigint,
    OUT fallback_overrun bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'pmwal_status'
LANGUAGE C STRICT VOLATILE PARALLEL SAFE;

CREATE VIEW pmwal_status AS
    SELECT * FROM pmwal_status();

REVOKE ALL ON FUNCTION pmwal_status() FROM PUBLIC;
REVOKE ALL ON pmwal_status FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pmwal_status() TO pg_monitor;
GRANT SELECT ON pmwal_status TO pg_monitor;
