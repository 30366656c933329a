import type { SQL } from "bun";
import { DB_NOW_MS as NOW } from "./db";
import type { AdmitRule, Hold, HoldStore, Refusal } from "../holds";

// Credit holds on PostgreSQL (the interface: ../holds.ts). An admission is one call of a database
// function (migration 010) that takes the account's advisory lock (admissions to one account run
// one at a time across every process; not the row's FOR UPDATE, which deadlocked against the
// foreign-key locks of settlements), reads the balance and the sum of the holds after it, and
// inserts its own, on the asynchronously committing pool (a hold lost with a crash of the database
// only admits less). Each hold belongs to this process (`owner`) and lapses LEASE_MS after its last
// heartbeat, by the database's clock: `heartbeat()` renews this process's holds and drops the
// lapsed ones of processes that stopped beating. A settlement deletes its hold in the ledger's
// transaction (pg/ledger.ts).

export const HOLD_LEASE_MS = 15_000;

export interface PgHoldStore extends HoldStore {
  /** Renews this process's holds and drops every lapsed hold; returns how many were dropped. */
  heartbeat(): Promise<number>;
}

type Verdict = { verdict: string; balance: unknown; held: unknown };

const refusal = (r: Verdict): Refusal | null => {
  if (r.verdict === "ok") return null;
  if (r.verdict === "balance") return { reason: "balance", balance: Number(r.balance), held: Number(r.held) };
  return { reason: r.verdict as "unknown_account" | "trial" };
};

export function postgresHolds(fast: SQL, owner: string, leaseMs = HOLD_LEASE_MS): PgHoldStore {
  const one = async ({ hold, rule }: Admission): Promise<Refusal | null> => {
    const [r] = await fast`SELECT verdict, balance, held FROM appliance_admit_hold(${hold.requestId}, ${hold.accountId}, ${hold.micros}, ${hold.tokens}, ${owner}, ${leaseMs}, ${rule.money}, ${rule.trialLimit})`;
    return refusal(r);
  };
  const many = async (items: Admission[]): Promise<(Refusal | null)[]> => {
    const rows = await fast`SELECT i, verdict, balance, held FROM appliance_admit_holds(
      ${items.map((x) => x.hold.requestId)}::text[], ${items.map((x) => x.hold.accountId)}::text[], ${items.map((x) => x.hold.micros)}::bigint[],
      ${items.map((x) => x.hold.tokens)}::bigint[], ${items.map((x) => x.rule.money)}::boolean[], ${items.map((x) => x.rule.trialLimit)}::bigint[], ${owner}, ${leaseMs})`;
    const out: (Refusal | null)[] = new Array(items.length);
    for (const r of rows) out[Number(r.i) - 1] = refusal(r);
    return out;
  };
  const group = grouped(one, many);
  return {
    settledWithCharge: true,
    // Admissions arriving while one call is out wait for it and go together as the next call
    // (migration 017: one round trip for the group, decided in account order). A lone admission is
    // one call of migration 010's function, as before.
    admit: (hold, rule) => group.add({ hold, rule }),
    async release(requestId) {
      await fast`DELETE FROM credit_holds WHERE request_id = ${requestId}`;
    },
    async held(accountId) {
      const [sum] = await fast`SELECT COALESCE(SUM(micros), 0) AS micros, COALESCE(SUM(tokens), 0) AS tokens FROM credit_holds WHERE account_id = ${accountId}`;
      return { micros: Number(sum.micros), tokens: Number(sum.tokens) };
    },
    async heartbeat() {
      await fast.unsafe(`UPDATE credit_holds SET expires_at = ${NOW} + $1 WHERE owner = $2`, [leaseMs, owner]);
      const dropped = await fast.unsafe(`DELETE FROM credit_holds WHERE expires_at < ${NOW} RETURNING request_id`);
      return dropped.length;
    },
  };
}

interface Admission {
  hold: Hold;
  rule: AdmitRule;
}

/** Calls made while one is out are sent together when it returns: `one` for a lone call, `many` for a group. */
function grouped<T, R>(one: (x: T) => Promise<R>, many: (xs: T[]) => Promise<R[]>) {
  let out = false;
  let queue: { x: T; done: (r: R) => void; fail: (e: unknown) => void }[] = [];
  const send = async (batch: typeof queue) => {
    out = true;
    try {
      const results = batch.length === 1 ? [await one(batch[0]!.x)] : await many(batch.map((b) => b.x));
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
