-- Issue 41 M4: an account's storage quota sums the bytes of its live files at every upload. This
-- index holds exactly what the sum reads (live rows of the account, their expiry and size).
CREATE INDEX files_account_live ON files(account_id, expires_at, bytes) WHERE deleted_at IS NULL;
