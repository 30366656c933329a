-- PostgreSQL twin of migrations/004-rentals.sql.
CREATE TABLE rentals (
  id TEXT PRIMARY KEY,
  key_id TEXT NOT NULL REFERENCES api_keys(id),
  account_id TEXT NOT NULL REFERENCES accounts(id),
  node_id TEXT NOT NULL,
  type TEXT NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('pending', 'running', 'stopping', 'stopped', 'failed')),
  stop_reason TEXT CHECK (stop_reason IN ('user', 'auto_stop', 'insufficient_credit', 'error')),
  failure TEXT,
  price_per_hour_micros BIGINT NOT NULL,
  hours DOUBLE PRECISION,
  token TEXT NOT NULL,
  launcher TEXT NOT NULL,
  handle TEXT,
  created_at BIGINT NOT NULL,
  running_at BIGINT,
  stopping_at BIGINT,
  stopped_at BIGINT,
  expires_at BIGINT,
  billed_minutes BIGINT NOT NULL DEFAULT 0,
  cost_micros BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX rentals_key ON rentals(key_id, created_at);
CREATE UNIQUE INDEX rentals_node_active ON rentals(node_id) WHERE status IN ('pending', 'running', 'stopping');
CREATE INDEX rentals_active ON rentals(status) WHERE status IN ('pending', 'running', 'stopping');

CREATE TABLE rental_requests (
  key_id TEXT NOT NULL REFERENCES api_keys(id),
  idempotency_key TEXT NOT NULL,
  body_hash TEXT NOT NULL,
  rental_id TEXT NOT NULL REFERENCES rentals(id),
  created_at BIGINT NOT NULL,
  PRIMARY KEY (key_id, idempotency_key)
);
