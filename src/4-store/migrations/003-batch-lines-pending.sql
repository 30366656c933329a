-- Which pending lines are running is known only to the batch worker (a line costs one write, its
-- result): the 'running' state and claimed_at go, and a line a dead process was running is simply
-- pending. A partial index over pending lines replaces batch_lines_todo: walking the primary key
-- past every finished line, once per line dispatched, made a large batch quadratic.
CREATE TABLE batch_lines_new (
  batch_id TEXT NOT NULL REFERENCES batches(id),
  line INTEGER NOT NULL,
  custom_id TEXT NOT NULL,
  model TEXT NOT NULL,
  body TEXT NOT NULL,
  state TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'completed', 'failed')),
  result TEXT,
  finished_at INTEGER,
  PRIMARY KEY (batch_id, line)
) WITHOUT ROWID;
INSERT INTO batch_lines_new (batch_id, line, custom_id, model, body, state, result, finished_at)
  SELECT batch_id, line, custom_id, model, body, CASE state WHEN 'running' THEN 'pending' ELSE state END, result, finished_at
  FROM batch_lines;
DROP TABLE batch_lines;
ALTER TABLE batch_lines_new RENAME TO batch_lines;
CREATE INDEX batch_lines_pending ON batch_lines(batch_id, line) WHERE state = 'pending';
