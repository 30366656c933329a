import { existsSync } from "node:fs";
import { isAbsolute, resolve } from "node:path";
import { ApiError } from "../api/http/errors";
import { ConfigError } from "../config";
import type { ModelKind, ModelManifest, RetiredModel } from "./manifest";

// Model id → manifest (and, as engines arrive, → engine). The one place a model id is resolved:
// an unknown or retired id is a 404 "model not found" in every wire format (spec §7, §9).

export interface ModelEntry {
  id: string;
  object: "model";
  created: number;
  owned_by: string;
  name: string;
  kind: ModelKind;
  max_context: number;
  supports_vision?: true;
}

export type Registry = ReturnType<typeof createRegistry>;

export function createRegistry(models: ModelManifest[], retired: RetiredModel[], opts: { baseDir: string; created?: number }) {
  const byId = new Map(models.map((m) => [m.id, m]));
  const retiredById = new Map(retired.map((r) => [r.id, r]));
  const created = Math.floor((opts.created ?? Date.now()) / 1000);
  const entries: ModelEntry[] = models.map((m) => ({
    id: m.id,
    object: "model",
    created,
    owned_by: "appliance",
    name: m.name,
    kind: m.kind,
    max_context: m.max_context,
    ...(m.vision ? { supports_vision: true as const } : {}),
  }));

  return {
    list: (): readonly ModelEntry[] => entries,
    entry(id: string): ModelEntry {
      this.resolve(id);
      return entries.find((e) => e.id === id)!;
    },
    /** The manifest for `id`, or a 404 naming the id (and its replacement when retired). */
    resolve(id: string, kind?: ModelKind): ModelManifest {
      const m = byId.get(id);
      if (!m) {
        const r = retiredById.get(id);
        const hint = r ? ` (retired${r.replaced_by ? `; use "${r.replaced_by}"` : ""})` : "";
        throw new ApiError("model_not_found", `model not found: "${id}"${hint}`, { param: "model" });
      }
      if (kind && m.kind !== kind) {
        const fits = models.filter((x) => x.kind === kind).map((x) => x.id);
        throw new ApiError(
          "invalid_request",
          `model "${id}" is a ${m.kind} model and cannot serve this endpoint` + (fits.length ? `; use one of: ${fits.join(", ")}` : ""),
          { param: "model" },
        );
      }
      return m;
    },
    /** Absolute path of one of a model's files. */
    file(m: ModelManifest, role: string): string {
      const p = m.files[role];
      if (!p) throw new Error(`model ${m.id} has no "${role}" file`);
      return isAbsolute(p) ? p : resolve(opts.baseDir, p);
    },
  };
}

/** Start-up check: every file a manifest names must exist. */
export function checkModelFiles(models: ModelManifest[], baseDir: string): void {
  models.forEach((m, i) => {
    for (const [role, p] of Object.entries(m.files)) {
      const abs = isAbsolute(p) ? p : resolve(baseDir, p);
      if (!existsSync(abs)) throw new ConfigError(`models[${i}].files.${role}: file not found: ${abs}`);
    }
  });
}
