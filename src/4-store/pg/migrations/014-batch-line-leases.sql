-- PostgreSQL twin of migrations/014-batch-line-leases.sql: lease_until by the database's clock.
ALTER TABLE batch_lines ADD COLUMN lease_owner TEXT;
ALTER TABLE batch_lines ADD COLUMN lease_until BIGINT;
CREATE INDEX batch_lines_leased ON batch_lines(lease_owner) WHERE state = 'pending' AND lease_owner IS NOT NULL;
