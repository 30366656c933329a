import type { Database } from "bun:sqlite";

export type UsageRow = {
  request_id: string;
  account_id: string;
  key_id: string;
  model: string;
  endpoint: string;
  input_tokens: number;
  output_tokens: number;
  cached_tokens: number;
  images: number;
  batch: number;
  cost_micros: number;
  trial_tokens: number;
  created_at: number;
};

export function usageRepo(db: Database) {
  const insert = db.query(
    `INSERT INTO usage (request_id, account_id, key_id, model, endpoint, input_tokens, output_tokens, cached_tokens,
       images, batch, cost_micros, trial_tokens, created_at)
     VALUES ($request_id, $account_id, $key_id, $model, $endpoint, $input_tokens, $output_tokens, $cached_tokens,
       $images, $batch, $cost_micros, $trial_tokens, $created_at)
     ON CONFLICT (request_id) DO NOTHING`,
  );
  const charge = db.query("UPDATE accounts SET balance_micros = balance_micros - $cost WHERE id = $id");
  const useTrial = db.query("UPDATE accounts SET trial_tokens_used = trial_tokens_used + $tokens WHERE id = $id");
  const totals = db.query<{ cost: number; trial: number; n: number }, [string]>(
    "SELECT COALESCE(SUM(cost_micros), 0) AS cost, COALESCE(SUM(trial_tokens), 0) AS trial, COUNT(*) AS n FROM usage WHERE account_id = ?",
  );
  const balance = db.query<{ balance_micros: number; trial_tokens_used: number }, [string]>(
    "SELECT balance_micros, trial_tokens_used FROM accounts WHERE id = ?",
  );
  const byRequest = db.query<UsageRow, [string]>("SELECT * FROM usage WHERE request_id = ?");

  /**
   * Records one request's usage and charges it. Returns false (and charges nothing) when the
   * request id was already settled: settlement is exactly-once per request.
   */
  const settleOne = (row: UsageRow): boolean => {
    if (insert.run({ ...row }).changes === 0) return false;
    if (row.cost_micros) charge.run({ cost: row.cost_micros, id: row.account_id });
    if (row.trial_tokens) useTrial.run({ tokens: row.trial_tokens, id: row.account_id });
    return true;
  };

  const settle = db.transaction(settleOne);
  /** One settlement and what must commit with it (`also` only runs when the row is new). */
  const settleWith = db.transaction((row: UsageRow, also?: () => void): boolean => {
    const charged = settleOne(row);
    if (charged) also?.();
    return charged;
  });

  return {
    settle,
    settleWith,
    /**
     * Several settlements in one transaction (one synced write). Each runs in its own savepoint
     * (a transaction inside a transaction), so one failing row fails only itself.
     */
    settleMany: db.transaction((items: { row: UsageRow; also?: () => void }[]): ({ charged: boolean } | { error: unknown })[] =>
      items.map(({ row, also }) => {
        try {
          return { charged: settleWith(row, also) };
        } catch (error) {
          return { error };
        }
      }),
    ),
    totals: (accountId: string) => totals.get(accountId)!,
    balance: (accountId: string) => balance.get(accountId),
    byRequest: (requestId: string) => byRequest.get(requestId),
  };
}
export type UsageRepo = ReturnType<typeof usageRepo>;
