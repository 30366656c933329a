import { hostname } from "node:os";
import { join } from "node:path";
import type { Database } from "bun:sqlite";
import type { UsageReports } from "./4-store/reports";
import { accountStoreOf, asStore, batchesStoreOf, filesStoreOf, nodeStoreOf, rentalsStoreOf, sessionStoreOf, threadStoreOf, usageReportsOf, type Store } from "./4-store/store";
import { nodeIdOf } from "./4-store/node-id";
import { createNode, type ClusterNode } from "./2-services/cluster/node";
import { nodeModels } from "./2-services/cluster/models";
import { advertisedUrl, clusterSecretOf } from "./2-services/cluster/settings";
import { createAccountService, type AccountService } from "./2-services/accounts/service";
import { createLimits, type Limits } from "./2-services/billing/limits";
import { createMeter, type Meter } from "./2-services/billing/meter";
import { pricingOf } from "./2-services/billing/pricing";
import { systemClock, type Clock } from "./lib/clock";
import type { CapabilityDeps } from "./2-services/capability";
import type { Config } from "./lib/config";
import { createBatchesService, type BatchesService } from "./2-services/batches/service";
import { createBatchWorker, type BatchWorker } from "./2-services/batches/worker";
import { createChatService, type ChatService } from "./2-services/chat/service";
import { createClassifyService, type ClassifyService } from "./2-services/classify/service";
import { createDecisionService, type DecisionService } from "./2-services/decisions/service";
import { createRerankService, type RerankService } from "./2-services/rerank/service";
import { diffusionFactory } from "./3-engines/diffusion/factory";
import { chatRuntime, llamaChatFactory } from "./3-engines/llama/factory";
import type { LlamaRuntime } from "./3-engines/llama/runtime";
import type { ModelEngine } from "./3-engines/types";
import { transformersFactories } from "./3-engines/transformers/factory";
import { createEmbeddingsService, type EmbeddingsService } from "./2-services/embeddings/service";
import { createFilesService, type FilesService } from "./2-services/files/service";
import { createImagesService, type ImagesService } from "./2-services/images/service";
import { createRegistry, type EngineFactories, type Registry } from "./3-engines/registry";
import { createLogger, type Logger } from "./lib/log";
import { createMetrics, type Metrics } from "./2-services/metrics/metrics";
import { buildInventory, type DiscoveredGpu } from "./2-services/rentals/inventory";
import { createDockerLauncher } from "./2-services/rentals/launchers/docker";
import { createProcessLauncher } from "./2-services/rentals/launchers/process";
import type { Launcher } from "./2-services/rentals/launchers/types";
import { createConsoleAuth, type ConsoleAuth } from "./2-services/console/auth";
import { consoleHosts } from "./2-services/console/hosts";
import { createConsoleViews, type ConsoleViews } from "./2-services/console/views";
import { createPullJobs, type PullJobs } from "./2-services/console/pulls";
import { consolePullTools } from "./ops/pull/console";
import { createConversationsService, type ConversationsService } from "./2-services/console/conversations";
import { conversationStoreOf } from "./4-store/store";
import { deviceGpus, gpusInUse, inferenceGpus, reservedNodes, type EngineUse } from "./2-services/rentals/reserved";
import type { ThreadStore } from "./4-store/threads";
import { createHeartbeat, processOwner, sharedState, type Heartbeat } from "./2-services/shared-state";
import type { MemoryPlanner } from "./3-engines/residency";
import { createPlanner } from "./3-engines/planner/planner";
import { createRentalsService, type RentalsService } from "./2-services/rentals/service";
import { publicBaseOf } from "./2-services/rentals/access";

/** Everything createApp needs: built once by main.ts, by the CLI, and by tests. */
export interface AppDeps {
  config: Config;
  /** The port the main listener bound (main.ts sets it; 0 before): rentals' public URLs name it. */
  listening: { port: number };
  /** The store: SQLite in the data dir, or PostgreSQL ([store] url). */
  store: Store;
  /** SQLite's handle (null on PostgreSQL): the data dir's backup and tests read it. */
  db: Database | null;
  clock: Clock;
  logger: Logger;
  accounts: AccountService;
  limits: Limits;
  meter: Meter;
  registry: Registry;
  chat: ChatService;
  embeddings: EmbeddingsService;
  classify: ClassifyService;
  decisions: DecisionService;
  rerank: RerankService;
  /** A served model's price as /v1/models shows it (USD), read from the live [prices]; undefined once it has left. */
  pricing: (id: string) => Record<string, number> | undefined;
  images: ImagesService;
  files: FilesService;
  batches: BatchesService;
  /** Runs batches in the background: started by main.ts (and by tests that need it). */
  batchWorker: BatchWorker;
  /** GPU rentals; its ticks (launch, billing, auto-stop) are started by main.ts (and tests). */
  rentals: RentalsService;
  /** The web console: sign-in sessions and the account views it shows. */
  console: { auth: ConsoleAuth; views: ConsoleViews; conversations: ConversationsService; pulls: PullJobs };
  /** Prometheus metrics counted as work happens (GET /metrics adds what it reads at scrape time). */
  metrics: Metrics;
  /**
   * What this process renews in a shared store while it runs (PostgreSQL: its credit holds' and
   * counters' leases; other processes drop them once it stops). Started by main.ts.
   */
  heartbeat: Heartbeat;
  /** This process as a node of its cluster (PostgreSQL; on SQLite one node, always accepting). Started by main.ts once listening. */
  node: ClusterNode;
  /** The usage rows' reads: the console's Usage page and /metrics. */
  usage: UsageReports;
  /** Message threads of /v1/messages: conversations held between turns, per key ([threads]). */
  threads: ThreadStore;
  startedAt: number;
}

export function createServices(
  config: Config,
  storeOrDb: Store | Database,
  opts: {
    clock?: Clock;
    logger?: Logger;
    engines?: EngineFactories;
    discoveredGpus?: DiscoveredGpu[];
    launchers?: Record<string, Launcher>;
    /** The memory planner; default src/3-engines/planner/planner.ts on this host's devices. */
    planner?: MemoryPlanner;
  } = {},
): AppDeps {
  const store = asStore(storeOrDb);
  const db = store.kind === "sqlite" ? store.db : null;
  const clock = opts.clock ?? systemClock;
  const logger = opts.logger ?? createLogger({ level: config.server.log_level });
  const storeFailed = (what: string, e: unknown) => logger.warn(`store: ${what} failed`, { error: (e as Error).message });
  // This process's name on what it leases in a shared store (holds, counters, rentals' ticks).
  const owner = processOwner();
  const shared = store.kind === "postgres" ? sharedState(store, clock, owner) : null;
  const limits = createLimits(db, config.limits, clock, shared?.counters);
  const meter = createMeter(db, config, limits, clock, shared?.meter);
  const runtime = chatRuntime(config, logger);
  /** The chat engines' llama.cpp runtime once the planner has started it (before it places any chat model). */
  let chatBackend: LlamaRuntime | null = null;
  const planner = opts.planner ?? createPlanner(config, { logger, runtime: () => runtime().then((rt) => (chatBackend = rt)) });
  const registry = createRegistry(config.models, config.retired_models, {
    baseDir: config.models_dir,
    created: clock.now(),
    now: () => clock.now(),
    logger,
    engines: opts.engines ?? {
      chat: llamaChatFactory(config, logger),
      ...transformersFactories(config, logger),
      ...diffusionFactory(config, logger),
    },
    residency: {
      keepAliveS: config.engines.keep_alive_s,
      // Each placement reads the active rentals as it reads the devices, so `blocked` below sees
      // them as of that moment (rentals.activeNow is otherwise as of the last tick or change here).
      planner: { ...planner, devices: () => Promise.all([planner.devices(), rentals.refreshActive()]).then(([d]) => d) },
      // A GPU a rental holds takes no model (src/3-engines/residency.ts places them elsewhere, or refuses).
      blocked: (d) => {
        const mine = deviceGpus(d, opts.discoveredGpus ?? []);
        if (!mine.length) return null;
        const r = rentals.activeNow().find((x) => nodes.find((n) => n.node_id === x.node_id)?.gpu_uuids.some((u) => mine.includes(u.toLowerCase())));
        return r ? `is rented (${r.id})` : null;
      },
    },
  });
  const metrics = createMetrics({ chatModels: config.models.filter((m) => m.kind === "chat").map((m) => m.id) });
  const capability: CapabilityDeps = { config, registry, meter, clock, logger, judged: metrics.judged };
  const pricing = (id: string): Record<string, number> | undefined => {
    try {
      return { ...pricingOf(registry.resolve(id), config.prices) } as Record<string, number>;
    } catch {
      return undefined;
    }
  };
  const accounts = createAccountService(accountStoreOf(store, storeFailed), config.limits, clock);
  const usage = usageReportsOf(store);
  const chat = createChatService({ registry, meter, clock, logger, metrics, imageInput: config.image_input, limits });
  const embeddings = createEmbeddingsService(capability);
  const files = createFilesService({ store: filesStoreOf(store, join(config.server.data_dir, "files")), clock, logger, storage: () => config.files });
  const batchStore = batchesStoreOf(store);
  // The cluster's node is built last (it reads the rentals); the worker asks it late.
  let node: ClusterNode | null = null;
  const batchWorker = createBatchWorker({
    store: batchStore,
    files,
    registry,
    accounts,
    clock,
    logger,
    owner: store.kind === "postgres" ? owner : undefined,
    cluster: { servedElsewhere: (model, kind) => node?.servedElsewhere(model, kind) ?? false },
  });
  const r = config.rentals;
  const listening = { port: 0 };
  const publicHost = r.public_host || (config.server.host === "0.0.0.0" || config.server.host === "::" ? hostname() : config.server.host);
  const nodes = buildInventory({
    declared: config.rental_nodes,
    discovered: opts.discoveredGpus ?? [],
    defaults: { price_per_hour: r.price_per_hour, country: r.country || undefined, country_code: r.country_code || undefined, launcher: r.launcher },
  });
  const inferenceGpuSet = inferenceGpus(opts.discoveredGpus ?? [], process.env.CUDA_VISIBLE_DEVICES);
  /**
   * Engines as gpusInUse reads them. A chat model placed on the CPU inside a GPU runtime still
   * computes its prompts on that runtime's GPU (ggml's op offload; the planner books its compute
   * buffer there, src/3-engines/planner/gguf-profile.ts) although its engine says "cpu": it counts as on the
   * runtime's GPUs.
   */
  const inUse = (engines: readonly ModelEngine[]): EngineUse[] => {
    const rt = chatBackend;
    if (!rt || rt.device === "cpu") return [...engines];
    const viaRuntime = new Set(registry.status().filter((s) => s.kind === "chat" && s.device === "cpu" && (s.memory_mb?.gpu ?? 0) > 0).map((s) => s.id));
    return engines.map((e) => (e.loaded && e.device === "cpu" && viaRuntime.has(e.modelId) ? { loaded: true, device: rt.device, gpus: rt.gpus } : e));
  };
  const batches = createBatchesService({ store: batchStore, files, clock, notify: batchWorker.notify });
  const nodeId = store.kind === "postgres" ? nodeIdOf(config.server.data_dir) : "local";
  const rentals = createRentalsService({
    store: rentalsStoreOf(store),
    // One server per SQLite data dir ("local": its leases are its own after a restart); on
    // PostgreSQL each process is a node (one per data dir), and its rentals' leases are its node's:
    // what a killed process held is found by its next start (src/2-services/rentals/ticks.ts, reconcile).
    owner: store.kind === "sqlite" ? undefined : nodeId,
    // The other nodes as of the last beat (the node is built below).
    cluster: { self: nodeId, shared: store.kind === "postgres", others: () => node?.others() ?? [], peer: (id) => node?.peer(id) ?? null },
    meter,
    clock,
    logger,
    dataDir: config.server.data_dir,
    nodes: () => nodes,
    launchers: opts.launchers ?? {
      process: createProcessLauncher({ command: r.process.command, bind: r.process.bind, publicHost }),
      docker: createDockerLauncher({ socketPath: r.docker.socket, image: r.docker.image, hostAddress: publicHost }),
    },
    access: r.access,
    publicBase: () => publicBaseOf({ ...config.server, port: listening.port || config.server.port }, publicHost),
    maxHours: r.max_hours,
    readyTimeoutMs: r.ready_timeout_s * 1000,
    // GPUs a loaded model computes on are not rented out (src/2-services/rentals/reserved.ts); with
    // rentals.share_gpus only those of models busy with requests or pinned (load = "start"): idle
    // ones are unloaded when the rental launches.
    reserved: () =>
      reservedNodes(nodes, gpusInUse(inUse(r.share_gpus ? registry.holding().filter((h) => h.busy).map((h) => h.engine) : registry.engines()), inferenceGpuSet, opts.discoveredGpus ?? []), true),
    beforeLaunch: async (uuids) => {
      if (!r.share_gpus || uuids.length === 0) return;
      const wanted = new Set(uuids.map((u) => u.toLowerCase()));
      const devices = await planner.devices();
      const on = new Set(devices.filter((d) => deviceGpus(d, opts.discoveredGpus ?? []).some((u) => wanted.has(u))).map((d) => d.id));
      const stay = await registry.vacate((id) => on.has(id));
      if (stay.length) throw new Error(`its GPU is in use by ${stay.map((id) => `model "${id}"`).join(", ")}`);
    },
  });
  return {
    config,
    listening,
    store,
    db,
    clock,
    logger,
    accounts,
    limits,
    meter,
    registry,
    chat,
    embeddings,
    classify: createClassifyService(capability),
    decisions: createDecisionService(capability),
    pricing,
    rerank: createRerankService(capability),
    images: createImagesService(capability),
    files,
    batches,
    batchWorker,
    rentals,
    console: {
      auth: createConsoleAuth({ sessions: sessionStoreOf(store), buckets: shared?.signinBuckets, clock, accounts, allowedHosts: consoleHosts(config) }),
      // On PostgreSQL the Models page lists every live node's models (the node is built below).
      views: createConsoleViews({
        clock,
        accounts,
        usage,
        batches,
        files,
        rentals,
        registry,
        cluster: store.kind === "postgres" ? { self: () => node!.id, others: () => node!.others() } : undefined,
        pricing,
      }),
      // The Chat page's conversations, per account (src/2-services/console/conversations.ts).
      conversations: createConversationsService({ store: conversationStoreOf(store), clock }),
      // Admins' model pulls into <data_dir>/models, as `appliance models pull` (src/2-services/console/pulls.ts).
      pulls: createPullJobs({ tools: consolePullTools({ modelsDir: join(config.server.data_dir, "models") }), registry, planner, clock, logger }),
    },
    metrics,
    usage,
    threads: threadStoreOf(store),
    heartbeat: createHeartbeat(shared?.beats ?? [], storeFailed),
    node: (node = createNode({
      store: nodeStoreOf(store),
      id: nodeId,
      secret: store.kind === "postgres" ? clusterSecretOf(config.cluster) : "",
      url: () =>
        config.cluster.advertise_url
          ? advertisedUrl(config.cluster.advertise_url, listening.port || config.server.port)
          : `${config.server.tls ? "https" : "http"}://${publicHost}:${listening.port || config.server.port}`,
      config,
      models: () => nodeModels(registry, pricing),
      // With what GET /api/v1/gpus shows of each on the other nodes (src/2-services/rentals/cluster.ts).
      gpus: async () =>
        (await rentals.gpus()).map((n) => ({ node_id: n.node_id, gpu: n.gpu, count: Math.max(1, n.gpu_uuids.length), vram_mb: n.vram_mb, price_per_hour: n.price_per_hour, compute_cap: n.compute_cap, country: n.country, country_code: n.country_code })),
      logger,
    })),
    startedAt: clock.now(),
  };
}
