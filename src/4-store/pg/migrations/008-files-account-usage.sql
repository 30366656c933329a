-- PostgreSQL twin of migrations/008-files-account-usage.sql.
CREATE INDEX files_account_live ON files(account_id, expires_at, bytes) WHERE deleted_at IS NULL;
