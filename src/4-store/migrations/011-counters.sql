-- The limits' counters: on SQLite they live in the one server's memory (src/4-store/counters.ts),
-- so this migration creates nothing; its PostgreSQL twin (pg/migrations/011-counters.sql) creates
-- the tables every process shares. Kept so the two lists pair by name.
SELECT 1;
