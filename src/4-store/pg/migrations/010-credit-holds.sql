-- Credit holds of requests in flight, shared by every process on this database (the SQLite store
-- keeps them in its one process's memory: its migration 010 creates nothing). A hold belongs to
-- the process that took it (owner) and lapses at expires_at (database clock, epoch ms) unless that
-- process's heartbeat renews it: a process that is gone has its holds dropped by the others.
CREATE TABLE credit_holds (
  request_id TEXT PRIMARY KEY,
  account_id TEXT NOT NULL REFERENCES accounts(id),
  micros BIGINT NOT NULL,
  tokens BIGINT NOT NULL,
  owner TEXT NOT NULL,
  created_at BIGINT NOT NULL,
  expires_at BIGINT NOT NULL
);
CREATE INDEX credit_holds_account ON credit_holds(account_id);
CREATE INDEX credit_holds_owner ON credit_holds(owner);
CREATE INDEX credit_holds_expiry ON credit_holds(expires_at);
