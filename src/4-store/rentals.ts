import type { Database } from "bun:sqlite";

export type RentalStatus = "pending" | "running" | "stopping" | "stopped" | "failed";
export type StopReason = "user" | "auto_stop" | "insufficient_credit" | "error" | "key_revoked";

export interface RentalRow {
  id: string;
  key_id: string;
  account_id: string;
  node_id: string;
  type: string;
  status: RentalStatus;
  stop_reason: StopReason | null;
  failure: string | null;
  price_per_hour_micros: number;
  hours: number | null;
  token: string;
  launcher: string;
  /** What the launcher is about to start (JSON LaunchIntent), written before it starts anything. */
  launch_intent: string | null;
  /** The launcher's handle (JSON), once started. */
  handle: string | null;
  created_at: number;
  running_at: number | null;
  stopping_at: number | null;
  stopped_at: number | null;
  expires_at: number | null;
  billed_minutes: number;
  cost_micros: number;
}

export const ACTIVE: readonly RentalStatus[] = ["pending", "running", "stopping"];

export function rentalsRepo(db: Database) {
  const insert = db.query(
    `INSERT INTO rentals (id, key_id, account_id, node_id, type, status, price_per_hour_micros, hours, token, launcher, created_at)
     VALUES ($id, $key_id, $account_id, $node_id, $type, 'pending', $price_per_hour_micros, $hours, $token, $launcher, $created_at)`,
  );
  const byId = db.query<RentalRow, [string]>("SELECT * FROM rentals WHERE id = ?");
  const byKey = db.query<RentalRow, { key: string; limit: number }>("SELECT * FROM rentals WHERE key_id = $key ORDER BY created_at DESC, rowid DESC LIMIT $limit");
  const active = db.query<RentalRow, []>("SELECT * FROM rentals WHERE status IN ('pending', 'running', 'stopping')");
  const activeOnNode = db.query<{ id: string }, [string]>("SELECT id FROM rentals WHERE node_id = ? AND status IN ('pending', 'running', 'stopping')");
  const activeForKey = db.query<{ n: number }, [string]>("SELECT COUNT(*) AS n FROM rentals WHERE key_id = ? AND status IN ('pending', 'running', 'stopping')");
  const request = db.query<{ body_hash: string; rental_id: string; created_at: number }, { key: string; idem: string }>(
    "SELECT body_hash, rental_id, created_at FROM rental_requests WHERE key_id = $key AND idempotency_key = $idem",
  );
  const remember = db.query(
    "INSERT INTO rental_requests (key_id, idempotency_key, body_hash, rental_id, created_at) VALUES ($key, $idem, $hash, $rental, $now)",
  );
  const forget = db.query("DELETE FROM rental_requests WHERE key_id = $key AND idempotency_key = $idem");
  const forgetOld = db.query("DELETE FROM rental_requests WHERE created_at < ?");
  const onRevokedKeys = db.query<RentalRow & { revoked_at: number }, []>(
    `SELECT r.*, k.revoked_at AS revoked_at FROM rentals r JOIN api_keys k ON k.id = r.key_id
      WHERE r.status IN ('pending', 'running') AND k.revoked_at IS NOT NULL`,
  );

  /** Moves a rental from one of `from` to `to`, with the given columns; false when it was not in `from`. */
  function transition(id: string, from: readonly RentalStatus[], to: RentalStatus, set: Partial<RentalRow> = {}): boolean {
    const cols = Object.keys(set);
    const sql =
      `UPDATE rentals SET status = $to${cols.map((c) => `, ${c} = $${c}`).join("")} ` +
      `WHERE id = $id AND status IN (${from.map((s) => `'${s}'`).join(", ")})`;
    const params: Record<string, string | number | null> = { id, to };
    for (const c of cols) params[c] = (set as Record<string, string | number | null>)[c] ?? null;
    return db.query(sql).run(params).changes > 0;
  }

  return {
    insert: (r: Pick<RentalRow, "id" | "key_id" | "account_id" | "node_id" | "type" | "price_per_hour_micros" | "hours" | "token" | "launcher" | "created_at">) =>
      insert.run({ ...r }),
    byId: (id: string) => byId.get(id) ?? null,
    byKey: (keyId: string, limit: number) => byKey.all({ key: keyId, limit }),
    active: () => active.all(),
    nodeTaken: (nodeId: string) => activeOnNode.get(nodeId) !== null,
    activeCount: (keyId: string) => activeForKey.get(keyId)!.n,
    transition,
    setHandle: (id: string, handle: string) => db.query("UPDATE rentals SET handle = ? WHERE id = ?").run(handle, id),
    setIntent: (id: string, intent: string) => db.query("UPDATE rentals SET launch_intent = ? WHERE id = ?").run(intent, id),
    /** Pending and running rentals whose key was revoked, with when. */
    onRevokedKeys: () => onRevokedKeys.all(),
    request: (keyId: string, idem: string) => request.get({ key: keyId, idem }),
    remember: (keyId: string, idem: string, hash: string, rentalId: string, now: number) => remember.run({ key: keyId, idem, hash, rental: rentalId, now }),
    forget: (keyId: string, idem: string) => forget.run({ key: keyId, idem }),
    forgetBefore: (t: number) => forgetOld.run(t).changes,
  };
}
export type RentalsRepo = ReturnType<typeof rentalsRepo>;

/**
 * A rotated key's active rentals go to its successor (called inside the rotation's transaction):
 * rotation changes the secret, not what runs; revoking a key stops its rentals (src/2-services/rentals/service.ts).
 */
export function moveActiveRentals(db: Database, fromKeyId: string, toKeyId: string): number {
  return db.query("UPDATE rentals SET key_id = ? WHERE key_id = ? AND status IN ('pending', 'running', 'stopping')").run(toKeyId, fromKeyId).changes;
}
