import type { SQL } from "bun";
import { DB_NOW_MS as NOW } from "./db";
import { statusFields, type BatchCounts, type BatchRow, type BatchStatus, type BatchStore, type LineRow, type ResultRow } from "../batches";
import type { NewFile } from "../files";

// Batches on PostgreSQL (the interface and its rules: ../batches.ts). Claims take lines with
// FOR UPDATE SKIP LOCKED — a line another process is claiming at the same moment is skipped, and
// one it has just claimed is seen leased — and lease them in the same statement, timed by the
// database's clock; leases, heartbeats and hand-backs go through the asynchronously committing pool
// (losing the last milliseconds of them in a crash of the database only makes lines claimable
// again). Results, status changes and a batch's end with its files go through the synchronous one.

const BATCH_INTS = ["total", "completed", "failed", "created_at", "expires_at", "in_progress_at", "finalizing_at", "completed_at", "failed_at", "expired_at", "cancelling_at", "cancelled_at"] as const;
const LINE_INTS = ["line", "starts", "lease_until", "finished_at"] as const;

function ints<T>(r: Record<string, unknown>, fields: readonly string[]): T {
  const row = { ...r };
  for (const f of fields) if (f in row) row[f] = row[f] === null ? null : Number(row[f]);
  return row as T;
}
const batchRow = (r: Record<string, unknown>) => ints<BatchRow>(r, BATCH_INTS);
const lineRow = (r: Record<string, unknown>) => ints<LineRow>(r, LINE_INTS);

/** Lines per statement when many are written at once (a 50,000-line batch). */
const PAGE = 1000;
const OPEN: BatchStatus[] = ["validating", "in_progress", "finalizing", "cancelling"];

export function postgresBatchStore(money: SQL, fast: SQL): BatchStore {
  /** An UPDATE of the given columns; the names come from this module and statusFields, never from a client. */
  async function update(q: SQL, id: string, fields: Record<string, unknown>, from?: BatchStatus[]): Promise<boolean> {
    const cols = Object.keys(fields);
    const only = from ? ` AND status IN (${from.map((f) => `'${f}'`).join(", ")})` : "";
    const rows = await q.unsafe(`UPDATE batches SET ${cols.map((c, i) => `${c} = $${i + 2}`).join(", ")} WHERE id = $1${only} RETURNING id`, [id, ...cols.map((c) => fields[c] ?? null)]);
    return rows.length > 0;
  }

  async function insertFile(q: SQL, f: NewFile) {
    await q`INSERT INTO files (id, key_id, account_id, filename, purpose, bytes, status, created_at, expires_at)
      VALUES (${f.id}, ${f.key_id}, ${f.account_id}, ${f.filename}, ${f.purpose}, ${f.bytes}, ${f.status}, ${f.created_at}, ${f.expires_at})`;
  }

  return {
    async insert(row) {
      await money`INSERT INTO batches (id, key_id, account_id, endpoint, input_file_id, completion_window, status, metadata, created_at, expires_at)
        VALUES (${row.id}, ${row.key_id}, ${row.account_id}, ${row.endpoint}, ${row.input_file_id}, ${row.completion_window}, 'validating', ${row.metadata}, ${row.created_at}, ${row.expires_at})`;
    },
    async byId(id) {
      const [r] = await money`SELECT * FROM batches WHERE id = ${id}`;
      return r ? batchRow(r) : null;
    },
    async page(key, after, limit) {
      const c = after ? (await money`SELECT created_at, id FROM batches WHERE id = ${after}`)[0] : undefined;
      const rows = c
        ? await money`SELECT * FROM batches WHERE key_id = ${key} AND (created_at, id) < (${Number(c.created_at)}, ${c.id}) ORDER BY created_at DESC, id DESC LIMIT ${limit}`
        : await money`SELECT * FROM batches WHERE key_id = ${key} ORDER BY created_at DESC, id DESC LIMIT ${limit}`;
      return rows.map(batchRow);
    },
    async byAccount(account, limit) {
      return (await money`SELECT * FROM batches WHERE account_id = ${account} ORDER BY created_at DESC, id DESC LIMIT ${limit}`).map(batchRow);
    },
    async open() {
      return (await money`SELECT * FROM batches WHERE status IN ${money(OPEN)} ORDER BY created_at, id`).map(batchRow);
    },
    async recent(limit) {
      return (await money`SELECT * FROM batches ORDER BY created_at DESC, id DESC LIMIT ${limit}`).map(batchRow);
    },
    setStatus: (id, status, now, extra, from) => update(money, id, statusFields(status, now, extra), from),

    async begin(id, lines, now) {
      return money.begin(async (tx) => {
        const [b] = await tx`SELECT status FROM batches WHERE id = ${id} FOR UPDATE`;
        if (b?.status !== "validating") return false;
        await tx`DELETE FROM batch_lines WHERE batch_id = ${id}`;
        for (let i = 0; i < lines.length; i += PAGE) {
          const rows = lines.slice(i, i + PAGE).map((l) => ({ batch_id: id, line: l.line, custom_id: l.custom_id, model: l.model, body: l.body }));
          await tx`INSERT INTO batch_lines ${tx(rows)}`;
        }
        await update(tx, id, statusFields("in_progress", now, { total: lines.length }));
        return true;
      });
    },

    async end(id, e) {
      return money.begin(async (tx) => {
        const [b] = await tx`SELECT status FROM batches WHERE id = ${id} FOR UPDATE`;
        if (!b || !e.from.includes(b.status)) return false;
        for (const f of [e.output, e.errors]) if (f) await insertFile(tx, f);
        await update(tx, id, statusFields(e.to, e.now, { output_file_id: e.output?.id ?? null, error_file_id: e.errors?.id ?? null }));
        return true;
      });
    },

    async line(batch, n) {
      const [r] = await money`SELECT * FROM batch_lines WHERE batch_id = ${batch} AND line = ${n}`;
      return r ? lineRow(r) : null;
    },

    async claimable(batch, limit) {
      const rows = await fast.unsafe(
        `SELECT line, model, starts FROM batch_lines WHERE batch_id = $1 AND state = 'pending' AND (lease_until IS NULL OR lease_until < ${NOW}) ORDER BY line LIMIT $2`,
        [batch, limit],
      );
      return rows.map((r: Record<string, unknown>) => ints<Pick<LineRow, "line" | "model" | "starts">>(r, LINE_INTS));
    },

    async claimLines({ batchId, owner, limit, leaseMs }) {
      // One statement: the lines are locked (others' locked ones skipped), leased and counted at once.
      const rows = await fast.unsafe(
        `WITH picked AS (
           SELECT batch_id, line FROM batch_lines
            WHERE batch_id = $1 AND state = 'pending' AND (lease_until IS NULL OR lease_until < ${NOW})
            ORDER BY line LIMIT $2 FOR UPDATE SKIP LOCKED)
         UPDATE batch_lines b SET lease_owner = $3, lease_until = ${NOW} + $4, starts = b.starts + 1
           FROM picked WHERE b.batch_id = picked.batch_id AND b.line = picked.line
         RETURNING b.*`,
        [batchId, limit, owner, leaseMs],
      );
      return rows.map(lineRow).sort((a: LineRow, b: LineRow) => a.line - b.line);
    },

    async renew(owner, leaseMs) {
      const rows = await fast.unsafe(`UPDATE batch_lines SET lease_until = ${NOW} + $2 WHERE lease_owner = $1 AND state = 'pending' RETURNING line`, [owner, leaseMs]);
      return rows.length;
    },

    async release(batch, n, owner, keepStart = false) {
      await fast`UPDATE batch_lines SET lease_owner = NULL, lease_until = NULL, starts = GREATEST(starts - ${keepStart ? 0 : 1}, 0)
        WHERE batch_id = ${batch} AND line = ${n} AND state = 'pending' AND lease_owner = ${owner}`;
    },

    async fail(batch, n, result, now) {
      const [r] = await money`
        WITH done AS (UPDATE batch_lines SET state = 'failed', result = ${result}, finished_at = ${now} WHERE batch_id = ${batch} AND line = ${n} AND state = 'pending' RETURNING line),
        counted AS (UPDATE batches SET failed = failed + 1 WHERE id = ${batch} AND EXISTS (SELECT 1 FROM done))
        SELECT COUNT(*) AS n FROM done`;
      return Number(r.n) > 0;
    },

    async failUnleased(batch, result, now) {
      let failed = 0;
      for (;;) {
        // A page at a time, each its own transaction; lines a claim holds locked right now are skipped (it leases them).
        const n = await money.begin(async (tx) => {
          const lines = await tx.unsafe(
            `SELECT line, custom_id FROM batch_lines WHERE batch_id = $1 AND state = 'pending' AND (lease_until IS NULL OR lease_until < ${NOW})
              ORDER BY line LIMIT $2 FOR UPDATE SKIP LOCKED`,
            [batch, PAGE],
          );
          if (lines.length === 0) return { seen: 0, done: 0 };
          const values = JSON.stringify(lines.map((l: { line: string; custom_id: string }) => ({ line: Number(l.line), result: result({ line: Number(l.line), custom_id: l.custom_id }) })));
          const done = await tx`UPDATE batch_lines b SET state = 'failed', result = v.result, finished_at = ${now}
            FROM json_to_recordset((${values}::text)::json) AS v(line bigint, result text)
            WHERE b.batch_id = ${batch} AND b.line = v.line AND b.state = 'pending' RETURNING b.line`;
          if (done.length) await tx`UPDATE batches SET failed = failed + ${done.length} WHERE id = ${batch}`;
          return { seen: lines.length, done: done.length };
        });
        failed += n.done;
        if (n.seen < PAGE) break;
      }
      const [p] = await money`SELECT COUNT(*) AS n FROM batch_lines WHERE batch_id = ${batch} AND state = 'pending'`;
      return { failed, pending: Number(p.n) };
    },

    async results(batch, after, limit) {
      const rows = await money`SELECT line, state, result FROM batch_lines WHERE batch_id = ${batch} AND line > ${after} AND state IN ('completed', 'failed') ORDER BY line LIMIT ${limit}`;
      return rows.map((r: Record<string, unknown>) => ints<ResultRow>(r, ["line"]));
    },

    async counts(): Promise<BatchCounts> {
      const [[p], [f], statuses] = await Promise.all([
        fast`SELECT COUNT(*) AS n FROM batch_lines WHERE state = 'pending'`,
        fast`SELECT COALESCE(SUM(completed), 0) AS completed, COALESCE(SUM(failed), 0) AS failed FROM batches`,
        fast`SELECT status, COUNT(*) AS n FROM batches GROUP BY status`,
      ]);
      return {
        pending: Number(p.n),
        completed: Number(f.completed),
        failed: Number(f.failed),
        byStatus: Object.fromEntries(statuses.map((r: { status: string; n: string }) => [r.status, Number(r.n)])),
      };
    },

    endDeadLeases: async () => 0,
  };
}
