--
-- pmwal_status is for monitoring roles only.
--
CREATE ROLE regress_pmwal_nobody;
CREATE ROLE regress_pmwal_monitor IN ROLE pg_monitor;

SET ROLE regress_pmwal_nobody;
SELECT mode FROM pmwal_status;
SELECT mode FROM pmwal_status();
RESET ROLE;

SET ROLE regress_pmwal_monitor;
SELECT mode FROM pmwal_status;
SELECT mode FROM pmwal_status();
RESET ROLE;

SELECT grantee, privilege_type FROM information_schema.role_table_grants
 WHERE table_name = 'pmwal_status' AND grantee <> current_user ORDER BY 1, 2;

DROP ROLE regress_pmwal_nobody;
DROP ROLE regress_pmwal_monitor;
