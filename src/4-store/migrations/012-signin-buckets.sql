-- The console's sign-in buckets: on SQLite they live in the one server's memory
-- (src/4-store/signin-buckets.ts), so this migration creates nothing; its PostgreSQL twin creates
-- the table every process shares. Kept so the two lists pair by name.
SELECT 1;
