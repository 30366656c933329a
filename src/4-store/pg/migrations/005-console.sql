-- PostgreSQL twin of migrations/005-console.sql.
ALTER TABLE accounts ADD COLUMN password_hash TEXT;

CREATE TABLE console_sessions (
  id_hash BYTEA PRIMARY KEY,
  account_id TEXT NOT NULL REFERENCES accounts(id),
  csrf TEXT NOT NULL,
  created_at BIGINT NOT NULL,
  last_seen_at BIGINT NOT NULL,
  expires_at BIGINT NOT NULL
);
CREATE INDEX console_sessions_account ON console_sessions(account_id);
