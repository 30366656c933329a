-- PostgreSQL only (pg/migrations/017-admit-holds.sql: admissions in groups). The SQLite store
-- keeps its holds in its one process's memory.
SELECT 1;
