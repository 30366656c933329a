-- PostgreSQL twin of migrations/006-rental-launch-intent.sql: launch_intent, and stop_reason
-- 'key_revoked' (PostgreSQL alters the CHECK in place, where SQLite rebuilds the table).
ALTER TABLE rentals ADD COLUMN launch_intent TEXT;
ALTER TABLE rentals DROP CONSTRAINT rentals_stop_reason_check;
ALTER TABLE rentals ADD CONSTRAINT rentals_stop_reason_check CHECK (stop_reason IN ('user', 'auto_stop', 'insufficient_credit', 'error', 'key_revoked'));
