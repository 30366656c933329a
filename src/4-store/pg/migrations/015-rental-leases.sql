-- PostgreSQL twin of migrations/015-rental-leases.sql: lease_until by the database's clock.
ALTER TABLE rentals ADD COLUMN lease_owner TEXT;
ALTER TABLE rentals ADD COLUMN lease_until BIGINT;
