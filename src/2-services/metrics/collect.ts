import type { Registry } from "../../3-engines/registry";
import type { BatchCounts } from "../../4-store/batches";
import type { RentalTotals } from "../../4-store/rentals";
import type { UsageReports } from "../../4-store/reports";
import type { NodeRow } from "../../4-store/nodes";
import { VERSION } from "../../lib/version";
import type { Metrics } from "./metrics";
import { CONTENT_TYPE, MetricsRegistry } from "./registry";

// What is read at scrape time: engine slots and queues, batch and rental state, and the totals
// kept in the store (credits consumed, images generated, rental minutes). Every query here is
// cheap on a large store: pending lines through their partial index, finished lines from the
// per-batch counters, and the usage table only past the last row already summed (usage rows
// are never updated or deleted, and their ids only grow).
//
// On a PostgreSQL store (a cluster, issue 45) each node answers its own /metrics. What this process
// alone measures — HTTP requests, chat tokens and latencies, models, slots, devices, the process —
// carries a `node` label with its node id, so a Prometheus scraping every node sums or compares
// them without clashes; what is read from the shared store — batches, rentals, credits, images —
// is the cluster's total, unlabelled and the same on every node (sum it over one node, not all).
// On SQLite (one node) nothing is labelled.

export type ScrapeDeps = {
  registry: Registry;
  metrics: Metrics;
  rentals: { totals(): Promise<RentalTotals> };
  usage: UsageReports;
  batches: { counts(): Promise<BatchCounts> };
  /** The store's kind: "postgres" labels node-local series with the node. */
  store?: { kind: string };
  /** This node, and the other live nodes as of its last beat (their models name the cluster's images). */
  node?: { id: string; others(): readonly NodeRow[] };
};

const BATCH_STATUSES = ["validating", "in_progress", "finalizing", "completed", "failed", "expired", "cancelling", "cancelled"] as const;
const KEY_KINDS = ["free", "premium"] as const;

interface StoreTotals {
  /** The last summing: scrapes at once take turns, so no row is summed twice. */
  turn: Promise<unknown>;
  usageAfter: number;
  costMicros: Map<string, number>;
  images: Map<string, number>;
}

const totalsOf = new WeakMap<Metrics, StoreTotals>();

/** The whole exposition: the process's own metrics, then what the scrape reads. */
export async function scrape(deps: ScrapeDeps): Promise<string> {
  const local = localLabels(deps);
  const models = new MetricsRegistry();
  collectModels(models, deps.registry);
  await collectDevices(models, deps.registry);
  const store = new MetricsRegistry();
  collectStore(store, deps, await deps.rentals.totals(), await usageTotals(deps), await deps.batches.counts());
  const proc = new MetricsRegistry();
  collectProcess(proc);
  return deps.metrics.registry.render(local) + models.render(local) + store.render() + proc.render(local);
}

/** The labels of this node's own series: `node` on a cluster, none on SQLite. */
function localLabels(deps: ScrapeDeps): Record<string, string> {
  return deps.store?.kind === "postgres" && deps.node ? { node: deps.node.id } : {};
}

/**
 * The models whose images are counted under their own id: this node's, and on a cluster every
 * live node's (so each node labels the shared totals alike), with their kinds.
 */
function clusterModels(deps: ScrapeDeps): { id: string; kind: string }[] {
  const own = deps.registry.list().map((m) => ({ id: m.id, kind: m.kind as string }));
  if (deps.store?.kind !== "postgres" || !deps.node) return own;
  return [...own, ...deps.node.others().flatMap((n) => n.models.map((m) => ({ id: m.id, kind: m.kind })))];
}

/** The exposition as an HTTP response (text format 0.0.4). */
export async function scrapeResponse(deps: ScrapeDeps): Promise<Response> {
  return new Response(await scrape(deps), { headers: { "content-type": CONTENT_TYPE } });
}

function collectModels(r: MetricsRegistry, registry: Registry) {
  const loaded = r.gauge("appliance_model_loaded", "1 when the model is loaded, else 0.", ["model", "kind"]);
  const slots = r.gauge("appliance_model_slots", "Worker slots of a loaded model.", ["model"]);
  const busy = r.gauge("appliance_model_slots_busy", "Slots of a loaded model running a request now.", ["model"]);
  const queue = r.gauge("appliance_model_queue_depth", "Live requests waiting for a slot of a loaded model.", ["model"]);
  const batchQueue = r.gauge("appliance_model_batch_queue_depth", "Batch lines waiting for a slot of a loaded chat model.", ["model"]);
  const engines = new Map(registry.engines().map((e) => [e.modelId, e]));
  for (const m of registry.list()) {
    const e = engines.get(m.id);
    loaded.set({ model: m.id, kind: m.kind }, e?.loaded ? 1 : 0);
    // Chat and image engines have worker slots; embedding and classifier models do not.
    const s = e?.loaded ? e.stats?.() : undefined;
    if (!s) continue;
    slots.set({ model: m.id }, s.slots);
    busy.set({ model: m.id }, s.busy);
    queue.set({ model: m.id }, s.queued);
    if (s.batchQueued !== undefined) batchQueue.set({ model: m.id }, s.batchQueued);
  }
}

/**
 * Where each loaded model computes (engines that say: the chat engine): the device and its GPUs as
 * labels, layers offloaded, and the device's memory as its backend reports it (llama.cpp's
 * getVramState: the whole device, so models sharing it report the same figures).
 */
async function collectDevices(r: MetricsRegistry, registry: Registry) {
  const info = r.gauge("appliance_model_device_info", "Always 1 for a loaded model that reports its device; the device (cpu, cuda, vulkan) and its GPUs' names are in the labels.", [
    "model",
    "device",
    "gpus",
  ]);
  const gpuLayers = r.gauge("appliance_model_gpu_layers", "Layers of a loaded model offloaded to its GPU (0 on the CPU).", ["model"]);
  const layers = r.gauge("appliance_model_layers", "Layers of a loaded model.", ["model"]);
  const used = r.gauge("appliance_model_device_memory_used_bytes", "Memory in use on the GPU a loaded model computes on, as its backend reports it (the whole device).", ["model", "device"]);
  const total = r.gauge("appliance_model_device_memory_total_bytes", "Memory of the GPU a loaded model computes on, as its backend reports it.", ["model", "device"]);
  const placements = await Promise.all(registry.engines().map(async (e) => ({ id: e.modelId, p: e.loaded ? await e.placement?.().catch(() => undefined) : undefined })));
  for (const { id, p } of placements) {
    if (!p) continue;
    info.set({ model: id, device: p.device, gpus: p.gpus.join(", ") }, 1);
    gpuLayers.set({ model: id }, p.gpuLayers);
    layers.set({ model: id }, p.layers);
    if (p.memory) {
      used.set({ model: id, device: p.device }, p.memory.used);
      total.set({ model: id, device: p.device }, p.memory.total);
    }
  }
}

function collectStore(r: MetricsRegistry, deps: ScrapeDeps, rentals: RentalTotals, t: StoreTotals, counts: BatchCounts) {
  const lines = r.gauge("appliance_batch_lines", "Batch lines by state.", ["state"]);
  lines.set({ state: "pending" }, counts.pending);
  lines.set({ state: "completed" }, counts.completed);
  lines.set({ state: "failed" }, counts.failed);

  const batches = r.gauge("appliance_batches", "Batches by status.", ["status"]);
  for (const s of BATCH_STATUSES) batches.set({ status: s }, counts.byStatus[s] ?? 0);

  r.gauge("appliance_rentals_active", "GPU rentals pending, running or stopping.").set({}, rentals.active);
  r.counter("appliance_rental_gpu_minutes_total", "GPU minutes billed to rentals.").inc({}, rentals.minutes);
  r.counter("appliance_rental_credits_consumed_usd_total", "Credit charged for GPU rentals, in USD.").inc({}, rentals.costMicros / 1e6);

  const credits = r.counter("appliance_credits_consumed_usd_total", "Credit charged for inference (the usage table's cost), in USD, by key kind.", ["kind"]);
  for (const k of KEY_KINDS) credits.inc({ kind: k }, (t.costMicros.get(k) ?? 0) / 1e6);
  const images = r.counter("appliance_images_generated_total", "Images generated and charged.", ["model"]);
  for (const m of clusterModels(deps)) if (m.kind === "image") images.inc({ model: m.id }, 0);
  for (const [model, n] of t.images) images.inc({ model }, n);
}

/** Sums the usage rows added since the last scrape into the running totals. */
async function usageTotals(deps: ScrapeDeps): Promise<StoreTotals> {
  let t = totalsOf.get(deps.metrics);
  if (!t) totalsOf.set(deps.metrics, (t = { turn: Promise.resolve(), usageAfter: 0, costMicros: new Map(), images: new Map() }));
  const totals = t;
  const summed = totals.turn.then(() => sumNewRows(deps, totals));
  totals.turn = summed.catch(() => {});
  return summed;
}

async function sumNewRows(deps: ScrapeDeps, t: StoreTotals): Promise<StoreTotals> {
  const rows = await deps.usage.sumsAfter(t.usageAfter);
  const known = new Set(clusterModels(deps).map((m) => m.id));
  for (const row of rows) {
    t.usageAfter = Math.max(t.usageAfter, row.last);
    t.costMicros.set(row.kind, (t.costMicros.get(row.kind) ?? 0) + row.cost);
    // A model no longer configured counts as "other": labels stay within the config's ids.
    if (row.images > 0) {
      const model = known.has(row.model) ? row.model : "other";
      t.images.set(model, (t.images.get(model) ?? 0) + row.images);
    }
  }
  return t;
}

function collectProcess(r: MetricsRegistry) {
  r.gauge("appliance_process_resident_memory_bytes", "Resident set size of the server process.").set({}, process.memoryUsage.rss());
  const cpu = process.cpuUsage();
  r.counter("appliance_process_cpu_seconds_total", "CPU time the server process has used (user and system).").inc({}, (cpu.user + cpu.system) / 1e6);
  r.gauge("appliance_process_start_time_seconds", "When the server process started, in Unix seconds.").set({}, performance.timeOrigin / 1000);
  r.gauge("appliance_build_info", "Always 1; the version is in the label.", ["version"]).set({ version: VERSION }, 1);
}
