import type { SQL } from "bun";
import type { UsageDay, UsageLine, UsageOfRequest, UsageReports, UsageSum } from "../reports";

// The usage reads of ../reports.ts on PostgreSQL: the same rows, days in UTC, numbers as numbers.

export function postgresUsageReports(sql: SQL): UsageReports {
  return {
    byDay: async (account, since) =>
      (
        await sql`SELECT to_char(to_timestamp(created_at / 1000.0) AT TIME ZONE 'UTC', 'YYYY-MM-DD') AS day, model, endpoint, COUNT(*) AS requests,
            SUM(input_tokens) AS input_tokens, SUM(output_tokens) AS output_tokens, SUM(cost_micros) AS cost_micros
          FROM usage WHERE account_id = ${account} AND created_at >= ${since}
          GROUP BY day, model, endpoint ORDER BY day, model, endpoint`
      ).map(
        (r: Record<string, any>): UsageDay => ({
          day: r.day,
          model: r.model,
          endpoint: r.endpoint,
          requests: Number(r.requests),
          input_tokens: Number(r.input_tokens),
          output_tokens: Number(r.output_tokens),
          cost_micros: Number(r.cost_micros),
        }),
      ),
    recent: async (account, limit) =>
      (
        await sql`SELECT u.created_at, u.model, u.endpoint, u.input_tokens, u.output_tokens, u.cost_micros, u.batch, k.last4, k.purpose
          FROM usage u JOIN api_keys k ON k.id = u.key_id
          WHERE u.account_id = ${account} ORDER BY u.created_at DESC, u.id DESC LIMIT ${limit}`
      ).map(
        (r: Record<string, any>): UsageLine => ({
          created_at: Number(r.created_at),
          model: r.model,
          endpoint: r.endpoint,
          input_tokens: Number(r.input_tokens),
          output_tokens: Number(r.output_tokens),
          cost_micros: Number(r.cost_micros),
          batch: Number(r.batch),
          last4: r.last4,
          purpose: r.purpose,
        }),
      ),
    ofRequest: async (account, requestId) => {
      const [r] = await sql`SELECT request_id, created_at, model, endpoint, input_tokens, output_tokens, cached_tokens, images, cost_micros, trial_tokens
          FROM usage WHERE request_id = ${requestId} AND account_id = ${account}`;
      if (!r) return null;
      const n = (k: string) => Number(r[k]);
      return { request_id: r.request_id, created_at: n("created_at"), model: r.model, endpoint: r.endpoint, input_tokens: n("input_tokens"), output_tokens: n("output_tokens"),
        cached_tokens: n("cached_tokens"), images: n("images"), cost_micros: n("cost_micros"), trial_tokens: n("trial_tokens") } satisfies UsageOfRequest;
    },
    sumsAfter: async (after) =>
      (
        await sql`SELECT k.kind AS kind, u.model AS model, SUM(u.cost_micros) AS cost, SUM(u.images) AS images, MAX(u.id) AS last
          FROM usage u JOIN api_keys k ON k.id = u.key_id WHERE u.id > ${after} GROUP BY k.kind, u.model`
      ).map((r: Record<string, any>): UsageSum => ({ kind: r.kind, model: r.model, cost: Number(r.cost), images: Number(r.images), last: Number(r.last) })),
  };
}
