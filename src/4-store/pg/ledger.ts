import type { SQL, TransactionSQL } from "bun";
import { LineEnded, type Balance, type HoldSpend, type Ledger, type LedgerEffect, type Settlement, type SettleOutcome } from "../ledger";
import type { UsageRow } from "../usage";

// The ledger on PostgreSQL (the interface and its rules: ../ledger.ts). A group of settlements is
// one transaction on the synchronously committing pool, each settlement in a savepoint (one that
// fails rolls back alone) and its charge one statement; a lone settlement with no effect is just
// that statement. Request ids are unique in `usage`: a settlement another process is
// committing at the same moment waits for it and then finds the id taken, so a request is charged
// once across processes. Rows are locked in one order (by account) so that two processes' groups
// cannot deadlock on each other's accounts; a deadlock or serialization failure the database
// reports anyway reruns the whole group (nothing of it was committed).

const RETRYABLE = new Set(["40P01", "40001"]);
/** A deadlock or serialization failure: nothing of the transaction was committed, and it may run again. */
const retryable = (e: unknown) => RETRYABLE.has((e as { errno?: string }).errno ?? "");

/** Runs a transaction again after a retryable failure (up to 5 times); any other failure is `failed`'s answer. */
async function retrying<T>(run: () => Promise<T>, failed: (error: unknown) => T): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await run();
    } catch (error) {
      if (attempt < 5 && retryable(error)) continue;
      return failed(error);
    }
  }
}
const INT_FIELDS = ["input_tokens", "output_tokens", "cached_tokens", "images", "batch", "cost_micros", "trial_tokens", "created_at"] as const;

export function postgresLedger(money: SQL): Ledger {
  /**
   * The charge in one statement: the usage row goes in unless its request id is there already,
   * and the account pays what that row says. Resolves whether it charged. (The request's credit
   * hold is the hold store's: a slice shrinks once the charge is committed, pg/holds.ts.)
   */
  async function charge(q: SQL, row: UsageRow, spend?: HoldSpend): Promise<boolean> {
    const [r] = await q`
      WITH spent AS (UPDATE credit_holds SET micros = micros - ${spend?.micros ?? 0}, tokens = tokens - ${spend?.tokens ?? 0} WHERE request_id = ${spend?.holdId ?? null} RETURNING 1),
      ins AS (
        INSERT INTO usage (request_id, account_id, key_id, model, endpoint, input_tokens, output_tokens, cached_tokens, images, batch, cost_micros, trial_tokens, created_at)
        VALUES (${row.request_id}, ${row.account_id}, ${row.key_id}, ${row.model}, ${row.endpoint}, ${row.input_tokens}, ${row.output_tokens}, ${row.cached_tokens},
          ${row.images}, ${row.batch}, ${row.cost_micros}, ${row.trial_tokens}, ${row.created_at})
        ON CONFLICT (request_id) DO NOTHING RETURNING account_id, cost_micros, trial_tokens),
      paid AS (
        UPDATE accounts a SET balance_micros = a.balance_micros - ins.cost_micros, trial_tokens_used = a.trial_tokens_used + ins.trial_tokens
        FROM ins WHERE a.id = ins.account_id AND (ins.cost_micros <> 0 OR ins.trial_tokens <> 0) RETURNING 1)
      SELECT (SELECT COUNT(*) FROM ins) AS charged`;
    return Number(r.charged) > 0;
  }

  /**
   * A group's charges in one statement (one round trip, one synchronous commit): the usage rows go
   * in unless their request ids are there already, and each account pays the sum of its new rows,
   * its row locked first in account order. Resolves the request ids it charged.
   */
  async function chargeAll(items: Settlement[]): Promise<Set<string>> {
    const rows = items.map((x) => x.row);
    const col = <K extends keyof UsageRow>(k: K) => rows.map((r) => r[k]);
    const spends = items.filter((x) => x.spend).map((x) => x.spend!);
    const charged = await money`
      WITH spent AS (
        UPDATE credit_holds h SET micros = h.micros - s.m, tokens = h.tokens - s.t
        FROM (SELECT hold_id, SUM(m) AS m, SUM(t) AS t FROM unnest(${spends.map((x) => x.holdId)}::text[], ${spends.map((x) => x.micros)}::bigint[], ${spends.map((x) => x.tokens)}::bigint[]) AS u(hold_id, m, t) GROUP BY hold_id) s
        WHERE h.request_id = s.hold_id RETURNING 1),
      input AS (
        SELECT * FROM unnest(${col("request_id")}::text[], ${col("account_id")}::text[], ${col("key_id")}::text[], ${col("model")}::text[], ${col("endpoint")}::text[],
          ${col("input_tokens")}::bigint[], ${col("output_tokens")}::bigint[], ${col("cached_tokens")}::bigint[], ${col("images")}::bigint[], ${col("batch")}::bigint[],
          ${col("cost_micros")}::bigint[], ${col("trial_tokens")}::bigint[], ${col("created_at")}::bigint[])
          AS t(request_id, account_id, key_id, model, endpoint, input_tokens, output_tokens, cached_tokens, images, batch, cost_micros, trial_tokens, created_at)),
      locked AS (SELECT id FROM accounts WHERE id IN (SELECT account_id FROM input) ORDER BY id FOR NO KEY UPDATE),
      ins AS (
        INSERT INTO usage (request_id, account_id, key_id, model, endpoint, input_tokens, output_tokens, cached_tokens, images, batch, cost_micros, trial_tokens, created_at)
        SELECT * FROM input ON CONFLICT (request_id) DO NOTHING RETURNING request_id, account_id, cost_micros, trial_tokens),
      sums AS (SELECT account_id, SUM(cost_micros) AS cost, SUM(trial_tokens) AS trial FROM ins GROUP BY account_id),
      paid AS (
        UPDATE accounts a SET balance_micros = a.balance_micros - sums.cost, trial_tokens_used = a.trial_tokens_used + sums.trial
        FROM sums JOIN locked ON locked.id = sums.account_id WHERE a.id = sums.account_id AND (sums.cost <> 0 OR sums.trial <> 0) RETURNING 1)
      SELECT request_id FROM ins`;
    return new Set(charged.map((r: { request_id: string }) => r.request_id));
  }

  async function one(tx: TransactionSQL, { row, effect, spend }: Settlement): Promise<SettleOutcome> {
    try {
      return await tx.savepoint(async (sp) => {
        if (!(await charge(sp, row, spend))) return { charged: false };
        if (effect) await apply(sp, effect);
        return { charged: true };
      });
    } catch (error) {
      if (error instanceof LineEnded) return { ended: true };
      if (retryable(error)) throw error; // the whole group reruns
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

  /** The settlements' indexes in the order their rows are locked: by account (no two groups deadlock on each other's accounts). */
  function byAccount(items: Settlement[]): number[] {
    return items.map((_, i) => i).sort((a, b) => (items[a]!.row.account_id < items[b]!.row.account_id ? -1 : items[a]!.row.account_id > items[b]!.row.account_id ? 1 : a - b));
  }

  async function settle(items: Settlement[]): Promise<SettleOutcome[]> {
    if (items.length === 0) return [];
    // One settlement with nothing to commit beside it: one statement, its own transaction.
    if (items.length === 1 && !items[0]!.effect) return retrying<SettleOutcome[]>(async () => [{ charged: await charge(money, items[0]!.row, items[0]!.spend) }], (error) => [{ error }]);
    // A group with no effects, first as one transaction without savepoints (a charge that fails
    // aborts it; then the group is settled again, each in a savepoint, to fail that one alone).
    if (items.every((x) => !x.effect)) {
      try {
        const charged = await retrying(() => chargeAll(items), (error) => {
          throw error;
        });
        const once = new Set<string>(); // a request id twice in one group is charged for its first
        return items.map(({ row }) => ({ charged: charged.has(row.request_id) && !once.has(row.request_id) && once.add(row.request_id).size > 0 }));
      } catch {
        // fall through: one savepoint per settlement
      }
    }
    const order = byAccount(items);
    return retrying(
      () =>
        money.begin(async (tx) => {
          const out: SettleOutcome[] = new Array(items.length);
          for (const i of order) out[i] = await one(tx, items[i]!);
          return out;
        }),
      (error) => items.map(() => ({ error })),
    );
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
