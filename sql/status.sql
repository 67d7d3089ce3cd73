--
-- The pmwal_status view on a server that preloads pmwal on an emulated ring.
--
CREATE EXTENSION pmwal;

\d pmwal_status

SELECT path ~ '^/dev/shm/pmwal_regress_[0-9]+\.ring$' AS path_ok,
       mode, capacity, state
  FROM pmwal_status;

SELECT head_lsn >= tail_lsn AS ordered,
       bytes_in_use = pg_wal_lsn_diff(head_lsn, tail_lsn) AS in_use_matches
  FROM pmwal_status;

-- the view is a thin wrapper over the function
SELECT count(*) FROM pmwal_status();
