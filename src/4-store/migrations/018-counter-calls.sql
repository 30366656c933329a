-- PostgreSQL only (pg/migrations/018-counter-calls.sql: the counters' operations as one call each).
-- The SQLite store keeps its counters in its one process's memory.
SELECT 1;
