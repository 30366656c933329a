-- The limits' counters in one call each (pg/counters.ts): a window's take and a lease each ran as a
-- transaction of four or five round trips, and a take read every event of its window back to sum
-- it (1.1–1.7 ms a request under a per-minute cap: bench store). Each function takes the key's
-- advisory lock, as before, so N processes admit against one count; times are the database's clock.

-- Takes `weight` from the key's window if the events of its last p_window_ms leave room under
-- p_limit. ok; the weight used before; the oldest event's time (when the window's first place
-- frees); on a refusal, how long until enough weight has left the window.
CREATE FUNCTION appliance_take_rate(p_key TEXT, p_limit BIGINT, p_window_ms BIGINT, p_weight BIGINT,
    OUT ok BOOLEAN, OUT used BIGINT, OUT oldest BIGINT, OUT retry_after_ms BIGINT, OUT now_ms BIGINT)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  PERFORM pg_advisory_xact_lock(hashtext(p_key));
  now_ms := (extract(epoch from clock_timestamp()) * 1000)::bigint;
  SELECT COALESCE(SUM(e.weight), 0), MIN(e.at) INTO used, oldest FROM rate_events e WHERE e.key = p_key AND e.at > now_ms - p_window_ms;
  IF used + p_weight > p_limit THEN
    ok := false;
    SELECT f.at + p_window_ms - now_ms INTO retry_after_ms FROM (
      SELECT e.at, SUM(e.weight) OVER (ORDER BY e.at, e.id) AS freed FROM rate_events e WHERE e.key = p_key AND e.at > now_ms - p_window_ms) f
      WHERE f.freed >= used + p_weight - p_limit ORDER BY f.at LIMIT 1;
    retry_after_ms := GREATEST(1, COALESCE(retry_after_ms, p_window_ms));
    RETURN;
  END IF;
  INSERT INTO rate_events (key, at, weight) VALUES (p_key, now_ms, p_weight);
  ok := true;
  retry_after_ms := 0;
END;
$$;

-- Takes a lease of `weight` on the key if its live leases leave room under p_limit (0: no cap).
CREATE FUNCTION appliance_take_lease(p_id TEXT, p_key TEXT, p_weight BIGINT, p_limit BIGINT, p_owner TEXT, p_lease_ms BIGINT,
    OUT ok BOOLEAN, OUT used BIGINT)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_now BIGINT := (extract(epoch from clock_timestamp()) * 1000)::bigint;
BEGIN
  PERFORM pg_advisory_xact_lock(hashtext(p_key));
  SELECT COALESCE(SUM(l.weight), 0) INTO used FROM counted_leases l WHERE l.key = p_key AND l.expires_at >= v_now;
  IF p_limit > 0 AND used + p_weight > p_limit THEN
    ok := false;
    RETURN;
  END IF;
  INSERT INTO counted_leases (id, key, weight, owner, expires_at) VALUES (p_id, p_key, p_weight, p_owner, v_now + p_lease_ms);
  ok := true;
END;
$$;
