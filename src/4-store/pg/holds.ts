import type { SQL } from "bun";
import { refusalOf, type HoldStore } from "../holds";

// Credit holds on PostgreSQL (the interface: ../holds.ts). An admission locks the account's row
// (FOR UPDATE: admissions to one account run one at a time across every process), sums the holds,
// and inserts its own in the same transaction, on the asynchronously committing pool (a hold lost
// with a crash of the database only admits less). Each hold belongs to this process (`owner`) and
// lapses LEASE_MS after its last heartbeat, by the database's clock: `heartbeat()` renews this
// process's holds and drops the lapsed ones of processes that stopped beating. A settlement
// deletes its hold in the ledger's transaction (pg/ledger.ts).

export const HOLD_LEASE_MS = 15_000;
const NOW = "(extract(epoch from clock_timestamp()) * 1000)::bigint";

export interface PgHoldStore extends HoldStore {
  /** Renews this process's holds and drops every lapsed hold; returns how many were dropped. */
  heartbeat(): Promise<number>;
}

export function postgresHolds(fast: SQL, owner: string, leaseMs = HOLD_LEASE_MS): PgHoldStore {
  return {
    async admit(hold, rule) {
      return fast.begin(async (tx) => {
        const [account] = await tx`SELECT balance_micros, trial_tokens_used FROM accounts WHERE id = ${hold.accountId} FOR UPDATE`;
        const [sum] = await tx`SELECT COALESCE(SUM(micros), 0) AS micros, COALESCE(SUM(tokens), 0) AS tokens FROM credit_holds WHERE account_id = ${hold.accountId}`;
        const refusal = refusalOf(
          account ? { balance_micros: Number(account.balance_micros), trial_tokens_used: Number(account.trial_tokens_used) } : null,
          { micros: Number(sum.micros), tokens: Number(sum.tokens) },
          rule,
        );
        if (refusal) return refusal;
        await tx.unsafe(
          `INSERT INTO credit_holds (request_id, account_id, micros, tokens, owner, created_at, expires_at) VALUES ($1, $2, $3, $4, $5, ${NOW}, ${NOW} + $6)`,
          [hold.requestId, hold.accountId, hold.micros, hold.tokens, owner, leaseMs],
        );
        return null;
      });
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
