-- Accounts, keys, credits and metered usage. Money is integer micro-dollars (1 USD = 1,000,000).
CREATE TABLE accounts (
  id TEXT PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  role TEXT NOT NULL DEFAULT 'user' CHECK (role IN ('user', 'admin')),
  balance_micros INTEGER NOT NULL DEFAULT 0,
  trial_tokens_used INTEGER NOT NULL DEFAULT 0,
  created_at INTEGER NOT NULL
);

CREATE TABLE api_keys (
  id TEXT PRIMARY KEY,
  account_id TEXT NOT NULL REFERENCES accounts(id),
  kind TEXT NOT NULL CHECK (kind IN ('free', 'premium')),
  name TEXT NOT NULL DEFAULT '',
  secret_hash BLOB NOT NULL UNIQUE,
  last4 TEXT NOT NULL,
  scopes TEXT NOT NULL DEFAULT 'inference',
  max_active_rentals INTEGER,
  rpm_limit INTEGER,
  inflight_limit INTEGER,
  created_at INTEGER NOT NULL,
  last_used_at INTEGER,
  revoked_at INTEGER,
  rotated_from TEXT REFERENCES api_keys(id)
);
CREATE INDEX api_keys_account ON api_keys(account_id);
-- "Each account gets exactly one free key": rotation revokes the old one before the new one is added.
CREATE UNIQUE INDEX api_keys_one_free ON api_keys(account_id) WHERE kind = 'free' AND revoked_at IS NULL;

CREATE TABLE credits (
  id INTEGER PRIMARY KEY,
  account_id TEXT NOT NULL REFERENCES accounts(id),
  amount_micros INTEGER NOT NULL,
  note TEXT NOT NULL DEFAULT '',
  created_at INTEGER NOT NULL
);
CREATE INDEX credits_account ON credits(account_id);

-- One row per settled request; request_id makes settlement idempotent.
CREATE TABLE usage (
  id INTEGER PRIMARY KEY,
  request_id TEXT NOT NULL UNIQUE,
  account_id TEXT NOT NULL REFERENCES accounts(id),
  key_id TEXT NOT NULL REFERENCES api_keys(id),
  model TEXT NOT NULL,
  endpoint TEXT NOT NULL,
  input_tokens INTEGER NOT NULL DEFAULT 0,
  output_tokens INTEGER NOT NULL DEFAULT 0,
  cached_tokens INTEGER NOT NULL DEFAULT 0,
  images INTEGER NOT NULL DEFAULT 0,
  batch INTEGER NOT NULL DEFAULT 0,
  cost_micros INTEGER NOT NULL DEFAULT 0,
  trial_tokens INTEGER NOT NULL DEFAULT 0,
  created_at INTEGER NOT NULL
);
CREATE INDEX usage_account_time ON usage(account_id, created_at);
CREATE INDEX usage_key_time ON usage(key_id, created_at);
