import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Scope } from "../../src/2-services/accounts/types";
import { createApp, type App } from "../../src/app";
import type { Clock } from "../../src/lib/clock";
import { validateConfig, type Config } from "../../src/lib/config";
import type { EngineFactories } from "../../src/3-engines/registry";
import { memoryLogger, type Logger } from "../../src/lib/log";
import { createServices, type AppDeps } from "../../src/services";
import { openStore } from "../../src/4-store/db";
import { sqliteStore, type Store } from "../../src/4-store/store";

export const BASE = "http://localhost";

/** Ends every active rental: rentals outlive a server by design; a test's must not outlive the test. */
export async function endRentals(deps: Pick<AppDeps, "rentals" | "accounts">): Promise<void> {
  for (const r of await deps.rentals.refreshActive()) await deps.rentals.remove((await deps.accounts.principalById(r.key_id))!, r.id).catch(() => {});
}

export function tempDir(prefix = "appliance-test-"): string {
  return mkdtempSync(join(tmpdir(), prefix));
}

export interface TestApp {
  app: App;
  deps: AppDeps;
  dir: string;
  logs: Record<string, any>[];
  /** A new account with one key; returns the full key. */
  key(opts?: { account?: string; kind?: "free" | "premium"; scopes?: Scope[]; creditUsd?: number; rpm?: number; inflight?: number; maxActiveRentals?: number }): Promise<string>;
  request(method: string, path: string, opts?: { key?: string | null; body?: unknown; headers?: Record<string, string> }): Promise<Response>;
  /** Stops the batch worker and the engines, then closes the store and removes the temp dir. */
  close(): Promise<void>;
}

let counter = 0;

/** A real app on a real SQLite file in a temp dir, served through app.handle (no socket). */
export function testApp(
  opts: {
    config?: Record<string, unknown>;
    clock?: Clock;
    engines?: (config: Config, logger: Logger) => EngineFactories;
    override?: (deps: AppDeps) => Partial<AppDeps>;
    discoveredGpus?: import("../../src/2-services/rentals/inventory").DiscoveredGpu[];
    /** A store opened by the test (default: a SQLite file in the app's temp dir); closed with the app. */
    store?: Store;
  } = {},
): TestApp {
  const dir = tempDir();
  const config = validateConfig({ ...opts.config, server: { ...(opts.config?.server as object), data_dir: dir } });
  config.models_dir = dir;
  // The store: the test's own SQLite file, or one it opened (PostgreSQL: test/helpers/backends.ts).
  const store = opts.store ?? sqliteStore(openStore(dir, { synchronous: "normal" }));
  const logger = memoryLogger();
  let deps = createServices(config, store, { clock: opts.clock, logger, engines: opts.engines?.(config, logger), discoveredGpus: opts.discoveredGpus });
  if (opts.override) deps = { ...deps, ...opts.override(deps) };
  const app = createApp(deps);
  return {
    app,
    deps,
    dir,
    logs: logger.lines,
    async key(k = {}) {
      const account = k.account ?? `acct${++counter}`;
      if (!(await deps.accounts.getAccount(account).catch(() => null)))
        await deps.accounts.createAccount(account, { creditMicros: k.creditUsd ? Math.round(k.creditUsd * 1e6) : undefined });
      return (await deps.accounts.createKey({
        account,
        kind: k.kind ?? "premium",
        scopes: k.scopes,
        rpm: k.rpm,
        inflight: k.inflight,
        maxActiveRentals: k.maxActiveRentals,
      })).key;
    },
    request(method, path, r = {}) {
      const headers: Record<string, string> = { ...r.headers };
      if (r.key) headers.authorization = `Bearer ${r.key}`;
      let body: string | undefined;
      if (r.body !== undefined) {
        body = typeof r.body === "string" ? r.body : JSON.stringify(r.body);
        headers["content-type"] ??= "application/json";
      }
      return app.handle(new Request(BASE + path, { method, headers, body }));
    },
    async close() {
      await endRentals(deps);
      await deps.rentals.stop();
      await deps.batchWorker.stop();
      await deps.registry.unloadAll();
      deps.heartbeat.stop();
      deps.accounts.close();
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
