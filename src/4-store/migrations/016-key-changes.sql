-- PostgreSQL only (pg/migrations/016-key-changes.sql: key changes announced across processes).
-- SQLite's PRAGMA data_version already tells a connection that another one committed.
SELECT 1;
