import type { PgPools } from "./db";
import { DB_NOW_MS as NOW } from "./db";
import type { CreateOutcome, RentalCreation, RentalRow, RentalStore, RevokedRental } from "../rentals";

// GPU rentals on PostgreSQL (the interface and its rules: ../rentals.ts). What a client is told is
// done — a creation, a launch intent (committed before the launcher starts anything), a state
// change — commits synchronously (`money`); leases commit asynchronously (`fast`: a lease lost in
// a crash of the database is taken again at the next tick). A creation runs under a
// transaction-scoped advisory lock on its key, so one key's Idempotency-Key and active count are
// decided one creation at a time across processes; two keys renting one node at once meet at the
// unique index of active rentals per node, and the loser's creation runs again and is refused by
// its `admit`. Leases are timed by the database's clock (DB_NOW_MS), whichever process reads them.

const ACTIVE_SQL = "status IN ('pending', 'running', 'stopping')";
/** A lease is taken only by the rental's own cluster node (or by anyone: `param` null, or a rental made before clusters). */
const onNode = (param: string) => `(${param}::text IS NULL OR cluster_node IS NULL OR cluster_node = ${param}::text)`;
const INTS = ["price_per_hour_micros", "created_at", "running_at", "stopping_at", "stopped_at", "expires_at", "billed_minutes", "cost_micros", "lease_until", "revoked_at"] as const;

/** A row as Bun's client returns it (BIGINT as strings) → numbers. */
function rowOf<T extends RentalRow = RentalRow>(r: Record<string, unknown>): T {
  const out = { ...r } as Record<string, unknown>;
  for (const f of INTS) if (f in out && out[f] !== null) out[f] = Number(out[f]);
  if (out.hours !== null && out.hours !== undefined) out.hours = Number(out.hours);
  return out as T;
}

const UNIQUE_VIOLATION = "23505";
const isUniqueViolation = (e: unknown) => (e as { errno?: string }).errno === UNIQUE_VIOLATION;

export function postgresRentalStore(pg: Pick<PgPools, "money" | "fast">): RentalStore {
  const { money, fast } = pg;

  async function createOnce(c: RentalCreation): Promise<CreateOutcome> {
    return money.begin(async (tx) => {
      await tx`SELECT pg_advisory_xact_lock(hashtext(${`rental-key:${c.keyId}`}))`;
      const idem = c.idempotency;
      if (idem) {
        const [seen] = await tx`SELECT body_hash, rental_id, created_at FROM rental_requests WHERE key_id = ${c.keyId} AND idempotency_key = ${idem.key}`;
        if (seen && c.now - Number(seen.created_at) < idem.ttlMs) {
          if (seen.body_hash !== idem.bodyHash) return { reused: true as const };
          const [row] = await tx`SELECT * FROM rentals WHERE id = ${seen.rental_id}`;
          return { row: rowOf(row), created: false };
        }
        if (seen) await tx`DELETE FROM rental_requests WHERE key_id = ${c.keyId} AND idempotency_key = ${idem.key}`;
      }
      const [count] = await tx.unsafe(`SELECT COUNT(*) AS n FROM rentals WHERE key_id = $1 AND ${ACTIVE_SQL}`, [c.keyId]);
      const [taken] = await tx.unsafe(`SELECT id FROM rentals WHERE node_id = $1 AND ${ACTIVE_SQL}`, [c.nodeId]);
      const r = c.admit({ activeForKey: Number(count.n), nodeTaken: taken !== undefined });
      const [row] = await tx.unsafe(
        `INSERT INTO rentals (id, key_id, account_id, node_id, type, status, price_per_hour_micros, hours, token, launcher, created_at, lease_owner, lease_until, cluster_node)
         VALUES ($1, $2, $3, $4, $5, 'pending', $6, $7, $8, $9, $10, $11, ${NOW} + $12, $13) RETURNING *`,
        [r.id, r.key_id, r.account_id, r.node_id, r.type, r.price_per_hour_micros, r.hours, r.token, r.launcher, r.created_at, c.lease.owner, c.lease.ms, r.cluster_node ?? null],
      );
      if (idem) await tx`INSERT INTO rental_requests (key_id, idempotency_key, body_hash, rental_id, created_at) VALUES (${c.keyId}, ${idem.key}, ${idem.bodyHash}, ${r.id}, ${c.now})`;
      return { row: rowOf(row), created: true };
    });
  }

  const many = async (q: Promise<Record<string, unknown>[]>) => (await q).map((r) => rowOf(r));

  return {
    async create(c) {
      // Another key's creation for the same node committed first: run again, and `admit` sees it taken.
      for (let attempt = 1; ; attempt++) {
        try {
          return await createOnce(c);
        } catch (e) {
          if (attempt < 3 && isUniqueViolation(e)) continue;
          throw e;
        }
      }
    },
    async byId(id) {
      const [r] = await money`SELECT * FROM rentals WHERE id = ${id}`;
      return r ? rowOf(r) : null;
    },
    byKey: (keyId, limit) => many(money`SELECT * FROM rentals WHERE key_id = ${keyId} ORDER BY created_at DESC, id DESC LIMIT ${limit}`),
    byAccount: (accountId, limit) => many(money`SELECT * FROM rentals WHERE account_id = ${accountId} ORDER BY created_at DESC, id DESC LIMIT ${limit}`),
    active: () => many(money.unsafe(`SELECT * FROM rentals WHERE ${ACTIVE_SQL}`)),
    async onRevokedKeys() {
      const rows = await money`SELECT r.*, k.revoked_at AS revoked_at FROM rentals r JOIN api_keys k ON k.id = r.key_id
        WHERE r.status IN ('pending', 'running') AND k.revoked_at IS NOT NULL`;
      return rows.map((r: Record<string, unknown>) => rowOf<RevokedRental>(r));
    },
    async setIntent(id, intent) {
      await money`UPDATE rentals SET launch_intent = ${intent} WHERE id = ${id}`;
    },
    async setHandle(id, handle) {
      await money`UPDATE rentals SET handle = ${handle} WHERE id = ${id}`;
    },
    async markRunning(id, at, expiresAt) {
      const done = await money`UPDATE rentals SET status = 'running', running_at = ${at}, expires_at = ${expiresAt} WHERE id = ${id} AND status = 'pending' RETURNING id`;
      return done.length > 0;
    },
    async markStopping(id, s) {
      const done =
        s.failure === undefined
          ? await money`UPDATE rentals SET status = 'stopping', stopping_at = ${s.at}, stop_reason = ${s.reason} WHERE id = ${id} AND status IN ('pending', 'running') RETURNING id`
          : await money`UPDATE rentals SET status = 'stopping', stopping_at = ${s.at}, stop_reason = ${s.reason}, failure = ${s.failure} WHERE id = ${id} AND status IN ('pending', 'running') RETURNING id`;
      return done.length > 0;
    },
    async markEnded(id, at) {
      const [r] = await money`UPDATE rentals SET status = CASE WHEN stop_reason = 'error' THEN 'failed' ELSE 'stopped' END, stopped_at = ${at}, lease_owner = NULL, lease_until = NULL
        WHERE id = ${id} AND status = 'stopping' RETURNING status`;
      return r ? (r.status as "stopped" | "failed") : null;
    },
    async forgetRequestsBefore(t) {
      const gone = await money`DELETE FROM rental_requests WHERE created_at < ${t} RETURNING rental_id`;
      return gone.length;
    },
    async totals() {
      const [t] = await money.unsafe(
        `SELECT COUNT(*) FILTER (WHERE ${ACTIVE_SQL}) AS active, COALESCE(SUM(billed_minutes), 0) AS minutes, COALESCE(SUM(cost_micros), 0) AS cost FROM rentals`,
      );
      return { active: Number(t.active), minutes: Number(t.minutes), costMicros: Number(t.cost) };
    },
    // Two processes claiming at once: the second waits for the first's row locks, then finds the
    // lease live and someone else's (READ COMMITTED re-reads a row an UPDATE waited for). Then the
    // rows this owner holds: none of them can be taken meanwhile (a lease it holds is live).
    async claimActive(owner, ms, node = null) {
      await fast.unsafe(
        `UPDATE rentals SET lease_owner = $1, lease_until = ${NOW} + $2
          WHERE ${ACTIVE_SQL} AND ${onNode("$3")} AND (lease_owner IS NULL OR lease_until < ${NOW} OR (lease_owner = $1 AND lease_until < ${NOW} + $2::bigint / 2))`,
        [owner, ms, node],
      );
      return many(fast.unsafe(`SELECT * FROM rentals WHERE ${ACTIVE_SQL} AND lease_owner = $1`, [owner]));
    },
    async claim(id, owner, ms, node = null) {
      const got = await fast.unsafe(
        `UPDATE rentals SET lease_owner = $2, lease_until = ${NOW} + $3
          WHERE id = $1 AND ${ACTIVE_SQL} AND ${onNode("$4")} AND (lease_owner IS NULL OR lease_owner = $2 OR lease_until < ${NOW}) RETURNING id`,
        [id, owner, ms, node],
      );
      return got.length > 0;
    },
    async renewLeases(owner, ms) {
      const renewed = await fast.unsafe(`UPDATE rentals SET lease_until = ${NOW} + $2 WHERE lease_owner = $1 AND ${ACTIVE_SQL} RETURNING id`, [owner, ms]);
      return renewed.length;
    },
    async releaseLeases(owner) {
      await fast`UPDATE rentals SET lease_owner = NULL, lease_until = NULL WHERE lease_owner = ${owner}`;
    },
  };
}
