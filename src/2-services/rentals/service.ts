import type { Database } from "bun:sqlite";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import type { Principal } from "../accounts/types";
import { ApiError } from "../../lib/errors";
import { unixSeconds as seconds, type Clock } from "../../lib/clock";
import { newId, randomBase62 } from "../../lib/ids";
import type { Logger } from "../../lib/log";
import { ACTIVE, rentalsRepo, type RentalRow, type StopReason } from "../../4-store/rentals";
import type { Meter } from "../billing/meter";
import { costOfMinutes, fromMicros, minutesRun, minutesStarted, toMicros } from "../billing/minutes";
import { isRentable, type RentableNode, type RentalNode } from "./inventory";
import { basePathOf, type RentalAccess } from "./access";
import type { LaunchHandle, LaunchIntent, Launcher, ProxyTarget } from "./launchers/types";

// The rental state machine (spec §2.3, §3 Rental): pending → running → stopping → stopped, or
// stopping → failed. It knows launchers only through their interface, and bills per started minute
// from `running_at` at the price fixed at creation (spec §8), charged as each minute starts, in the
// same transaction that records it. Everything is in the store, so a restarted server reconciles
// what it finds (`reconcile`): the launch intent is written before a launcher starts anything, and
// a rental holds its node (pending, running, stopping) until what it started is known to be gone.

export interface RentalsOptions {
  db: Database;
  /** GPU minutes are charged through it, on the ledger every other capability uses. */
  meter: Pick<Meter, "chargeMinutes" | "balance">;
  clock: Clock;
  logger: Logger;
  dataDir: string;
  /** The nodes this appliance can hand out (config and discovery). */
  nodes: () => RentalNode[];
  launchers: Record<string, Launcher>;
  /** Nodes reserved for a loaded inference model: not rentable. */
  reserved?: () => ReadonlySet<string>;
  /**
   * Before a launch: frees the node's GPUs of idle models (they are unloaded); throws, naming the
   * models, when one of them is busy or pinned by now (the rental then fails, unbilled).
   */
  beforeLaunch?: (gpuUuids: readonly string[]) => Promise<void>;
  maxHours: number;
  /** How long a launch may take to answer before the rental fails. */
  readyTimeoutMs: number;
  /** How often launches are probed and running rentals billed, probed and auto-stopped. */
  tickMs?: number;
  /** How long an Idempotency-Key is remembered. */
  idempotencyMs?: number;
  /**
   * How new rentals are reached (src/2-services/rentals/access.ts); default `direct` here (the config's default is `proxy`). A rental keeps the access
   * it was launched with (its handle records it).
   */
  access?: RentalAccess;
  /**
   * The appliance's public base URL (`publicBaseOf`): proxied rentals' connection URLs start with
   * it. A function where the port is known only once the main listener is bound (`port = 0`).
   */
  publicBase?: string | (() => string);
}

export interface CreateRental {
  node_id?: unknown;
  type?: unknown;
  hours?: unknown;
}

export type RentalsService = ReturnType<typeof createRentalsService>;

/** How often a running rental's server is probed (a dead one fails and stops billing). */
const PROBE_EVERY_MS = 5000;

/** How long after a failed stop (the Docker daemon did not answer) the ticks try it again. */
const STOP_RETRY_MS = 30_000;

/** How often launchers are checked (an offline one's nodes are not listed or rentable). */
const HEALTH_EVERY_MS = 30_000;

/** How much of a rental's log GET /api/v1/rentals/{id}/logs returns (the end of it). */
export const LOG_TAIL_BYTES = 256 * 1024;

export function createRentalsService(o: RentalsOptions) {
  const repo = rentalsRepo(o.db);
  const tickMs = o.tickMs ?? 1000;
  const idempotencyMs = o.idempotencyMs ?? 86_400_000;
  const launching = new Map<string, Promise<void>>();
  const stopping = new Map<string, Promise<void>>();
  const lastProbe = new Map<string, number>();
  /** When a rental's stop last failed (launcher unreachable): retried every STOP_RETRY_MS, not every tick. */
  const stopFailedAt = new Map<string, number>();
  let timer: ReturnType<typeof setInterval> | null = null;

  const launcherOf = (name: string) => {
    const l = o.launchers[name];
    if (!l) throw new Error(`no launcher "${name}" is configured`);
    return l;
  };
  const handleOf = (r: RentalRow): LaunchHandle | null => (r.handle ? (JSON.parse(r.handle) as LaunchHandle) : null);
  const intentOf = (r: RentalRow): LaunchIntent | null => (r.launch_intent ? (JSON.parse(r.launch_intent) as LaunchIntent) : null);

  /** What is wrong with each launcher (null: healthy), as last checked; unchecked counts as healthy. */
  const launcherProblems = new Map<string, string | null>();
  let lastHealthCheck = -Infinity;

  async function checkLaunchers() {
    lastHealthCheck = o.clock.now();
    const used = new Set(o.nodes().map((n) => n.launcher));
    for (const [name, l] of Object.entries(o.launchers)) {
      if (!used.has(name)) continue;
      const problem = await l.health().catch((e) => `health check failed: ${(e as Error).message}`);
      if (problem !== (launcherProblems.get(name) ?? null)) {
        if (problem) o.logger.warn("rental launcher offline", { launcher: name, problem });
        else if (launcherProblems.has(name)) o.logger.info("rental launcher online", { launcher: name });
      }
      launcherProblems.set(name, problem);
    }
  }

  /** Nodes that are rentable (inventory), whose launcher is configured and healthy, and are not reserved. */
  function rentable(): RentableNode[] {
    const reserved = o.reserved?.() ?? new Set<string>();
    return o.nodes().filter((n): n is RentableNode => isRentable(n) && !!o.launchers[n.launcher] && !launcherProblems.get(n.launcher) && !reserved.has(n.node_id));
  }

  function toObject(r: RentalRow) {
    const handle = handleOf(r);
    return {
      rental_id: r.id,
      object: "rental" as const,
      node_id: r.node_id,
      type: r.type,
      status: r.status,
      stop_reason: r.stop_reason,
      failure: r.failure,
      connection: r.status === "running" && handle ? { url: `${handle.proxy ? `${typeof o.publicBase === "function" ? o.publicBase() : (o.publicBase ?? "")}${handle.proxy.basePath}` : handle.url}?token=${r.token}`, token: r.token } : null,
      hours: r.hours,
      price_per_hour: fromMicros(r.price_per_hour_micros),
      billed_minutes: r.billed_minutes,
      cost: fromMicros(r.cost_micros),
      created_at: seconds(r.created_at),
      running_at: seconds(r.running_at),
      stopped_at: seconds(r.stopped_at),
      expires_at: seconds(r.expires_at),
    };
  }

  function owned(p: Principal, id: string): RentalRow {
    const r = repo.byId(id);
    if (!r || r.key_id !== p.keyId) throw new ApiError("not_found", `No such rental: ${id}`, { param: "rental_id" });
    return r;
  }

  function validate(body: CreateRental) {
    if (typeof body !== "object" || body === null) throw new ApiError("invalid_request", "the body must be a JSON object");
    if (typeof body.node_id !== "string" || body.node_id === "") throw new ApiError("invalid_request", "node_id is required (a node's UUID from GET /api/v1/gpus)", { param: "node_id" });
    if (body.type !== "jupyter") throw new ApiError("invalid_request", `type must be "jupyter"${body.type === undefined ? "" : ` (got ${JSON.stringify(body.type)})`}`, { param: "type" });
    let hours: number | null = null;
    if (body.hours !== undefined && body.hours !== null) {
      if (typeof body.hours !== "number" || !Number.isFinite(body.hours) || body.hours <= 0 || body.hours > o.maxHours)
        throw new ApiError("invalid_request", `hours must be a number > 0 and ≤ ${o.maxHours}`, { param: "hours" });
      hours = body.hours;
    }
    return { node_id: body.node_id, type: "jupyter" as const, hours };
  }

  // Checks, insert and the idempotency record in one synchronous transaction: 50 concurrent POSTs
  // with one Idempotency-Key are serialised here and find the first one's rental.
  // `balance`: the account's, read just before (the ledger is asynchronous; a transaction is not).
  const createTx = o.db.transaction((p: Principal, req: ReturnType<typeof validate>, idem: string | null, balance: number) => {
    const now = o.clock.now();
    const hash = new Bun.CryptoHasher("sha256").update(JSON.stringify(req)).digest("hex");
    if (idem) {
      const seen = repo.request(p.keyId, idem);
      if (seen && now - seen.created_at < idempotencyMs) {
        if (seen.body_hash !== hash)
          throw new ApiError("idempotency_key_reused", "this Idempotency-Key was used with a different body; use a new key for a new rental", { param: "Idempotency-Key" });
        return { row: repo.byId(seen.rental_id)!, created: false };
      }
      if (seen) repo.forget(p.keyId, idem);
    }
    const node = o.nodes().find((n) => n.node_id === req.node_id);
    if (!node) throw new ApiError("node_not_found", `no GPU node ${req.node_id}`, { param: "node_id" });
    if (repo.activeCount(p.keyId) >= p.maxActiveRentals)
      throw new ApiError("max_active_rentals_reached", `this key already has ${p.maxActiveRentals} active rental(s), its max_active_rentals; stop one first`);
    const taken = repo.nodeTaken(node.node_id);
    if (taken || !rentable().some((n) => n.node_id === node.node_id)) {
      const why = taken ? "it is rented" : launcherProblems.get(node.launcher) ? "it is offline" : "it is not offered (reserved, unpriced or offline)";
      throw new ApiError("node_unavailable", `node ${node.node_id} is not available: ${why}; GET /api/v1/gpus lists the free ones`, { param: "node_id" });
    }
    const price = toMicros(node.price_per_hour!); // rentable() above: priced
    if (balance < costOfMinutes(price, 1))
      throw new ApiError("insufficient_balance", `a rental of this node needs at least ${fromMicros(costOfMinutes(price, 1))} for its first minute; the balance is ${fromMicros(balance)}`);
    const id = newId("rent_");
    repo.insert({ id, key_id: p.keyId, account_id: p.accountId, node_id: node.node_id, type: req.type, price_per_hour_micros: price, hours: req.hours, token: randomBase62(40), launcher: node.launcher, created_at: now });
    if (idem) repo.remember(p.keyId, idem, hash, id, now);
    return { row: repo.byId(id)!, created: true };
  });

  function launch(r: RentalRow): Promise<void> {
    const node = o.nodes().find((n) => n.node_id === r.node_id);
    const work = (async () => {
      const launcher = launcherOf(r.launcher);
      const workDir = join(o.dataDir, "rentals", r.id);
      mkdirSync(workDir, { recursive: true });
      const spec = { rentalId: r.id, gpus: node?.gpu_uuids ?? [], token: r.token, workDir, ...(o.access === "proxy" ? { basePath: basePathOf(r.id) } : {}) };
      // Committed before anything starts (issue 23: a kill -9 between the start and setHandle left
      // a notebook server nobody knew of): a restart finds what this launch started by its intent.
      await o.beforeLaunch?.(spec.gpus);
      repo.setIntent(r.id, JSON.stringify(launcher.intent(spec)));
      const handle = await launcher.start(spec);
      repo.setHandle(r.id, JSON.stringify(handle));
      o.logger.info("rental launched", { rental: r.id, node: r.node_id, launcher: launcher.name });
    })().catch((e) => void fail(r.id, `the launch failed: ${(e as Error).message}`)); // not awaited here: the stop waits for this launch
    launching.set(r.id, work);
    return work.finally(() => launching.delete(r.id));
  }

  /** A pending rental's server answers: running from now, first minute charged. */
  async function started(r: RentalRow) {
    const now = o.clock.now();
    const expires = r.hours === null ? null : now + Math.round(r.hours * 3_600_000);
    if (!repo.transition(r.id, ["pending"], "running", { running_at: now, expires_at: expires })) return;
    o.logger.info("rental running", { rental: r.id, node: r.node_id });
    await bill(r.id, now);
  }

  /** Each rental's billing in flight: its charges run one after another (each reads what the last billed). */
  const billing = new Map<string, Promise<boolean>>();

  /**
   * Charges every minute of rental `id` started by `t` (or up to `upTo` minutes). Resolves false
   * when the balance cannot pay the next one (nothing is charged then; the caller stops the
   * rental). One rental's charges are serialised, and each reads the minutes billed so far from the
   * store; the ledger charges only from those minutes, so a charge computed from a stale count is
   * refused rather than billed twice.
   */
  function bill(id: string, t: number, upTo?: (r: RentalRow) => number): Promise<boolean> {
    const run = async (): Promise<boolean> => {
      for (let attempt = 0; attempt < 3; attempt++) {
        const r = repo.byId(id);
        if (!r || r.running_at === null) return true;
        const to = upTo ? upTo(r) : minutesStarted(r.running_at, t);
        if (to <= r.billed_minutes) return true;
        const charge = { rentalId: r.id, accountId: r.account_id, keyId: r.key_id, nodeId: r.node_id, pricePerHourMicros: r.price_per_hour_micros, from: r.billed_minutes, upTo: to, at: t };
        const out = await o.meter.chargeMinutes(charge);
        if (out !== "stale") return out !== "unpaid";
      }
      return true;
    };
    const next = (billing.get(id) ?? Promise.resolve(true)).then(run, run);
    billing.set(id, next);
    void next.finally(() => billing.get(id) === next && billing.delete(id)).catch(() => {});
    return next;
  }

  /**
   * Ends a rental that broke: `failed`, through `stopping`. `charge`: bill the minutes started until
   * now (the server saw it alive until moments ago); false when it ended at an unknown time (found
   * dead after a restart): then what was billed before stays the bill.
   */
  function fail(id: string, reason: string, charge = true): Promise<void> {
    return stop(id, "error", { failure: reason, billTo: charge ? undefined : null });
  }

  /**
   * Stops a rental (idempotent): billing ends, the process/container goes, then the GPU is free. The
   * rental is `stopping` (its node still taken) until the launcher has stopped what it started —
   * found by its handle or, for a launch that never recorded one, by its intent — and only then
   * `stopped` (`failed` for reason `error`). A stop that throws (the Docker daemon does not answer)
   * leaves it `stopping` and the ticks try again: the GPU is never listed free while a process may
   * still hold it. `billTo`: bill to that time (at most now); null: bill nothing more.
   */
  function stop(id: string, reason: StopReason, opts: { failure?: string; billTo?: number | null } = {}): Promise<void> {
    const inFlight = stopping.get(id);
    if (inFlight) return inFlight;
    const work = (async () => {
      await launching.get(id); // a launch in progress finishes first, so its process is known
      let r = repo.byId(id);
      if (!r || !ACTIVE.includes(r.status)) return;
      const now = o.clock.now();
      if (r.status !== "stopping") {
        if (reason === "error") o.logger.warn("rental failed", { rental: id, reason: opts.failure });
        const billTo = opts.billTo === null ? null : Math.min(now, opts.billTo ?? now, reason === "auto_stop" && r.expires_at !== null ? r.expires_at : now);
        if (r.status === "running" && billTo !== null) await bill(id, billTo, (x) => minutesRun(x.running_at!, billTo));
        repo.transition(id, ["pending", "running"], "stopping", { stopping_at: now, stop_reason: reason, ...(opts.failure === undefined ? {} : { failure: opts.failure }) });
        r = repo.byId(id)!;
      }
      await release(r);
      const end = r.stop_reason === "auto_stop" && r.expires_at !== null ? Math.min(o.clock.now(), r.expires_at) : o.clock.now();
      repo.transition(id, ["stopping"], r.stop_reason === "error" ? "failed" : "stopped", { stopped_at: end });
      lastProbe.delete(id);
      stopFailedAt.delete(id);
      if (r.stop_reason !== "error") o.logger.info("rental stopped", { rental: id, reason: r.stop_reason });
    })().catch((e) => {
      stopFailedAt.set(id, o.clock.now());
      o.logger.error("rental stop failed; its node stays taken until it succeeds", { rental: id, error: (e as Error).message });
    });
    stopping.set(id, work);
    return work.finally(() => stopping.delete(id));
  }

  /** Stops what the rental's launch started: by its handle, else by its intent; nothing when it never began. */
  async function release(r: RentalRow) {
    const launcher = o.launchers[r.launcher];
    if (!launcher) {
      // The config no longer names its launcher: nothing here can stop what it started.
      o.logger.warn("rental launcher no longer configured; what it started is not stopped", { rental: r.id, launcher: r.launcher });
      return;
    }
    const handle = handleOf(r);
    const intent = intentOf(r);
    if (handle) await launcher.stop(handle);
    else if (intent) await launcher.reclaim(intent);
  }

  /** One pass over active rentals: launches answer, minutes are charged, due rentals stop. */
  async function tick() {
    const now = o.clock.now();
    if (now - lastHealthCheck >= HEALTH_EVERY_MS) await checkLaunchers();
    stopRevoked();
    for (const r of repo.active()) {
      if (launching.has(r.id) || stopping.has(r.id)) continue;
      try {
        await tickOne(r, now);
      } catch (e) {
        o.logger.error("rental tick failed", { rental: r.id, error: (e as Error).message });
      }
    }
    repo.forgetBefore(now - idempotencyMs);
  }

  /**
   * A revoked key's rentals stop, billed to the moment of revocation (issue 23: they ran and billed
   * on). Read from the store, so a key revoked by the CLI or the console, in this process or
   * another, is found at the next tick. A rotated key's rentals moved to its successor when it was
   * rotated (accounts service), so they are not among these.
   */
  function stopRevoked() {
    for (const r of repo.onRevokedKeys()) {
      if (stopping.has(r.id)) continue;
      o.logger.info("rental's key revoked", { rental: r.id });
      void stop(r.id, "key_revoked", { billTo: r.revoked_at });
    }
  }

  async function tickOne(r: RentalRow, now: number) {
    const handle = handleOf(r);
    if (r.status === "stopping") {
      // A stop that failed, or one the server did not finish (restart).
      if (now - (stopFailedAt.get(r.id) ?? -Infinity) >= STOP_RETRY_MS) void stop(r.id, r.stop_reason ?? "user");
      return;
    }
    if (r.status === "pending") {
      if (!handle) return; // launch() is starting it, or reconcile decides
      const state = await launcherOf(r.launcher).probe(handle).catch(() => "starting" as const);
      if (state === "ready") await started(r);
      else if (state === "dead") void fail(r.id, "the notebook server exited before it answered");
      else if (now - r.created_at > o.readyTimeoutMs) void fail(r.id, `the notebook server did not answer within ${Math.round(o.readyTimeoutMs / 1000)} s`);
      return;
    }
    if (r.expires_at !== null && now >= r.expires_at) {
      void stop(r.id, "auto_stop");
      return;
    }
    if (!(await bill(r.id, now))) {
      void stop(r.id, "insufficient_credit");
      return;
    }
    if (handle && now - (lastProbe.get(r.id) ?? 0) >= PROBE_EVERY_MS) {
      lastProbe.set(r.id, now);
      if ((await launcherOf(r.launcher).probe(handle).catch(() => "ready" as const)) === "dead") void fail(r.id, "the notebook server exited");
    }
  }

  let ticking: Promise<void> | null = null;
  const runTick = () => {
    if (ticking) return ticking;
    ticking = tick()
      .catch((e) => o.logger.error("rental tick failed", { error: (e as Error).message }))
      .finally(() => (ticking = null));
    return ticking;
  };

  return {
    /** GET /api/v1/gpus: nodes online, priced and free. */
    gpus(): RentableNode[] {
      const taken = new Set(repo.active().map((r) => r.node_id));
      return rentable().filter((n) => !taken.has(n.node_id));
    },
    async create(p: Principal, body: CreateRental, idempotencyKey: string | null) {
      // A rental is paid from the account's prepaid balance, which nothing else lets a free key spend
      // (its inference runs on the trial): renting needs a premium key, whatever its scopes (issue 23).
      if (p.kind !== "premium")
        throw new ApiError(
          "premium_key_required",
          "GPU rentals need a premium key: a rental is paid from the account's balance, which a free key cannot spend. Create a premium key with the GPU Rentals scope in the console or with `appliance keys create --premium --scope rental`",
        );
      if (idempotencyKey !== null && (idempotencyKey.length === 0 || idempotencyKey.length > 255))
        throw new ApiError("invalid_request", "Idempotency-Key must be 1–255 characters", { param: "Idempotency-Key" });
      const req = validate(body);
      const { row, created } = createTx.immediate(p, req, idempotencyKey, await o.meter.balance(p.accountId));
      if (created) void launch(row);
      return toObject(row);
    },
    get: (p: Principal, id: string) => toObject(owned(p, id)),
    /**
     * Where the proxy reaches a running, proxied rental's notebook server, with the token it
     * requires; null for an unknown, not (yet or any more) running, or direct rental. Whoever
     * presents the token may use the notebook (spec §2.3: the token is the notebook's credential),
     * so no API key is asked for here.
     */
    proxyTarget(id: string): (ProxyTarget & { token: string }) | null {
      const r = repo.byId(id);
      if (!r || r.status !== "running") return null;
      const proxy = handleOf(r)?.proxy;
      return proxy ? { ...proxy, token: r.token } : null;
    },
    list: (p: Principal, limit = 100) => ({ object: "list" as const, data: repo.byKey(p.keyId, limit).map(toObject) }),
    async remove(p: Principal, id: string) {
      const r = owned(p, id);
      if (ACTIVE.includes(r.status)) await stop(id, "user");
      return toObject(repo.byId(id)!);
    },
    /** The tail of the notebook server's stdout/stderr (owner only), also after it stopped. */
    async logs(p: Principal, id: string): Promise<string> {
      const r = owned(p, id);
      const handle = handleOf(r);
      return handle ? launcherOf(r.launcher).logs(handle, LOG_TAIL_BYTES) : "";
    },
    /**
     * At start, before any billing: what the store says is active is checked against what really
     * runs. A launch the server lost (it died before recording the handle) fails, and whatever it
     * had started is found by the launch intent and stopped first; a running rental whose server is
     * gone fails with no charge for the time the appliance was down; a launcher no longer configured
     * fails its rentals; an unfinished stop is finished. The rest (still running, due or not;
     * started and still coming up) is picked up by the ticks.
     */
    async reconcile() {
      const ending: Promise<void>[] = [];
      for (const r of repo.active()) {
        const handle = handleOf(r);
        if (!o.launchers[r.launcher]) ending.push(fail(r.id, `the "${r.launcher}" launcher is no longer configured`, false));
        else if (r.status === "stopping") ending.push(stop(r.id, r.stop_reason ?? "user"));
        else if (r.status === "pending" && !handle)
          ending.push(fail(r.id, r.launch_intent ? "the appliance restarted while the launch was under way; what it had started was stopped" : "the server restarted before the launch started"));
        else if (r.status === "running" && handle) {
          const state = await o.launchers[r.launcher]!.probe(handle).catch(() => "starting" as const);
          if (state === "dead") ending.push(fail(r.id, "the notebook server was gone when the appliance restarted", false));
          else o.logger.info("rental found running", { rental: r.id, node: r.node_id });
        }
      }
      await Promise.all(ending);
    },
    async start() {
      await checkLaunchers();
      await this.reconcile();
      timer = setInterval(runTick, tickMs);
      timer.unref();
      void runTick();
    },
    async stop() {
      if (timer) clearInterval(timer);
      timer = null;
      await ticking;
      await Promise.all([...launching.values(), ...stopping.values()]);
    },
    /** One pass now (tests with an injected clock). */
    tick: runTick,
    /** Launchers and what is wrong with each (null: healthy), as last checked. */
    launcherProblems: (): Record<string, string | null> => Object.fromEntries(Object.keys(o.launchers).map((n) => [n, launcherProblems.get(n) ?? null])),
  };
}
