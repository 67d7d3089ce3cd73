/* pmwal--2.0.0.sql */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION pmwal" to load this file. \quit

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
    OUT commit_path text,
    OUT flusher_pid integer,
    OUT generation bigint,
    OUT ring_id text,
    OUT library_version text,
    OUT ring_writes bigint,
    OUT bytes_copied bigint,
    OUT ring_syncs bigint,
    OUT pass_writes bigint,
    OUT pass_syncs bigint,
    OUT ring_full bigint,
    OUT large_writes bigint,
    OUT retires bigint,
    OUT anchors bigint,
    OUT sync_rounds bigint,
    OUT segments_synced bigint,
    OUT dir_syncs bigint,
    OUT control_syncs bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'pmwal_status'
LANGUAGE C STRICT VOLATILE PARALLEL SAFE;

CREATE VIEW pmwal_status AS
    SELECT * FROM pmwal_status();

REVOKE ALL ON FUNCTION pmwal_status() FROM PUBLIC;
REVOKE ALL ON pmwal_status FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pmwal_status() TO pg_monitor;
GRANT SELECT ON pmwal_status TO pg_monitor;
