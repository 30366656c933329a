import type { Database } from "bun:sqlite";
import type { NewFile } from "./files";

// Batches and their lines (spec §2.10, §3), by domain operation (issue 44): one async interface,
// SQLite here and PostgreSQL in pg/batches.ts. A line is pending until its result commits — a
// completed line's with its charge, through the ledger's batch_line effect (ledger.ts), so a line
// that already ended is never charged; a failed line's here, only if it is still pending.
//
// A line being run is leased to its process: claimLines takes pending lines that no live lease
// holds, sets the lease (owner, until) and counts a start (`starts`, migration 007), in one step;
// the process renews its leases on a heartbeat while the lines run, and hands a line back (lease
// gone, start taken back) when it stops gracefully. A line whose lease lapsed — its process was
// killed — is claimed again by another, with its start counted again: a line started and never
// finished nor handed back is a suspect (src/2-services/batches/worker.ts). Cancel and expiry fail
// only lines no live lease holds: a line running somewhere finishes.

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
  /** Times claimed and neither finished nor handed back by a graceful stop (migration 007), this claim included. */
  starts: number;
  /** The process running the line and until when (epoch ms, the store's clock) unless it renews (migration 014). */
  lease_owner: string | null;
  lease_until: number | null;
}

export type NewBatch = Pick<BatchRow, "id" | "key_id" | "account_id" | "endpoint" | "input_file_id" | "completion_window" | "metadata" | "created_at" | "expires_at">;
export interface NewLine {
  line: number;
  custom_id: string;
  model: string;
  body: string;
}
export type ResultRow = { line: number; state: "completed" | "failed"; result: string };

/** What the metrics read: lines pending (running ones included) and finished, batches by status. */
export interface BatchCounts {
  pending: number;
  completed: number;
  failed: number;
  byStatus: Record<string, number>;
}

export interface BatchEnd {
  /** The statuses it may end from: a batch another process ended meanwhile is left as it is. */
  from: BatchStatus[];
  to: "completed" | "cancelled" | "expired";
  now: number;
  /** The result files' rows (their bytes already written, unpublished: src/4-store/files.ts): published with the end. */
  output: NewFile | null;
  errors: NewFile | null;
}

export interface BatchStore {
  insert(row: NewBatch): Promise<void>;
  byId(id: string): Promise<BatchRow | null>;
  /** The key's batches, newest first; `after` is the id of the last batch of the previous page. */
  page(keyId: string, after: string | undefined, limit: number): Promise<BatchRow[]>;
  /** The account's batches (all its keys'), newest first: the console. */
  byAccount(accountId: string, limit: number): Promise<BatchRow[]>;
  /** Batches not yet ended, oldest first. */
  open(): Promise<BatchRow[]>;
  /** The most recent batches of every key (the CLI). */
  recent(limit: number): Promise<BatchRow[]>;
  /** Moves a batch to `status`, stamping its time, with any other columns given; with `from`, only from one of those statuses. Whether it moved. */
  setStatus(id: string, status: BatchStatus, now: number, extra?: Partial<BatchRow>, from?: BatchStatus[]): Promise<boolean>;
  /** validating → in_progress with its validated lines, in one transaction (a retried validation starts over); false, nothing written, when it is no longer validating. */
  begin(id: string, lines: NewLine[], now: number): Promise<boolean>;
  /** Ends a batch with its result files, in one transaction; false, nothing written, when its status is no longer one of `from`. */
  end(id: string, e: BatchEnd): Promise<boolean>;
  line(batchId: string, line: number): Promise<LineRow | null>;
  /** What claimLines would take now (up to `limit` pending lines no live lease holds, in line order), without taking it. */
  claimable(batchId: string, limit: number): Promise<Pick<LineRow, "line" | "model" | "starts">[]>;
  /** Leases up to `limit` of those lines to `owner` for `leaseMs` and counts a start of each; never one another process holds. In line order. */
  claimLines(q: { batchId: string; owner: string; limit: number; leaseMs: number }): Promise<LineRow[]>;
  /** The heartbeat: `owner`'s leases on pending lines run `leaseMs` from now; how many. */
  renew(owner: string, leaseMs: number): Promise<number>;
  /**
   * `owner` lets a pending line go: no lease. Its start is taken back (a graceful stop, a claim it
   * cannot run now) unless `keepStart` (its run ended without a result: the next claim finds a suspect).
   */
  release(batchId: string, line: number, owner: string, keepStart?: boolean): Promise<void>;
  /** Records a line's failure (and counts it), only if it is still pending: false when it had ended. No charge. */
  fail(batchId: string, line: number, result: string, now: number): Promise<boolean>;
  /** Fails the batch's pending lines that no live lease holds, each with `result(line)` (cancel, expiry); then how many are still pending (running somewhere). */
  failUnleased(batchId: string, result: (l: Pick<LineRow, "line" | "custom_id">) => string, now: number): Promise<{ failed: number; pending: number }>;
  /** Finished lines in line order, a page at a time: the output and error files are written from these. */
  results(batchId: string, after: number, limit: number): Promise<ResultRow[]>;
  counts(): Promise<BatchCounts>;
  /**
   * When a worker starts. SQLite: every lease there is ends now — one process holds a data dir, so
   * they belonged to one that is gone (its lines are suspects at once). PostgreSQL: nothing; leases
   * lapse by the database's clock.
   */
  endDeadLeases(): Promise<number>;
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

/** The columns a status change writes: the status, its time stamp, and what else is given. */
export function statusFields(status: BatchStatus, now: number, extra: Partial<BatchRow> = {}): Record<string, unknown> {
  const fields: Record<string, unknown> = { status, ...extra };
  const stamp = STAMP[status];
  if (stamp) fields[stamp] = now;
  return fields;
}

/** The rows' queries, synchronous (bun:sqlite). Lease times are this process's clock (one process per data dir). */
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
  const byAccount = db.query<BatchRow, { account: string; limit: number }>("SELECT * FROM batches WHERE account_id = $account ORDER BY created_at DESC, rowid DESC LIMIT $limit");
  const open = db.query<BatchRow, []>(
    "SELECT * FROM batches WHERE status IN ('validating', 'in_progress', 'finalizing', 'cancelling') ORDER BY created_at, rowid",
  );
  const all = db.query<BatchRow, { limit: number }>("SELECT * FROM batches ORDER BY created_at DESC, rowid DESC LIMIT $limit");
  const insertLine = db.query(
    "INSERT INTO batch_lines (batch_id, line, custom_id, model, body) VALUES ($batch_id, $line, $custom_id, $model, $body)",
  );
  const deleteLines = db.query("DELETE FROM batch_lines WHERE batch_id = ?");
  // INDEXED BY: on a fresh table the planner would walk the primary key past every finished line,
  // once per line claimed — quadratic in the batch's size.
  const unleased = db.query<LineRow, { batch: string; now: number; limit: number }>(
    `SELECT * FROM batch_lines INDEXED BY batch_lines_pending WHERE batch_id = $batch AND state = 'pending'
       AND (lease_owner IS NULL OR lease_until < $now) ORDER BY line LIMIT $limit`,
  );
  const lease = db.query("UPDATE batch_lines SET lease_owner = $owner, lease_until = $until, starts = starts + 1 WHERE batch_id = $batch AND line = $line");
  const renew = db.query("UPDATE batch_lines SET lease_until = $until WHERE lease_owner = $owner AND state = 'pending'");
  const release = db.query(
    "UPDATE batch_lines SET lease_owner = NULL, lease_until = NULL, starts = MAX(starts - $back, 0) WHERE batch_id = $batch AND line = $line AND state = 'pending' AND lease_owner = $owner",
  );
  const endLeases = db.query("UPDATE batch_lines SET lease_owner = NULL, lease_until = NULL WHERE state = 'pending' AND lease_owner IS NOT NULL");
  const pendingCount = db.query<{ n: number }, [string]>("SELECT COUNT(*) AS n FROM batch_lines INDEXED BY batch_lines_pending WHERE batch_id = ? AND state = 'pending'");
  const finishLine = db.query(
    "UPDATE batch_lines SET state = $state, result = $result, finished_at = $now WHERE batch_id = $batch AND line = $line AND state = 'pending'",
  );
  const line = db.query<LineRow, { batch: string; line: number }>("SELECT * FROM batch_lines WHERE batch_id = $batch AND line = $line");
  const started = db.query<{ batch_id: string; line: number }, []>(
    "SELECT batch_id, line FROM batch_lines INDEXED BY batch_lines_started WHERE state = 'pending' AND starts > 0 ORDER BY batch_id, line",
  );
  const countUp = db.query("UPDATE batches SET completed = completed + $completed, failed = failed + $failed WHERE id = $id");
  const results = db.query<ResultRow, { batch: string; after: number; limit: number }>(
    "SELECT line, state, result FROM batch_lines WHERE batch_id = $batch AND line > $after AND state IN ('completed', 'failed') ORDER BY line LIMIT $limit",
  );
  const insertFile = db.query(
    `INSERT INTO files (id, key_id, account_id, filename, purpose, bytes, status, created_at, expires_at)
     VALUES ($id, $key_id, $account_id, $filename, $purpose, $bytes, $status, $created_at, $expires_at)`,
  );
  const pendingLines = db.query<{ n: number }, []>("SELECT COUNT(*) AS n FROM batch_lines WHERE state = 'pending'");
  const finished = db.query<{ completed: number; failed: number }, []>("SELECT COALESCE(SUM(completed), 0) AS completed, COALESCE(SUM(failed), 0) AS failed FROM batches");
  const byStatus = db.query<{ status: string; n: number }, []>("SELECT status, COUNT(*) AS n FROM batches GROUP BY status");

  const setStatus = (id: string, status: BatchStatus, now: number, extra: Partial<BatchRow> = {}, from?: BatchStatus[]) => {
    const fields = statusFields(status, now, extra);
    const cols = Object.keys(fields);
    // `from` names statuses of this module's type, never a client's words
    const only = from ? ` AND status IN (${from.map((f) => `'${f}'`).join(", ")})` : "";
    return db.query(`UPDATE batches SET ${cols.map((c) => `${c} = $${c}`).join(", ")} WHERE id = $id${only}`).run({ ...fields, id } as never).changes > 0;
  };
  const finish = (batch: string, line: number, state: "completed" | "failed", result: string, now: number) => {
    if (finishLine.run({ batch, line, state, result, now }).changes === 0) return false;
    countUp.run({ id: batch, completed: state === "completed" ? 1 : 0, failed: state === "failed" ? 1 : 0 });
    return true;
  };
  const insertLines = db.transaction((batch: string, lines: NewLine[]) => {
    deleteLines.run(batch);
    for (const l of lines) insertLine.run({ batch_id: batch, ...l });
  });

  return {
    insert: (row: NewBatch) => void insert.run(row),
    byId: (id: string) => byId.get(id),
    page(key: string, after: string | undefined, limit: number): BatchRow[] {
      const end = { at: Number.MAX_SAFE_INTEGER, row: Number.MAX_SAFE_INTEGER };
      const c = after ? (cursor.get(after) ?? end) : end;
      return page.all({ key, at: c.at, row: c.row, limit });
    },
    byAccount: (account: string, limit: number) => byAccount.all({ account, limit }),
    open: () => open.all(),
    recent: (limit: number) => all.all({ limit }),
    setStatus,
    /** The validated lines, all at once (a retried validation starts over). */
    insertLines,
    begin: db.transaction((id: string, lines: NewLine[], now: number) => {
      if (byId.get(id)?.status !== "validating") return false;
      insertLines(id, lines);
      setStatus(id, "in_progress", now, { total: lines.length });
      return true;
    }),
    end: db.transaction((id: string, e: BatchEnd) => {
      const row = byId.get(id);
      if (!row || !e.from.includes(row.status)) return false;
      for (const f of [e.output, e.errors]) if (f) insertFile.run(f);
      setStatus(id, e.to, e.now, { output_file_id: e.output?.id ?? null, error_file_id: e.errors?.id ?? null });
      return true;
    }),
    line: (batch: string, n: number) => line.get({ batch, line: n }),
    unleased: (batch: string, limit: number, now = Date.now()) => unleased.all({ batch, now, limit }),
    claim: db.transaction((batch: string, owner: string, limit: number, leaseMs: number): LineRow[] => {
      const now = Date.now();
      const lines = unleased.all({ batch, now, limit });
      for (const l of lines) lease.run({ batch, line: l.line, owner, until: now + leaseMs });
      return lines.map((l) => ({ ...l, starts: l.starts + 1, lease_owner: owner, lease_until: now + leaseMs }));
    }),
    renew: (owner: string, leaseMs: number) => renew.run({ owner, until: Date.now() + leaseMs }).changes,
    release: (batch: string, n: number, owner: string, keepStart = false) => void release.run({ batch, line: n, owner, back: keepStart ? 0 : 1 }),
    endLeases: () => endLeases.run().changes,
    /** Pending lines a process started and did not finish or hand back: a dead process was running them. */
    started: () => started.all(),
    /** Records a line's result (and counts it). */
    finish,
    /** Fails a line in its own transaction (no charge). */
    fail: db.transaction((batch: string, line: number, result: string, now: number) => finish(batch, line, "failed", result, now)),
    /** Pending lines no live lease holds are given `result(line)` and counted as failed (cancel, expiry). */
    failUnleased: db.transaction((batch: string, result: (l: LineRow) => string, now: number) => {
      let failed = 0;
      for (const l of unleased.all({ batch, now: Date.now(), limit: -1 })) if (finish(batch, l.line, "failed", result(l), now)) failed++;
      return { failed, pending: pendingCount.get(batch)!.n };
    }),
    /** Finished lines in line order, a page at a time: the output and error files are written from these. */
    results: (batch: string, after: number, limit: number) => results.all({ batch, after, limit }),
    counts: (): BatchCounts => ({ pending: pendingLines.get()!.n, ...finished.get()!, byStatus: Object.fromEntries(byStatus.all().map((r) => [r.status, r.n])) }),
  };
}
export type BatchesRepo = ReturnType<typeof batchesRepo>;

/** The SQLite store's batches (one process per data dir: leases timed by its clock). */
export function sqliteBatchStore(db: Database): BatchStore {
  const repo = batchesRepo(db);
  return {
    insert: async (row) => repo.insert(row),
    byId: async (id) => repo.byId(id) ?? null,
    page: async (key, after, limit) => repo.page(key, after, limit),
    byAccount: async (account, limit) => repo.byAccount(account, limit),
    open: async () => repo.open(),
    recent: async (limit) => repo.recent(limit),
    setStatus: async (id, status, now, extra, from) => repo.setStatus(id, status, now, extra, from),
    begin: async (id, lines, now) => repo.begin.immediate(id, lines, now),
    end: async (id, e) => repo.end.immediate(id, e),
    line: async (batch, n) => repo.line(batch, n) ?? null,
    claimable: async (batch, limit) => repo.unleased(batch, limit).map(({ line, model, starts }) => ({ line, model, starts })),
    claimLines: async (q) => repo.claim.immediate(q.batchId, q.owner, q.limit, q.leaseMs),
    renew: async (owner, leaseMs) => repo.renew(owner, leaseMs),
    release: async (batch, n, owner, keepStart) => repo.release(batch, n, owner, keepStart),
    fail: async (batch, n, result, now) => repo.fail.immediate(batch, n, result, now),
    failUnleased: async (batch, result, now) => repo.failUnleased.immediate(batch, result, now),
    results: async (batch, after, limit) => repo.results(batch, after, limit),
    counts: async () => repo.counts(),
    endDeadLeases: async () => repo.endLeases(),
  };
}
