-- PostgreSQL twin of migrations/007-batch-line-starts.sql.
ALTER TABLE batch_lines ADD COLUMN starts BIGINT NOT NULL DEFAULT 0;
CREATE INDEX batch_lines_started ON batch_lines(batch_id, line) WHERE state = 'pending' AND starts > 0;
