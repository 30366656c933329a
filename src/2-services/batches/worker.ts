import type { Database } from "bun:sqlite";
import type { AccountService } from "../accounts/service";
import type { Principal } from "../accounts/types";
import type { ChatService } from "../chat/service";
import type { Clock } from "../../lib/clock";
import type { EmbeddingsService } from "../embeddings/service";
import { slotCount } from "../../lib/manifest";
import type { Registry } from "../../3-engines/registry";
import type { FilesService } from "../files/service";
import type { Logger } from "../../lib/log";
import { batchesRepo, type BatchRow, type LineRow } from "../../4-store/batches";
import { isBatchEndpoint } from "./endpoints";
import { crashedResult, runLine, unrunResult } from "./run-line";
import { validateBatchFile } from "./validate";
import type { BatchLanes } from "./lanes";

// The batch worker: validates new batches, runs their lines on spare capacity, expires and
// finalizes them. Its state is the store: every step is recorded, so a restart (or a kill)
// resumes where the last commit left off — a line is pending until its result and charge commit
// together. Which lines are running is kept here only; the store keeps how many times each line
// was started (one write per dispatch pass, committed before the lines run; a graceful stop hands
// it back).
//
// Crashes (issue 41 C2): a pending line with starts > 0 was running when a process died (or its
// result could not be recorded). It is a suspect: it runs alone, with no other batch line beside
// it, so that if the process dies again it is the one to blame (live traffic aside). A line found
// with MAX_STARTS starts is failed with `batch_line_crashed` instead of being run again: a line
// that kills the process costs two restarts, not a crash loop.
//
// Spare capacity (spec §8): a chat model runs at most slots − 1 batch lines at once (one slot is
// left to live traffic), and its lines wait for slots behind every live request; embedding lines
// join the model's micro-batches.

const POLL_MS = 500;
const EMBEDDING_LINES_IN_FLIGHT = 64;
const PAGE = 1000;
const DISPATCH_PAGE = 64;
/** Runs a line may have been cut short by a dying process before it is failed rather than run again. */
export const MAX_STARTS = 2;

export interface BatchWorkerDeps {
  db: Database;
  files: FilesService;
  registry: Registry;
  accounts: AccountService;
  clock: Clock;
  logger: Logger;
}

export type BatchWorker = ReturnType<typeof createBatchWorker>;
type BatchState = { lines: Set<number>; cursor: number };

export function createBatchWorker(deps: BatchWorkerDeps) {
  const repo = batchesRepo(deps.db);
  /** Given by the edge (createApp) before the worker starts: how each endpoint's lines are checked and run. */
  let lanes: BatchLanes | null = null;
  const lineDeps = () => ({ repo, lanes: lanes!, clock: deps.clock, logger: deps.logger });
  const running = new Map<string, { controller: AbortController; done: Promise<unknown> }>();
  const perModel = new Map<string, number>();
  /** Per batch, the lines running now and the last line handed out (lines are started in order). */
  const perBatch = new Map<string, { lines: Set<number>; cursor: number }>();
  const inFlight = (id: string) => perBatch.get(id)?.lines.size ?? 0;
  const runningLines = (id: string): ReadonlySet<number> => perBatch.get(id)?.lines ?? new Set();
  const busy = new Set<string>(); // batches being validated or finalized
  /** Suspect lines (`batch:line`) waiting to run alone; while any waits, no other line starts. */
  const suspects = new Map<string, { batch: string; line: number }>();
  let suspectRunning = false;
  let tickSoon = false;
  let timer: ReturnType<typeof setInterval> | null = null;
  let stopped = true;
  let ticking = false;
  let again = false;

  function capacity(model: string): number {
    const m = deps.registry.resolve(model);
    return m.kind === "chat" ? Math.max(1, slotCount(m) - 1) : EMBEDDING_LINES_IN_FLIGHT;
  }

  function tick(): void {
    if (stopped) return;
    if (ticking) {
      again = true;
      return;
    }
    ticking = true;
    try {
      const now = deps.clock.now();
      for (const b of repo.open()) {
        if (stopped) break;
        if (busy.has(b.id)) continue;
        if (b.status === "validating") void validate(b);
        else if (b.status === "finalizing") void finalize(b, "completed");
        else if (b.status === "cancelling") {
          repo.failUnrun(b.id, runningLines(b.id), (l) => unrunResult(b.id, l, "batch_cancelled", "the batch was cancelled before this request started"), now);
          if (!inFlight(b.id)) void finalize(b, "cancelled");
        } else if (now >= b.expires_at) {
          repo.failUnrun(b.id, runningLines(b.id), (l) => unrunResult(b.id, l, "batch_expired", "the batch's completion window ended before this request ran"), now);
          if (!inFlight(b.id)) void finalize(b, "expired");
        } else if (b.completed + b.failed >= b.total) void finalize(b, "completed");
        else if (suspects.size === 0) dispatch(b);
      }
      if (suspects.size && !stopped) runSuspect(now);
    } catch (e) {
      deps.logger.error("batch worker tick failed", { error: (e as Error).message, stack: (e as Error).stack });
    } finally {
      ticking = false;
      if (again) {
        again = false;
        queueMicrotask(tick);
      }
    }
  }

  /**
   * A tick once the lines ending now have all ended: the lines of one micro-batch end together, and
   * one dispatch pass then starts their successors with one store write, not one each.
   */
  function soon(): void {
    if (tickSoon) return;
    tickSoon = true;
    setImmediate(() => {
      tickSoon = false;
      tick();
    });
  }

  function stateOf(batchId: string) {
    let state = perBatch.get(batchId);
    if (!state) perBatch.set(batchId, (state = { lines: new Set(), cursor: 0 }));
    return state;
  }

  /** Starts the batch's next pending lines, in order, while their models have spare capacity. */
  function dispatch(b: BatchRow) {
    const principal = deps.accounts.principalById(b.key_id);
    if (!principal) return;
    const state = stateOf(b.id);
    const picked = pick(b, state);
    if (picked.length === 0) return;
    launch(b, picked, principal, state);
  }

  /** The lines to start now, counted against their models' capacity; stops at a suspect. */
  function pick(b: BatchRow, state: BatchState): LineRow[] {
    const picked: LineRow[] = [];
    for (;;) {
      const page = repo.pendingAfter(b.id, state.cursor, DISPATCH_PAGE);
      if (page.length === 0) return picked;
      for (const line of page) {
        if (state.lines.has(line.line)) {
          state.cursor = line.line;
          continue;
        }
        if (line.starts > 0) {
          // started before and never finished: it waits to run alone (runSuspect)
          suspects.set(`${b.id}:${line.line}`, { batch: b.id, line: line.line });
          return picked;
        }
        let cap: number;
        try {
          cap = capacity(line.model);
        } catch {
          cap = Infinity; // the model left the config: the line runs and fails with the model's 404
        }
        if ((perModel.get(line.model) ?? 0) >= cap) return picked;
        state.cursor = line.line;
        perModel.set(line.model, (perModel.get(line.model) ?? 0) + 1);
        picked.push(line);
      }
    }
  }

  /**
   * Runs one suspect line with no other batch line beside it, once nothing else runs; fails one
   * that has already been started MAX_STARTS times.
   */
  function runSuspect(now: number) {
    if (running.size > 0 || suspectRunning) return;
    for (const [key, s] of suspects) {
      const b = repo.byId(s.batch);
      const line = repo.line(s.batch, s.line);
      const principal = b && deps.accounts.principalById(b.key_id);
      // ended meanwhile (cancel, expiry), or its batch cannot run (the same as dispatch would decide)
      if (!b || !line || !principal || line.state !== "pending" || b.status !== "in_progress" || now >= b.expires_at) {
        suspects.delete(key);
        continue;
      }
      if (line.starts >= MAX_STARTS) {
        suspects.delete(key);
        if (repo.fail(b.id, line.line, crashedResult(b.id, line), now))
          deps.logger.warn("batch line failed: the server stopped while running it twice", { batch: b.id, line: line.line, starts: line.starts });
        continue;
      }
      suspectRunning = true;
      perModel.set(line.model, (perModel.get(line.model) ?? 0) + 1);
      deps.logger.info("batch line runs alone: the server stopped while running it", { batch: b.id, line: line.line, starts: line.starts });
      launch(b, [line], principal, stateOf(b.id), key);
      return;
    }
  }

  /** Records the lines' starts (one commit), then runs them. Their models' capacity is already counted. */
  function launch(b: BatchRow, lines: LineRow[], principal: Principal, state: BatchState, suspect?: string) {
    try {
      repo.markStarted(b.id, lines.map((l) => l.line));
    } catch (e) {
      for (const l of lines) perModel.set(l.model, perModel.get(l.model)! - 1);
      if (suspect) suspectRunning = false;
      throw e;
    }
    for (const line of lines) {
      const key = `${b.id}:${line.line}`;
      const controller = new AbortController();
      state.lines.add(line.line);
      const done = runLine(lineDeps(), b, line, principal, controller.signal)
        .then((outcome) => {
          // a graceful stop is no crash: the start is handed back
          if (outcome === "aborted") repo.unstart(b.id, line.line);
        })
        .catch((e) => {
          // its result could not be recorded: it is still pending, a suspect to run alone
          deps.logger.error("batch line crashed", { batch: b.id, line: line.line, error: (e as Error).message });
          suspects.set(key, { batch: b.id, line: line.line });
          state.cursor = Math.min(state.cursor, line.line - 1);
        })
        .finally(() => {
          perModel.set(line.model, perModel.get(line.model)! - 1);
          state.lines.delete(line.line);
          running.delete(key);
          if (suspect) {
            suspectRunning = false;
            // ended, or handed back by a stop (then found again at the next start)
            const row = repo.line(b.id, line.line);
            if (!row || row.state !== "pending" || row.starts < 1 || stopped) suspects.delete(suspect);
          }
          soon();
        });
      running.set(key, { controller, done });
    }
  }

  async function validate(b: BatchRow) {
    busy.add(b.id);
    try {
      const file = deps.db.query<{ deleted_at: number | null }, [string]>("SELECT deleted_at FROM files WHERE id = ?").get(b.input_file_id);
      const result =
        !file || file.deleted_at !== null || !isBatchEndpoint(b.endpoint)
          ? { lines: [], errors: [{ code: "invalid_file", message: "the input file was deleted before the batch started", param: "input_file_id", line: null }] }
          : await validateBatchFile(deps.files.pathOf(b.input_file_id), b.endpoint, lanes!.lanes[b.endpoint], deps.registry);
      const now = deps.clock.now();
      const current = repo.byId(b.id)!;
      perBatch.delete(b.id);
      if (current.status === "cancelling") return void finalizeNow(current, "cancelled");
      if (result.errors.length) {
        repo.setStatus(b.id, "failed", now, { errors: JSON.stringify(result.errors) });
        deps.logger.info("batch failed validation", { batch: b.id, problems: result.errors.length });
      } else {
        deps.db.transaction(() => {
          repo.insertLines(b.id, result.lines);
          repo.setStatus(b.id, "in_progress", now, { total: result.lines.length });
        })();
        deps.logger.info("batch started", { batch: b.id, lines: result.lines.length, endpoint: b.endpoint });
      }
    } catch (e) {
      deps.logger.error("batch validation crashed", { batch: b.id, error: (e as Error).message });
    } finally {
      busy.delete(b.id);
      tick();
    }
  }

  async function finalize(b: BatchRow, terminal: "completed" | "cancelled" | "expired") {
    busy.add(b.id);
    try {
      await finalizeNow(b, terminal);
    } catch (e) {
      deps.logger.error("batch finalization failed; will retry", { batch: b.id, error: (e as Error).message });
    } finally {
      busy.delete(b.id);
    }
  }

  /** Writes the output and error files from the recorded lines, then ends the batch in one transaction. */
  async function finalizeNow(b: BatchRow, terminal: "completed" | "cancelled" | "expired") {
    if (terminal === "completed" && b.status !== "finalizing") repo.setStatus(b.id, "finalizing", deps.clock.now());
    const owner = { keyId: b.key_id, accountId: b.account_id };
    const staged = await stageResults(b.id);
    try {
      deps.db.transaction(() => {
        const out = staged.output.bytes ? deps.files.publishResult(owner, `${b.id}_output.jsonl`, staged.output) : null;
        const err = staged.errors.bytes ? deps.files.publishResult(owner, `${b.id}_error.jsonl`, staged.errors) : null;
        repo.setStatus(b.id, terminal, deps.clock.now(), { output_file_id: out?.id ?? null, error_file_id: err?.id ?? null });
      })();
    } finally {
      for (const s of [staged.output, staged.errors]) if (!s.bytes) deps.files.discardStaged(s);
    }
    perBatch.delete(b.id);
    const done = repo.byId(b.id)!;
    deps.logger.info("batch ended", { batch: b.id, status: terminal, completed: done.completed, failed: done.failed });
  }

  async function stageResults(batchId: string) {
    const write = (state: "completed" | "failed") =>
      deps.files.stageResult(async (path) => {
        const sink = Bun.file(path).writer();
        let bytes = 0;
        let after = 0;
        for (;;) {
          const page = repo.results(batchId, after, PAGE);
          if (page.length === 0) break;
          for (const r of page) {
            if (r.state !== state) continue;
            const line = r.result + "\n";
            bytes += Buffer.byteLength(line);
            sink.write(line);
          }
          after = page.at(-1)!.line;
          await sink.flush();
        }
        await sink.end();
        return bytes;
      });
    return { output: await write("completed"), errors: await write("failed") };
  }

  return {
    /** The edge's lanes (src/1-api/batch-lanes.ts): needed before start. */
    useLanes(given: BatchLanes) {
      lanes = given;
    },
    /** Resumes after a restart: what was running when the process died is pending again, a suspect. */
    start() {
      if (!lanes) throw new Error("the batch worker has no lanes: createApp gives them (src/1-api/batch-lanes.ts) before it starts");
      stopped = false;
      suspects.clear();
      for (const l of repo.started()) suspects.set(`${l.batch_id}:${l.line}`, { batch: l.batch_id, line: l.line });
      timer = setInterval(tick, POLL_MS);
      timer.unref();
      tick();
    },
    /** Something changed (a batch was created or cancelled): look now rather than at the next poll. */
    notify: () => queueMicrotask(tick),
    /** Stops taking lines, stops the running ones (they are pending again), and waits for them. */
    async stop() {
      stopped = true;
      if (timer) clearInterval(timer);
      for (const r of running.values()) r.controller.abort(new Error("the server is stopping"));
      await Promise.all([...running.values()].map((r) => r.done));
      perBatch.clear();
    },
    /** Lines running now (for tests and metrics). */
    running: () => running.size,
  };
}
