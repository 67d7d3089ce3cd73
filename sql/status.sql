--
-- The pmwal_status view on a server that preloads pmwal on an emulated ring.
--
CREATE EXTENSION pmwal;

\d pmwal_status

SELECT path ~ '^/dev/shm/pmwal_regress_[0-9_]+\.ring$' AS path_ok,
       mode, capacity, state
  FROM pmwal_status;

SELECT head_lsn >= tail_lsn AS ordered,
       bytes_in_use = pg_wal_lsn_diff(head_lsn, tail_lsn) AS in_use_matches
  FROM pmwal_status;

-- the view is a thin wrapper over the function
SELECT count(*) FROM pmwal_status();

-- the library reports its version
SELECT library_version FROM pmwal_status;

-- which way commits are made durable (no synchronous standby here)
SELECT accelerated, commit_path FROM pmwal_status;

-- an older version of the extension's SQL is refused clearly, and updates
DROP EXTENSION pmwal;
CREATE EXTENSION pmwal VERSION '1.0';
SELECT accelerated FROM pmwal_status;
ALTER EXTENSION pmwal UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'pmwal';
SELECT ring_syncs >= 0 AS works_2_0 FROM pmwal_status;
