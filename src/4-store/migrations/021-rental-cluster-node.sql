-- Issue 45: the cluster node that launched a rental (src/2-services/cluster/node.ts: its id, or
-- "local" on a SQLite store, which is one node). Only that node runs the rental's ticks (its
-- launch's probe, billing, probes, auto-stop, stop) and serves its notebook; the others forward
-- to it. NULL: made before clusters — run by whichever process holds its lease, as before.
ALTER TABLE rentals ADD COLUMN cluster_node TEXT;
