import type { Database } from "bun:sqlite";
import { usageRepo, type UsageRow } from "./usage";

// The ledger as the meter uses it (issue 44: one async store interface by domain operation, a
// SQLite backend here and a PostgreSQL one in pg/ledger.ts): settlements, each exactly once per
// request id, with what must commit in the same transaction; and the balances they draw on.

/** What commits with a charge: never the charge without it, never it without the charge. */
export type LedgerEffect =
  /** A batch line's result. The line must still be pending: one that already ended (failed as crashed, cancelled, run elsewhere) gates its charge off. */
  | { kind: "batch_line"; batchId: string; line: number; result: string; at: number }
  /** A rental's billed minutes, from `from` (what the rental had billed: anything else gates the charge off) up to `upTo` in total. */
  | { kind: "rental_minutes"; rentalId: string; from: number; upTo: number; costMicros: number };

/** A credit hold the charge spends, in the charge's transaction (PostgreSQL's slices, pg/holds.ts). */
export interface HoldSpend {
  holdId: string;
  micros: number;
  tokens: number;
}

export interface Settlement {
  row: UsageRow;
  effect?: LedgerEffect;
  /** Spent whether or not the row is new (a repeat's hold is as spent); SQLite keeps holds in memory and ignores it. */
  spend?: HoldSpend;
}

/** charged: false when this request id was settled before (nothing charged again); ended: the effect's gate was closed — its batch line had already ended, or its rental had billed other minutes meanwhile (nothing charged). */
export type SettleOutcome = { charged: boolean } | { ended: true } | { error: unknown };

export interface Balance {
  balance_micros: number;
  trial_tokens_used: number;
}

export interface Ledger {
  /** Several settlements in one durable commit; each stands alone (one failing fails only itself). */
  settle(items: Settlement[]): Promise<SettleOutcome[]>;
  /** The account's balance and trial use; null for an unknown account. */
  balance(accountId: string): Promise<Balance | null>;
  totals(accountId: string): Promise<{ cost: number; trial: number; n: number }>;
  byRequest(requestId: string): Promise<UsageRow | null>;
}

/** Thrown inside a settlement whose effect's gate is closed: rolls that settlement back alone. */
export class LineEnded extends Error {}

export function sqliteLedger(db: Database): Ledger {
  const usage = usageRepo(db);
  const finishLine = db.query("UPDATE batch_lines SET state = 'completed', result = $result, finished_at = $at WHERE batch_id = $batch AND line = $line AND state = 'pending'");
  const countUp = db.query("UPDATE batches SET completed = completed + 1 WHERE id = $id");
  const billed = db.query("UPDATE rentals SET billed_minutes = $m, cost_micros = cost_micros + $c WHERE id = $id AND billed_minutes = $from");
  const apply = (e: LedgerEffect) => {
    if (e.kind === "batch_line") {
      if (finishLine.run({ batch: e.batchId, line: e.line, result: e.result, at: e.at }).changes === 0) throw new LineEnded(`batch line ${e.batchId}:${e.line} had already ended`);
      countUp.run({ id: e.batchId });
    } else if (billed.run({ id: e.rentalId, m: e.upTo, c: e.costMicros, from: e.from }).changes === 0) throw new LineEnded(`rental ${e.rentalId} had billed other minutes meanwhile`);
  };
  const many = db.transaction((items: Settlement[]): SettleOutcome[] =>
    items.map(({ row, effect }) => {
      try {
        return { charged: usage.settleWith(row, effect && (() => apply(effect))) };
      } catch (error) {
        return error instanceof LineEnded ? { ended: true } : { error };
      }
    }),
  );
  return {
    settle: async (items) => many.immediate(items),
    balance: async (id) => usage.balance(id) ?? null,
    totals: async (id) => usage.totals(id),
    byRequest: async (id) => usage.byRequest(id) ?? null,
  };
}
