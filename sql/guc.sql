--
-- pmwal's settings: defaults, ranges, contexts and validation messages.
--
SELECT name, regexp_replace(setting, '_[0-9_]+\.ring$', '_UID.ring') AS setting, unit, context, vartype, min_val, max_val, boot_val
  FROM pg_settings WHERE name LIKE 'pmwal.%' ORDER BY name;

-- postmaster settings cannot change in a session, reloadable ones neither
SET pmwal.size = '16MB';
SET pmwal.path = '/dev/shm/elsewhere.ring';
SET pmwal.require_pmem = off;
SET pmwal.enabled = off;

-- the prefix is reserved: typos are errors, not silent placeholders
SET pmwal.enable = off;

-- values are validated before they can reach postgresql.auto.conf
ALTER SYSTEM SET pmwal.path = 'pmwal.ring';
ALTER SYSTEM SET pmwal.path = '/dev/shm/';
ALTER SYSTEM SET pmwal.size = '1MB';
ALTER SYSTEM SET pmwal.size = '128GB';
ALTER SYSTEM SET pmwal.size = 'big';
ALTER SYSTEM SET pmwal.enabled = 'maybe';
ALTER SYSTEM SET pmwal.require_pmem = 'sometimes';
