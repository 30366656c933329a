-- File contents in the store (issue 44): on SQLite they stay on the data dir's disk
-- (<data_dir>/files/<id>, src/4-store/files.ts), so this migration creates nothing; its PostgreSQL
-- twin creates the chunk table every process reads. Kept so the two lists pair by name.
SELECT 1;
