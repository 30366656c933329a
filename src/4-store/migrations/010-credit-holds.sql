-- Credit holds: on SQLite they live in the one server's memory (src/4-store/holds.ts), so this
-- migration creates nothing; its PostgreSQL twin (pg/migrations/010-credit-holds.sql) creates the
-- table every process shares. Kept so the two lists pair by name.
SELECT 1;
