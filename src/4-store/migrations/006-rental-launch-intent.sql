-- Rentals, issue 23 (orphaned notebook servers; revoked keys).
-- launch_intent: what the launcher is about to start (JSON: launcher name and what identifies it —
-- the environment tag of the process launcher, the container name of the docker launcher),
-- written before the launch begins, so a server killed mid-launch (before `handle` was written)
-- finds and stops what it started when it comes back.
-- stop_reason gains 'key_revoked' (the rental's key was revoked), which needs the table rebuilt:
-- SQLite cannot alter a CHECK constraint. rental_requests references rentals(id), so it is set
-- aside and rebuilt too (with foreign keys on, dropping a referenced table fails).
CREATE TEMP TABLE rental_requests_copy AS SELECT * FROM rental_requests;
DROP TABLE rental_requests;
CREATE TABLE rentals_new (
  id TEXT PRIMARY KEY,
  key_id TEXT NOT NULL REFERENCES api_keys(id),
  account_id TEXT NOT NULL REFERENCES accounts(id),
  node_id TEXT NOT NULL,
  type TEXT NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('pending', 'running', 'stopping', 'stopped', 'failed')),
  stop_reason TEXT CHECK (stop_reason IN ('user', 'auto_stop', 'insufficient_credit', 'error', 'key_revoked')),
  failure TEXT,
  price_per_hour_micros INTEGER NOT NULL,
  hours REAL,
  token TEXT NOT NULL,
  launcher TEXT NOT NULL,
  launch_intent TEXT,
  handle TEXT,
  created_at INTEGER NOT NULL,
  running_at INTEGER,
  stopping_at INTEGER,
  stopped_at INTEGER,
  expires_at INTEGER,
  billed_minutes INTEGER NOT NULL DEFAULT 0,
  cost_micros INTEGER NOT NULL DEFAULT 0
);
INSERT INTO rentals_new (id, key_id, account_id, node_id, type, status, stop_reason, failure, price_per_hour_micros, hours, token,
    launcher, handle, created_at, running_at, stopping_at, stopped_at, expires_at, billed_minutes, cost_micros)
  SELECT id, key_id, account_id, node_id, type, status, stop_reason, failure, price_per_hour_micros, hours, token,
    launcher, handle, created_at, running_at, stopping_at, stopped_at, expires_at, billed_minutes, cost_micros
  FROM rentals ORDER BY rowid;
DROP TABLE rentals;
ALTER TABLE rentals_new RENAME TO rentals;
CREATE INDEX rentals_key ON rentals(key_id, created_at);
CREATE UNIQUE INDEX rentals_node_active ON rentals(node_id) WHERE status IN ('pending', 'running', 'stopping');
CREATE INDEX rentals_active ON rentals(status) WHERE status IN ('pending', 'running', 'stopping');

CREATE TABLE rental_requests (
  key_id TEXT NOT NULL REFERENCES api_keys(id),
  idempotency_key TEXT NOT NULL,
  body_hash TEXT NOT NULL,
  rental_id TEXT NOT NULL REFERENCES rentals(id),
  created_at INTEGER NOT NULL,
  PRIMARY KEY (key_id, idempotency_key)
) WITHOUT ROWID;
INSERT INTO rental_requests SELECT key_id, idempotency_key, body_hash, rental_id, created_at FROM rental_requests_copy;
DROP TABLE rental_requests_copy;
