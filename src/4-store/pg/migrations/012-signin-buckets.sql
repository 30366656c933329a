-- The console's sign-in buckets, shared by every process on this database (the SQLite store keeps
-- them in its one process's memory: its migration 012 creates nothing). Times in epoch ms.
CREATE TABLE signin_buckets (
  key TEXT PRIMARY KEY,
  failures BIGINT NOT NULL,
  since BIGINT NOT NULL,
  last BIGINT NOT NULL,
  next_at BIGINT NOT NULL
);
