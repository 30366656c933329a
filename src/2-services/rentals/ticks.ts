import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { ACTIVE, type RentalRow, type RentalStore, type StopReason } from "../../4-store/rentals";
import { minutesRun, minutesStarted } from "../billing/minutes";
import { basePathOf } from "./access";
import type { LaunchHandle, LaunchIntent } from "./launchers/types";
import { homeOfRental, type RentalCluster } from "./cluster";
import type { LauncherHealth } from "./health";
import type { RentalsOptions } from "./options";

// The rentals service's ticks (service.ts: the state machine and its API): launches, per-minute
// billing, probes, auto-stop, stops, reconciliation, and the leases on the store that say which
// process runs a rental's ticks.
//
// Several processes on one store (PostgreSQL, issue 44): a rental's ticks (its launch's probe, its
// billing, its probes, its auto-stop, its stop) are run by the process holding its lease in the
// store (lease_owner, lease_until by the database's clock). The creating process takes it with
// the row; every tick renews the leases this process holds and takes those that lapsed (their
// process was killed), and a heartbeat renews them while a tick or a launch takes long. A rental
// this process takes over is reconciled first, as a restart would (`reconcileOne`). What stays in
// memory is this process's own work and throttles: the launches and stops it runs (`launching`,
// `stopping`: what a stop here waits for), when it last probed or failed to stop a rental it holds
// (a process that takes one over probes and retries at once), its launchers' health (health.ts), and
// a view of the active rentals for synchronous readers (service.ts, `activeNow`).

/** How often a running rental's server is probed (a dead one fails and stops billing). */
const PROBE_EVERY_MS = 5000;

/** How long after a failed stop (the Docker daemon did not answer) the ticks try it again. */
const STOP_RETRY_MS = 30_000;

/** What the ticks share with the rest of the service (service.ts). */
export interface TicksContext {
  o: Pick<RentalsOptions, "meter" | "clock" | "logger" | "dataDir" | "nodes" | "launchers" | "beforeLaunch" | "readyTimeoutMs" | "access">;
  store: RentalStore;
  owner: string;
  leaseMs: number;
  tickMs: number;
  idempotencyMs: number;
  cluster: RentalCluster;
  /** The leases this process may take: its node's rentals on a shared store; any on its own (null). */
  onNode: string | null;
  health: LauncherHealth;
  /** Reads the active rentals into the view synchronous readers see. */
  refreshActive: () => Promise<readonly RentalRow[]>;
  /** After a change made here: the view follows at once. */
  changed: () => void;
}

export const handleOf = (r: RentalRow): LaunchHandle | null => (r.handle ? (JSON.parse(r.handle) as LaunchHandle) : null);
const intentOf = (r: RentalRow): LaunchIntent | null => (r.launch_intent ? (JSON.parse(r.launch_intent) as LaunchIntent) : null);

export type RentalTicks = ReturnType<typeof createRentalTicks>;

export function createRentalTicks(c: TicksContext) {
  const { o, store, owner, leaseMs, tickMs, idempotencyMs, cluster, onNode, health, refreshActive, changed } = c;
  const launcherOf = health.launcherOf;
  const launching = new Map<string, Promise<void>>();
  const stopping = new Map<string, Promise<void>>();
  const lastProbe = new Map<string, number>();
  /** When a rental's stop last failed (launcher unreachable): retried every STOP_RETRY_MS, not every tick. */
  const stopFailedAt = new Map<string, number>();
  /** The rentals whose lease this process held at its last claim, or took since (created, claimed to stop). */
  const held = new Set<string>();
  let timer: ReturnType<typeof setInterval> | null = null;
  let heartbeat: ReturnType<typeof setInterval> | null = null;

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
    if (health.due(now)) await health.check();
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

  /**
   * At start, before any billing: every active rental whose lease this process can take is
   * reconciled (`reconcileOne`) with what really runs; those another live process holds are its.
   */
  async function reconcile() {
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
  }

  return {
    reconcile,
    /** One pass now. */
    runTick,
    /** A rental created here: this process holds its lease, and its launch begins. */
    launched(r: RentalRow) {
      held.add(r.id);
      void launch(r);
    },
    stop,
    stopElsewhere,
    holds,
    /** Starts the ticks, and the heartbeat of this process's leases, with a first pass now. */
    begin() {
      timer = setInterval(runTick, tickMs);
      timer.unref();
      // Renews this process's leases while a tick or a launch takes long (a tick renews them too).
      heartbeat = setInterval(() => void store.renewLeases(owner, leaseMs).catch((e) => o.logger.warn("rental lease renewal failed", { error: (e as Error).message })), Math.max(100, Math.floor(leaseMs / 3)));
      heartbeat.unref();
      void runTick();
    },
    /** The service's stop: the ticks end, this process's launches and stops finish, its leases go back. */
    async end() {
      if (timer) clearInterval(timer);
      if (heartbeat) clearInterval(heartbeat);
      timer = heartbeat = null;
      await ticking;
      await Promise.all([...launching.values(), ...stopping.values()]);
      held.clear();
      await store.releaseLeases(owner).catch((e) => o.logger.warn("rental leases not handed back", { error: (e as Error).message }));
    },
  };
}
