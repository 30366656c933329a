-- The web console: account passwords (argon2id, Bun.password) and sign-in sessions. A session
-- is found by the SHA-256 of its cookie value; the cookie value itself is never stored.
ALTER TABLE accounts ADD COLUMN password_hash TEXT;

CREATE TABLE console_sessions (
  id_hash BLOB PRIMARY KEY,
  account_id TEXT NOT NULL REFERENCES accounts(id),
  csrf TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  last_seen_at INTEGER NOT NULL,
  expires_at INTEGER NOT NULL
);
CREATE INDEX console_sessions_account ON console_sessions(account_id);
