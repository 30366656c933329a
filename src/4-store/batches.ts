import type { Database } from "bun:sqlite";

export type BatchStatus = "validating" | "failed" | "in_progress" | "finalizing" | "completed" | "expired" | "cancelling" | "cancelled";

export interface BatchRow {
  id: string;
  key_id: string;
  account_id: string;
  endpoint: string;
  input_file_id: string;
  completion_window: string;
  status: BatchStatus;
  metadata: string | null;
  errors: string | null;
  output_file_id: string | null;
  error_file_id: string | null;
  total: number;
  completed: number;
  failed: number;
  created_at: number;
  expires_at: number;
  in_progress_at: number | null;
  finalizing_at: number | null;
  completed_at: number | null;
  failed_at: number | null;
  expired_at: number | null;
  cancelling_at: number | null;
  cancelled_at: number | null;
}

export interface LineRow {
  batch_id: string;
  line: number;
  custom_id: string;
  model: string;
  body: string;
  state: "pending" | "completed" | "failed";
  result: string | null;
  /** Times started and neither finished nor handed back by a graceful stop (migration 007). */
  starts: number;
}

const STAMP: Partial<Record<BatchStatus, keyof BatchRow>> = {
  failed: "failed_at",
  in_progress: "in_progress_at",
  finalizing: "finalizing_at",
  completed: "completed_at",
  expired: "expired_at",
  cancelling: "cancelling_at",
  cancelled: "cancelled_at",
};

export function batchesRepo(db: Database) {
  const insert = db.query(
    `INSERT INTO batches (id, key_id, account_id, endpoint, input_file_id, completion_window, status, metadata, created_at, expires_at)
     VALUES ($id, $key_id, $account_id, $endpoint, $input_file_id, $completion_window, 'validating', $metadata, $created_at, $expires_at)`,
  );
  const byId = db.query<BatchRow, [string]>("SELECT * FROM batches WHERE id = ?");
  const page = db.query<BatchRow, { key: string; at: number; row: number; limit: number }>(
    `SELECT * FROM batches WHERE key_id = $key AND (created_at, rowid) < ($at, $row) ORDER BY created_at DESC, rowid DESC LIMIT $limit`,
  );
  const cursor = db.query<{ at: number; row: number }, [string]>("SELECT created_at AS at, rowid AS row FROM batches WHERE id = ?");
  const open = db.query<BatchRow, []>(
    "SELECT * FROM batches WHERE status IN ('validating', 'in_progress', 'finalizing', 'cancelling') ORDER BY created_at, rowid",
  );
  const all = db.query<BatchRow, { limit: number }>("SELECT * FROM batches ORDER BY created_at DESC, rowid DESC LIMIT $limit");
  const insertLine = db.query(
    "INSERT INTO batch_lines (batch_id, line, custom_id, model, body) VALUES ($batch_id, $line, $custom_id, $model, $body)",
  );
  const deleteLines = db.query("DELETE FROM batch_lines WHERE batch_id = ?");
  // INDEXED BY: on a fresh table the planner would walk the primary key past every finished line,
  // once per line dispatched — quadratic in the batch's size.
  const pendingAfter = db.query<LineRow, { batch: string; after: number; limit: number }>(
    "SELECT * FROM batch_lines INDEXED BY batch_lines_pending WHERE batch_id = $batch AND state = 'pending' AND line > $after ORDER BY line LIMIT $limit",
  );
  const finishLine = db.query(
    "UPDATE batch_lines SET state = $state, result = $result, finished_at = $now WHERE batch_id = $batch AND line = $line AND state = 'pending'",
  );
  const line = db.query<LineRow, { batch: string; line: number }>("SELECT * FROM batch_lines WHERE batch_id = $batch AND line = $line");
  const started = db.query<{ batch_id: string; line: number }, []>(
    "SELECT batch_id, line FROM batch_lines INDEXED BY batch_lines_started WHERE state = 'pending' AND starts > 0 ORDER BY batch_id, line",
  );
  const start = db.query("UPDATE batch_lines SET starts = starts + 1 WHERE batch_id = $batch AND line = $line AND state = 'pending'");
  const unstart = db.query("UPDATE batch_lines SET starts = starts - 1 WHERE batch_id = $batch AND line = $line AND state = 'pending' AND starts > 0");
  const countUp = db.query("UPDATE batches SET completed = completed + $completed, failed = failed + $failed WHERE id = $id");
  const results = db.query<{ line: number; state: string; result: string }, { batch: string; after: number; limit: number }>(
    "SELECT line, state, result FROM batch_lines WHERE batch_id = $batch AND line > $after AND state IN ('completed', 'failed') ORDER BY line LIMIT $limit",
  );

  const finish = (batch: string, line: number, state: "completed" | "failed", result: string, now: number) => {
    if (finishLine.run({ batch, line, state, result, now }).changes === 0) return false;
    countUp.run({ id: batch, completed: state === "completed" ? 1 : 0, failed: state === "failed" ? 1 : 0 });
    return true;
  };

  return {
    insert: (row: Pick<BatchRow, "id" | "key_id" | "account_id" | "endpoint" | "input_file_id" | "completion_window" | "metadata" | "created_at" | "expires_at">) =>
      void insert.run(row),
    byId: (id: string) => byId.get(id),
    page(key: string, after: string | undefined, limit: number): BatchRow[] {
      const end = { at: Number.MAX_SAFE_INTEGER, row: Number.MAX_SAFE_INTEGER };
      const c = after ? (cursor.get(after) ?? end) : end;
      return page.all({ key, at: c.at, row: c.row, limit });
    },
    open: () => open.all(),
    recent: (limit: number) => all.all({ limit }),
    /** Moves a batch to `status`, stamping its time, with any other columns given. */
    setStatus(id: string, status: BatchStatus, now: number, extra: Partial<BatchRow> = {}) {
      const fields: Record<string, unknown> = { status, ...extra };
      const stamp = STAMP[status];
      if (stamp) fields[stamp] = now;
      const cols = Object.keys(fields);
      db.query(`UPDATE batches SET ${cols.map((c) => `${c} = $${c}`).join(", ")} WHERE id = $id`).run({ ...fields, id } as never);
    },
    /** The validated lines, all at once (a retried validation starts over). */
    insertLines: db.transaction((batch: string, lines: { line: number; custom_id: string; model: string; body: string }[]) => {
      deleteLines.run(batch);
      for (const l of lines) insertLine.run({ batch_id: batch, ...l });
    }),
    /** Up to `limit` pending lines after line `after`, in line order. */
    pendingAfter: (batch: string, after: number, limit: number) => pendingAfter.all({ batch, after, limit }),
    line: (batch: string, n: number) => line.get({ batch, line: n }),
    /** Pending lines a process started and did not finish or hand back: a dead process was running them. */
    started: () => started.all(),
    /** Counts a start of each line, committed before they run (one write for all). */
    markStarted: db.transaction((batch: string, lines: number[]) => {
      for (const l of lines) start.run({ batch, line: l });
    }),
    /** A graceful stop hands a line's start back: it was stopped, not crashed on. */
    unstart: (batch: string, n: number) => void unstart.run({ batch, line: n }),
    /** Records a line's result (and counts it). Run inside the settle transaction for completed lines. */
    finish,
    /** Fails a line in its own transaction (no charge). */
    fail: db.transaction((batch: string, line: number, result: string, now: number) => finish(batch, line, "failed", result, now)),
    /** Pending lines but those `running`: they are given `result(line)` and counted as failed (cancel, expiry). */
    failUnrun: db.transaction((batch: string, running: ReadonlySet<number>, result: (l: LineRow) => string, now: number) => {
      let n = 0;
      for (const l of pendingAfter.all({ batch, after: -1, limit: -1 })) if (!running.has(l.line) && finish(batch, l.line, "failed", result(l), now)) n++;
      return n;
    }),
    /** Finished lines in line order, a page at a time: the output and error files are written from these. */
    results: (batch: string, after: number, limit: number) => results.all({ batch, after, limit }),
  };
}
export type BatchesRepo = ReturnType<typeof batchesRepo>;
