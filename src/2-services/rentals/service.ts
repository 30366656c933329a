import type { Principal } from "../accounts/types";
import { ApiError } from "../../lib/errors";
import { newId, randomBase62 } from "../../lib/ids";
import { ACTIVE, type RentalRow } from "../../4-store/rentals";
import { costOfMinutes, fromMicros, toMicros } from "../billing/minutes";
import { validateRental, type CreateRental, type RentalRequest } from "./request";
import { rentalObject } from "./view";
import type { GpuEntry, RentableNode } from "./inventory";
import type { ProxyTarget } from "./launchers/types";
import { clusterGpus, homeOfGpu, homeOfRental, LOCAL_CLUSTER, nodeUnreachable, type RentalHome } from "./cluster";
import type { RentalsOptions } from "./options";
import { createLauncherHealth } from "./health";
import { createRentalTicks, handleOf } from "./ticks";

// The rental state machine (spec §2.3, §3 Rental): pending → running → stopping → stopped, or
// stopping → failed. It knows launchers only through their interface, and bills per started minute
// from `running_at` at the price fixed at creation (spec §8), charged as each minute starts, in the
// same transaction that records it. Everything is in the store, so a restarted server reconciles
// what it finds (`reconcile`): the launch intent is written before a launcher starts anything, and
// a rental holds its node (pending, running, stopping) until what it started is known to be gone.
//
// Several processes on one store (PostgreSQL, issue 44): a rental's ticks are run by the process
// holding its lease in the store (ticks.ts). The service is built from its options (options.ts);
// its launchers' health and what is rentable are in health.ts.
//
// A cluster (issue 45, cluster.ts): each rental records the node that launched it, and only that
// node's process takes its lease (the lease owner is the node's id), so a rental is billed by its
// own node alone and nobody bills it while that node is down; the node ends it at its next start.

export type { RentalsOptions } from "./options";

export type RentalsService = ReturnType<typeof createRentalsService>;

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
  /** The active rentals as last read (each tick, each change made here, each placement through `refreshActive`). */
  let activeView: readonly RentalRow[] = [];

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

  const health = createLauncherHealth(o);
  const { launcherOf, rentable } = health;
  const ticks = createRentalTicks({ o, store, owner, leaseMs, tickMs, idempotencyMs, cluster, onNode, health, refreshActive, changed });

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
        const why = found.nodeTaken ? "it is rented" : health.problem(node.launcher) ? "it is offline" : "it is not offered (reserved, unpriced or offline)";
        throw new ApiError("node_unavailable", `node ${node.node_id} is not available: ${why}; GET /api/v1/gpus lists the free ones`, { param: "node_id" });
      }
      const price = toMicros(node.price_per_hour!); // rentable() above: priced
      if (balance < costOfMinutes(price, 1))
        throw new ApiError("insufficient_balance", `a rental of this node needs at least ${fromMicros(costOfMinutes(price, 1))} for its first minute; the balance is ${fromMicros(balance)}`);
      return { id: newId("rent_"), key_id: p.keyId, account_id: p.accountId, node_id: node.node_id, type: req.type, price_per_hour_micros: price, hours: req.hours, token: randomBase62(40), launcher: node.launcher, created_at: now, cluster_node: cluster.self };
    };
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
        ticks.launched(out.row);
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
          await ticks.stopElsewhere(id, "user", null);
        }
        // Another live process runs this rental's ticks: it finishes the stop at its next tick.
        else if (await ticks.holds(id)) await ticks.stop(id, "user");
        else await ticks.stopElsewhere(id, "user");
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
    /** At start, before any billing: the active rentals this process can take, checked against what really runs (ticks.ts). */
    reconcile: ticks.reconcile,
    async start() {
      await refreshActive();
      await health.check();
      await this.reconcile();
      ticks.begin();
    },
    /** Stops the ticks, waits for this process's launches and stops, and hands its leases back. */
    stop: ticks.end,
    /** One pass now (tests with an injected clock). */
    tick: ticks.runTick,
    /** Launchers and what is wrong with each (null: healthy), as last checked. */
    launcherProblems: health.problems,
  };
}
