import { mkdirSync } from "node:fs";
import { join } from "node:path";
import type { Principal } from "../accounts/types";
import { ApiError } from "../../lib/errors";
import type { Clock } from "../../lib/clock";
import { newId, randomBase62 } from "../../lib/ids";
import type { Logger } from "../../lib/log";
import { ACTIVE, type RentalRow, type RentalStore, type StopReason } from "../../4-store/rentals";
import type { Meter } from "../billing/meter";
import { costOfMinutes, fromMicros, minutesRun, minutesStarted, toMicros } from "../billing/minutes";
import { validateRental, type CreateRental, type RentalRequest } from "./request";
import { rentalObject } from "./view";
import { isRentable, type GpuEntry, type RentableNode, type RentalNode } from "./inventory";
import { basePathOf, type RentalAccess } from "./access";
import type { LaunchHandle, LaunchIntent, Launcher, ProxyTarget } from "./launchers/types";
import { clusterGpus, homeOfGpu, homeOfRental, LOCAL_CLUSTER, nodeUnreachable, type RentalCluster, type RentalHome } from "./cluster";

// The rental state machine (spec §2.3, §3 Rental): pending → running → stopping → stopped, or
// stopping → failed. It knows launchers only through their interface, and bills per started minute
// from `running_at` at the price fixed at creation (spec §8), charged as each minute starts, in the
// same transaction that records it. Everything is in the store, so a restarted server reconciles
// what it finds (`reconcile`): the launch intent is written before a launcher starts anything, and
// a rental holds its node (pending, running, stopping) until what it started is known to be gone.
//
// Several processes on one store (PostgreSQL, issue 44): a rental's ticks (its launch's probe, its
// billing, its probes, its auto-stop, its stop) are run by the process holding its lease in the
// store (lease_owner, lease_until by the database's clock). The creating process takes it with
// the row; every tick renews the leases this process holds and takes those that lapsed (their
// process was killed), and a heartbeat renews them while a tick or a launch takes long. A rental
// this process takes over is reconciled first, as a restart would (`reconcileOne`). What stays in
// memory is this process's own work and throttles: the launches and stops it runs (`launching`,
// `stopping`: what a stop here waits for), when it last probed or failed to stop a rental it holds
// (a process that takes one over probes and retries at once), its launchers' health, and a view of
// the active rentals for synchronous readers (`activeNow`).
//
// A cluster (issue 45, cluster.ts): each rental records the node that launched it, and only that
// node's process takes its lease (the lease owner is the node's id), so a rental is billed by its
// own node alone and nobody bills it while that node is down; the node ends it at its next start.

export interface RentalsOptions {
  store: RentalStore;
  /**
   * Who holds this service's leases. One server per SQLite data dir: the default, "local", takes
   * its leases back at once when it restarts. On PostgreSQL, one name per process.
   */
  owner?: string;
  /** How long a lease lasts without renewal: how soon another process takes over a dead one's rentals. */
  leaseMs?: number;
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
  /** This appliance as a node of a cluster (cluster.ts); default: one node on its own. */
  cluster?: RentalCluster;
}

export type RentalsService = ReturnType<typeof createRentalsService>;

/** How often a running rental's server is probed (a dead one fails and stops billing). */
const PROBE_EVERY_MS = 5000;

/** How long after a failed stop (the Docker daemon did not answer) the ticks try it again. */
const STOP_RETRY_MS = 30_000;

/** How often launchers are checked (an offline one's nodes are not listed or rentable). */
const HEALTH_EVERY_MS = 30_000;

/** A rental's lease: 15 ticks of 1 s; another process takes over a dead one's rentals 15 s after its last renewal. */
export const LEASE_MS = 15_000;

/** How much of a rental's log GET /api/v1/rentals/{id}/logs returns (the end of it). */
export const LOG_TAIL_BYTES = 256 * 1024;

export function createRentalsService(o: RentalsOptions) {
  const store = o.store;
  const owner = o.owner ?? "local";
  const cluster = o.cluster ?? LOCAL_CLUSTER;
  /** The leases this process may take: its node's rentals on a shared store; any on its own. */
  const onNode = cluster.shared ? cluster.self : null;
  const leaseMs = o.leaseMs ?? LEASE_MS;
  const tickMs = o.tickMs ?? 1000;
  const idempotencyMs = o.idempotencyMs ?? 86_400_000;
  const launching = new Map<string, Promise<void>>();
  const stopping = new Map<string, Promise<void>>();
  const lastProbe = new Map<string, number>();
  /** When a rental's stop last failed (launcher unreachable): retried every STOP_RETRY_MS, not every tick. */
  const stopFailedAt = new Map<string, number>();
  /** The rentals whose lease this process held at its last claim, or took since (created, claimed to stop). */
  const held = new Set<string>();
  /** The active rentals as last read (each tick, each change made here, each placement through `refreshActive`). */
  let activeView: readonly RentalRow[] = [];
  let timer: ReturnType<typeof setInterval> | null = null;
  let heartbeat: ReturnType<typeof setInterval> | null = null;

  const launcherOf = (name: string) => {
    const l = o.launchers[name];
    if (!l) throw new Error(`no launcher "${name}" is configured`);
    return l;
  };
  const handleOf = (r: RentalRow): LaunchHandle | null => (r.handle ? (JSON.parse(r.handle) as LaunchHandle) : null);
  const intentOf = (r: RentalRow): LaunchIntent | null => (r.launch_intent ? (JSON.parse(r.launch_intent) as LaunchIntent) : null);

  /** Reads the active rentals into the view synchronous readers see. */
  let reads = 0;
  let shown = 0;
  async function refreshActive(): Promise<readonly RentalRow[]> {
    const n = ++reads;
    const rows = await store.active();
    // Reads that overlap: an older one finishing last does not replace a newer one.
    if (n > shown) {
      shown = n;
      activeView = rows;
    }
    return rows;
  }
  /** After a change made here: the view follows at once (a failed read leaves it to the next tick). */
  const changed = () => void refreshActive().catch(() => {});

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

  /** The rental as the API shows it; the public base is read each time (the port is known once bound). */
  const toObject = (r: RentalRow) => rentalObject(r, typeof o.publicBase === "function" ? o.publicBase() : (o.publicBase ?? ""));

  async function owned(p: Principal, id: string): Promise<RentalRow> {
    const r = await store.byId(id);
    if (!r || r.key_id !== p.keyId) throw new ApiError("not_found", `No such rental: ${id}`, { param: "rental_id" });
    return r;
  }

  /**
   * The checks of a creation, in the store's transaction (after the Idempotency-Key's): the node,
   * the key's active rentals, the node free and offered, the balance (read just before: the ledger
   * is asynchronous, a transaction is not) for the first minute. Throws the refusal, or gives the row.
   */
  function admission(p: Principal, req: RentalRequest, balance: number, now: number) {
    return (found: { activeForKey: number; nodeTaken: boolean }) => {
      const node = o.nodes().find((n) => n.node_id === req.node_id);
      if (!node) throw new ApiError("node_not_found", `no GPU node ${req.node_id}`, { param: "node_id" });
      if (found.activeForKey >= p.maxActiveRentals)
        throw new ApiError("max_active_rentals_reached", `this key already has ${p.maxActiveRentals} active rental(s), its max_active_rentals; stop one first`);
      if (found.nodeTaken || !rentable().some((n) => n.node_id === node.node_id)) {
        const why = found.nodeTaken ? "it is rented" : launcherProblems.get(node.launcher) ? "it is offline" : "it is not offered (reserved, unpriced or offline)";
        throw new ApiError("node_unavailable", `node ${node.node_id} is not available: ${why}; GET /api/v1/gpus lists the free ones`, { param: "node_id" });
      }
      const price = toMicros(node.price_per_hour!); // rentable() above: priced
      if (balance < costOfMinutes(price, 1))
        throw new ApiError("insufficient_balance", `a rental of this node needs at least ${fromMicros(costOfMinutes(price, 1))} for its first minute; the balance is ${fromMicros(balance)}`);
      return { id: newId("rent_"), key_id: p.keyId, account_id: p.accountId, node_id: node.node_id, type: req.type, price_per_hour_micros: price, hours: req.hours, token: randomBase62(40), launcher: node.launcher, created_at: now, cluster_node: cluster.self };
    };
  }

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
      await store.setIntent(r.id, JSON.stringify(launcher.intent(spec)));
      const handle = await launcher.start(spec);
      await store.setHandle(r.id, JSON.stringify(handle));
      o.logger.info("rental launched", { rental: r.id, node: r.node_id, launcher: launcher.name });
    })().catch((e) => void fail(r.id, `the launch failed: ${(e as Error).message}`)); // not awaited here: the stop waits for this launch
    launching.set(r.id, work);
    return work.finally(() => launching.delete(r.id));
  }

  /** A pending rental's server answers: running from now, first minute charged. */
  async function started(r: RentalRow) {
    const now = o.clock.now();
    const expires = r.hours === null ? null : now + Math.round(r.hours * 3_600_000);
    if (!(await store.markRunning(r.id, now, expires))) return;
    o.logger.info("rental running", { rental: r.id, node: r.node_id });
    await bill(r.id, now);
  }

  /** Each rental's billing in flight here: its charges run one after another (each reads what the last billed). */
  const billing = new Map<string, Promise<boolean>>();

  /**
   * Charges every minute of rental `id` started by `t` (or up to `upTo` minutes). Resolves false
   * when the balance cannot pay the next one (nothing is charged then; the caller stops the
   * rental). One rental's charges are serialised here, and each reads the minutes billed so far
   * from the store; the ledger charges only from those minutes, so a charge computed from a stale
   * count (another process's charge came first) is refused rather than billed twice.
   */
  function bill(id: string, t: number, upTo?: (r: RentalRow) => number): Promise<boolean> {
    const run = async (): Promise<boolean> => {
      for (let attempt = 0; attempt < 3; attempt++) {
        const r = await store.byId(id);
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

  /** Bills a running rental up to `billTo` (null: nothing more), then moves it to stopping. */
  async function toStopping(r: RentalRow, reason: StopReason, opts: { failure?: string; billTo?: number | null }) {
    const now = o.clock.now();
    if (reason === "error") o.logger.warn("rental failed", { rental: r.id, reason: opts.failure });
    const billTo = opts.billTo === null ? null : Math.min(now, opts.billTo ?? now, reason === "auto_stop" && r.expires_at !== null ? r.expires_at : now);
    if (r.status === "running" && billTo !== null) await bill(r.id, billTo, (x) => minutesRun(x.running_at!, billTo));
    await store.markStopping(r.id, { at: now, reason, ...(opts.failure === undefined ? {} : { failure: opts.failure }) });
  }

  /**
   * Stops a rental (idempotent): billing ends, the process/container goes, then the GPU is free. The
   * rental is `stopping` (its node still taken) until the launcher has stopped what it started —
   * found by its handle or, for a launch that never recorded one, by its intent — and only then
   * `stopped` (`failed` for reason `error`). A stop that throws (the Docker daemon does not answer)
   * leaves it `stopping` and the ticks try again: the GPU is never listed free while a process may
   * still hold it. `billTo`: bill to that time (at most now); null: bill nothing more. Run by the
   * process holding the rental's lease.
   */
  function stop(id: string, reason: StopReason, opts: { failure?: string; billTo?: number | null } = {}): Promise<void> {
    const inFlight = stopping.get(id);
    if (inFlight) return inFlight;
    const work = (async () => {
      await launching.get(id); // a launch in progress finishes first, so its process is known
      let r = await store.byId(id);
      if (!r || !ACTIVE.includes(r.status)) return;
      if (r.status !== "stopping") {
        await toStopping(r, reason, opts);
        r = (await store.byId(id))!;
        changed();
      }
      await release(r);
      const end = r.stop_reason === "auto_stop" && r.expires_at !== null ? Math.min(o.clock.now(), r.expires_at) : o.clock.now();
      await store.markEnded(id, end);
      lastProbe.delete(id);
      stopFailedAt.delete(id);
      held.delete(id);
      changed();
      if (r.stop_reason !== "error") o.logger.info("rental stopped", { rental: id, reason: r.stop_reason });
    })().catch((e) => {
      stopFailedAt.set(id, o.clock.now());
      o.logger.error("rental stop failed; its node stays taken until it succeeds", { rental: id, error: (e as Error).message });
    });
    stopping.set(id, work);
    return work.finally(() => stopping.delete(id));
  }

  /**
   * A stop asked of a process that does not hold the rental's lease (another process runs its
   * ticks, on PostgreSQL): billing ends here, the rental is `stopping`, and the holder's next tick
   * stops what its launch started.
   */
  async function stopElsewhere(id: string, reason: StopReason, billTo?: null) {
    const r = await store.byId(id);
    if (!r || (r.status !== "pending" && r.status !== "running")) return;
    await toStopping(r, reason, billTo === null ? { billTo } : {});
    changed();
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

  /**
   * A rental this process has just taken the lease of — at its start, or from a process that
   * stopped renewing it — checked against what really runs, as a restart finds it. A launch whose
   * process is gone (the handle never recorded) fails, and whatever it had started is found by the
   * launch intent and stopped first; a running rental whose server is gone fails with no charge for
   * the time nobody watched it; a launcher no longer configured fails its rentals; an unfinished
   * stop is finished. The rest (still running, due or not; started and still coming up) is picked
   * up by the ticks. Resolves once it is decided, with the ending it started, if any.
   */
  async function reconcileOne(r: RentalRow, after: "restart" | "takeover"): Promise<{ ending: Promise<void> } | null> {
    const handle = handleOf(r);
    const restart = after === "restart";
    if (!o.launchers[r.launcher]) return { ending: fail(r.id, `the "${r.launcher}" launcher is no longer configured`, false) };
    if (r.status === "stopping") return { ending: stop(r.id, r.stop_reason ?? "user") };
    if (r.status === "pending" && !handle) {
      const why = r.launch_intent
        ? `${restart ? "the appliance restarted" : "the process launching it stopped"} while the launch was under way; what it had started was stopped`
        : restart
          ? "the server restarted before the launch started"
          : "the process that created it stopped before the launch started";
      return { ending: fail(r.id, why) };
    }
    if (r.status === "running" && handle) {
      const state = await o.launchers[r.launcher]!.probe(handle).catch(() => "starting" as const);
      if (state === "dead") return { ending: fail(r.id, `the notebook server was gone when ${restart ? "the appliance restarted" : "another process took the rental over"}`, false) };
      o.logger.info(restart ? "rental found running" : "rental taken over", { rental: r.id, node: r.node_id });
    }
    return null;
  }

  /**
   * Takes the leases of the active rentals free or lapsed and renews this process's own: the rows
   * it holds now, and those of them it did not hold before. Work of its own in flight (a launch, a
   * stop) is never "new": it began here.
   */
  async function claim(): Promise<{ rows: RentalRow[]; taken: RentalRow[] }> {
    const rows = await store.claimActive(owner, leaseMs, onNode);
    const taken = rows.filter((r) => !held.has(r.id) && !launching.has(r.id) && !stopping.has(r.id));
    const now = new Set(rows.map((r) => r.id));
    for (const id of held) if (!now.has(id) && !launching.has(id) && !stopping.has(id)) held.delete(id);
    for (const id of now) held.add(id);
    return { rows, taken };
  }

  /** One pass over the rentals this process holds: launches answer, minutes are charged, due rentals stop. */
  async function tick() {
    const now = o.clock.now();
    if (now - lastHealthCheck >= HEALTH_EVERY_MS) await checkLaunchers();
    const { rows, taken } = await claim();
    await refreshActive();
    const fresh = new Set(taken.map((r) => r.id));
    for (const r of taken) {
      try {
        await reconcileOne(r, "takeover");
      } catch (e) {
        o.logger.error("rental takeover failed", { rental: r.id, error: (e as Error).message });
      }
    }
    await stopRevoked();
    for (const r of rows) {
      if (fresh.has(r.id) || launching.has(r.id) || stopping.has(r.id)) continue;
      try {
        await tickOne(r, now);
      } catch (e) {
        o.logger.error("rental tick failed", { rental: r.id, error: (e as Error).message });
      }
    }
    await store.forgetRequestsBefore(now - idempotencyMs);
  }

  /**
   * A revoked key's rentals stop, billed to the moment of revocation (issue 23: they ran and billed
   * on). Read from the store, so a key revoked by the CLI or the console, in this process or
   * another, is found at the next tick (by the process holding the rental). A rotated key's rentals
   * moved to its successor when it was rotated (accounts service), so they are not among these.
   */
  async function stopRevoked() {
    for (const r of await store.onRevokedKeys()) {
      if (stopping.has(r.id) || !held.has(r.id)) continue;
      o.logger.info("rental's key revoked", { rental: r.id });
      void stop(r.id, "key_revoked", { billTo: r.revoked_at });
    }
  }

  async function tickOne(r: RentalRow, now: number) {
    const handle = handleOf(r);
    if (r.status === "stopping") {
      // A stop that failed, one another process asked for, or one the server did not finish (restart).
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

  /** Whether this process may run the rental's stop: it holds the lease, or takes it now. */
  async function holds(id: string): Promise<boolean> {
    if (!(await store.claim(id, owner, leaseMs, onNode))) return false;
    held.add(id);
    return true;
  }

  return {
    /** GET /api/v1/gpus: nodes online, priced and free. */
    async gpus(): Promise<RentableNode[]> {
      const taken = new Set((await refreshActive()).map((r) => r.node_id));
      return rentable().filter((n) => !taken.has(n.node_id));
    },
    /**
     * The active rentals as last read, for callers that cannot wait (model placement asks whether a
     * GPU is rented): read again at every tick (tickMs), after every change this process makes, and
     * by `refreshActive` (each placement reads it first); a rental another process made or ended
     * shows here by this process's next tick.
     */
    activeNow: (): readonly RentalRow[] => activeView,
    /** GET /api/v1/gpus: this node's free GPUs and, on a cluster, those the other live nodes offer (cluster.ts). */
    async offered(): Promise<GpuEntry[]> {
      const active = await refreshActive();
      const taken = new Set(active.map((r) => r.node_id));
      return clusterGpus(rentable().filter((n) => !taken.has(n.node_id)), active, cluster);
    },
    /** The node a rental of GPU node `gpu` is created on (cluster.ts). */
    homeOfGpu: async (gpu: string): Promise<RentalHome> => homeOfGpu(gpu, o.nodes(), await refreshActive(), cluster),
    /**
     * The node that runs the key's rental `id` (404 for another key's); `activeOnly`: an ended
     * rental is here (the store has all of it), only what still runs is another node's affair.
     */
    async homeOf(p: Principal, id: string, activeOnly: boolean): Promise<RentalHome> {
      const r = await owned(p, id);
      return activeOnly && !ACTIVE.includes(r.status) ? { here: true } : homeOfRental(r, cluster);
    },
    refreshActive,
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
      const req = validateRental(body, o.maxHours);
      const balance = await o.meter.balance(p.accountId);
      const now = o.clock.now();
      const bodyHash = new Bun.CryptoHasher("sha256").update(JSON.stringify(req)).digest("hex");
      const out = await store.create({
        keyId: p.keyId,
        nodeId: req.node_id,
        now,
        idempotency: idempotencyKey === null ? null : { key: idempotencyKey, bodyHash, ttlMs: idempotencyMs },
        admit: admission(p, req, balance, now),
        lease: { owner, ms: leaseMs },
      });
      if ("reused" in out)
        throw new ApiError("idempotency_key_reused", "this Idempotency-Key was used with a different body; use a new key for a new rental", { param: "Idempotency-Key" });
      if (out.created) {
        held.add(out.row.id);
        void launch(out.row);
        changed();
      }
      return toObject(out.row);
    },
    get: async (p: Principal, id: string) => toObject(await owned(p, id)),
    /**
     * Where the proxy reaches a running, proxied rental's notebook server, with the token it
     * requires; null for an unknown, not (yet or any more) running, or direct rental. Whoever
     * presents the token may use the notebook (spec §2.3: the token is the notebook's credential),
     * so no API key is asked for here.
     */
    async proxyTarget(id: string): Promise<(ProxyTarget & { token: string; home: RentalHome }) | null> {
      const r = await store.byId(id);
      if (!r || r.status !== "running") return null;
      const proxy = handleOf(r)?.proxy;
      return proxy ? { ...proxy, token: r.token, home: homeOfRental(r, cluster) } : null;
    },
    list: async (p: Principal, limit = 100) => ({ object: "list" as const, data: (await store.byKey(p.keyId, limit)).map(toObject) }),
    /** An account's rentals (every key's), newest first, with the key each belongs to (the console). */
    ofAccount: async (accountId: string, limit = 100) => (await store.byAccount(accountId, limit)).map((r) => ({ keyId: r.key_id, rental: toObject(r) })),
    /** Whose rental `id` is (key and account), or null: the console's ownership check. */
    async ownerOf(id: string): Promise<{ key_id: string; account_id: string } | null> {
      const r = await store.byId(id);
      return r ? { key_id: r.key_id, account_id: r.account_id } : null;
    },
    /** What every rental billed, and how many are active (the metrics' scrape). */
    totals: () => store.totals(),
    async remove(p: Principal, id: string) {
      const r = await owned(p, id);
      if (ACTIVE.includes(r.status)) {
        const home = homeOfRental(r, cluster);
        // Another node's rental (the API forwards its stop there; the console's comes here): that
        // node finishes the stop at its next tick, and bills it, as it alone does.
        if (!home.here) {
          if (!home.peer) throw nodeUnreachable(home, `rental ${id}`);
          await stopElsewhere(id, "user", null);
        }
        // Another live process runs this rental's ticks: it finishes the stop at its next tick.
        else if (await holds(id)) await stop(id, "user");
        else await stopElsewhere(id, "user");
      }
      return toObject((await store.byId(id))!);
    },
    /** The tail of the notebook server's stdout/stderr (owner only), also after it stopped. */
    async logs(p: Principal, id: string): Promise<string> {
      const r = await owned(p, id);
      const home = homeOfRental(r, cluster);
      // The log is on the disk of the node that launched it (the API forwards there while it is live).
      if (!home.here) throw nodeUnreachable(home, `rental ${id} (its log with it)`, home.peer ? "keeps its log" : undefined);
      const handle = handleOf(r);
      return handle ? launcherOf(r.launcher).logs(handle, LOG_TAIL_BYTES) : "";
    },
    /**
     * At start, before any billing: every active rental whose lease this process can take is
     * reconciled (`reconcileOne`) with what really runs; those another live process holds are its.
     */
    async reconcile() {
      // On a cluster, what this node's previous process still held (a clean stop hands its leases
      // back) was held by a process that died: nobody billed it since that process's last tick. It
      // ends now, failed, billed no further, and whatever runs of it is stopped.
      const orphans = new Set(cluster.shared ? (await store.active()).filter((r) => r.lease_owner === owner && r.status !== "stopping" && homeOfRental(r, cluster).here).map((r) => r.id) : []);
      const { rows } = await claim();
      const ending: Promise<void>[] = [];
      for (const r of rows) {
        if (launching.has(r.id) || stopping.has(r.id)) continue;
        const why = `node ${cluster.self}, which ran it, went down (its process ended without handing it back); billing ended at that node's last tick and what it had started is stopped now that the node is back`;
        const end = orphans.has(r.id) ? { ending: fail(r.id, why, false) } : await reconcileOne(r, "restart");
        if (end) ending.push(end.ending);
      }
      await Promise.all(ending);
      await refreshActive();
    },
    async start() {
      await refreshActive();
      await checkLaunchers();
      await this.reconcile();
      timer = setInterval(runTick, tickMs);
      timer.unref();
      // Renews this process's leases while a tick or a launch takes long (a tick renews them too).
      heartbeat = setInterval(() => void store.renewLeases(owner, leaseMs).catch((e) => o.logger.warn("rental lease renewal failed", { error: (e as Error).message })), Math.max(100, Math.floor(leaseMs / 3)));
      heartbeat.unref();
      void runTick();
    },
    /** Stops the ticks, waits for this process's launches and stops, and hands its leases back. */
    async stop() {
      if (timer) clearInterval(timer);
      if (heartbeat) clearInterval(heartbeat);
      timer = heartbeat = null;
      await ticking;
      await Promise.all([...launching.values(), ...stopping.values()]);
      held.clear();
      await store.releaseLeases(owner).catch((e) => o.logger.warn("rental leases not handed back", { error: (e as Error).message }));
    },
    /** One pass now (tests with an injected clock). */
    tick: runTick,
    /** Launchers and what is wrong with each (null: healthy), as last checked. */
    launcherProblems: (): Record<string, string | null> => Object.fromEntries(Object.keys(o.launchers).map((n) => [n, launcherProblems.get(n) ?? null])),
  };
}
