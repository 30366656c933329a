import type { SQL } from "bun";
import { DB_NOW_MS as NOW } from "./db";
import type { AdmitRule, Hold, HoldStore, Refusal } from "../holds";

// Credit holds on PostgreSQL (the interface: ../holds.ts), in slices. A process holds one row of
// credit_holds per account it admits for (`slice:<owner>:<account>`) and admits requests against
// it in its memory; when a request does not fit, the slice grows in the database (migration 019:
// the account's advisory lock, its balance and every process's holds read in one snapshot, the
// shortfall granted while anything is left, and spare for about SPARE_REQUESTS more such requests
// only while the account has four times that left — so near the end of a balance each admission
// is decided there, one at a time, as a per-request hold was). A settled request's part of the
// slice is spent: the settlement's statement shrinks the row by it (spendOf, pg/ledger.ts), in
// the charge's transaction. A slice no request has used for IDLE_MS is handed back. Growths of several accounts that arrive while one call is out go together as the
// next call. Rows are on the asynchronously committing pool; each belongs to this process
// (`owner`) and lapses LEASE_MS after its last heartbeat, by the database's clock: `heartbeat()`
// renews this process's rows, drops the lapsed ones of processes that stopped beating, and stops
// admitting against a slice of this process whose row was dropped (it was cut off that long).

export const HOLD_LEASE_MS = 15_000;
/** Spare a slice takes beyond a request's shortfall: room for this many more requests like it. */
const SPARE_REQUESTS = 16;
/** A slice with nothing held against it for this long goes back to the account. */
const IDLE_MS = 1_000;

export interface PgHoldStore extends HoldStore {
  /** Renews this process's rows, hands idle slices back and drops every lapsed row; returns how many were dropped. */
  heartbeat(): Promise<number>;
}

interface Slice {
  id: string;
  accountId: string;
  /** What the row holds for this process (the database holds this plus shrinks not yet sent). */
  micros: number;
  tokens: number;
  /** What requests admitted here hold of it. */
  usedMicros: number;
  usedTokens: number;
  growing: Promise<unknown> | null;
  lastUse: number;
}

interface Growth {
  slice: Slice;
  needMicros: number;
  needTokens: number;
  spareMicros: number;
  spareTokens: number;
  rule: AdmitRule;
}

type Grown = { verdict: string; balance: unknown; held: unknown; grant_micros: unknown; grant_tokens: unknown };

const refusal = (r: Grown): Refusal | null => {
  if (r.verdict === "ok") return null;
  if (r.verdict === "balance") return { reason: "balance", balance: Number(r.balance), held: Number(r.held) };
  return { reason: r.verdict as "unknown_account" | "trial" };
};

export function postgresHolds(fast: SQL, owner: string, leaseMs = HOLD_LEASE_MS): PgHoldStore {
  const slices = new Map<string, Slice>(); // by account
  const sliceId = (accountId: string) => `slice:${owner}:${accountId}`;
  const byRequest = new Map<string, { slice: Slice; micros: number; tokens: number }>();
  const sliceOf = (accountId: string): Slice => {
    let s = slices.get(accountId);
    if (!s) slices.set(accountId, (s = { id: sliceId(accountId), accountId, micros: 0, tokens: 0, usedMicros: 0, usedTokens: 0, growing: null, lastUse: Date.now() }));
    return s;
  };

  const grow = grouped(async (items: Growth[]): Promise<Grown[]> => {
    const col = <K extends keyof Growth>(k: K) => items.map((x) => x[k]);
    const rows = await fast`SELECT i, verdict, balance, held, grant_micros, grant_tokens FROM appliance_grow_slices(
      ${items.map((x) => x.slice.id)}::text[], ${items.map((x) => x.slice.accountId)}::text[],
      ${col("needMicros")}::bigint[], ${col("needTokens")}::bigint[], ${col("spareMicros")}::bigint[], ${col("spareTokens")}::bigint[],
      ${items.map((x) => x.slice.micros - x.slice.usedMicros)}::bigint[], ${items.map((x) => x.slice.tokens - x.slice.usedTokens)}::bigint[],
      ${items.map((x) => x.rule.money)}::boolean[], ${items.map((x) => x.rule.trialLimit)}::bigint[], ${owner}, ${leaseMs})`;
    const out: Grown[] = new Array(items.length);
    for (const r of rows) out[Number(r.i) - 1] = r;
    return out;
  });

  // Shrinks of settled requests' parts, summed per slice and sent together: subtractions, which
  // commute with the growths' additions, so no order between them matters.
  let shrinks = new Map<string, { micros: number; tokens: number }>();
  /** Shrinks queued or on their way, by slice: the database holds this much more than the slices say. */
  const unapplied = new Map<string, { micros: number; tokens: number }>();
  const addTo = (m: Map<string, { micros: number; tokens: number }>, id: string, micros: number, tokens: number) => {
    const p = m.get(id) ?? { micros: 0, tokens: 0 };
    const next = { micros: p.micros + micros, tokens: p.tokens + tokens };
    if (next.micros === 0 && next.tokens === 0) m.delete(id);
    else m.set(id, next);
  };
  let sending: Promise<void> | null = null;
  const sendShrinks = async (): Promise<void> => {
    while (shrinks.size) {
      const batch = shrinks;
      shrinks = new Map();
      const ids = [...batch.keys()];
      await fast`UPDATE credit_holds h SET micros = h.micros - v.m, tokens = h.tokens - v.t
        FROM unnest(${ids}::text[], ${ids.map((id) => batch.get(id)!.micros)}::bigint[], ${ids.map((id) => batch.get(id)!.tokens)}::bigint[]) AS v(id, m, t)
        WHERE h.request_id = v.id`.catch(() => {}); // a row gone (lapsed) holds nothing any more
      for (const [id, d] of batch) addTo(unapplied, id, -d.micros, -d.tokens);
    }
  };
  const shrink = (s: Slice, micros: number, tokens: number) => {
    if (micros === 0 && tokens === 0) return;
    addTo(shrinks, s.id, micros, tokens);
    addTo(unapplied, s.id, micros, tokens);
    sending ??= sendShrinks().finally(() => (sending = null));
  };

  return {
    async admit(hold, rule) {
      if (byRequest.has(hold.requestId)) throw new Error(`request ${hold.requestId} already holds credit`);
      for (;;) {
        const s = sliceOf(hold.accountId);
        const freeMicros = s.micros - s.usedMicros;
        const freeTokens = s.tokens - s.usedTokens;
        if (freeMicros >= hold.micros && freeTokens >= hold.tokens) {
          s.usedMicros += hold.micros;
          s.usedTokens += hold.tokens;
          s.lastUse = Date.now();
          byRequest.set(hold.requestId, { slice: s, micros: hold.micros, tokens: hold.tokens });
          return null;
        }
        if (s.growing) {
          await s.growing; // then try again: the growth may have left room for this one too
          continue;
        }
        const growth: Growth = {
          slice: s,
          needMicros: Math.max(0, hold.micros - freeMicros),
          needTokens: Math.max(0, hold.tokens - freeTokens),
          spareMicros: hold.micros * SPARE_REQUESTS,
          spareTokens: hold.tokens * SPARE_REQUESTS,
          rule,
        };
        const growing = grow.add(growth);
        s.growing = growing;
        let r: Grown;
        try {
          r = await growing;
        } finally {
          s.growing = null;
        }
        const refused = refusal(r);
        if (refused) return refused;
        s.micros += Number(r.grant_micros);
        s.tokens += Number(r.grant_tokens);
      }
    },

    async release(requestId, settled = false) {
      const h = byRequest.get(requestId);
      if (!h) return;
      byRequest.delete(requestId);
      const s = h.slice;
      s.usedMicros -= h.micros;
      s.usedTokens -= h.tokens;
      s.lastUse = Date.now();
      // Charged: its part was spent and leaves the slice (in the database, the settlement's own
      // statement took it: spendOf). Not charged: it is the slice's again.
      if (settled) {
        s.micros -= h.micros;
        s.tokens -= h.tokens;
      }
    },

    spendOf(requestId) {
      const h = byRequest.get(requestId);
      return h && { holdId: h.slice.id, micros: h.micros, tokens: h.tokens };
    },

    /** What requests in flight hold on the account: this process's exactly, others' with their spare. */
    async held(accountId) {
      const [sum] = await fast`SELECT COALESCE(SUM(micros), 0) AS micros, COALESCE(SUM(tokens), 0) AS tokens FROM credit_holds WHERE account_id = ${accountId}`;
      const s = slices.get(accountId);
      const pending = unapplied.get(sliceId(accountId));
      const spareMicros = s ? s.micros - s.usedMicros : 0;
      const spareTokens = s ? s.tokens - s.usedTokens : 0;
      return { micros: Number(sum.micros) - spareMicros - (pending?.micros ?? 0), tokens: Number(sum.tokens) - spareTokens - (pending?.tokens ?? 0) };
    },

    async heartbeat() {
      // Idle slices go back (their spare, in the database a moment later).
      const now = Date.now();
      for (const s of [...slices.values()]) {
        if (s.usedMicros === 0 && s.usedTokens === 0 && !s.growing && now - s.lastUse >= IDLE_MS) {
          slices.delete(s.accountId);
          shrink(s, s.micros, s.tokens);
        }
      }
      await sending;
      const kept = new Set(
        (await fast.unsafe(`UPDATE credit_holds SET expires_at = ${NOW} + $1 WHERE owner = $2 RETURNING request_id`, [leaseMs, owner])).map((r: { request_id: string }) => r.request_id),
      );
      // A slice whose row was dropped (this process was cut off past its lease): no more admissions from its spare.
      for (const s of slices.values()) {
        if (!kept.has(s.id) && !s.growing) {
          s.micros = s.usedMicros;
          s.tokens = s.usedTokens;
        }
      }
      const dropped = await fast.unsafe(`DELETE FROM credit_holds WHERE expires_at < ${NOW} OR (owner = $1 AND micros = 0 AND tokens = 0) RETURNING request_id, owner`, [owner]);
      return dropped.filter((r: { owner: string }) => r.owner !== owner).length;
    },
  };
}

/** Calls made while one is out are sent together, as one call, when it returns. */
function grouped<T, R>(many: (xs: T[]) => Promise<R[]>) {
  let out = false;
  let queue: { x: T; done: (r: R) => void; fail: (e: unknown) => void }[] = [];
  const send = async (batch: typeof queue) => {
    out = true;
    try {
      const results = await many(batch.map((b) => b.x));
      batch.forEach((b, i) => b.done(results[i]!));
    } catch (e) {
      for (const b of batch) b.fail(e);
    } finally {
      out = false;
      if (queue.length) {
        const next = queue;
        queue = [];
        void send(next);
      }
    }
  };
  return {
    add: (x: T) =>
      new Promise<R>((done, fail) => {
        if (out) queue.push({ x, done, fail });
        else void send([{ x, done, fail }]);
      }),
  };
}
