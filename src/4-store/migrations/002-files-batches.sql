-- Files (batch inputs and results) and batches (spec §2.10, §3). File content lives under
-- <data_dir>/files/; a row here is its metadata. Everything belongs to the key that created it.
CREATE TABLE files (
  id TEXT PRIMARY KEY,
  key_id TEXT NOT NULL REFERENCES api_keys(id),
  account_id TEXT NOT NULL REFERENCES accounts(id),
  filename TEXT NOT NULL,
  purpose TEXT NOT NULL,
  bytes INTEGER NOT NULL,
  status TEXT NOT NULL DEFAULT 'processed',
  created_at INTEGER NOT NULL,
  expires_at INTEGER,
  deleted_at INTEGER
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
  total INTEGER NOT NULL DEFAULT 0,
  completed INTEGER NOT NULL DEFAULT 0,
  failed INTEGER NOT NULL DEFAULT 0,
  created_at INTEGER NOT NULL,
  expires_at INTEGER NOT NULL,
  in_progress_at INTEGER,
  finalizing_at INTEGER,
  completed_at INTEGER,
  failed_at INTEGER,
  expired_at INTEGER,
  cancelling_at INTEGER,
  cancelled_at INTEGER
);
CREATE INDEX batches_key ON batches(key_id, created_at);
CREATE INDEX batches_open ON batches(status) WHERE status IN ('validating', 'in_progress', 'finalizing', 'cancelling');

-- One row per input line. A line's result and its charge are committed in one transaction, so a
-- line is either pending/running (nothing recorded, nothing charged) or finished exactly once.
CREATE TABLE batch_lines (
  batch_id TEXT NOT NULL REFERENCES batches(id),
  line INTEGER NOT NULL,
  custom_id TEXT NOT NULL,
  model TEXT NOT NULL,
  body TEXT NOT NULL,
  state TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'running', 'completed', 'failed')),
  result TEXT,
  claimed_at INTEGER,
  finished_at INTEGER,
  PRIMARY KEY (batch_id, line)
) WITHOUT ROWID;
CREATE INDEX batch_lines_todo ON batch_lines(state, batch_id, line);
