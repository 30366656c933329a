import { hostname } from "node:os";
import type { AccountService } from "../accounts/service";
import type { Principal } from "../accounts/types";
import type { Clock } from "../../lib/clock";
import { randomBase62 } from "../../lib/ids";
import { slotCount } from "../../lib/manifest";
import type { Registry } from "../../3-engines/registry";
import type { FileSink } from "../../4-store/files";
import type { FilesService } from "../files/service";
import type { Logger } from "../../lib/log";
import type { BatchRow, BatchStatus, BatchStore, LineRow } from "../../4-store/batches";
import { isBatchEndpoint } from "./endpoints";
import { crashedResult, runLine, unrunResult } from "./run-line";
import { validateBatchFile } from "./validate";
import type { BatchLanes } from "./lanes";

// The batch worker: validates new batches, runs their lines on spare capacity, expires and
// finalizes them. Its state is the store (src/4-store/batches.ts): every step is recorded, so a
// restart (or a kill) resumes where the last commit left off — a line is pending until its result
// and charge commit together. Any number of processes may run a worker on one store: a line is run
// by the process it is leased to (claimLines counts its start with the lease, committed before it
// runs), the heartbeat renews this process's leases while their lines run, a graceful stop hands
// them back, and the lines of a process that died are claimed again once their leases lapse.
//
// Crashes (issue 41 C2): a line claimed with starts > 1 was started before and never finished nor
// handed back — a process died while running it (or its result could not be recorded). It is a
// suspect: it runs alone, with no other batch line of this process beside it, so that if the
// process dies again it is the one to blame (live traffic aside). A line found started MAX_STARTS
// times is failed with `batch_line_crashed` instead of being run again: a line that kills the
// process costs two restarts, not a crash loop.
//
// Spare capacity (spec §8): a chat model runs at most slots − 1 batch lines at once in a process
// (one slot is left to live traffic), and its lines wait for slots behind every live request;
// embedding lines join the model's micro-batches.

const POLL_MS = 500;
const EMBEDDING_LINES_IN_FLIGHT = 64;
const PAGE = 1000;
const DISPATCH_PAGE = 64;
/** Runs a line may have been cut short by a dying process before it is failed rather than run again. */
export const MAX_STARTS = 2;
/** How long a claim holds a line without a heartbeat (renewed every third of it): a killed process's lines are claimed again this long after its last beat. */
export const LEASE_MS = 15_000;

export interface BatchWorkerDeps {
  store: BatchStore;
  files: FilesService;
  registry: Registry;
  accounts: AccountService;
  clock: Clock;
  logger: Logger;
  /** This process's name on its leases; default host:pid:random. */
  owner?: string;
  /** The other nodes of a cluster: a line of a model only another node serves is left to it (issue 45). */
  cluster?: { servedElsewhere(model: string, kind?: string): boolean };
  leaseMs?: number;
}

export type BatchWorker = ReturnType<typeof createBatchWorker>;

/** What ending a batch in `to` may end it from: another process may have ended or moved it meanwhile. */
const ENDS_FROM: Record<"completed" | "cancelled" | "expired", BatchStatus[]> = { completed: ["finalizing"], cancelled: ["cancelling"], expired: ["in_progress"] };

export function createBatchWorker(deps: BatchWorkerDeps) {
  const store = deps.store;
  const owner = deps.owner ?? `${hostname()}:${process.pid}:${randomBase62(6)}`;
  const leaseMs = deps.leaseMs ?? LEASE_MS;
  /** Given by the edge (createApp) before the worker starts: how each endpoint's lines are checked and run. */
  let lanes: BatchLanes | null = null;
  const lineDeps = () => ({ repo: store, lanes: lanes!, clock: deps.clock, logger: deps.logger });
  const running = new Map<string, { controller: AbortController; done: Promise<unknown> }>();
  const perModel = new Map<string, number>();
  const busy = new Set<string>(); // batches being validated or finalized here
  /** Suspect lines (`batch:line`) claimed here, waiting to run alone; while any waits, no other line starts. */
  const suspects = new Map<string, { batch: string; line: LineRow }>();
  let suspectRunning = false;
  let tickSoon = false;
  let timer: ReturnType<typeof setInterval> | null = null;
  let heartbeat: ReturnType<typeof setInterval> | null = null;
  let stopped = true;
  /** The tick running now, if any: a stop waits for it (a claim it made is handed back, not left counted). */
  let ticking: Promise<void> | null = null;
  let again = false;

  function capacity(model: string): number {
    try {
      const m = deps.registry.resolve(model);
      return m.kind === "chat" ? Math.max(1, slotCount(m) - 1) : EMBEDDING_LINES_IN_FLIGHT;
    } catch {
      // Not served here: another live node's to run; else the model left the config, and the line
      // runs and fails with the model's 404.
      return deps.cluster?.servedElsewhere(model) ? 0 : Infinity;
    }
  }
  const hasRoom = (model: string, taken = 0) => (perModel.get(model) ?? 0) + taken < capacity(model);
  const startsBefore = (l: Pick<LineRow, "starts">) => l.starts - 1; // claimLines counted this claim

  function tick(): Promise<void> {
    if (stopped) return Promise.resolve();
    if (ticking) {
      again = true;
      return ticking;
    }
    ticking = pass().finally(() => {
      ticking = null;
      if (again) {
        again = false;
        queueMicrotask(() => void tick());
      }
    });
    return ticking;
  }

  async function pass(): Promise<void> {
    try {
      const now = deps.clock.now();
      for (const b of await store.open()) {
        if (stopped) break;
        if (busy.has(b.id)) continue;
        if (b.status === "validating") void validate(b);
        else if (b.status === "finalizing") void finalize(b, "completed");
        else if (b.status === "cancelling") await endUnrun(b, "cancelled", now);
        else if (now >= b.expires_at) await endUnrun(b, "expired", now);
        else if (b.completed + b.failed >= b.total) void finalize(b, "completed");
        else if (suspects.size === 0) await dispatch(b);
      }
      if (suspects.size && !stopped) await runSuspect(now);
    } catch (e) {
      deps.logger.error("batch worker tick failed", { error: (e as Error).message, stack: (e as Error).stack });
    }
  }

  /**
   * A tick once the lines ending now have all ended: the lines of one micro-batch end together, and
   * one dispatch pass then claims their successors with one store write, not one each.
   */
  function soon(): void {
    if (tickSoon) return;
    tickSoon = true;
    setImmediate(() => {
      tickSoon = false;
      void tick();
    });
  }

  /** Cancel or expiry: lines no lease holds are failed; once none is running anywhere, the batch ends. */
  async function endUnrun(b: BatchRow, to: "cancelled" | "expired", now: number) {
    const [code, message] =
      to === "cancelled"
        ? (["batch_cancelled", "the batch was cancelled before this request started"] as const)
        : (["batch_expired", "the batch's completion window ended before this request ran"] as const);
    const { pending } = await store.failUnleased(b.id, (l) => unrunResult(b.id, l, code, message), now);
    if (pending === 0) void finalize(b, to);
  }

  /** How many of the batch's next claimable lines to claim now, in order: while their models have room, up to the first suspect. */
  function planned(lines: Pick<LineRow, "model" | "starts">[]): number {
    const taken = new Map<string, number>();
    let n = 0;
    for (const l of lines) {
      if (l.starts >= MAX_STARTS) {
        n++; // failed when claimed, never run
        continue;
      }
      // claimed to run alone, nothing after it; a model only another node serves is that node's (issue 45)
      if (l.starts > 0) return capacity(l.model) > 0 ? n + 1 : n;
      if (!hasRoom(l.model, taken.get(l.model) ?? 0)) return n;
      taken.set(l.model, (taken.get(l.model) ?? 0) + 1);
      n++;
    }
    return n;
  }

  /** Claims the batch's next lines that fit and starts them; a suspect among them waits to run alone. */
  async function dispatch(b: BatchRow) {
    const principal = await deps.accounts.principalById(b.key_id);
    if (!principal) return;
    const want = planned(await store.claimable(b.id, DISPATCH_PAGE));
    if (want === 0 || stopped) return;
    const claimed = await store.claimLines({ batchId: b.id, owner, limit: want, leaseMs });
    // Another process may have claimed some of what was seen: the lines taken are judged again.
    let handBack = false;
    for (const line of claimed) {
      if (handBack || stopped) {
        await store.release(b.id, line.line, owner);
        continue;
      }
      const before = startsBefore(line);
      if (before >= MAX_STARTS) {
        if (await store.fail(b.id, line.line, crashedResult(b.id, { ...line, starts: before }), deps.clock.now()))
          deps.logger.warn("batch line failed: the server stopped while running it twice", { batch: b.id, line: line.line, starts: before });
        continue;
      }
      if (before > 0 && capacity(line.model) === 0) {
        handBack = true;
        await store.release(b.id, line.line, owner);
        continue;
      }
      if (before > 0) {
        suspects.set(`${b.id}:${line.line}`, { batch: b.id, line });
        handBack = true;
        continue;
      }
      if (!hasRoom(line.model)) {
        handBack = true;
        await store.release(b.id, line.line, owner);
        continue;
      }
      launch(b, line, principal);
    }
  }

  /** Runs one suspect line with no other batch line of this process beside it, once nothing else runs here. */
  async function runSuspect(now: number) {
    if (running.size > 0 || suspectRunning) return;
    for (const [key, s] of suspects) {
      suspects.delete(key);
      const b = await store.byId(s.batch);
      const principal = b && (await deps.accounts.principalById(b.key_id));
      // its batch cannot run now (cancelled, expired: the same as dispatch would decide): handed back, as it never ran
      if (!b || !principal || b.status !== "in_progress" || now >= b.expires_at) {
        await store.release(s.batch, s.line.line, owner);
        continue;
      }
      suspectRunning = true;
      deps.logger.info("batch line runs alone: the server stopped while running it", { batch: b.id, line: s.line.line, starts: startsBefore(s.line) });
      launch(b, s.line, principal, true);
      return;
    }
  }

  /** Runs a line claimed here; its start is already counted. */
  function launch(b: BatchRow, line: LineRow, principal: Principal, suspect = false) {
    const key = `${b.id}:${line.line}`;
    const controller = new AbortController();
    perModel.set(line.model, (perModel.get(line.model) ?? 0) + 1);
    const done = runLine(lineDeps(), b, line, principal, controller.signal)
      .catch((e) => {
        // its result could not be recorded: it is still pending, a suspect to run alone
        deps.logger.error("batch line crashed", { batch: b.id, line: line.line, error: (e as Error).message });
        return "crashed" as const;
      })
      // A graceful stop is no crash: its start is handed back. Otherwise the line has ended (nothing
      // to let go), or it is let go with its start counted: the next claim finds a suspect.
      .then((outcome) => store.release(b.id, line.line, owner, outcome !== "aborted"))
      .catch((e) => deps.logger.warn("a batch line's lease could not be let go; it lapses", { batch: b.id, line: line.line, error: (e as Error).message }))
      .finally(() => {
        perModel.set(line.model, perModel.get(line.model)! - 1);
        running.delete(key);
        if (suspect) suspectRunning = false;
        soon();
      });
    running.set(key, { controller, done });
  }

  async function validate(b: BatchRow) {
    busy.add(b.id);
    try {
      const file = await deps.files.byId(b.input_file_id);
      const input = file && isBatchEndpoint(b.endpoint) ? await deps.files.stream(b.input_file_id) : null;
      const result =
        !input || !isBatchEndpoint(b.endpoint)
          ? { lines: [], errors: [{ code: "invalid_file", message: "the input file was deleted before the batch started", param: "input_file_id", line: null }] }
          : await validateBatchFile(input, b.endpoint, lanes!.lanes[b.endpoint], clusterModels(deps.registry, deps.cluster));
      const now = deps.clock.now();
      const current = (await store.byId(b.id))!;
      if (current.status === "cancelling") return void (await finalizeNow(current, "cancelled"));
      if (result.errors.length) {
        if (await store.setStatus(b.id, "failed", now, { errors: JSON.stringify(result.errors) }, ["validating"]))
          deps.logger.info("batch failed validation", { batch: b.id, problems: result.errors.length });
      } else if (await store.begin(b.id, result.lines, now)) deps.logger.info("batch started", { batch: b.id, lines: result.lines.length, endpoint: b.endpoint });
    } catch (e) {
      deps.logger.error("batch validation crashed", { batch: b.id, error: (e as Error).message });
    } finally {
      busy.delete(b.id);
      void tick();
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

  /** Writes the output and error files from the recorded lines, then ends the batch with them in one transaction. */
  async function finalizeNow(b: BatchRow, terminal: "completed" | "cancelled" | "expired") {
    if (terminal === "completed" && b.status !== "finalizing") await store.setStatus(b.id, "finalizing", deps.clock.now(), {}, ["in_progress"]);
    const owner = { keyId: b.key_id, accountId: b.account_id };
    const output = await stageResults(b.id, "completed");
    let ended = false;
    try {
      const errors = await stageResults(b.id, "failed").catch(async (e) => {
        await output.discard();
        throw e;
      });
      try {
        ended = await store.end(b.id, {
          from: ENDS_FROM[terminal],
          to: terminal,
          now: deps.clock.now(),
          output: output.bytes ? deps.files.resultRow(owner, `${b.id}_output.jsonl`, output) : null,
          errors: errors.bytes ? deps.files.resultRow(owner, `${b.id}_error.jsonl`, errors) : null,
        });
      } finally {
        if (!ended || !errors.bytes) await errors.discard();
      }
    } finally {
      if (!ended || !output.bytes) await output.discard();
    }
    if (!ended) return; // another process ended it meanwhile: its files are the batch's
    const done = (await store.byId(b.id))!;
    deps.logger.info("batch ended", { batch: b.id, status: terminal, completed: done.completed, failed: done.failed });
  }

  /** The lines in `state`, one JSON line each in line order, written a page at a time into a result file (unpublished). */
  function stageResults(batchId: string, state: "completed" | "failed"): Promise<FileSink> {
    return deps.files.stageResult(async (sink) => {
      const encoder = new TextEncoder();
      let after = 0;
      for (;;) {
        const page = await store.results(batchId, after, PAGE);
        if (page.length === 0) break;
        const text = page
          .filter((r) => r.state === state)
          .map((r) => r.result + "\n")
          .join("");
        if (text) await sink.write(encoder.encode(text));
        after = page.at(-1)!.line;
      }
    });
  }

  return {
    /** The edge's lanes (src/1-api/batch-lanes.ts): needed before start. */
    useLanes(given: BatchLanes) {
      lanes = given;
    },
    /** Starts claiming lines; on SQLite, what a dead process was running is let go first (then found as suspects). */
    start() {
      if (!lanes) throw new Error("the batch worker has no lanes: createApp gives them (src/1-api/batch-lanes.ts) before it starts");
      stopped = false;
      suspects.clear();
      void (async () => {
        try {
          await store.endDeadLeases();
        } catch (e) {
          deps.logger.error("batch worker: leases of a process that is gone could not be ended", { error: (e as Error).message });
        }
        if (stopped) return;
        timer = setInterval(() => void tick(), POLL_MS);
        timer.unref();
        heartbeat = setInterval(
          () => void store.renew(owner, leaseMs).catch((e) => deps.logger.warn("batch line leases could not be renewed", { error: (e as Error).message })),
          Math.max(50, Math.floor(leaseMs / 3)),
        );
        heartbeat.unref();
        await tick();
      })();
    },
    /** Something changed (a batch was created or cancelled): look now rather than at the next poll. */
    notify: () => queueMicrotask(() => void tick()),
    /** Stops claiming lines, stops the running ones (handed back: pending again) and waits for them; suspects waiting here are handed back too. */
    async stop() {
      stopped = true;
      if (timer) clearInterval(timer);
      await ticking;
      for (const r of running.values()) r.controller.abort(new Error("the server is stopping"));
      await Promise.all([...running.values()].map((r) => r.done));
      for (const s of suspects.values()) await store.release(s.batch, s.line.line, owner).catch(() => {});
      suspects.clear();
      if (heartbeat) clearInterval(heartbeat);
    },
    /** Lines running now in this process (for tests and metrics). */
    running: () => running.size,
    /** This process's name on its leases. */
    owner,
  };
}

/** Resolves a line's model here, or as served by another live node of the cluster (issue 45). */
function clusterModels(registry: Pick<Registry, "resolve">, cluster: BatchWorkerDeps["cluster"]): Pick<Registry, "resolve"> {
  return {
    resolve: ((model: string, kind?: string) => {
      try {
        return registry.resolve(model, kind as never);
      } catch (e) {
        if (cluster?.servedElsewhere(model, kind)) return undefined as never; // another node's to run
        throw e;
      }
    }) as Registry["resolve"],
  };
}
