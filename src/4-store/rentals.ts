import type { Database } from "bun:sqlite";

// GPU rentals in the store (migrations 004, 006, 015, 021): the rows of the state machine
// (src/2-services/rentals/service.ts), the Idempotency-Keys of their creation, and the lease that
// says which process runs a rental's ticks. One async interface by domain operation (issue 44), on
// SQLite here and on PostgreSQL in pg/rentals.ts; each operation is one transaction.

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
  /** The process that runs this rental's ticks, until lease_until (epoch ms, the database's clock). */
  lease_owner: string | null;
  lease_until: number | null;
  /** The cluster node that launched it, the only one that runs its ticks ("local" on SQLite; null: made before clusters). */
  cluster_node: string | null;
}

export const ACTIVE: readonly RentalStatus[] = ["pending", "running", "stopping"];

/** What a new rental's row is given; the rest starts empty (pending, nothing billed). */
export type RentalInsert = Pick<RentalRow, "id" | "key_id" | "account_id" | "node_id" | "type" | "price_per_hour_micros" | "hours" | "token" | "launcher" | "created_at"> & { cluster_node?: string | null };

export interface RentalCreation {
  keyId: string;
  nodeId: string;
  now: number;
  /** The request's Idempotency-Key, the hash of its body, and how long a key is remembered. */
  idempotency: { key: string; bodyHash: string; ttlMs: number } | null;
  /**
   * Decides, inside the transaction and synchronously, from what the store holds now: refuses by
   * throwing, or returns the row to insert. (The account's balance is read before: the ledger is
   * asynchronous, the decision is not.)
   */
  admit(now: { activeForKey: number; nodeTaken: boolean }): RentalInsert;
  /** The creating process takes the new rental's lease at once: its launch is under way there. */
  lease: { owner: string; ms: number };
}

/** created: a new rental; false: the one this Idempotency-Key made before; reused: that key came with another body. */
export type CreateOutcome = { row: RentalRow; created: boolean } | { reused: true };

export type RevokedRental = RentalRow & { revoked_at: number };

/** What the metrics read: rentals active now, and what every rental billed. */
export interface RentalTotals {
  active: number;
  minutes: number;
  costMicros: number;
}

export interface RentalStore {
  /**
   * A new rental, in one transaction serialised per key: the Idempotency-Key first (the rental it
   * made within its time, or `reused` for another body), then `admit`, the insert and the key's
   * record. Two creations for one node: one is created, the other's `admit` finds it taken.
   */
  create(c: RentalCreation): Promise<CreateOutcome>;
  byId(id: string): Promise<RentalRow | null>;
  /** A key's rentals, newest first. */
  byKey(keyId: string, limit: number): Promise<RentalRow[]>;
  /** An account's rentals (every key's), newest first. */
  byAccount(accountId: string, limit: number): Promise<RentalRow[]>;
  /** Pending, running and stopping rentals: those that hold their node. */
  active(): Promise<RentalRow[]>;
  /** Pending and running rentals whose key was revoked, with when. */
  onRevokedKeys(): Promise<RevokedRental[]>;
  /** What the launch is about to start: committed (durably) before the launcher starts it. */
  setIntent(id: string, intent: string): Promise<void>;
  /** What the launch started. */
  setHandle(id: string, handle: string): Promise<void>;
  /** pending → running at `at`, due at `expiresAt`; false when it was not pending. */
  markRunning(id: string, at: number, expiresAt: number | null): Promise<boolean>;
  /** pending or running → stopping (its node stays taken until it ended); false when it was neither. */
  markStopping(id: string, s: { at: number; reason: StopReason; failure?: string }): Promise<boolean>;
  /** stopping → failed (stop reason `error`) or stopped, at `at`; its lease ends. null when it was not stopping. */
  markEnded(id: string, at: number): Promise<"stopped" | "failed" | null>;
  /** Forgets Idempotency-Keys recorded before `t`; how many. */
  forgetRequestsBefore(t: number): Promise<number>;
  totals(): Promise<RentalTotals>;

  /**
   * Takes, for `owner` and `leaseMs` from the database's clock, the lease of every active rental
   * whose lease is free or lapsed, and renews `owner`'s own once half of it has passed (a tick
   * every second writes a rental's row only every leaseMs / 2). The rows `owner` holds now.
   * `node`: only rentals launched by that cluster node (or by none) are taken; null: any.
   */
  claimActive(owner: string, leaseMs: number, node?: string | null): Promise<RentalRow[]>;
  /** The same for one rental: whether `owner` holds it now. */
  claim(id: string, owner: string, leaseMs: number, node?: string | null): Promise<boolean>;
  /** Extends `owner`'s leases of active rentals by `leaseMs` from now (its heartbeat); how many. */
  renewLeases(owner: string, leaseMs: number): Promise<number>;
  /** Hands `owner`'s leases back (a clean shutdown): another process takes them at its next tick. */
  releaseLeases(owner: string): Promise<void>;
}

/** SQLite's clock in epoch ms (julianday('now') has millisecond precision), as leases read it. */
const SQLITE_NOW_MS = "CAST(ROUND((julianday('now') - 2440587.5) * 86400000) AS INTEGER)";
const ACTIVE_SQL = "status IN ('pending', 'running', 'stopping')";
/** A lease is taken only by the rental's own cluster node (or by anyone: $node null, or a rental made before clusters). */
const ON_NODE_SQL = "($node IS NULL OR cluster_node IS NULL OR cluster_node = $node)";

/** The rentals' statements on one SQLite handle, synchronous (the store below, and tests that set up rows). */
export function rentalsRepo(db: Database) {
  const insert = db.query(
    `INSERT INTO rentals (id, key_id, account_id, node_id, type, status, price_per_hour_micros, hours, token, launcher, created_at, cluster_node)
     VALUES ($id, $key_id, $account_id, $node_id, $type, 'pending', $price_per_hour_micros, $hours, $token, $launcher, $created_at, $cluster_node)`,
  );
  const byId = db.query<RentalRow, [string]>("SELECT * FROM rentals WHERE id = ?");
  const byKey = db.query<RentalRow, { key: string; limit: number }>("SELECT * FROM rentals WHERE key_id = $key ORDER BY created_at DESC, rowid DESC LIMIT $limit");
  const active = db.query<RentalRow, []>(`SELECT * FROM rentals WHERE ${ACTIVE_SQL}`);
  const activeOnNode = db.query<{ id: string }, [string]>(`SELECT id FROM rentals WHERE node_id = ? AND ${ACTIVE_SQL}`);
  const activeForKey = db.query<{ n: number }, [string]>(`SELECT COUNT(*) AS n FROM rentals WHERE key_id = ? AND ${ACTIVE_SQL}`);
  const request = db.query<{ body_hash: string; rental_id: string; created_at: number }, { key: string; idem: string }>(
    "SELECT body_hash, rental_id, created_at FROM rental_requests WHERE key_id = $key AND idempotency_key = $idem",
  );
  const remember = db.query(
    "INSERT INTO rental_requests (key_id, idempotency_key, body_hash, rental_id, created_at) VALUES ($key, $idem, $hash, $rental, $now)",
  );
  const forget = db.query("DELETE FROM rental_requests WHERE key_id = $key AND idempotency_key = $idem");
  const forgetOld = db.query("DELETE FROM rental_requests WHERE created_at < ?");
  const onRevokedKeys = db.query<RevokedRental, []>(
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
    insert: (r: RentalInsert) => insert.run({ ...r, cluster_node: r.cluster_node ?? null }),
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

/** The rental store on SQLite: synchronous inside (bun:sqlite), resolved promises outside. */
export function sqliteRentalStore(db: Database): RentalStore {
  const repo = rentalsRepo(db);
  const byAccount = db.query<RentalRow, { account: string; limit: number }>(
    "SELECT * FROM rentals WHERE account_id = $account ORDER BY created_at DESC, rowid DESC LIMIT $limit",
  );
  const totals = db.query<{ active: number; minutes: number; cost: number }, []>(
    `SELECT COUNT(*) FILTER (WHERE ${ACTIVE_SQL}) AS active, COALESCE(SUM(billed_minutes), 0) AS minutes, COALESCE(SUM(cost_micros), 0) AS cost FROM rentals`,
  );
  const takeLeases = db.query(
    `UPDATE rentals SET lease_owner = $owner, lease_until = ${SQLITE_NOW_MS} + $ms
      WHERE ${ACTIVE_SQL} AND ${ON_NODE_SQL} AND (lease_owner IS NULL OR lease_until < ${SQLITE_NOW_MS} OR (lease_owner = $owner AND lease_until < ${SQLITE_NOW_MS} + $ms / 2))`,
  );
  const leased = db.query<RentalRow, [string]>(`SELECT * FROM rentals WHERE ${ACTIVE_SQL} AND lease_owner = ?`);
  const claimActive = db.transaction((owner: string, ms: number, node: string | null) => {
    takeLeases.run({ owner, ms, node });
    return leased.all(owner);
  });
  const claimOne = db.query<{ id: string }, { id: string; owner: string; ms: number; node: string | null }>(
    `UPDATE rentals SET lease_owner = $owner, lease_until = ${SQLITE_NOW_MS} + $ms
      WHERE id = $id AND ${ACTIVE_SQL} AND ${ON_NODE_SQL} AND (lease_owner IS NULL OR lease_owner = $owner OR lease_until < ${SQLITE_NOW_MS}) RETURNING id`,
  );
  const renew = db.query(`UPDATE rentals SET lease_until = ${SQLITE_NOW_MS} + $ms WHERE lease_owner = $owner AND ${ACTIVE_SQL}`);
  const release = db.query("UPDATE rentals SET lease_owner = NULL, lease_until = NULL WHERE lease_owner = ?");
  const lease = db.query(`UPDATE rentals SET lease_owner = $owner, lease_until = ${SQLITE_NOW_MS} + $ms WHERE id = $id`);
  const ended = db.query<{ status: "stopped" | "failed" }, { id: string; at: number }>(
    `UPDATE rentals SET status = CASE WHEN stop_reason = 'error' THEN 'failed' ELSE 'stopped' END, stopped_at = $at, lease_owner = NULL, lease_until = NULL
      WHERE id = $id AND status = 'stopping' RETURNING status`,
  );

  // Checks, insert and the idempotency record in one immediate transaction: 50 concurrent POSTs
  // with one Idempotency-Key are serialised here and find the first one's rental.
  const create = db.transaction((c: RentalCreation): CreateOutcome => {
    const idem = c.idempotency;
    if (idem) {
      const seen = repo.request(c.keyId, idem.key);
      if (seen && c.now - seen.created_at < idem.ttlMs) return seen.body_hash === idem.bodyHash ? { row: repo.byId(seen.rental_id)!, created: false } : { reused: true };
      if (seen) repo.forget(c.keyId, idem.key);
    }
    const row = c.admit({ activeForKey: repo.activeCount(c.keyId), nodeTaken: repo.nodeTaken(c.nodeId) });
    repo.insert(row);
    lease.run({ id: row.id, owner: c.lease.owner, ms: c.lease.ms });
    if (idem) repo.remember(c.keyId, idem.key, idem.bodyHash, row.id, c.now);
    return { row: repo.byId(row.id)!, created: true };
  });

  return {
    create: async (c) => create.immediate(c),
    byId: async (id) => repo.byId(id),
    byKey: async (keyId, limit) => repo.byKey(keyId, limit),
    byAccount: async (accountId, limit) => byAccount.all({ account: accountId, limit }),
    active: async () => repo.active(),
    onRevokedKeys: async () => repo.onRevokedKeys(),
    setIntent: async (id, intent) => void repo.setIntent(id, intent),
    setHandle: async (id, handle) => void repo.setHandle(id, handle),
    markRunning: async (id, at, expiresAt) => repo.transition(id, ["pending"], "running", { running_at: at, expires_at: expiresAt }),
    markStopping: async (id, s) =>
      repo.transition(id, ["pending", "running"], "stopping", { stopping_at: s.at, stop_reason: s.reason, ...(s.failure === undefined ? {} : { failure: s.failure }) }),
    markEnded: async (id, at) => ended.get({ id, at })?.status ?? null,
    forgetRequestsBefore: async (t) => repo.forgetBefore(t),
    async totals() {
      const t = totals.get()!;
      return { active: t.active, minutes: t.minutes, costMicros: t.cost };
    },
    claimActive: async (owner, ms, node = null) => claimActive.immediate(owner, ms, node),
    claim: async (id, owner, ms, node = null) => claimOne.get({ id, owner, ms, node }) !== null,
    renewLeases: async (owner, ms) => renew.run({ owner, ms }).changes,
    releaseLeases: async (owner) => void release.run(owner),
  };
}

/**
 * A rotated key's active rentals go to its successor (called inside the rotation's transaction):
 * rotation changes the secret, not what runs; revoking a key stops its rentals (src/2-services/rentals/ticks.ts).
 */
export function moveActiveRentals(db: Database, fromKeyId: string, toKeyId: string): number {
  return db.query("UPDATE rentals SET key_id = ? WHERE key_id = ? AND status IN ('pending', 'running', 'stopping')").run(toKeyId, fromKeyId).changes;
}
