-- Credit held in slices (pg/holds.ts): a process holds one row per account it admits for (its
-- request_id names the slice, 'slice:<owner>:<account>'), admits requests against it in its memory,
-- and grows it here when a request does not fit. A group of growths in one call, decided one by
-- one in account order under each account's advisory lock (migration 017's order). The rule is
-- migration 010's — room left after every hold — with the slice's unused part counted as room:
-- the shortfall is granted while anything is left (an account ends below zero by at most one
-- request), and spare beyond it only while the account has four times that left, so that near the
-- end of a balance every admission is decided here, one request at a time, as before. Growths add
-- to the slice; a settlement's statement subtracts its request's share, and an idle slice going
-- back subtracts the rest: additions and subtractions commute, so the row never holds less than
-- the process has admitted against it.
-- This replaces the per-request holds of migrations 010 and 017, whose functions are no longer called.
CREATE FUNCTION appliance_grow_slices(p_slices TEXT[], p_accounts TEXT[],
    p_need_micros BIGINT[], p_need_tokens BIGINT[], p_spare_micros BIGINT[], p_spare_tokens BIGINT[],
    p_unused_micros BIGINT[], p_unused_tokens BIGINT[], p_money BOOLEAN[], p_trial_limits BIGINT[],
    p_owner TEXT, p_lease_ms BIGINT)
RETURNS TABLE (i INT, verdict TEXT, balance BIGINT, held BIGINT, grant_micros BIGINT, grant_tokens BIGINT)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  k INT;
  v_balance BIGINT;
  v_trial BIGINT;
  v_held BIGINT;
  v_held_tokens BIGINT;
  v_room BIGINT;
  v_room_tokens BIGINT;
  v_spare BOOLEAN;
  v_now BIGINT := (extract(epoch from clock_timestamp()) * 1000)::bigint;
BEGIN
  FOR k IN SELECT o FROM generate_subscripts(p_accounts, 1) AS o ORDER BY p_accounts[o], o LOOP
    PERFORM pg_advisory_xact_lock(hashtext('hold:' || p_accounts[k]));
    -- One statement, one snapshot: a settlement is seen whole or not at all (migration 010).
    SELECT a.balance_micros, a.trial_tokens_used,
           (SELECT COALESCE(SUM(h.micros), 0) FROM credit_holds h WHERE h.account_id = p_accounts[k]),
           (SELECT COALESCE(SUM(h.tokens), 0) FROM credit_holds h WHERE h.account_id = p_accounts[k])
      INTO v_balance, v_trial, v_held, v_held_tokens FROM accounts a WHERE a.id = p_accounts[k];
    i := k;
    balance := v_balance;
    held := v_held - p_unused_micros[k];
    grant_micros := 0;
    grant_tokens := 0;
    v_room := v_balance - v_held + p_unused_micros[k];
    v_room_tokens := COALESCE(p_trial_limits[k], 0) - v_trial - v_held_tokens + p_unused_tokens[k];
    IF v_balance IS NULL THEN
      verdict := 'unknown_account';
    ELSIF p_money[k] AND v_room <= 0 THEN
      verdict := 'balance';
    ELSIF p_trial_limits[k] IS NOT NULL AND v_room_tokens <= 0 THEN
      verdict := 'trial';
    ELSE
      v_spare := (NOT p_money[k] OR v_room >= 4 * (p_need_micros[k] + p_spare_micros[k]))
        AND (p_trial_limits[k] IS NULL OR v_room_tokens >= 4 * (p_need_tokens[k] + p_spare_tokens[k]));
      grant_micros := p_need_micros[k] + CASE WHEN v_spare THEN p_spare_micros[k] ELSE 0 END;
      grant_tokens := p_need_tokens[k] + CASE WHEN v_spare THEN p_spare_tokens[k] ELSE 0 END;
      INSERT INTO credit_holds (request_id, account_id, micros, tokens, owner, created_at, expires_at)
        VALUES (p_slices[k], p_accounts[k], grant_micros, grant_tokens, p_owner, v_now, v_now + p_lease_ms)
        ON CONFLICT (request_id) DO UPDATE SET micros = credit_holds.micros + EXCLUDED.micros,
          tokens = credit_holds.tokens + EXCLUDED.tokens, expires_at = EXCLUDED.expires_at;
      verdict := 'ok';
    END IF;
    RETURN NEXT;
  END LOOP;
END;
$$;
