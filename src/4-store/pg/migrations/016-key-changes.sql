-- Key changes, announced to every process on this database (the SQLite store needs none: its
-- PRAGMA data_version moves on every commit of another connection; its migration 016 creates
-- nothing). A change to a key, or to an account's name or role, bumps the version and notifies
-- `appliance_keys`; processes drop their cached principals on either (pg/accounts.ts).
CREATE TABLE key_changes (
  id INT PRIMARY KEY CHECK (id = 1),
  version BIGINT NOT NULL
);
INSERT INTO key_changes (id, version) VALUES (1, 0);

CREATE FUNCTION appliance_key_changed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE v BIGINT;
BEGIN
  UPDATE key_changes SET version = version + 1 WHERE id = 1 RETURNING version INTO v;
  PERFORM pg_notify('appliance_keys', v::text);
  RETURN NULL;
END $$;

CREATE TRIGGER api_keys_changed AFTER UPDATE ON api_keys FOR EACH ROW
  WHEN (OLD.revoked_at IS DISTINCT FROM NEW.revoked_at OR OLD.scopes IS DISTINCT FROM NEW.scopes OR OLD.name IS DISTINCT FROM NEW.name
    OR OLD.rpm_limit IS DISTINCT FROM NEW.rpm_limit OR OLD.inflight_limit IS DISTINCT FROM NEW.inflight_limit
    OR OLD.max_active_rentals IS DISTINCT FROM NEW.max_active_rentals OR OLD.account_id IS DISTINCT FROM NEW.account_id
    OR OLD.secret_hash IS DISTINCT FROM NEW.secret_hash)
  EXECUTE FUNCTION appliance_key_changed();
CREATE TRIGGER api_keys_deleted AFTER DELETE ON api_keys FOR EACH ROW EXECUTE FUNCTION appliance_key_changed();
CREATE TRIGGER accounts_changed AFTER UPDATE ON accounts FOR EACH ROW
  WHEN (OLD.name IS DISTINCT FROM NEW.name OR OLD.role IS DISTINCT FROM NEW.role)
  EXECUTE FUNCTION appliance_key_changed();
