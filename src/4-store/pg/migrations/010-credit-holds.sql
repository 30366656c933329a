-- Credit holds of requests in flight, shared by every process on this database (the SQLite store
-- keeps them in its one process's memory: its migration 010 creates nothing). A hold belongs to
-- the process that took it (owner) and lapses at expires_at (database clock, epoch ms) unless that
-- process's heartbeat renews it: a process that is gone has its holds dropped by the others.
CREATE TABLE credit_holds (
  request_id TEXT PRIMARY KEY,
  account_id TEXT NOT NULL REFERENCES accounts(id),
  micros BIGINT NOT NULL,
  tokens BIGINT NOT NULL,
  owner TEXT NOT NULL,
  created_at BIGINT NOT NULL,
  expires_at BIGINT NOT NULL
);
CREATE INDEX credit_holds_account ON credit_holds(account_id);
CREATE INDEX credit_holds_owner ON credit_holds(owner);
CREATE INDEX credit_holds_expiry ON credit_holds(expires_at);

-- One admission in one call (pg/holds.ts): admissions to an account run one at a time under its
-- advisory lock, and each statement here reads with a fresh snapshot (a volatile function under
-- READ COMMITTED), taken after the lock: the balance and the holds as the last admission left them.
-- (Edited in place before any release: no database was ever migrated by a published build.)
-- Returns 'ok', or why not: 'unknown_account', 'balance' (with the balance and the holds), 'trial'.
CREATE FUNCTION appliance_admit_hold(p_request TEXT, p_account TEXT, p_micros BIGINT, p_tokens BIGINT, p_owner TEXT,
    p_lease_ms BIGINT, p_money BOOLEAN, p_trial_limit BIGINT,
    OUT verdict TEXT, OUT balance BIGINT, OUT held BIGINT)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_trial BIGINT;
  v_held_tokens BIGINT;
  v_now BIGINT := (extract(epoch from clock_timestamp()) * 1000)::bigint;
BEGIN
  PERFORM pg_advisory_xact_lock(hashtext('hold:' || p_account));
  -- The balance and the holds in one statement, so one snapshot: a settlement (which charges the
  -- balance and deletes its hold in one transaction, without this lock) is seen whole or not at all.
  -- Read in two statements, one committing in between was counted in neither (an overdraft of
  -- several reservations, seen with three processes).
  SELECT a.balance_micros, a.trial_tokens_used,
         (SELECT COALESCE(SUM(h.micros), 0) FROM credit_holds h WHERE h.account_id = p_account),
         (SELECT COALESCE(SUM(h.tokens), 0) FROM credit_holds h WHERE h.account_id = p_account)
    INTO balance, v_trial, held, v_held_tokens FROM accounts a WHERE a.id = p_account;
  IF NOT FOUND THEN
    verdict := 'unknown_account';
    RETURN;
  END IF;
  IF p_money AND balance - held <= 0 THEN
    verdict := 'balance';
    RETURN;
  END IF;
  IF p_trial_limit IS NOT NULL AND p_trial_limit - v_trial - v_held_tokens <= 0 THEN
    verdict := 'trial';
    RETURN;
  END IF;
  INSERT INTO credit_holds (request_id, account_id, micros, tokens, owner, created_at, expires_at)
    VALUES (p_request, p_account, p_micros, p_tokens, p_owner, v_now, v_now + p_lease_ms);
  verdict := 'ok';
END;
$$;
