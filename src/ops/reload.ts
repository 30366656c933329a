import type { Config } from "../lib/config";
import { demoModelsOf, withDemoModels } from "./demo";
import type { AppDeps } from "../services";

// Config reload without a restart (SIGHUP): limits and prices — the [limits], [prices], [files], [compat] and [threads] tables
// and each served model's `price` — are applied in place, so every service reading them sees the
// new values on its next request. The served models follow the config too (registry.apply): a new
// model is listed at once and loads per its `load`; a removed one answers 404 to new requests at
// once and is unloaded once the requests running on it have finished; a model whose manifest
// changed beyond price, name and load gets a new engine the same way. The demo models (--demo) are
// not in the file: they are served as at start, where the file does not use their ids (demo.ts).
// Anything else that changed needs a restart and is reported.

export interface ReloadResult {
  applied: string[];
  needsRestart: string[];
  /** Model ids listed from now on, taken out of the list, and given a new engine. */
  models: { added: string[]; removed: string[]; replaced: string[] };
}

export function applyReload(deps: Pick<AppDeps, "config" | "accounts" | "registry"> & Partial<Pick<AppDeps, "metrics">>, next: Config): ReloadResult {
  const current = deps.config;
  // As the start merged them (demo.ts): a removed override gives the demo model back.
  const served = withDemoModels(next.models, demoModelsOf(current));
  // First, as it alone can refuse (a new model's file missing): then a refused reload changes nothing.
  const changes = deps.registry.apply(served, { baseDir: next.models_dir, retired: next.retired_models });
  current.models.splice(0, current.models.length, ...deps.registry.manifests());
  current.retired_models = next.retired_models;
  current.models_dir = next.models_dir;
  for (const id of changes.added) if (deps.registry.resolve(id).kind === "chat") deps.metrics?.chatModel(id);

  const applied: string[] = changes.updated.map((f) => `models.${f}`);
  const needsRestart: string[] = [];
  for (const table of ["limits", "prices", "files", "compat", "threads"] as const) {
    for (const [k, v] of Object.entries(next[table])) {
      if ((current[table] as Record<string, unknown>)[k] !== v) applied.push(`${table}.${k}`);
    }
    Object.assign(current[table], next[table]);
  }
  // [server.tls]'s cert and key are re-read by the caller (serve.ts) on every reload and applied
  // there; switching TLS on or off, or its redirect port, needs a restart.
  const tlsShape = (t: Config["server"]["tls"]) => (t ? { redirect_port: t.redirect_port } : null);
  const { tls: curTls, ...curServer } = current.server;
  const { tls: nextTls, ...nextServer } = next.server;
  if (JSON.stringify(curServer) !== JSON.stringify(nextServer)) needsRestart.push("[server]");
  if (JSON.stringify(tlsShape(curTls)) !== JSON.stringify(tlsShape(nextTls))) needsRestart.push("[server.tls]");
  else if (curTls && nextTls) Object.assign(curTls, { cert: nextTls.cert, key: nextTls.key });
  for (const table of ["engines", "rentals", "image_input", "store"] as const)
    if (JSON.stringify(current[table]) !== JSON.stringify(next[table])) needsRestart.push(`[${table}]`);
  deps.accounts.dropCache(); // cached principals carry rpm/in-flight defaults from [limits]
  return { applied, needsRestart, models: { added: changes.added, removed: changes.removed, replaced: changes.replaced } };
}
