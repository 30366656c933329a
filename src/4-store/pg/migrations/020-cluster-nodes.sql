-- The nodes of a cluster (issue 45): every appliance process on this database registers itself,
-- what it serves and its settings, and beats (heartbeat_at, the database's clock, epoch ms). A node
-- whose beat is older than the lease is not live. draining: it takes no new work (set by
-- `appliance nodes drain`). The SQLite store is one node: its migration 020 creates nothing.
CREATE TABLE cluster_nodes (
  id TEXT PRIMARY KEY,
  url TEXT NOT NULL,
  version TEXT NOT NULL,
  started_at BIGINT NOT NULL,
  heartbeat_at BIGINT NOT NULL,
  models TEXT NOT NULL,
  gpus TEXT NOT NULL,
  settings TEXT NOT NULL,
  draining BOOLEAN NOT NULL DEFAULT false
);
