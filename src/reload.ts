import type { Config } from "./config";
import type { AppDeps } from "./services";

// Config reload without a restart (SIGHUP): limits and prices — the [limits] and [prices] tables
// and each served model's `price` — are applied in place, so every service reading them sees the
// new values on its next request. Anything else that changed needs a restart and is reported.

export interface ReloadResult {
  applied: string[];
  needsRestart: string[];
}

export function applyReload(deps: Pick<AppDeps, "config" | "accounts">, next: Config): ReloadResult {
  const current = deps.config;
  const applied: string[] = [];
  const needsRestart: string[] = [];
  for (const table of ["limits", "prices"] as const) {
    for (const [k, v] of Object.entries(next[table])) {
      if ((current[table] as Record<string, unknown>)[k] !== v) applied.push(`${table}.${k}`);
    }
    Object.assign(current[table], next[table]);
  }
  const nextModels = new Map(next.models.map((m) => [m.id, m]));
  for (const m of current.models) { // the registry serves these very manifest objects
    const n = nextModels.get(m.id);
    if (!n) continue;
    if (JSON.stringify(m.price ?? null) !== JSON.stringify(n.price ?? null)) {
      applied.push(`models.${m.id}.price`);
      if (n.price) m.price = n.price;
      else delete m.price;
    }
  }
  const served = new Set(current.models.map((m) => m.id));
  const added = next.models.filter((m) => !served.has(m.id)).map((m) => m.id);
  if (added.length) needsRestart.push(`new models: ${added.join(", ")}`);
  const removed = [...served].filter((id) => !nextModels.has(id) && !(current.demo && id.startsWith("demo-")));
  if (removed.length) needsRestart.push(`removed models: ${removed.join(", ")}`);
  for (const table of ["server", "engines", "rentals", "image_input"] as const)
    if (JSON.stringify(current[table]) !== JSON.stringify(next[table])) needsRestart.push(`[${table}]`);
  deps.accounts.dropCache(); // cached principals carry rpm/in-flight defaults from [limits]
  return { applied, needsRestart };
}
