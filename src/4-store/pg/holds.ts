import type { SQL } from "bun";
import { DB_NOW_MS as NOW } from "./db";
import type { HoldStore } from "../holds";

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

export function postgresHolds(fast: SQL, owner: string, leaseMs = HOLD_LEASE_MS): PgHoldStore {
  return {
    settledWithCharge: true,
    async admit(hold, rule) {
      // One round trip: the database function of migration 010 takes the account's advisory lock,
      // reads the balance and the holds after it, and inserts the hold if there is room.
      const [r] = await fast`SELECT verdict, balance, held FROM appliance_admit_hold(${hold.requestId}, ${hold.accountId}, ${hold.micros}, ${hold.tokens}, ${owner}, ${leaseMs}, ${rule.money}, ${rule.trialLimit})`;
      if (r.verdict === "ok") return null;
      if (r.verdict === "balance") return { reason: "balance", balance: Number(r.balance), held: Number(r.held) };
      return { reason: r.verdict as "unknown_account" | "trial" };
    },
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
