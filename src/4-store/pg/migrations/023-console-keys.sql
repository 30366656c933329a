-- PostgreSQL twin of migrations/023-console-keys.sql: the console's own key of an account (purpose
-- 'console', at most one active), through which a signed-in console session makes its requests.
ALTER TABLE api_keys ADD COLUMN purpose TEXT NOT NULL DEFAULT 'api' CHECK (purpose IN ('api', 'console'));
CREATE UNIQUE INDEX api_keys_one_console ON api_keys(account_id) WHERE purpose = 'console' AND revoked_at IS NULL;
