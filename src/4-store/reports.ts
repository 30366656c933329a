import type { Database } from "bun:sqlite";
import type { UsageRow } from "./usage";

// What the console and /metrics read of the usage rows (issue 44: the same reads on SQLite here and
// on PostgreSQL in pg/reports.ts). Read-only: charging is the ledger's (ledger.ts).

export interface UsageDay {
  /** YYYY-MM-DD, UTC. */
  day: string;
  model: string;
  endpoint: string;
  requests: number;
  input_tokens: number;
  output_tokens: number;
  cost_micros: number;
}

export interface UsageLine {
  created_at: number;
  model: string;
  endpoint: string;
  input_tokens: number;
  output_tokens: number;
  cost_micros: number;
  batch: number;
  last4: string;
  /** The key's purpose: "console" for the console's own key (its secret was never shown). */
  purpose: "api" | "console";
}

/** One settled request of an account (the console shows each chat answer's cost): its usage row, less whose it is. */
export type UsageOfRequest = Omit<UsageRow, "account_id" | "key_id" | "batch">;

/** Usage rows after `after` (a row id), summed by key kind and model; `last` is the largest row id summed. */
export interface UsageSum {
  kind: string;
  model: string;
  cost: number;
  images: number;
  last: number;
}

export interface UsageReports {
  byDay(accountId: string, since: number): Promise<UsageDay[]>;
  recent(accountId: string, limit: number): Promise<UsageLine[]>;
  sumsAfter(afterId: number): Promise<UsageSum[]>;
  /** The usage row of `requestId` if it belongs to the account (null: not settled yet, or not its). */
  ofRequest(accountId: string, requestId: string): Promise<UsageOfRequest | null>;
}

export function sqliteUsageReports(db: Database): UsageReports {
  const byDay = db.query<UsageDay, { account: string; since: number }>(
    `SELECT date(created_at / 1000, 'unixepoch') AS day, model, endpoint, COUNT(*) AS requests,
            SUM(input_tokens) AS input_tokens, SUM(output_tokens) AS output_tokens, SUM(cost_micros) AS cost_micros
       FROM usage WHERE account_id = $account AND created_at >= $since
      GROUP BY day, model, endpoint ORDER BY day, model, endpoint`,
  );
  const recent = db.query<UsageLine, { account: string; limit: number }>(
    `SELECT u.created_at, u.model, u.endpoint, u.input_tokens, u.output_tokens, u.cost_micros, u.batch, k.last4, k.purpose
       FROM usage u JOIN api_keys k ON k.id = u.key_id
      WHERE u.account_id = $account ORDER BY u.created_at DESC, u.id DESC LIMIT $limit`,
  );
  const sums = db.query<UsageSum, [number]>(
    `SELECT k.kind AS kind, u.model AS model, SUM(u.cost_micros) AS cost, SUM(u.images) AS images, MAX(u.id) AS last
       FROM usage u JOIN api_keys k ON k.id = u.key_id WHERE u.id > ? GROUP BY k.kind, u.model`,
  );
  const ofRequest = db.query<UsageOfRequest, [string, string]>(
    `SELECT request_id, created_at, model, endpoint, input_tokens, output_tokens, cached_tokens, images, cost_micros, trial_tokens
       FROM usage WHERE request_id = ? AND account_id = ?`,
  );
  return {
    byDay: async (account, since) => byDay.all({ account, since }),
    ofRequest: async (account, requestId) => ofRequest.get(requestId, account),
    recent: async (account, limit) => recent.all({ account, limit }),
    sumsAfter: async (after) => sums.all(after),
  };
}
