-- GPU rentals (spec §2.3, §3 Rental). Money in integer micro-dollars; times in epoch ms.
-- status: pending → running → stopping → stopped, or failed. A rental holds its node while
-- pending, running or stopping (the partial unique index: never two on one node).
CREATE TABLE rentals (
  id TEXT PRIMARY KEY,
  key_id TEXT NOT NULL REFERENCES api_keys(id),
  account_id TEXT NOT NULL REFERENCES accounts(id),
  node_id TEXT NOT NULL,
  type TEXT NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('pending', 'running', 'stopping', 'stopped', 'failed')),
  stop_reason TEXT CHECK (stop_reason IN ('user', 'auto_stop', 'insufficient_credit', 'error')),
  failure TEXT,
  price_per_hour_micros INTEGER NOT NULL,
  hours REAL,
  token TEXT NOT NULL,
  launcher TEXT NOT NULL,
  handle TEXT,
  created_at INTEGER NOT NULL,
  running_at INTEGER,
  stopping_at INTEGER,
  stopped_at INTEGER,
  expires_at INTEGER,
  billed_minutes INTEGER NOT NULL DEFAULT 0,
  cost_micros INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX rentals_key ON rentals(key_id, created_at);
CREATE UNIQUE INDEX rentals_node_active ON rentals(node_id) WHERE status IN ('pending', 'running', 'stopping');
CREATE INDEX rentals_active ON rentals(status) WHERE status IN ('pending', 'running', 'stopping');

-- Idempotency-Key → the rental it created, per key; remembered 24 h (spec §8 rule 1).
CREATE TABLE rental_requests (
  key_id TEXT NOT NULL REFERENCES api_keys(id),
  idempotency_key TEXT NOT NULL,
  body_hash TEXT NOT NULL,
  rental_id TEXT NOT NULL REFERENCES rentals(id),
  created_at INTEGER NOT NULL,
  PRIMARY KEY (key_id, idempotency_key)
) WITHOUT ROWID;
