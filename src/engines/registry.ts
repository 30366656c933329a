import { existsSync, statSync } from "node:fs";
import { isAbsolute, resolve } from "node:path";
import { ApiError } from "../api/http/errors";
import { ConfigError } from "../config";
import type { ModelKind, ModelManifest, RetiredModel } from "./manifest";
import { DeviceUnavailableError } from "./onnx-device";
import type { ChatEngine, ClassifierEngine, EmbeddingEngine, ImageEngine, ModelEngine } from "./types";

// Model id → manifest → engine. The one place a model id is resolved: an unknown or retired id
// is a 404 "model not found" in every wire format (spec §7, §9). Engines are made by factories
// (one per kind), created on first use and loaded at start or on first use per the manifest.

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

type Factory<E> = (manifest: ModelManifest, file: (role: string) => string) => E;

/** One factory per model kind; a kind without one is listed but answers 503 model_unavailable. */
export interface EngineFactories {
  chat?: Factory<ChatEngine>;
  embedding?: Factory<EmbeddingEngine>;
  classifier?: Factory<ClassifierEngine>;
  image?: Factory<ImageEngine>;
}

interface EngineOf {
  chat: ChatEngine;
  embedding: EmbeddingEngine;
  classifier: ClassifierEngine;
  image: ImageEngine;
}

export type Registry = ReturnType<typeof createRegistry>;

export function createRegistry(
  models: ModelManifest[],
  retired: RetiredModel[],
  opts: { baseDir: string; created?: number; engines?: EngineFactories },
) {
  const byId = new Map(models.map((m) => [m.id, m]));
  const retiredById = new Map(retired.map((r) => [r.id, r]));
  const engines = new Map<string, ModelEngine>();
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

  const file = (m: ModelManifest, role: string): string => {
    const p = m.files[role];
    if (!p) throw new Error(`model ${m.id} has no "${role}" file`);
    return isAbsolute(p) ? p : resolve(opts.baseDir, p);
  };

  const registry = {
    list: (): readonly ModelEntry[] => entries,
    entry(id: string): ModelEntry {
      registry.resolve(id);
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
    file,
    /** The engine serving `id` as `kind` (404 for an unknown id, 400 for a model of another kind). */
    engine<K extends ModelKind>(id: string, kind: K): EngineOf[K] {
      const m = registry.resolve(id, kind);
      let engine = engines.get(id);
      if (!engine) {
        const factory = opts.engines?.[kind] as Factory<EngineOf[K]> | undefined;
        if (!factory) throw new ApiError("model_unavailable", `no ${kind} engine is available for "${id}" in this build`);
        engine = factory(m, (role) => file(m, role));
        engines.set(id, engine);
      }
      return engine as EngineOf[K];
    },
    chatEngine: (id: string) => registry.engine(id, "chat"),
    /**
     * Loads every model whose manifest says `load = "start"` and whose kind has an engine. A file
     * the engine cannot read stops the start with one line naming the model and its files, not
     * the engine library's own error and stack; a device the model asked for and this host lacks
     * (DeviceUnavailableError) leaves only that model unavailable.
     */
    async loadAtStart(): Promise<void> {
      for (const [i, m] of models.entries()) {
        if (m.load !== "start" || !opts.engines?.[m.kind]) continue;
        try {
          await registry.engine(m.id, m.kind).load();
        } catch (e) {
          // The model asked for a device this host lacks (its engine logged why): the others serve,
          // and every request for it gets the same refusal.
          if (e instanceof DeviceUnavailableError) continue;
          const files = Object.keys(m.files).map((role) => `${role} ${file(m, role)}`).join(", ");
          const why = e instanceof Error ? e.message : String(e);
          throw new ConfigError(`models[${i}] "${m.id}": cannot load its files (${files}): ${why}`);
        }
      }
    },
    async unload(id: string): Promise<void> {
      await engines.get(id)?.unload();
    },
    async unloadAll(): Promise<void> {
      for (const e of engines.values()) await e.unload();
    },
    engines: () => [...engines.values()],
  };
  return registry;
}

/** Start-up check: every file a manifest names must exist, and no model file is empty. */
export function checkModelFiles(models: ModelManifest[], baseDir: string): void {
  models.forEach((m, i) => {
    for (const [role, p] of Object.entries(m.files)) {
      const abs = isAbsolute(p) ? p : resolve(baseDir, p);
      if (!existsSync(abs)) throw new ConfigError(`models[${i}].files.${role}: file not found: ${abs}`);
      // An interrupted copy or download leaves an empty file; no engine reads weights from one.
      const st = statSync(abs);
      if (st.isFile() && st.size === 0) throw new ConfigError(`models[${i}].files.${role}: file is empty: ${abs}`);
    }
  });
}
