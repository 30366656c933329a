-- Issue 41 C2: a line that was running when the process died was simply pending again, so a line
-- that killed the process was run again seconds after every restart: a crash loop. `starts` counts
-- the times a line was started and neither finished nor was handed back by a graceful stop
-- (SIGTERM takes its start back). It is committed before the line runs, so after a crash a pending
-- line with starts > 0 was running when the process died; the worker runs such a line alone, and
-- fails one that was running during two deaths instead of starting it a third time.
ALTER TABLE batch_lines ADD COLUMN starts INTEGER NOT NULL DEFAULT 0;
-- What a restart looks for: the few pending lines a dead process had started.
CREATE INDEX batch_lines_started ON batch_lines(batch_id, line) WHERE state = 'pending' AND starts > 0;
