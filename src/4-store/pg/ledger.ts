import type { SQL, TransactionSQL } from "bun";
import { LineEnded, type Balance, type Ledger, type LedgerEffect, type Settlement, type SettleOutcome } from "../ledger";
import type { UsageRow } from "../usage";

// The ledger on PostgreSQL (the interface and its rules: ../ledger.ts). A group of settlements is
// one transaction on the synchronously committing pool, each settlement in a savepoint (one that
// fails rolls back alone). Request ids are unique in `usage`: a settlement another process is
// committing at the same moment waits for it and then finds the id taken, so a request is charged
// once across processes. Rows are locked in one order (by account) so that two processes' groups
// cannot deadlock on each other's accounts; a deadlock or serialization failure the database
// reports anyway reruns the whole group (nothing of it was committed).

const RETRYABLE = new Set(["40P01", "40001"]);
const INT_FIELDS = ["input_tokens", "output_tokens", "cached_tokens", "images", "batch", "cost_micros", "trial_tokens", "created_at"] as const;

export function postgresLedger(money: SQL): Ledger {
  async function one(tx: TransactionSQL, { row, effect }: Settlement): Promise<SettleOutcome> {
    try {
      return await tx.savepoint(async (sp) => {
        // The request's credit hold goes with its settlement (../holds.ts), charged or not.
        await sp`DELETE FROM credit_holds WHERE request_id = ${row.request_id}`;
        const inserted = await sp`
          INSERT INTO usage (request_id, account_id, key_id, model, endpoint, input_tokens, output_tokens, cached_tokens, images, batch, cost_micros, trial_tokens, created_at)
          VALUES (${row.request_id}, ${row.account_id}, ${row.key_id}, ${row.model}, ${row.endpoint}, ${row.input_tokens}, ${row.output_tokens}, ${row.cached_tokens},
            ${row.images}, ${row.batch}, ${row.cost_micros}, ${row.trial_tokens}, ${row.created_at})
          ON CONFLICT (request_id) DO NOTHING RETURNING id`;
        if (inserted.length === 0) return { charged: false };
        if (row.cost_micros || row.trial_tokens)
          await sp`UPDATE accounts SET balance_micros = balance_micros - ${row.cost_micros}, trial_tokens_used = trial_tokens_used + ${row.trial_tokens} WHERE id = ${row.account_id}`;
        if (effect) await apply(sp, effect);
        return { charged: true };
      });
    } catch (error) {
      if (error instanceof LineEnded) return { ended: true };
      if (RETRYABLE.has((error as { errno?: string }).errno ?? "")) throw error; // the whole group reruns
      return { error };
    }
  }

  async function apply(sp: SQL, e: LedgerEffect) {
    if (e.kind === "batch_line") {
      const done = await sp`UPDATE batch_lines SET state = 'completed', result = ${e.result}, finished_at = ${e.at} WHERE batch_id = ${e.batchId} AND line = ${e.line} AND state = 'pending' RETURNING line`;
      if (done.length === 0) throw new LineEnded(`batch line ${e.batchId}:${e.line} had already ended`);
      await sp`UPDATE batches SET completed = completed + 1 WHERE id = ${e.batchId}`;
    } else {
      const done = await sp`UPDATE rentals SET billed_minutes = ${e.upTo}, cost_micros = cost_micros + ${e.costMicros} WHERE id = ${e.rentalId} AND billed_minutes = ${e.from} RETURNING id`;
      if (done.length === 0) throw new LineEnded(`rental ${e.rentalId} had billed other minutes meanwhile`);
    }
  }

  async function settle(items: Settlement[]): Promise<SettleOutcome[]> {
    if (items.length === 0) return [];
    const order = items.map((_, i) => i).sort((a, b) => (items[a]!.row.account_id < items[b]!.row.account_id ? -1 : items[a]!.row.account_id > items[b]!.row.account_id ? 1 : a - b));
    for (let attempt = 1; ; attempt++) {
      try {
        return await money.begin(async (tx) => {
          const out: SettleOutcome[] = new Array(items.length);
          for (const i of order) out[i] = await one(tx, items[i]!);
          return out;
        });
      } catch (error) {
        if (attempt < 5 && RETRYABLE.has((error as { errno?: string }).errno ?? "")) continue;
        return items.map(() => ({ error }));
      }
    }
  }

  return {
    settle,
    async balance(accountId): Promise<Balance | null> {
      const [r] = await money`SELECT balance_micros, trial_tokens_used FROM accounts WHERE id = ${accountId}`;
      return r ? { balance_micros: Number(r.balance_micros), trial_tokens_used: Number(r.trial_tokens_used) } : null;
    },
    async totals(accountId) {
      const [r] = await money`SELECT COALESCE(SUM(cost_micros), 0) AS cost, COALESCE(SUM(trial_tokens), 0) AS trial, COUNT(*) AS n FROM usage WHERE account_id = ${accountId}`;
      return { cost: Number(r.cost), trial: Number(r.trial), n: Number(r.n) };
    },
    async byRequest(requestId) {
      const [r] = await money`SELECT request_id, account_id, key_id, model, endpoint, input_tokens, output_tokens, cached_tokens, images, batch, cost_micros, trial_tokens, created_at FROM usage WHERE request_id = ${requestId}`;
      if (!r) return null;
      const row = { ...r } as Record<string, unknown>;
      for (const f of INT_FIELDS) row[f] = Number(row[f]);
      return row as UsageRow;
    },
  };
}
