-- Issue 48: the console's chat runs as its account through a key of the account's own, made by the
-- server on first use (src/2-services/accounts/service.ts consolePrincipal). Its secret is never
-- kept or shown: only its hash, of a random value nobody holds, so it cannot be presented as a
-- Bearer key; a signed-in console session (or a hop from another node that served one) acts with it.
-- 'api' keys are the ones people create; one active console key per account.
ALTER TABLE api_keys ADD COLUMN purpose TEXT NOT NULL DEFAULT 'api' CHECK (purpose IN ('api', 'console'));
CREATE UNIQUE INDEX api_keys_one_console ON api_keys(account_id) WHERE purpose = 'console' AND revoked_at IS NULL;
