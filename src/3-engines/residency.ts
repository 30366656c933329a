import { ApiError } from "../lib/errors";
import type { Logger } from "../lib/log";
import { withLoadSignal } from "./load-signal";
import { DeviceUnavailableError } from "./onnx-device";
import type { DeviceInfo, Fit, Footprint, LoadSettings, LoadWants, ModelProfile, Room } from "./planner/types";
import type { ModelManifest } from "../lib/manifest";
import { checkGgufHeaders, loadTimeoutS } from "./model-files";
import { GgufFormatError } from "./gguf-check";
import type { ModelEngine } from "./types";

// Which models are in memory (issue 28). A request holds its model (registry.use) and then waits
// here until the model is loaded. A model not loaded is placed by the memory planner on the
// memory left by the models that stay; idle models (no request holding them, not pinned by
// `load = "start"`) are unloaded to make room, least recently used first; when only models busy
// with requests stand in the way, the request waits for them to finish (never cutting one), up to
// its queue wait; a model that cannot fit even with every unpinned model gone is refused with a
// 503 saying how much memory is missing. An idle model is unloaded after its keep-alive.
//
// Before a load, the GGUF headers of the model's files are checked (src/3-engines/gguf-check.ts): a
// file that does not hold together fails the load with its reason, and the model shows "failed" with
// it (`appliance ps`, the admin API) until a later load succeeds. A load is bounded in time
// (load_timeout_s) and can be stopped: when it outlasts its bound, or its model leaves the config
// (registry.apply), its abort signal fires; the chat engine hands it to node-llama-cpp, which stops
// reading and frees what it loaded. An engine that cannot stop (ONNX Runtime sessions) is given up
// on and unloaded once its load ends.
//
// Plans, evictions and loads run one at a time (one lock): two loads never plan on the same free
// memory. Nothing here runs on a request that finds its model loaded except a timestamp and a timer
// cleared: the bookkeeping an already-loaded model's request pays.

/** What the residency manager needs of a served model (the registry's entry). */
export interface Resident {
  readonly manifest: ModelManifest;
  /** The model's engine, made on first call. */
  engine(): ModelEngine;
  /** The engine if it has been made (reads never make one). */
  readonly made?: ModelEngine;
  /** Requests holding it now. */
  readonly holds: number;
  file(role: string): string;
}

/** The memory planner as residency uses it (src/3-engines/planner/planner.ts wires the real one). */
export interface MemoryPlanner {
  /** Devices and their memory now. */
  devices(): Promise<DeviceInfo[]>;
  profile(m: ModelManifest, file: (role: string) => string): Promise<ModelProfile>;
  wants(m: ModelManifest, devices: readonly DeviceInfo[]): LoadWants;
  /** `name` is the model's id, for the refusal's sentence. */
  fit(profile: ModelProfile, wants: LoadWants, gpus: Room[], cpu: Room, name: string): Promise<Fit>;
}

export interface Placement {
  device: string;
  /** Where footprint.gpuMb lies when not on `device` (a CPU placement inside a GPU runtime). */
  gpuDevice?: string;
  settings: LoadSettings;
  footprint: Footprint;
}

interface State {
  lastUsed: number;
  placement: Placement | null;
  loading: Promise<void> | null;
  /** Stops the load in progress (its model removed, or its time up). */
  stop: AbortController | null;
  /** Loads started so far: a load given up on is unloaded when it ends only if none started since. */
  loads: number;
  /** The engine's last load call, settled once it has ended (and, given up on, been unloaded). */
  running: Promise<void>;
  /** Why the last load failed; null once one succeeds. */
  failed: string | null;
  /** Requests waiting for this model to load. */
  waiting: number;
  timer: ReturnType<typeof setTimeout> | null;
  /** An admin asked for an unload while requests held it: done when the last one ends. */
  unloadWhenIdle: boolean;
}

/** One model's residency, for `appliance ps`, the console and the admin API. */
export interface ResidencyStatus {
  id: string;
  kind: ModelManifest["kind"];
  state: "loaded" | "loading" | "unloaded" | "failed";
  /** Why the last load failed (state "failed"), else null. */
  error: string | null;
  pinned: boolean;
  /** Seconds an idle loaded model stays loaded; -1: until room is needed. */
  keep_alive_s: number;
  device: string | null;
  gpu_layers: number | null;
  context_size: number | null;
  slots: number | null;
  memory_mb: { gpu: number; cpu: number } | null;
  in_flight: number;
  waiting: number;
  /** Seconds since the last request ended (null while one runs, or never used). */
  idle_s: number | null;
  last_used: number | null;
}

export interface ResidencyOptions {
  /** Absent: memory is not accounted (every model fits); keep-alive still applies. */
  planner?: MemoryPlanner;
  /** Why a device may not take models now (a rental holds its GPU), else null. */
  blocked?: (d: DeviceInfo) => string | null;
  /** Default keep-alive in seconds for models whose manifest sets none. */
  keepAliveS: number;
  now?: () => number;
  logger?: Logger;
}

const pinned = (m: ModelManifest) => m.load === "start";

export type Residency = ReturnType<typeof createResidency>;

export function createResidency(residents: () => Iterable<Resident>, o: ResidencyOptions) {
  const now = o.now ?? Date.now;
  const states = new WeakMap<Resident, State>();
  let lock: Promise<unknown> = Promise.resolve();
  /** Wakes requests waiting for busy models to let go of memory (made only while one waits). */
  let released: PromiseWithResolvers<void> | null = null;
  const loaded = (r: Resident) => r.made?.loaded === true;

  const stateOf = (r: Resident): State => {
    let s = states.get(r);
    if (!s) states.set(r, (s = { lastUsed: 0, placement: null, loading: null, stop: null, loads: 0, running: Promise.resolve(), failed: null, waiting: 0, timer: null, unloadWhenIdle: false }));
    return s;
  };
  const keepAliveOf = (m: ModelManifest): number => m.keep_alive_s ?? o.keepAliveS;

  function serially<T>(fn: () => Promise<T>): Promise<T> {
    const run = lock.then(fn, fn);
    lock = run.catch(() => undefined);
    return run;
  }

  function wake(): void {
    released?.resolve();
    released = null;
  }

  async function unload(r: Resident, why: string): Promise<void> {
    const s = stateOf(r);
    const e = r.made;
    if (!e?.loaded) return void (s.placement = null);
    const freed = s.placement?.footprint;
    await e.unload();
    s.placement = null;
    o.logger?.info("model unloaded", { model: r.manifest.id, reason: why, ...(freed ? { freed_mb: { gpu: freed.gpuMb, cpu: freed.cpuMb } } : {}) });
    wake();
  }

  /** Memory free for a new model on each usable device, with the models in `gone` unloaded. */
  function roomsWith(devices: DeviceInfo[], gone: ReadonlySet<Resident>, self: Resident): { gpus: Room[]; cpu: Room; blocked: string[] } {
    const held = new Map<string, number>();
    const freed = new Map<string, number>();
    let cpuHeld = 0;
    let cpuFreed = 0;
    for (const r of residents()) {
      const p = r === self ? null : stateOf(r).placement;
      if (!p || !loaded(r)) continue;
      const into = gone.has(r) ? freed : held;
      const gpu = p.gpuDevice ?? p.device;
      into.set(gpu, (into.get(gpu) ?? 0) + p.footprint.gpuMb);
      if (gone.has(r)) cpuFreed += p.footprint.cpuMb;
      else cpuHeld += p.footprint.cpuMb;
    }
    const room = (d: DeviceInfo, ours: number, back: number): number => Math.max(0, Math.min(d.budgetMb - ours, d.freeMb + back));
    const cpuDevice = devices.find((d) => d.kind === "cpu")!;
    const gpus: Room[] = [];
    const blocked: string[] = [];
    for (const d of devices) {
      if (d.kind === "cpu") continue;
      const why = o.blocked?.(d) ?? null;
      if (why) blocked.push(`${d.id} (${d.name}) ${why}`);
      else gpus.push({ device: d, availableMb: room(d, held.get(d.id) ?? 0, freed.get(d.id) ?? 0) });
    }
    return { gpus, cpu: { device: cpuDevice, availableMb: room(cpuDevice, cpuHeld, cpuFreed) }, blocked };
  }

  const fitsIn = (f: Extract<Fit, { ok: true }>, rooms: { gpus: Room[]; cpu: Room }): boolean =>
    f.footprint.cpuMb <= rooms.cpu.availableMb &&
    (f.footprint.gpuMb === 0 || f.footprint.gpuMb <= (rooms.gpus.find((g) => g.device.id === (f.gpuDevice ?? f.device))?.availableMb ?? 0));

  /**
   * The engine's load, bounded by the model's load_timeout_s and stopped by `stop`. When it is given
   * up on while the engine goes on (an engine that cannot stop), the engine is unloaded once its
   * load ends, unless another load of the model started meanwhile.
   */
  async function loadEngine(r: Resident, engine: ModelEngine, settings: LoadSettings | undefined, stop: AbortController): Promise<void> {
    const m = r.manifest;
    const limitS = loadTimeoutS(m, (role) => r.file(role));
    const timer = setTimeout(
      () => stop.abort(new ApiError("model_load_failed", `model "${m.id}" did not load within ${limitS} s (load_timeout_s); the load was stopped`)),
      limitS * 1000,
    );
    const s = stateOf(r);
    const load = s.loads;
    const run = withLoadSignal(engine, stop.signal, () => engine.load(settings));
    s.running = run.then(noop, noop);
    try {
      await abortable(run, stop.signal);
    } catch (e) {
      if (stop.signal.aborted)
        s.running = run.then(async () => {
          if (s.loads !== load || !engine.loaded) return;
          o.logger?.warn("a model load given up on finished later: unloading it", { model: m.id });
          await engine.unload().catch(noop);
        }, noop);
      throw e;
    } finally {
      clearTimeout(timer);
    }
  }

  /** Loads `r` where the planner puts it, unloading idle models first when it needs their room. */
  async function bringIn(r: Resident, deadline: number, stop: AbortController): Promise<void> {
    stop.signal.throwIfAborted(); // stopped while it waited for the lock
    const engine = r.engine();
    const s = stateOf(r);
    if (engine.loaded) return;
    const m = r.manifest;
    await checkGgufHeaders(r.manifest, (x) => r.file(x), stop.signal);
    if (!o.planner) {
      await loadEngine(r, engine, undefined, stop);
      return;
    }
    const planner = o.planner;
    let profile: ModelProfile;
    try {
      profile = await planner.profile(m, (role) => r.file(role));
    } catch (e) {
      // Files the planner cannot read: the engine says at load what is wrong with them, or loads
      // what the planner does not know; either way without memory accounting, said once here.
      o.logger?.warn("memory planner cannot read the model's files: loading it without memory accounting", { model: m.id, error: (e as Error).message });
      await loadEngine(r, engine, undefined, stop);
      return;
    }
    for (;;) {
      stop.signal.throwIfAborted();
      const devices = await planner.devices();
      const wants = planner.wants(m, devices);
      const others = [...residents()].filter((x) => x !== r && stateOf(x).placement && loaded(x));
      const idle = others.filter((x) => x.holds === 0 && !pinned(x.manifest)).sort((a, b) => stateOf(a).lastUsed - stateOf(b).lastUsed);
      const busy = others.filter((x) => x.holds > 0 && !pinned(x.manifest));
      // The best this model can have once idle models make room; then only the room it needs is made.
      const best = await planner.fit(profile, wants, ...rooms(roomsWith(devices, new Set(idle), r)), `"${m.id}"`);
      if (best.ok) {
        const gone = new Set<Resident>();
        for (const x of idle) {
          if (fitsIn(best, roomsWith(devices, gone, r))) break;
          const p = stateOf(x).placement!;
          if ((p.gpuDevice ?? p.device) === (best.gpuDevice ?? best.device) || p.footprint.cpuMb > 0) gone.add(x);
        }
        for (const x of gone) await unload(x, `to make room for ${m.id}`);
        await loadEngine(r, engine, best.settings, stop);
        s.placement = { device: best.device, gpuDevice: best.gpuDevice, settings: best.settings, footprint: best.footprint };
        o.logger?.info("model placed", { model: m.id, ...best.settings, device: best.device, memory_mb: { gpu: best.footprint.gpuMb, cpu: best.footprint.cpuMb }, unloaded: [...gone].map((x) => x.manifest.id) });
        return;
      }
      const all = roomsWith(devices, new Set([...idle, ...busy]), r);
      const someday = await planner.fit(profile, wants, ...rooms(all), `"${m.id}"`);
      if (!someday.ok) {
        const rented = all.blocked.length ? ` (not usable now: ${all.blocked.join("; ")})` : "";
        throw new NoRoomError(`model "${m.id}" cannot be loaded: ${someday.reason}${rented}`);
      }
      // Only models busy with requests stand in the way: wait for one to finish, then plan again.
      const left = deadline - now();
      if (left <= 0)
        throw new ApiError("workers_busy", `model "${m.id}" waits for memory held by requests to ${busy.map((x) => `"${x.manifest.id}"`).join(", ")}; retry shortly`, { headers: { "retry-after": "5" } });
      await Promise.race([(released ??= Promise.withResolvers<void>()).promise, Bun.sleep(Math.min(left, 1000))]);
    }
  }

  /**
   * One load of `r` (shared by everyone waiting for it), under the lock, with its own stop. A
   * failure is remembered as the model's state and logged, except no room for it (memory that busy
   * models hold, a budget it does not fit, its device rented: the model itself is fine) and a stop
   * because the model left the config.
   */
  function startLoad(r: Resident, deadline: number): Promise<void> {
    const s = stateOf(r);
    const stop = new AbortController();
    s.stop = stop;
    s.loads++;
    // A stop answers the waiters at once, even while another model's load holds the lock.
    return abortable(serially(() => bringIn(r, deadline, stop)), stop.signal)
      .then(
        () => void (s.failed = null),
        (e: unknown) => {
          const removed = stop.signal.aborted && stop.signal.reason instanceof ModelRemovedError;
          // (no room for it now, the memory busy or its device rented, is no failure of the model: it stays "unloaded")
          if (!removed && !(e instanceof NoRoomError) && !(e instanceof ApiError && e.code === "workers_busy")) {
            s.failed = (e as Error).message ?? String(e);
            const cause = (e as { cause?: unknown }).cause;
            // A device the host lacks was logged by its engine, once.
            if (!(e instanceof DeviceUnavailableError))
              o.logger?.error("model failed to load", { model: r.manifest.id, error: cause instanceof GgufFormatError ? cause.message : s.failed });
          }
          throw e;
        },
      )
      .finally(() => {
        s.loading = null;
        if (s.stop === stop) s.stop = null;
      });
  }

  const rooms = (x: { gpus: Room[]; cpu: Room }): [Room[], Room] => [x.gpus, x.cpu];

  function scheduleIdle(r: Resident): void {
    const s = stateOf(r);
    if (s.timer) clearTimeout(s.timer);
    s.timer = null;
    if (!loaded(r)) return;
    if (s.unloadWhenIdle) {
      s.unloadWhenIdle = false;
      void serially(() => (r.holds === 0 ? unload(r, "asked by an admin") : Promise.resolve()));
      return;
    }
    if (pinned(r.manifest)) return;
    const keep = keepAliveOf(r.manifest);
    if (keep < 0) return;
    const fire = () => void serially(() => (r.holds === 0 && loaded(r) ? unload(r, `idle for ${keep} s (keep_alive_s)`) : Promise.resolve()));
    if (keep === 0) return fire();
    s.timer = setTimeout(fire, keep * 1000);
    s.timer.unref?.();
  }

  return {
    /**
     * Waits until `r` (held by the caller) is loaded: at once when it is, else while the planner
     * places it and idle models make room. `maxQueue` requests may wait for one model's load (more
     * get 429); waiting for busy models counts against `maxWaitMs`.
     */
    async ready(r: Resident, opts: { signal?: AbortSignal; maxQueue: number; maxWaitMs: number }): Promise<void> {
      const s = stateOf(r);
      s.lastUsed = now();
      if (s.timer) (clearTimeout(s.timer), (s.timer = null));
      if (r.engine().loaded) return;
      if (s.waiting >= opts.maxQueue)
        throw new ApiError("workers_busy", `model "${r.manifest.id}" is loading and ${s.waiting} requests already wait for it; retry shortly`, { headers: { "retry-after": "5" } });
      s.waiting++;
      try {
        const deadline = now() + opts.maxWaitMs;
        // Shared by every request waiting for this model: one leaving does not stop the load.
        s.loading ??= startLoad(r, deadline);
        await (opts.signal ? abortable(s.loading, opts.signal) : s.loading);
      } finally {
        s.waiting--;
      }
    },
    /** A request let go of `r`; when none holds it, its keep-alive starts (or a pending unload runs). */
    idle(r: Resident): void {
      stateOf(r).lastUsed = now();
      if (r.holds === 0) scheduleIdle(r);
      wake();
    },
    /** Loads a pinned model at start (or an admin's load); refuses with the planner's reason. */
    async load(r: Resident): Promise<void> {
      const s = stateOf(r);
      s.lastUsed = now();
      s.loading ??= startLoad(r, now());
      await s.loading;
      if (r.holds === 0) scheduleIdle(r);
    },
    /** An admin's unload: now when idle, else once the requests holding it end. */
    async unload(r: Resident): Promise<"unloaded" | "when_idle" | "not_loaded"> {
      if (!loaded(r)) return "not_loaded";
      if (r.holds > 0) {
        stateOf(r).unloadWhenIdle = true;
        return "when_idle";
      }
      await serially(() => unload(r, "asked by an admin"));
      return "unloaded";
    },
    /**
     * Unloads the idle, unpinned models placed on devices `on` matches (a rental is about to take
     * the GPU); returns the ids of those that stay (busy or pinned).
     */
    async vacate(on: (device: string) => boolean): Promise<string[]> {
      return serially(async () => {
        const stay: string[] = [];
        for (const r of residents()) {
          const p = stateOf(r).placement;
          if (!p || !loaded(r) || !on(p.gpuDevice ?? p.device)) continue;
          if (r.holds > 0 || pinned(r.manifest)) stay.push(r.manifest.id);
          else await unload(r, "its GPU is being rented");
        }
        return stay;
      });
    },
    /**
     * Stops `r`'s load in progress, if any (its model left the config): requests waiting for it get
     * `reason` at once. Resolves once the engine's load has ended (an engine that cannot stop: once
     * it finished and was unloaded).
     */
    async stopLoad(r: Resident, reason: ModelRemovedError): Promise<void> {
      const s = states.get(r);
      s?.stop?.abort(reason);
      await s?.loading?.catch(noop);
      await s?.running;
    },
    /** Remembers a model's files as unloadable (the start-up check found them corrupt): its state says why. */
    fail(r: Resident, reason: string): void {
      stateOf(r).failed = reason;
    },
    /** Where `r` is placed (null when not loaded, or loaded outside the planner). */
    placement: (r: Resident): Placement | null => (loaded(r) ? stateOf(r).placement : null),
    status(r: Resident): ResidencyStatus {
      const s = stateOf(r);
      const e = r.made;
      const p = loaded(r) ? s.placement : null;
      const idleFor = loaded(r) && r.holds === 0 && s.lastUsed > 0 ? Math.round((now() - s.lastUsed) / 1000) : null;
      return {
        id: r.manifest.id,
        kind: r.manifest.kind,
        state: loaded(r) ? "loaded" : s.loading ? "loading" : s.failed !== null ? "failed" : "unloaded",
        error: loaded(r) ? null : s.failed,
        pinned: pinned(r.manifest),
        keep_alive_s: pinned(r.manifest) ? -1 : keepAliveOf(r.manifest),
        device: p?.device ?? (loaded(r) ? (e?.device ?? null) : null),
        gpu_layers: p?.settings.gpuLayers ?? null,
        context_size: p?.settings.contextSize ?? null,
        slots: p?.settings.slots ?? null,
        memory_mb: p ? { gpu: p.footprint.gpuMb, cpu: p.footprint.cpuMb } : null,
        in_flight: r.holds,
        waiting: s.waiting,
        idle_s: idleFor,
        last_used: s.lastUsed > 0 ? Math.floor(s.lastUsed / 1000) : null,
      };
    },
    /** Clears keep-alive timers (shutdown). */
    stop(): void {
      for (const r of residents()) {
        const s = states.get(r);
        if (s?.timer) (clearTimeout(s.timer), (s.timer = null));
      }
    },
  };
}

const noop = () => undefined;

/** No room for a model now (the budgets it does not fit, its device rented): 503, the model itself fine. */
class NoRoomError extends ApiError {
  constructor(message: string) {
    super("model_unavailable", message, { headers: { "retry-after": "60" } });
  }
}

/** The reason a load is stopped when its model leaves the config (a reload removed or replaced it). */
export class ModelRemovedError extends ApiError {
  constructor(id: string) {
    super("model_load_failed", `model "${id}" was removed or changed by a config reload while it loaded; its load was stopped`);
    this.name = "ModelRemovedError";
  }
}

/** `p`, or the signal's reason once it aborts (the load itself goes on for the others waiting). */
function abortable<T>(p: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    p.then(
      (v) => (signal.removeEventListener("abort", onAbort), resolve(v)),
      (e) => (signal.removeEventListener("abort", onAbort), reject(e)),
    );
  });
}
