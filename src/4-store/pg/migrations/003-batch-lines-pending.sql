-- PostgreSQL twin of migrations/003-batch-lines-pending.sql: no 'running' state, no claimed_at, a
-- partial index over pending lines.
UPDATE batch_lines SET state = 'pending' WHERE state = 'running';
ALTER TABLE batch_lines DROP COLUMN claimed_at;
ALTER TABLE batch_lines DROP CONSTRAINT batch_lines_state_check;
ALTER TABLE batch_lines ADD CONSTRAINT batch_lines_state_check CHECK (state IN ('pending', 'completed', 'failed'));
DROP INDEX batch_lines_todo;
CREATE INDEX batch_lines_pending ON batch_lines(batch_id, line) WHERE state = 'pending';
