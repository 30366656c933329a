import { existsSync, statSync } from "node:fs";
import { isAbsolute, resolve } from "node:path";
import { ApiError } from "../lib/errors";
import { ConfigError } from "../lib/config";
import type { Logger } from "../lib/log";
import { slotCount, slotQueue, type ModelKind, type ModelManifest, type RetiredModel } from "../lib/manifest";
import { DeviceUnavailableError } from "./onnx-device";
import type { ChatEngine, ClassifierEngine, EmbeddingEngine, ImageEngine, ModelEngine, RerankerEngine } from "./types";
import { GgufFormatError, ggufVerdict, ggufVerdictSync } from "./gguf-check";
import { ggufFiles, ggufLoadError } from "./model-files";
import { createResidency, ModelRemovedError, type Resident, type ResidencyOptions, type ResidencyStatus } from "./residency";

// Model id → manifest → engine. The one place a model id is resolved: an unknown or retired id
// is a 404 "model not found" in every wire format (spec §7, §9). Engines are made by factories
// (one per kind), created on first use and loaded at start or on first use per the manifest.
//
// The served set changes on a config reload (SIGHUP, src/ops/reload.ts): `apply` lists new models at
// once, and takes removed ones out of the list so that new requests get the 404 at once. A request
// holds its model's engine (`use`) from the moment it resolves the id until it has finished,
// streams included; an engine that left the set — its model removed, or replaced because its
// manifest changed — is unloaded only when the last request holding it lets go. A load of it still
// in progress is stopped at once (residency.stopLoad): a model removed from the config does not go
// on filling memory.

export interface ModelEntry {
  id: string;
  object: "model";
  created: number;
  owned_by: string;
  name: string;
  kind: ModelKind;
  max_context: number;
  supports_vision?: true;
  /** Its price (USD; pricingOf in src/2-services/billing/pricing.ts), added by the models route. */
  pricing?: Record<string, number>;
}

type Factory<E> = (manifest: ModelManifest, file: (role: string) => string) => E;

/** One factory per model kind; a kind without one is listed but answers 503 model_unavailable. */
export interface EngineFactories {
  chat?: Factory<ChatEngine>;
  embedding?: Factory<EmbeddingEngine>;
  classifier?: Factory<ClassifierEngine>;
  reranker?: Factory<RerankerEngine>;
  image?: Factory<ImageEngine>;
}

interface EngineOf {
  chat: ChatEngine;
  embedding: EmbeddingEngine;
  classifier: ClassifierEngine;
  reranker: RerankerEngine;
  image: ImageEngine;
}

/** A request's hold on a model's engine: release it (idempotent) once the request has finished. */
export interface EngineUse<E> {
  manifest: ModelManifest;
  engine: E;
  release(): void;
}

/** What `apply` changed. Price, name and load are changed in place; anything else gets a new engine. */
export interface ModelChanges {
  added: string[];
  removed: string[];
  replaced: string[];
  /** Fields changed in place, as "<id>.<field>". */
  updated: string[];
}

/** One served model: its manifest and (once used) its engine, and the requests holding that engine. */
interface Served extends Resident {
  manifest: ModelManifest;
  baseDir: string;
  created: number;
  /** The engine, once made (`engine()` makes it). */
  made?: ModelEngine;
  holds: number;
  retired: boolean;
  /** A load the registry started in the background (a model added by a reload with load = "start"). */
  loading?: Promise<void>;
  /** The unload of an engine that left the served set, once started (never twice). */
  disposing?: Promise<void>;
}

/** Manifest fields that can change without a new engine: they are read per request, not by the engine. */
const IN_PLACE = ["price", "name", "load", "load_timeout_s"] as const;

export type Registry = ReturnType<typeof createRegistry>;

export function createRegistry(
  models: ModelManifest[],
  retired: RetiredModel[],
  opts: {
    baseDir: string;
    created?: number;
    now?: () => number;
    engines?: EngineFactories;
    logger?: Logger;
    /** Memory planning, keep-alive (src/3-engines/residency.ts); default: no planner, 300 s keep-alive. */
    residency?: Omit<ResidencyOptions, "logger" | "now">;
  },
) {
  const now = () => Math.floor((opts.now ?? Date.now)() / 1000);
  const startedAt = opts.created !== undefined ? Math.floor(opts.created / 1000) : now();
  const makeServed = (manifest: ModelManifest, baseDir: string, created: number): Served => {
    const s: Served = {
      manifest,
      baseDir,
      created,
      holds: 0,
      retired: false,
      engine: () => engineOf(s, s.manifest.kind),
      file: (role) => fileOf(s.manifest, role, s.baseDir),
    };
    return s;
  };
  let served = new Map<string, Served>(models.map((m) => [m.id, makeServed(m, opts.baseDir, startedAt)]));
  let retiredById = new Map(retired.map((r) => [r.id, r]));
  /** Engines that left the served set and still run requests; unloaded when their last hold goes. */
  const retiring = new Map<Served, () => void>();
  const disposed = new Set<Promise<void>>();
  let entries: readonly ModelEntry[] = [];

  const toEntry = (s: Served): ModelEntry => ({
    id: s.manifest.id,
    object: "model",
    created: s.created,
    owned_by: "appliance",
    name: s.manifest.name,
    kind: s.manifest.kind,
    max_context: s.manifest.max_context,
    ...(s.manifest.vision ? { supports_vision: true as const } : {}),
  });
  // A new array on every change: callers may cache what they derive from it by its identity.
  const rebuild = () => (entries = Object.freeze([...served.values()].map(toEntry)));
  rebuild();

  const fileOf = (m: ModelManifest, role: string, baseDir: string): string => {
    const p = m.files[role];
    if (!p) throw new Error(`model ${m.id} has no "${role}" file`);
    return isAbsolute(p) ? p : resolve(baseDir, p);
  };
  const file = (m: ModelManifest, role: string): string => fileOf(m, role, served.get(m.id)?.baseDir ?? opts.baseDir);

  function servedAs(id: string, kind?: ModelKind): Served {
    const s = served.get(id);
    if (!s) {
      const r = retiredById.get(id);
      const hint = r ? ` (retired${r.replaced_by ? `; use "${r.replaced_by}"` : ""})` : "";
      throw new ApiError("model_not_found", `model not found: "${id}"${hint}`, { param: "model" });
    }
    const m = s.manifest;
    if (kind && m.kind !== kind) {
      const fits = [...served.values()].filter((x) => x.manifest.kind === kind).map((x) => x.manifest.id);
      throw new ApiError(
        "wrong_model_kind",
        `model "${id}" is a ${m.kind} model and cannot serve this endpoint` + (fits.length ? `; use one of: ${fits.join(", ")}` : ""),
        { param: "model" },
      );
    }
    return s;
  }

  function engineOf<K extends ModelKind>(s: Served, kind: K): EngineOf[K] {
    if (!s.made) {
      const m = s.manifest;
      const factory = opts.engines?.[kind] as Factory<EngineOf[K]> | undefined;
      if (!factory) throw new ApiError("model_unavailable", `no ${kind} engine is available for "${m.id}" in this build`);
      s.made = factory(m, (role) => fileOf(m, role, s.baseDir));
    }
    return s.made as EngineOf[K];
  }

  function retire(s: Served): void {
    s.retired = true;
    void residency.stopLoad(s, new ModelRemovedError(s.manifest.id));
    const { promise, resolve } = Promise.withResolvers<void>();
    retiring.set(s, resolve);
    disposed.add(promise);
    void promise.then(() => disposed.delete(promise));
    if (s.holds === 0) void dispose(s);
  }

  function dispose(s: Served): Promise<void> {
    s.disposing ??= (async () => {
      await s.loading?.catch(() => undefined); // a load under way would otherwise finish after the unload
      await residency.stopLoad(s, new ModelRemovedError(s.manifest.id));
      try {
        await s.made?.unload();
        if (s.made) opts.logger?.info("model engine unloaded: its model left the config or changed", { model: s.manifest.id });
      } catch (e) {
        opts.logger?.error("model engine failed to unload", { model: s.manifest.id, error: (e as Error).message });
      } finally {
        retiring.get(s)?.();
        retiring.delete(s);
      }
    })();
    return s.disposing;
  }

  /** Starts loading a model in the background (a reload's new model with load = "start"). */
  function loadInBackground(s: Served): void {
    const m = s.manifest;
    if (m.load !== "start" || !opts.engines?.[m.kind]) return;
    const failed = (e: unknown) => {
      if (!(e instanceof DeviceUnavailableError)) opts.logger?.error("model failed to load in the background", { model: m.id, error: (e as Error).message });
    };
    try {
      engineOf(s, m.kind);
      s.loading = residency.load(s);
      s.loading.catch(() => undefined); // residency logged why
    } catch (e) {
      failed(e); // the factory refused: the model stays listed and answers with the same error
    }
  }

  const residency = createResidency(() => served.values(), { keepAliveS: 300, ...opts.residency, now: opts.now, logger: opts.logger });

  /** A first_use model's GGUF headers at start: a corrupt file is logged once, with its path, and the model shows "failed". */
  async function checkHeadersAtStart(s: Served, i: number): Promise<void> {
    for (const { role, path } of ggufFiles(s.manifest, (r) => fileOf(s.manifest, r, s.baseDir))) {
      const problem = await ggufVerdict(path).then(
        () => null,
        (e) => (e instanceof GgufFormatError ? e : null), // unreadable now: its load says why
      );
      if (!problem) continue;
      opts.logger?.error("model cannot load: its file is not a valid GGUF; it stays listed and answers 503 model_load_failed", {
        model: s.manifest.id,
        field: `models[${i}].files.${role}`,
        error: problem.message,
      });
      residency.fail(s, ggufLoadError(s.manifest, role, problem).message);
      return;
    }
  }

  const registry = {
    list: (): readonly ModelEntry[] => entries,
    entry(id: string): ModelEntry {
      servedAs(id);
      return entries.find((e) => e.id === id)!;
    },
    /** The manifest for `id`, or a 404 naming the id (and its replacement when retired). */
    resolve(id: string, kind?: ModelKind): ModelManifest {
      return servedAs(id, kind).manifest;
    },
    /** Absolute path of one of a model's files. */
    file,
    /**
     * The engine serving `id` as `kind` now (404 for an unknown id, 400 for a model of another
     * kind), without holding it: requests take `use` instead.
     */
    engine<K extends ModelKind>(id: string, kind: K): EngineOf[K] {
      return engineOf(servedAs(id, kind), kind);
    },
    chatEngine: (id: string) => registry.engine(id, "chat"),
    /**
     * The manifest and engine of `id`, loaded, held until `release()`: a reload that removes or
     * replaces the model unloads this engine only after every hold on it is released, and no
     * model a request holds is unloaded to make room. A model not loaded is loaded first
     * (residency.ts): the wait counts against the model's queue (`queue`, `queue_wait_s`).
     */
    async use<K extends ModelKind>(id: string, kind: K, signal?: AbortSignal, o: { batch?: boolean } = {}): Promise<EngineUse<EngineOf[K]>> {
      const s = servedAs(id, kind);
      const engine = engineOf(s, kind);
      s.holds++;
      let released = false;
      const release = () => {
        if (released) return;
        released = true;
        if (--s.holds === 0 && s.retired) void dispose(s);
        else if (!s.retired) residency.idle(s);
      };
      try {
        await residency.ready(s, { signal, ...loadQueue(s.manifest, o.batch === true) });
      } catch (e) {
        release();
        throw e;
      }
      return { manifest: s.manifest, engine, release };
    },
    /** `fn` with `id`'s manifest and engine, held until the promise it returns settles. */
    async using<K extends ModelKind, T>(id: string, kind: K, fn: (manifest: ModelManifest, engine: EngineOf[K]) => Promise<T>, signal?: AbortSignal): Promise<T> {
      const use = await registry.use(id, kind, signal);
      try {
        return await fn(use.manifest, use.engine);
      } finally {
        use.release();
      }
    },
    /**
     * Loads every model whose manifest says `load = "start"` and whose kind has an engine. A file
     * the engine cannot read stops the start with one line naming the model and its files, not
     * the engine library's own error and stack; a device the model asked for and this host lacks
     * (DeviceUnavailableError) leaves only that model unavailable.
     */
    async loadAtStart(): Promise<void> {
      for (const [i, s] of [...served.values()].entries()) {
        const m = s.manifest;
        // Every model's GGUF headers, loaded now or not: a corrupt first_use model is logged and
        // shows "failed" from the start, and the others serve (a pinned one stops the start below).
        if (m.load !== "start") await checkHeadersAtStart(s, i);
        if (m.load !== "start" || !opts.engines?.[m.kind]) continue;
        try {
          engineOf(s, m.kind);
          await residency.load(s);
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
    /**
     * Makes `models` the served set (a config reload). Every file of a new or changed model must
     * exist first, else a ConfigError and nothing changes. New models are listed at once and load
     * per their `load`; removed ones leave the list at once; a model whose manifest changed beyond
     * price, name and load gets a new engine for new requests. Engines that left the set are
     * unloaded once the requests holding them finish.
     */
    apply(next: ModelManifest[], o: { baseDir: string; retired?: RetiredModel[] }): ModelChanges {
      const changes: ModelChanges = { added: [], removed: [], replaced: [], updated: [] };
      const fresh: { s: Served; i: number }[] = [];
      const kept: { s: Served; m: ModelManifest }[] = [];
      for (const [i, m] of next.entries()) {
        const old = served.get(m.id);
        if (!old) {
          changes.added.push(m.id);
          fresh.push({ s: makeServed(m, o.baseDir, now()), i });
        } else if (engineKey(old.manifest, old.baseDir) !== engineKey(m, o.baseDir)) {
          changes.replaced.push(m.id);
          fresh.push({ s: makeServed(m, o.baseDir, old.created), i });
        } else kept.push({ s: old, m });
      }
      for (const { s, i } of fresh) {
        checkFiles(s.manifest, i, s.baseDir);
        // A reload is refused for a corrupt GGUF, as for a missing file: the served set stays as it is.
        const bad = headerProblems(s.manifest, i, s.baseDir)[0];
        if (bad) throw new ConfigError(`${bad.field}: ${bad.error.message}`);
      }
      // Checked: from here on nothing throws.
      const ids = new Set(next.map((m) => m.id));
      const retiredNow = [...served.values()].filter((s) => !ids.has(s.manifest.id) || changes.replaced.includes(s.manifest.id));
      changes.removed = retiredNow.filter((s) => !ids.has(s.manifest.id)).map((s) => s.manifest.id);
      for (const { s, m } of kept) {
        for (const f of IN_PLACE) {
          if (JSON.stringify(s.manifest[f] ?? null) === JSON.stringify(m[f] ?? null)) continue;
          changes.updated.push(`${m.id}.${f}`);
          // In place: the manifest object is the one services and the meter already hold.
          if (m[f] === undefined) delete s.manifest[f];
          else (s.manifest as Record<string, unknown>)[f] = m[f];
        }
      }
      const byId = new Map([...kept.map(({ s }) => s), ...fresh.map(({ s }) => s)].map((s) => [s.manifest.id, s]));
      served = new Map(next.map((m) => [m.id, byId.get(m.id)!]));
      if (o.retired) retiredById = new Map(o.retired.map((r) => [r.id, r]));
      rebuild();
      for (const s of retiredNow) retire(s);
      for (const { s } of fresh) loadInBackground(s);
      for (const { s, m } of kept) if (!s.made?.loaded && m.load === "start" && changes.updated.includes(`${m.id}.load`)) loadInBackground(s);
      return changes;
    },
    /** Every manifest served now, in order. */
    manifests: (): ModelManifest[] => [...served.values()].map((s) => s.manifest),
    /** Resolves once every engine that left the served set so far has been unloaded. */
    async settled(): Promise<void> {
      await Promise.all(disposed);
    },
    /** Each served model's residency: loaded where, how much memory, idle for how long (`appliance ps`). */
    status: (): ResidencyStatus[] => [...served.values()].map((s) => residency.status(s)),
    /** An admin's load of `id` (placed by the planner like a request's), or unload (once idle). */
    async adminLoad(id: string): Promise<ResidencyStatus> {
      const s = servedAs(id);
      engineOf(s, s.manifest.kind);
      await residency.load(s);
      return residency.status(s);
    },
    async adminUnload(id: string): Promise<"unloaded" | "when_idle" | "not_loaded"> {
      const s = servedAs(id);
      return s.made ? residency.unload(s) : "not_loaded";
    },
    /** Unloads idle models placed on the devices `on` matches (a rental takes the GPU); the ids that stay. */
    vacate: (on: (device: string) => boolean): Promise<string[]> => residency.vacate(on),
    /** Loaded engines with whether a request holds them or they are pinned (rentals' rule for a free GPU). */
    holding: (): { engine: ModelEngine; busy: boolean; device: string | null }[] =>
      [...served.values()]
        .filter((s) => s.made?.loaded)
        .map((s) => ({ engine: s.made!, busy: s.holds > 0 || s.manifest.load === "start", device: residency.placement(s)?.device ?? null })),
    /** At shutdown, once requests have drained: every engine, those that left the served set too. */
    async unloadAll(): Promise<void> {
      residency.stop();
      for (const s of [...retiring.keys()]) await dispose(s);
      for (const s of served.values()) await s.made?.unload();
    },
    /** Every engine made, those still finishing requests for a model that left the set first. */
    engines: (): ModelEngine[] => [...[...retiring.keys()].map((s) => s.made), ...[...served.values()].map((s) => s.made)].filter((e): e is ModelEngine => e !== undefined),
  };
  return registry;
}

/** What an engine is built from: the manifest without the fields read per request, files resolved. */
function engineKey(m: ModelManifest, baseDir: string): string {
  const rest: Record<string, unknown> = { ...m };
  for (const f of IN_PLACE) delete rest[f];
  rest.files = Object.fromEntries(Object.entries(m.files).map(([role, p]) => [role, isAbsolute(p) ? p : resolve(baseDir, p)]));
  return JSON.stringify(Object.keys(rest).sort().map((k) => [k, rest[k]]));
}

function checkFiles(m: ModelManifest, i: number, baseDir: string): void {
  for (const [role, p] of Object.entries(m.files)) {
    const abs = isAbsolute(p) ? p : resolve(baseDir, p);
    if (!existsSync(abs)) throw new ConfigError(`models[${i}].files.${role}: file not found: ${abs}`);
    // An interrupted copy or download leaves an empty file; no engine reads weights from one.
    const st = statSync(abs);
    if (st.isFile() && st.size === 0) throw new ConfigError(`models[${i}].files.${role}: file is empty: ${abs}`);
  }
}

/** A model file whose GGUF header does not hold together (src/3-engines/gguf-check.ts). */
export interface HeaderProblem {
  id: string;
  /** `models[i].files.<role>` */
  field: string;
  error: GgufFormatError;
}

/** The GGUF files of `m` whose header does not hold together (each read once per version of the file). */
function headerProblems(m: ModelManifest, i: number, baseDir: string): HeaderProblem[] {
  const out: HeaderProblem[] = [];
  for (const { role, path } of ggufFiles(m, (r) => pathOf(m, r, baseDir))) {
    try {
      ggufVerdictSync(path);
    } catch (e) {
      // A file that cannot be read now is left to its load, which says why.
      if (e instanceof GgufFormatError) out.push({ id: m.id, field: `models[${i}].files.${role}`, error: e });
    }
  }
  return out;
}

/**
 * Start-up check: every file a manifest names must exist, and no model file is empty (else a
 * ConfigError). GGUF headers are checked too, and what does not hold together is returned rather
 * than thrown: a server starts with such a model listed as failed (registry.loadAtStart logs it);
 * `config check`, `doctor` and `models add` refuse it.
 */
export function checkModelFiles(models: ModelManifest[], baseDir: string): HeaderProblem[] {
  models.forEach((m, i) => checkFiles(m, i, baseDir));
  return models.flatMap((m, i) => headerProblems(m, i, baseDir));
}

const pathOf = (m: ModelManifest, role: string, baseDir: string): string => {
  const p = m.files[role]!;
  return isAbsolute(p) ? p : resolve(baseDir, p);
};

/**
 * How many requests may wait for a model to load, and how long for memory: for models with worker
 * slots (chat, image) what their slots and queue hold; embedding, classifier and reranker engines batch
 * whatever comes, and batch lines wait without bound (spec §8), as they do for slots.
 */
function loadQueue(m: ModelManifest, batch: boolean): { maxQueue: number; maxWaitMs: number } {
  if (batch || m.kind === "embedding" || m.kind === "classifier" || m.kind === "reranker") return { maxQueue: Infinity, maxWaitMs: batch ? Infinity : slotQueue(m).maxWaitMs };
  const q = slotQueue(m);
  return { maxQueue: q.maxQueue + slotCount(m), maxWaitMs: q.maxWaitMs };
}
