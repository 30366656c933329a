import type { Config } from "../../lib/config";
import type { Logger } from "../../lib/log";
import { VERSION } from "../../lib/version";
import type { NodeGpu, NodeModel, NodeRow, NodeStore } from "../../4-store/nodes";
import { SeenHops, verifyHop, type HopCheck } from "./hop";

// This process as a node of a cluster (issue 45): every appliance on one PostgreSQL store registers
// itself, what it serves and its settings, and beats every NODE_BEAT_MS. A node whose beats have
// not reached the store for NODE_LEASE_MS fences itself — the others count it gone by then, and
// its leases (holds, batch lines, rental ticks) lapse — and takes no new work until a beat gets
// through; a node an operator drains (`appliance nodes drain`) takes none either. A node whose
// prices or limits differ from the live nodes' refuses to start, naming the field. On SQLite
// there is one node, always accepting.

export const NODE_BEAT_MS = 3_000;
export const NODE_LEASE_MS = 15_000;

/** The settings every node of a cluster must share: what a request costs and may do. */
export function sharedSettings(config: Pick<Config, "prices" | "limits">): Record<string, unknown> {
  return { prices: config.prices, limits: config.limits };
}

/** The first field where two nodes' shared settings differ, as `prices.chat_input_per_m: 0.2 here, 0.12 there`; null when equal. */
export function settingsDiff(mine: Record<string, unknown>, theirs: Record<string, unknown>, path = ""): string | null {
  for (const key of [...new Set([...Object.keys(mine), ...Object.keys(theirs)])].sort()) {
    const a = mine[key];
    const b = theirs[key];
    const at = path ? `${path}.${key}` : key;
    if (a && b && typeof a === "object" && typeof b === "object" && !Array.isArray(a) && !Array.isArray(b)) {
      const d = settingsDiff(a as Record<string, unknown>, b as Record<string, unknown>, at);
      if (d) return d;
    } else if (JSON.stringify(a) !== JSON.stringify(b)) return `${at}: ${JSON.stringify(a) ?? "unset"} here, ${JSON.stringify(b) ?? "unset"} on the cluster`;
  }
  return null;
}

export class ClusterMismatch extends Error {}

export interface NodeStatus {
  accepting: boolean;
  /** Why not: fenced (its beats do not reach the store) or draining. */
  reason: "fenced" | "draining" | null;
}

export interface NodeDeps {
  store: NodeStore | null;
  id: string;
  /** The cluster's secret, which signs the hops between nodes (hop.ts); "" on SQLite. */
  secret: string;
  /** How other nodes reach this one; read at each registration (the port is known once listening). */
  url: () => string;
  config: Pick<Config, "prices" | "limits">;
  models: () => NodeModel[];
  gpus: () => Promise<NodeGpu[]>;
  logger: Logger;
  /** Monotonic ms (performance.now), for the fence. */
  now?: () => number;
  beatMs?: number;
  leaseMs?: number;
}

export type ClusterNode = ReturnType<typeof createNode>;

export function createNode(d: NodeDeps) {
  const now = d.now ?? (() => performance.now());
  const beatMs = d.beatMs ?? NODE_BEAT_MS;
  const leaseMs = d.leaseMs ?? NODE_LEASE_MS;
  const settings = sharedSettings(d.config);
  const startedAt = Date.now();
  let lastBeat = now();
  let draining = false;
  let fencedLogged = false;
  let timer: ReturnType<typeof setInterval> | null = null;
  let beating: Promise<void> | null = null;
  /** The models live other nodes serve (model id → its kinds), as of the last beat. */
  let elsewhere = new Map<string, Set<string>>();
  /** The other live nodes taking work, as of the last beat, by id. */
  let others: NodeRow[] = [];
  /** The other live nodes, draining ones too, as of the last beat (a rental's node serves its notebook while draining). */
  let live: NodeRow[] = [];

  async function readOthers(store: NodeStore): Promise<void> {
    const next = new Map<string, Set<string>>();
    const alive = (await store.list()).filter((n) => n.id !== d.id && n.ageMs <= leaseMs).sort((a, b) => (a.id < b.id ? -1 : 1));
    const taking = alive.filter((n) => !n.draining);
    for (const n of taking) for (const m of n.models) next.set(m.id, (next.get(m.id) ?? new Set()).add(m.kind));
    elsewhere = next;
    others = taking;
    live = alive;
  }

  const info = async () => ({ id: d.id, url: d.url(), version: VERSION, startedAt, models: d.models(), gpus: await d.gpus(), settings });

  async function beat(): Promise<void> {
    const store = d.store;
    if (!store) return;
    try {
      const r = await store.beat(d.id, { models: d.models(), gpus: await d.gpus() });
      if (r === null) await store.register(await info()); // the row was removed: this node is back
      draining = r?.draining ?? false;
      lastBeat = now();
      await readOthers(store);
      if (fencedLogged) d.logger.info("node: beats reach the store again; taking new work", { node: d.id });
      fencedLogged = false;
    } catch (e) {
      if (!fencedLogged && now() - lastBeat > leaseMs) {
        fencedLogged = true;
        d.logger.error("node: fenced — its beats have not reached the store for the lease; no new work until they do", { node: d.id, error: (e as Error).message });
      } else d.logger.warn("node: a beat failed", { node: d.id, error: (e as Error).message });
    }
  }

  const seen = new SeenHops();
  /** Hops this node has open to each other node (peersFor). */
  const sending = new Map<string, number>();
  return {
    id: d.id,
    secret: d.secret,
    /** Checks a hop's header addressed to this node and takes it (a second time is a replay). */
    takeHop(value: string, method: string, path: string): HopCheck {
      if (!d.store || !d.secret) return { ok: false, reason: "this appliance is not a node of a cluster" };
      return verifyHop(value, { secret: d.secret, self: d.id, method, path, now: Date.now(), seen });
    },
    /** Whether a hop's header is signed for this node and fresh, without taking it. */
    isHop(value: string, method: string, path: string): boolean {
      return Boolean(d.store && d.secret) && verifyHop(value, { secret: d.secret, self: d.id, method, path, now: Date.now() }).ok;
    },
    /** Refuses a node whose prices or limits differ from a live node's (before it listens). */
    async check(): Promise<void> {
      const store = d.store;
      if (!store) return;
      const others = (await store.list()).filter((n) => n.id !== d.id && n.ageMs <= leaseMs);
      for (const n of others) {
        const diff = settingsDiff(settings, n.settings);
        if (diff) throw new ClusterMismatch(`this node's settings differ from the cluster's (node ${n.id} at ${n.url}): ${diff}; every node of a cluster shares [prices] and [limits]`);
      }
    },
    /** Registers (once listening: its URL names its port) and starts beating. */
    async start(): Promise<void> {
      const store = d.store;
      if (!store) return;
      await store.register(await info());
      lastBeat = now();
      await readOthers(store);
      timer = setInterval(() => void (beating ??= beat().finally(() => (beating = null))), beatMs);
      timer.unref?.();
    },
    /** Whether it takes new work, and why not. */
    status(): NodeStatus {
      if (d.store && now() - lastBeat > leaseMs) return { accepting: false, reason: "fenced" };
      if (draining) return { accepting: false, reason: "draining" };
      return { accepting: true, reason: null };
    },
    /** Whether a live node other than this one serves `model` (of `kind`, when given), as of the last beat. */
    servedElsewhere(model: string, kind?: string): boolean {
      const kinds = elsewhere.get(model);
      return kinds !== undefined && (kind === undefined || kinds.has(kind));
    },
    /**
     * The live nodes to forward a request for `model` to, best first: those with it loaded, then
     * the least busy — its requests in flight per slot as of its last beat, plus the hops this
     * node has sent it since that are still open (so requests between two beats spread out).
     */
    peersFor(model: string): { id: string; url: string }[] {
      const busy = (id: string, m: NodeModel) => (m.in_flight + (sending.get(id) ?? 0)) / Math.max(1, m.slots ?? 1);
      return others
        .flatMap((n) => n.models.filter((m) => m.id === model).map((m) => ({ id: n.id, url: n.url, m })))
        .sort((a, b) => Number(b.m.loaded) - Number(a.m.loaded) || busy(a.id, a.m) - busy(b.id, b.m) || (a.id < b.id ? -1 : 1))
        .map(({ id, url }) => ({ id, url }));
    },
    /** A hop to node `id` opened; the function closes it (its answer ended, or it failed). */
    sent(id: string): () => void {
      sending.set(id, (sending.get(id) ?? 0) + 1);
      let open = true;
      return () => {
        if (!open) return;
        open = false;
        const n = (sending.get(id) ?? 1) - 1;
        if (n > 0) sending.set(id, n);
        else sending.delete(id);
      };
    },
    /** The other live nodes taking work (id order), as of the last beat: their models and GPUs. */
    others: (): readonly NodeRow[] => others,
    /** Node `id` if it is another live node, draining or not, as of the last beat (where a rental it launched is stopped and served). */
    peer: (id: string): NodeRow | null => live.find((n) => n.id === id) ?? null,
    /** One beat now (tests; `appliance nodes drain` is seen at the next one otherwise). */
    beat: () => (beating ??= beat().finally(() => (beating = null))),
    stop(): void {
      if (timer) clearInterval(timer);
      timer = null;
    },
  };
}
