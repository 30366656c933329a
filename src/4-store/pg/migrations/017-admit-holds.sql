-- Admissions in groups (pg/holds.ts): a process sends the admissions that arrived while its last
-- call was out as one call, decided one by one in account order (each account's advisory lock taken
-- once, in the same order by every process, so two groups cannot deadlock), each seeing the holds
-- the ones before it took. The rule is appliance_admit_hold's (migration 010). Verdicts come back
-- in the order given.
CREATE FUNCTION appliance_admit_holds(p_requests TEXT[], p_accounts TEXT[], p_micros BIGINT[], p_tokens BIGINT[],
    p_money BOOLEAN[], p_trial_limits BIGINT[], p_owner TEXT, p_lease_ms BIGINT)
RETURNS TABLE (i INT, verdict TEXT, balance BIGINT, held BIGINT)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  k INT;
  v_balance BIGINT;
  v_trial BIGINT;
  v_held BIGINT;
  v_held_tokens BIGINT;
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
    held := v_held;
    IF v_balance IS NULL THEN
      verdict := 'unknown_account';
    ELSIF p_money[k] AND v_balance - v_held <= 0 THEN
      verdict := 'balance';
    ELSIF p_trial_limits[k] IS NOT NULL AND p_trial_limits[k] - v_trial - v_held_tokens <= 0 THEN
      verdict := 'trial';
    ELSE
      INSERT INTO credit_holds (request_id, account_id, micros, tokens, owner, created_at, expires_at)
        VALUES (p_requests[k], p_accounts[k], p_micros[k], p_tokens[k], p_owner, v_now, v_now + p_lease_ms)
        ON CONFLICT (request_id) DO NOTHING;
      verdict := 'ok';
    END IF;
    RETURN NEXT;
  END LOOP;
END;
$$;
