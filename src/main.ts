import type { Server } from "bun";
import { mkdirSync } from "node:fs";
import { setClientAddress } from "./1-api/http/context";
import { ApiError } from "./1-api/http/errors";
import { rentalUpgrade, rentalWebSocket } from "./1-api/rentals/proxy";
import { createConnectionGuard } from "./1-api/http/idle";
import { InFlight } from "./1-api/http/in-flight";
import { startMetricsListener } from "./2-services/metrics/listen";
import { createApp, maxBodyBytesOf } from "./app";
import { formatMicros, usdToMicros } from "./2-services/billing/pricing";
import type { Config } from "./lib/config";
import { ensureDemoModels, serveDemoModels } from "./ops/demo";
import { checkModelFiles } from "./3-engines/registry";
import { createLogger, type Logger } from "./lib/log";
import { createServices, type AppDeps } from "./services";
import { startControlSocket } from "./1-api/control-socket";
import { discoverGpus, type DiscoveredGpu } from "./2-services/rentals/inventory";
import { openConfiguredStore, type Store } from "./4-store/store";
import { lockDataDir } from "./4-store/lock";
import { MainListener, readTls, startRedirectListener, type TlsFiles, type TlsMaterial } from "./lib/net/listener";
import { randomBase62 } from "./lib/ids";
import { raiseFdLimit } from "./lib/net/rlimit";
import { parseTrustedProxies } from "./lib/net/trusted-proxies";
import { VERSION } from "./lib/version";
import { clusterSettingsOf } from "./2-services/cluster/settings";
import { HOP_HEADER } from "./2-services/cluster/hop";
import { pathAndQueryOf } from "./1-api/http/context";

export interface RunningServer {
  url: string;
  deps: AppDeps;
  server: MainListener;
  /** Re-reads `[server.tls]`'s files and serves new connections with them (SIGHUP); throws on bad files. */
  reloadTls(files: TlsFiles): TlsMaterial;
  /** Stops accepting, lets running requests finish (up to `timeoutMs`, default server.shutdown_timeout_s), then closes. */
  stop(opts?: { timeoutMs?: number }): Promise<void>;
}

/** Reads nothing itself: takes a validated config, opens the store, builds services, listens. */
export async function startServer(
  config: Config,
  opts: { logger?: Logger; banner?: (line: string) => void } = {},
): Promise<RunningServer> {
  const logger = opts.logger ?? createLogger({ level: config.server.log_level });
  const banner = opts.banner ?? ((line: string) => process.stderr.write(line + "\n"));
  const dataDir = config.server.data_dir;
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const unlock = lockDataDir(dataDir);
  let store: Store | undefined;
  try {
    store = await openConfiguredStore(config);
    logger.info("store", { kind: store.kind, at: store.describe });
    // A node of a cluster is reachable by the others and signs its hops to them (cluster/settings.ts).
    if (store.kind === "postgres") clusterSettingsOf(config.cluster);
    if (config.demo) {
      const demo = await ensureDemoModels(dataDir);
      serveDemoModels(config, demo); // a reload computes the served models the same way (reload.ts)
      logger.info("demo models", { served: demo.map((m) => m.id) });
      banner(`--demo: serving the generated demo models ${demo.map((m) => m.id).join(", ")} (random weights: answers are noise)`);
    }
    checkModelFiles(config.models, config.models_dir);
    let discoveredGpus: DiscoveredGpu[] = [];
    if (config.rentals.discover) {
      const found = await discoverGpus();
      discoveredGpus = found.gpus;
      if (found.problem) logger.warn("GPU discovery", { problem: found.problem });
      else logger.info("GPU discovery", { gpus: found.gpus.length });
    }
    const deps = createServices(config, store, { logger, discoveredGpus });
    await deps.node.check(); // a cluster's nodes share [prices] and [limits]
    deps.heartbeat.start();
    const first = await bootstrapFirstAccount(deps);
    await deps.registry.loadAtStart();
    const sweepFiles = () => deps.files.sweep().catch((e) => logger.warn("file sweep failed", { error: (e as Error).message }));
    await sweepFiles();
    // Expired message threads go at start and hourly too, not only when some key keeps a thread.
    const sweepThreads = () => deps.threads.sweep(deps.clock.now()).catch((e) => logger.warn("message thread sweep failed", { error: (e as Error).message }));
    void sweepThreads();
    const sweeper = setInterval(() => {
      void sweepFiles();
      void sweepThreads();
    }, 3_600_000);
    sweeper.unref();
    const app = createApp(deps); // gives the batch worker its lanes
    deps.batchWorker.start();
    await deps.rentals.start();
    const inFlight = new InFlight();
    // Before the main listener: a bad metrics address stops the start cleanly.
    const metricsListener = startMetricsListener(deps);
    if (metricsListener.url) logger.info("metrics listening", { url: metricsListener.url });
    const tls = config.server.tls ? readTls(config.server.tls) : undefined;
    // Every connection holds a descriptor: the soft limit goes up to the hard one (src/lib/net/rlimit.ts).
    const fds = raiseFdLimit();
    if ("error" in fds) logger.warn("file descriptor limit not raised", { problem: fds.error });
    else logger.info("file descriptor limit", { soft: fds.after.soft, hard: fds.after.hard, raised_from: fds.before.soft === fds.after.soft ? undefined : fds.before.soft });
    // Request bodies keep a pace, and each client address a bounded number of requests in flight (src/1-api/http/idle.ts).
    const guard = createConnectionGuard({
      bodyGraceS: config.server.body_grace_s,
      bodyMinBytesPerS: config.server.body_min_bytes_per_s,
      maxRequestsPerAddress: config.server.max_requests_per_address,
      // Another node's hops all come from its one address: they were capped there, by client.
      exempt: (req) => {
        const hop = req.headers.get(HOP_HEADER);
        return hop !== null && deps.node.isHop(hop, req.method, pathAndQueryOf(req.url));
      },
      logger,
    });
    const proxies = parseTrustedProxies(config.server.trusted_proxies);
    const fetch = (req: Request, srv: Server<any>) => {
      // The client: the socket's peer, or the one a listed proxy names (src/lib/net/trusted-proxies.ts).
      setClientAddress(req, srv.requestIP(req)?.address, proxies);
      // A rental notebook's WebSocket (src/1-api/rentals/proxy.ts) is upgraded here; a refused one is
      // answered by the app, in the API's envelope. Everything else costs one header read.
      // Another node's rental: its WebSocket is opened to that node (src/1-api/rentals/elsewhere.ts).
      return guard.serve(req, srv, (r) => rentalUpgrade(deps.rentals, r, srv, () => inFlight.track(() => app.handle(r)), { node: deps.node, logger }) ?? inFlight.track(() => app.handle(r)));
    };
    const server = MainListener.start({
      hostname: config.server.host,
      port: config.server.port,
      // Bodies announced as too large get a 413 in the API's envelope from createApp; this is the
      // backstop for chunked bodies that announce no length.
      maxRequestBodySize: maxBodyBytesOf(config) + 1024 * 1024,
      fetch,
      websocket: rentalWebSocket,
      tls,
    });
    deps.listening.port = server.port;
    await deps.node.start();
    const redirect = tls && config.server.tls!.redirect_port ? startRedirectListener({ hostname: config.server.host, port: config.server.tls!.redirect_port, httpsPort: server.port, health: (req) => app.handle(req) }) : null;
    // `appliance ps` talks to this (src/1-api/control-socket.ts); opened once the listeners are up.
    const control = startControlSocket(dataDir, deps.registry, logger);
    const url = server.url;
    logger.info("listening", {
      url,
      version: VERSION,
      data_dir: dataDir,
      models: deps.registry.list().map((m) => m.id),
      ...(tls ? { tls: { names: tls.names, not_after: tls.notAfter, sha256: tls.fingerprint256 } } : {}),
      ...(redirect ? { redirect_http: `http://${config.server.host}:${redirect.port}` } : {}),
    });
    if (first) banner(await firstStartBanner(first, deps, url));
    banner(`appliance ${VERSION} listening on ${url} (data dir ${dataDir}${store.kind === "postgres" ? `, store ${store.describe}` : ""})`);
    let stopped = false;
    return {
      url,
      deps,
      server,
      /** Re-reads `[server.tls]`'s files and serves new connections with them (SIGHUP). */
      reloadTls(files: TlsFiles): TlsMaterial {
        const next = readTls(files);
        server.swapTls(next);
        logger.info("TLS certificate reloaded", { names: next.names, not_after: next.notAfter, sha256: next.fingerprint256 });
        return next;
      },
      async stop(opts = {}) {
        if (stopped) return;
        stopped = true;
        // With the listener closed, nothing else may keep the event loop alive (engine workers are
        // unref'd): hold it open until every step below has run, or the process ends half-way.
        const hold = setInterval(() => {}, 1000);
        // Stop accepting at once; requests in flight (streams included) finish, up to the timeout.
        const timeoutMs = opts.timeoutMs ?? config.server.shutdown_timeout_s * 1000;
        const running = inFlight.size;
        const closing = server.stop(false);
        redirect?.stop(true);
        metricsListener.stop();
        control.stop();
        if (!(await inFlight.drained(timeoutMs))) {
          logger.warn("shutdown: requests still running after the timeout are cut", { timeout_s: timeoutMs / 1000, requests: inFlight.size });
          // Requests still queued for a slot never started: they get a 503 they can retry on, not a reset.
          const closing = new ApiError("model_unavailable", "the server is shutting down; retry once it is back", { headers: { "retry-after": "5" } });
          for (const engine of deps.registry.engines()) engine.refuseWaiting?.(closing);
          await inFlight.drained(200);
          await server.stop(true);
          await inFlight.drained(5000); // cut streams end their generations through their signals
        } else if (running > 0) logger.info("shutdown: running requests finished", { requests: running });
        await closing;
        clearInterval(sweeper);
        await deps.batchWorker.stop();
        // Generations whose clients were cut end through their signals: let them, before unloading.
        for (let waited = 0; waited < 5000 && deps.registry.engines().some((e) => (e.stats?.().busy ?? 0) > 0); waited += 20) await Bun.sleep(20);
        await deps.rentals.stop(); // rentals keep running: the next start reconciles them
        await deps.registry.unloadAll();
        // Batch lines in flight were stopped above and stay pending; what finished is committed.
        deps.heartbeat.stop();
        deps.node.stop();
        deps.accounts.close();
        if (store!.kind === "sqlite") store!.db.exec("PRAGMA wal_checkpoint(TRUNCATE)");
        logger.info("stopped");
        logger.flush();
        await store!.close();
        unlock();
        clearInterval(hold);
      },
    };
  } catch (e) {
    await store?.close().catch(() => {});
    unlock();
    throw e;
  }
}

/**
 * On an empty store, create the first (admin) account with a premium key. The key is returned to
 * be printed this once: it is never stored in clear.
 */
async function bootstrapFirstAccount(deps: AppDeps): Promise<{ key: string; password: string } | null> {
  if ((await deps.accounts.accountCount()) > 0) return null;
  const { account, credit_usd } = deps.config.bootstrap;
  try {
    await deps.accounts.createAccount(account, { role: "admin", creditMicros: usdToMicros(credit_usd), note: "bootstrap credit" });
  } catch (e) {
    // Processes starting together on one new PostgreSQL store: one creates the first account; the
    // others find it made and print no key.
    if (e instanceof ApiError && e.code === "conflict") return null;
    throw e;
  }
  const { key, info } = await deps.accounts.createKey({ account, kind: "premium", name: "bootstrap" });
  const password = randomBase62(20);
  await deps.console.auth.setPassword(account, password);
  deps.logger.info("bootstrap account created", { account, key: info.display });
  return { key, password };
}

async function firstStartBanner({ key, password }: { key: string; password: string }, deps: AppDeps, url: string): Promise<string> {
  const { account } = deps.config.bootstrap;
  const balance = formatMicros((await deps.accounts.getAccount(account)).balance_micros);
  return [
    "",
    `First start: created account "${account}" (admin) with ${balance} credit and a premium key:`,
    "",
    `    ${key}`,
    "",
    "This key is shown once; only its hash is stored. Use it as a Bearer token, e.g.",
    `    curl -H "Authorization: Bearer ${key}" ${url}/v1/models`,
    "More keys: appliance keys create --account NAME [--premium]",
    "",
    `Web console: ${url}/console — account "${account}", password ${password}`,
    `(also shown once; change it with: appliance accounts password ${account})`,
    "",
  ].join("\n");
}
