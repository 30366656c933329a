-- Issue 44: a batch line being run is leased to its process (lease_owner) until lease_until (epoch
-- ms), renewed by the process's heartbeat, rather than known only to one worker's memory: a line
-- whose lease lapsed (its process was killed) is claimed again by another, and a cancel or an
-- expiry fails only lines no live lease holds. On SQLite (one process per data dir) every lease
-- found when the worker starts belonged to a process that is gone.
ALTER TABLE batch_lines ADD COLUMN lease_owner TEXT;
ALTER TABLE batch_lines ADD COLUMN lease_until INTEGER;
-- What the heartbeat renews: one process's leased lines still pending.
CREATE INDEX batch_lines_leased ON batch_lines(lease_owner) WHERE state = 'pending' AND lease_owner IS NOT NULL;
