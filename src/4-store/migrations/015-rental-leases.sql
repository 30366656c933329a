-- Issue 44: the ticks of an active rental (its launch's probe, its billing, its probes and its
-- auto-stop) are run by one process at a time: the one holding its lease (lease_owner) until
-- lease_until (epoch ms, the database's clock), renewed while that process lives. A lease that
-- lapsed (its process was killed) is taken by another process, which picks the rental up as a
-- restart would (src/2-services/rentals/service.ts). On SQLite one server owns the data dir and
-- takes its own leases back when it restarts.
ALTER TABLE rentals ADD COLUMN lease_owner TEXT;
ALTER TABLE rentals ADD COLUMN lease_until INTEGER;
