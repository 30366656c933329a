-- PostgreSQL only (pg/migrations/019-hold-slices.sql: credit held in slices). The SQLite store
-- keeps its holds in its one process's memory.
SELECT 1;
