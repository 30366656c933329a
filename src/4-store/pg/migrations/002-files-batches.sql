-- PostgreSQL twin of migrations/002-files-batches.sql.
CREATE TABLE files (
  id TEXT PRIMARY KEY,
  key_id TEXT NOT NULL REFERENCES api_keys(id),
  account_id TEXT NOT NULL REFERENCES accounts(id),
  filename TEXT NOT NULL,
  purpose TEXT NOT NULL,
  bytes BIGINT NOT NULL,
  status TEXT NOT NULL DEFAULT 'processed',
  created_at BIGINT NOT NULL,
  expires_at BIGINT,
  deleted_at BIGINT
);
CREATE INDEX files_key ON files(key_id, created_at);
CREATE INDEX files_expiry ON files(expires_at) WHERE deleted_at IS NULL;

CREATE TABLE batches (
  id TEXT PRIMARY KEY,
  key_id TEXT NOT NULL REFERENCES api_keys(id),
  account_id TEXT NOT NULL REFERENCES accounts(id),
  endpoint TEXT NOT NULL,
  input_file_id TEXT NOT NULL REFERENCES files(id),
  completion_window TEXT NOT NULL,
  status TEXT NOT NULL,
  metadata TEXT,
  errors TEXT,
  output_file_id TEXT REFERENCES files(id),
  error_file_id TEXT REFERENCES files(id),
  total BIGINT NOT NULL DEFAULT 0,
  completed BIGINT NOT NULL DEFAULT 0,
  failed BIGINT NOT NULL DEFAULT 0,
  created_at BIGINT NOT NULL,
  expires_at BIGINT NOT NULL,
  in_progress_at BIGINT,
  finalizing_at BIGINT,
  completed_at BIGINT,
  failed_at BIGINT,
  expired_at BIGINT,
  cancelling_at BIGINT,
  cancelled_at BIGINT
);
CREATE INDEX batches_key ON batches(key_id, created_at);
CREATE INDEX batches_open ON batches(status) WHERE status IN ('validating', 'in_progress', 'finalizing', 'cancelling');

CREATE TABLE batch_lines (
  batch_id TEXT NOT NULL REFERENCES batches(id),
  line BIGINT NOT NULL,
  custom_id TEXT NOT NULL,
  model TEXT NOT NULL,
  body TEXT NOT NULL,
  state TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'running', 'completed', 'failed')),
  result TEXT,
  claimed_at BIGINT,
  finished_at BIGINT,
  PRIMARY KEY (batch_id, line)
);
CREATE INDEX batch_lines_todo ON batch_lines(state, batch_id, line);
