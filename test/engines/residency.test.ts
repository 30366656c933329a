import { afterAll, expect, test } from "bun:test";
import { rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ApiError } from "../../src/1-api/http/errors";
import { loadSignalOf } from "../../src/3-engines/load-signal";
import type { ModelManifest } from "../../src/lib/manifest";
import { loadTimeoutS } from "../../src/3-engines/model-files";
import { createResidency, ModelRemovedError, type MemoryPlanner, type Resident } from "../../src/3-engines/residency";
import { memoryLogger } from "../../src/lib/log";
import { tempDir } from "../helpers/app";
import { attackGguf, validGguf } from "../models/gguf-bytes";
import type { ModelEngine } from "../../src/3-engines/types";
import type { DeviceInfo, Fit, LoadSettings, ModelProfile, Room } from "../../src/3-engines/planner/types";

// Scheduling of the residency manager with stand-in engines and a planner of fixed sizes (the
// real engines and planner are proven in test/planner/ and test/engines/budget.test.ts): who is
// unloaded to make room, in which order, when a request waits and when it is refused.

class StandIn implements ModelEngine {
  loaded = false;
  loads = 0;
  unloads = 0;
  settings: LoadSettings | undefined;
  constructor(readonly modelId: string) {}
  async load(s?: LoadSettings) {
    this.loaded = true;
    this.loads++;
    this.settings = s;
  }
  async unload() {
    this.loaded = false;
    this.unloads++;
  }
}

/** A GPU of `gpuMb` (and a host of `cpuMb`); each model takes its fixed MB on the GPU, or `cpuFallback` on the host. */
function world(gpuMb: number, sizes: Record<string, number>, o: { cpuMb?: number; cpuFallback?: boolean; onCpuHoldingGpu?: Record<string, number> } = {}) {
  const models = new Map<string, { r: Resident & { holds: number }; e: StandIn; pending: boolean }>();
  const gpu: DeviceInfo = { id: "cuda:0", kind: "cuda", name: "Test GPU", uuid: "GPU-1", totalMb: gpuMb, freeMb: gpuMb, budgetMb: gpuMb };
  const cpu: DeviceInfo = { id: "cpu", kind: "cpu", name: "host", totalMb: o.cpuMb ?? 1e6, freeMb: o.cpuMb ?? 1e6, budgetMb: o.cpuMb ?? 1e6 };
  let blocked: string | null = null;
  const planner: MemoryPlanner = {
    devices: async () => {
      // The device reports what the loaded stand-ins take, as a real one would.
      let used = 0;
      for (const { r, e } of models.values()) if (e.loaded && e.settings?.device !== "cpu") used += sizes[r.manifest.id]!;
      return [{ ...gpu, freeMb: gpuMb - used }, cpu];
    },
    profile: async (m) => ({ kind: m.kind, layers: 10, fileBytes: 0, footprint: async () => ({ gpuMb: 0, cpuMb: 0, parts: { weightsMb: 0, cacheMb: 0, computeMb: 0, projectorMb: 0 } }) }) as ModelProfile,
    wants: () => ({ devices: o.cpuFallback ? ["cuda", "cpu"] : ["cuda"], gpuLayers: "auto", contextSize: 512, slots: 1, maxContext: 512, maxSlots: 1, minContext: 256 }),
    fit: async (p: ModelProfile, _w, gpus: Room[], cpuRoom: Room): Promise<Fit> => {
      const id = [...models.values()].find((x) => x.r.manifest.kind === p.kind && x.pending)?.r.manifest.id;
      const need = sizes[id!]!;
      const room = gpus[0];
      // A CPU placement inside a GPU runtime: its compute buffer (MB) on the GPU, booked as gpuDevice.
      const onGpu = o.onCpuHoldingGpu?.[id!];
      if (onGpu !== undefined) {
        if (!room || onGpu > room.availableMb) return { ok: false, missingMb: onGpu - (room?.availableMb ?? 0), reason: `${id} needs ${onGpu} MB on the GPU beside the CPU` };
        return { ok: true, device: "cpu", gpuDevice: room.device.id, settings: { device: "cpu", gpuLayers: 0, contextSize: 512, slots: 1 }, footprint: { gpuMb: onGpu, cpuMb: need, parts: { weightsMb: need, cacheMb: 0, computeMb: onGpu, projectorMb: 0 } } };
      }
      if (room && need <= room.availableMb)
        return { ok: true, device: room.device.id, settings: { device: "cuda", gpuLayers: 10, contextSize: 512, slots: 1 }, footprint: { gpuMb: need, cpuMb: 0, parts: { weightsMb: need, cacheMb: 0, computeMb: 0, projectorMb: 0 } } };
      if (o.cpuFallback && need <= cpuRoom.availableMb)
        return { ok: true, device: "cpu", settings: { device: "cpu", gpuLayers: 0, contextSize: 512, slots: 1 }, footprint: { gpuMb: 0, cpuMb: need, parts: { weightsMb: need, cacheMb: 0, computeMb: 0, projectorMb: 0 } } };
      const missing = need - (room?.availableMb ?? 0);
      return { ok: false, missingMb: missing, reason: `${id} needs ${need} MB; ${room?.availableMb ?? 0} MB free: ${missing} MB missing` };
    },
  };
  let t = 0;
  const residency = createResidency(() => [...models.values()].map((x) => x.r), { planner, keepAliveS: -1, now: () => t, blocked: () => blocked });
  function add(id: string, load: "start" | "first_use" = "first_use") {
    const e = new StandIn(id);
    const r = { manifest: { id, kind: "chat", load, slots: 1, files: {} } as ModelManifest, engine: () => e, made: e, holds: 0, file: () => "" };
    models.set(id, { r, e, pending: false } as any);
  }
  for (const id of Object.keys(sizes)) add(id);
  /** A request for `id`: held while `hold` runs. */
  async function request(id: string, o2: { maxWaitMs?: number } = {}): Promise<{ release(): void }> {
    const x = models.get(id)! as any;
    x.r.holds++;
    x.pending = true;
    t += 1000;
    try {
      await residency.ready(x.r, { maxQueue: 10, maxWaitMs: o2.maxWaitMs ?? 2000 });
    } catch (e) {
      x.r.holds--;
      throw e;
    } finally {
      x.pending = false;
    }
    return {
      release() {
        x.r.holds--;
        t += 1000;
        residency.idle(x.r);
      },
    };
  }
  return { residency, request, engine: (id: string) => models.get(id)!.e, resident: (id: string) => models.get(id)!.r, block: (why: string | null) => (blocked = why) };
}

test("idle models are unloaded least recently used first, and only as many as the new model needs", async () => {
  const w = world(100, { a: 40, b: 40, c: 30, d: 60 });
  for (const id of ["a", "b", "c"]) (await w.request(id)).release(); // 110 MB asked of 100: a goes for c
  expect([w.engine("a").loaded, w.engine("b").loaded, w.engine("c").loaded]).toEqual([false, true, true]);
  expect(w.engine("a").unloads).toBe(1);
  (await w.request("b")).release(); // b is now the most recent
  (await w.request("d")).release(); // 60 MB with 30 free: c (least recent) goes, and that is enough
  expect([w.engine("b").loaded, w.engine("c").loaded, w.engine("d").loaded]).toEqual([true, false, true]);
  (await w.request("a")).release(); // 40 MB with 0 free: b, the least recent, frees enough; d stays
  expect([w.engine("a").loaded, w.engine("b").loaded, w.engine("d").loaded]).toEqual([true, false, true]);
});

test("a model in flight is never unloaded: the new model waits for its request to end, then takes its room", async () => {
  const w = world(100, { a: 70, b: 70 });
  const running = await w.request("a");
  let loaded = false;
  const waiting = w.request("b").then((r) => ((loaded = true), r));
  await Bun.sleep(50);
  expect(loaded).toBe(false);
  expect(w.engine("a").loaded).toBe(true);
  running.release();
  (await waiting).release();
  expect(loaded).toBe(true);
  expect([w.engine("a").loaded, w.engine("b").loaded]).toEqual([false, true]);
});

test("waiting for models in flight counts against the queue wait: past it, a 429 to retry", async () => {
  const w = world(100, { a: 70, b: 70 });
  const running = await w.request("a");
  const e = await w.request("b", { maxWaitMs: 0 }).catch((x) => x);
  expect(e).toBeInstanceOf(ApiError);
  expect((e as ApiError).code).toBe("workers_busy");
  expect((e as ApiError).message).toContain('"a"');
  expect(w.engine("a").loaded).toBe(true);
  running.release();
});

test("a model that cannot fit even with every unpinned model gone is a 503 with the MB missing, at once", async () => {
  const w = world(100, { pin: 50, big: 80 });
  (await w.request("pin")).release();
  (w.resident("pin").manifest as { load: string }).load = "start";
  const e = (await w.request("big").catch((x) => x)) as ApiError;
  expect(e.code).toBe("model_unavailable");
  expect(e.message).toContain("30 MB missing");
  expect(w.engine("pin").loaded).toBe(true);
});

test("vacate unloads the idle models on a GPU and names those that stay", async () => {
  const w = world(100, { a: 30, b: 30 });
  (await w.request("a")).release();
  const busy = await w.request("b");
  expect(await w.residency.vacate((d) => d === "cuda:0")).toEqual(["b"]);
  expect([w.engine("a").loaded, w.engine("b").loaded]).toEqual([false, true]);
  busy.release();
});

test("a GPU a rental holds takes no model: it goes to the CPU when allowed, else a 503 naming the rental", async () => {
  const w = world(100, { a: 30 }, { cpuFallback: true });
  w.block("is rented (rent_x)");
  (await w.request("a")).release();
  expect(w.engine("a").settings?.device).toBe("cpu");
  const strict = world(100, { a: 30 });
  strict.block("is rented (rent_x)");
  const e = (await strict.request("a").catch((x) => x)) as ApiError;
  expect(e.code).toBe("model_unavailable");
  expect(e.message).toContain("rent_x");
});

test("an admin's unload of a busy model waits for its requests; of an idle one, at once", async () => {
  const w = world(100, { a: 30 });
  const busy = await w.request("a");
  expect(await w.residency.unload(w.resident("a"))).toBe("when_idle");
  expect(w.engine("a").loaded).toBe(true);
  busy.release();
  for (let i = 0; i < 20 && w.engine("a").loaded; i++) await Bun.sleep(5);
  expect(w.engine("a").loaded).toBe(false);
  expect(await w.residency.unload(w.resident("a"))).toBe("not_loaded");
});

test("a CPU placement's compute buffer on the GPU is booked there: it counts against the GPU's room, is unloaded for it, and for a rental of it", async () => {
  const w = world(100, { small: 10, big: 80 }, { onCpuHoldingGpu: { small: 30 } });
  (await w.request("small")).release();
  expect(w.residency.status(w.resident("small"))).toMatchObject({ state: "loaded", device: "cpu", memory_mb: { gpu: 30, cpu: 10 } });
  // 80 MB on a GPU of 100 with 30 booked: the idle CPU model goes, since its buffer is in the way.
  (await w.request("big")).release();
  expect(w.engine("small").unloads).toBe(1);
  expect(w.engine("big").loaded).toBe(true);
  // Back on the CPU beside big? 30 MB more on the GPU do not fit beside 80: big (idle) goes.
  (await w.request("small")).release();
  expect([w.engine("small").loaded, w.engine("big").loaded]).toEqual([true, false]);
  // A rental of the GPU unloads the CPU model holding a buffer there.
  expect(await w.residency.vacate((d) => d === "cuda:0")).toEqual([]);
  expect(w.engine("small").loaded).toBe(false);
});

// Loads bounded and stoppable (issue 41 M2): an engine whose load waits until it is told to finish,
// reading the abort signal residency lends it (as the chat engine hands it to node-llama-cpp), or
// not (as ONNX Runtime sessions, which cannot stop).

class SlowEngine implements ModelEngine {
  loaded = false;
  loads = 0;
  unloads = 0;
  aborted: unknown = null;
  finish = Promise.withResolvers<void>();
  constructor(
    readonly modelId: string,
    private readonly stops: boolean,
  ) {}
  async load() {
    this.loads++;
    const signal = loadSignalOf(this);
    await new Promise<void>((resolve, reject) => {
      if (this.stops) signal?.addEventListener("abort", () => ((this.aborted = signal.reason), reject(signal.reason)), { once: true });
      void this.finish.promise.then(resolve);
    });
    this.loaded = true;
  }
  async unload() {
    this.loaded = false;
    this.unloads++;
  }
}

const files = tempDir("appliance-residency-");
afterAll(() => rmSync(files, { recursive: true, force: true }));

function alone(e: ModelEngine, m: Partial<ModelManifest> = {}) {
  const logger = memoryLogger();
  const manifest = { id: e.modelId, kind: "chat", load: "first_use", slots: 1, files: {}, ...m } as ModelManifest;
  const r: Resident = { manifest, engine: () => e, made: e, holds: 1, file: (role) => manifest.files[role]! };
  const residency = createResidency(() => [r], { keepAliveS: -1, logger });
  return { r, residency, logger, ready: () => residency.ready(r, { maxQueue: 10, maxWaitMs: 60_000 }) };
}

test("a load past its load_timeout_s is stopped through its signal: 503 model_load_failed, and the model shows failed until a load succeeds", async () => {
  const e = new SlowEngine("slow", true);
  const { r, residency, logger, ready } = alone(e, { load_timeout_s: 1 });
  const err = await ready().catch((x) => x);
  expect(err).toBeInstanceOf(ApiError);
  expect(err.code).toBe("model_load_failed");
  expect(err.message).toBe('model "slow" did not load within 1 s (load_timeout_s); the load was stopped');
  expect(e.aborted).toBe(err); // the engine was told, with the same reason
  expect(residency.status(r)).toMatchObject({ state: "failed", error: err.message });
  expect(logger.lines.find((l) => l.msg === "model failed to load")).toMatchObject({ model: "slow", error: err.message });
  e.finish.resolve(); // the next load ends at once
  await ready();
  expect(residency.status(r)).toMatchObject({ state: "loaded", error: null });
}, 10_000);

test("an engine that cannot stop is given up on at its bound, and unloaded once its load ends", async () => {
  const e = new SlowEngine("onnx-like", false);
  const { r, residency, logger, ready } = alone(e, { load_timeout_s: 1 });
  expect((await ready().catch((x) => x)).code).toBe("model_load_failed");
  expect(residency.status(r).state).toBe("failed");
  e.finish.resolve();
  for (let i = 0; i < 100 && e.unloads === 0; i++) await Bun.sleep(10);
  expect([e.loaded, e.unloads]).toEqual([false, 1]);
  expect(logger.lines.some((l) => l.msg === "a model load given up on finished later: unloading it")).toBe(true);
}, 10_000);

test("stopping a load (its model left the config) answers its waiters at once and aborts the engine's load; the model is not marked failed", async () => {
  const e = new SlowEngine("gone", true);
  const { r, residency, ready } = alone(e);
  const waiting = ready().catch((x) => x);
  for (let i = 0; i < 100 && e.loads === 0; i++) await Bun.sleep(5);
  expect(residency.status(r).state).toBe("loading");
  await residency.stopLoad(r, new ModelRemovedError("gone"));
  const err = await waiting;
  expect(err).toBeInstanceOf(ModelRemovedError);
  expect(err.code).toBe("model_load_failed");
  expect(err.message).toBe('model "gone" was removed or changed by a config reload while it loaded; its load was stopped');
  expect(e.aborted).toBe(err);
  expect(residency.status(r)).toMatchObject({ state: "unloaded", error: null });
});

test("a corrupt GGUF fails the load before the engine is asked, naming the file's problem; replaced by a valid one, the model loads", async () => {
  const path = join(files, "model.gguf");
  writeFileSync(path, attackGguf());
  const e = new SlowEngine("corrupt", true);
  e.finish.resolve();
  const { r, residency, logger, ready } = alone(e, { files: { model: path } });
  const err = await ready().catch((x) => x);
  expect(err).toBeInstanceOf(ApiError);
  expect(err.code).toBe("model_load_failed");
  expect(err.message).toStartWith('model "corrupt" cannot be loaded: its model file is not a valid GGUF file (too_many_kvs): kv_count at byte 16: ');
  expect(err.message).not.toContain(files); // clients are not told paths
  expect(e.loads).toBe(0);
  expect(residency.status(r)).toMatchObject({ state: "failed", error: err.message });
  expect(logger.lines.find((l) => l.msg === "model failed to load")!.error).toStartWith(`${path}: not a valid GGUF file (too_many_kvs)`); // the log has it
  writeFileSync(path, validGguf());
  await ready();
  expect(residency.status(r)).toMatchObject({ state: "loaded", error: null });
});

test("the parts of a split GGUF the manifest does not name are checked too: a corrupt second part fails the load", async () => {
  const first = join(files, "split-00001-of-00002.gguf");
  writeFileSync(first, validGguf());
  writeFileSync(join(files, "split-00002-of-00002.gguf"), attackGguf());
  const e = new SlowEngine("split", true);
  e.finish.resolve();
  const { ready } = alone(e, { files: { model: first } });
  const err = await ready().catch((x) => x);
  expect(err.code).toBe("model_load_failed");
  expect(err.message).toStartWith('model "split" cannot be loaded: its model (split part split-00002-of-00002.gguf) file is not a valid GGUF file (too_many_kvs)');
  expect(e.loads).toBe(0);
});

test("the default load bound: 120 s, and 20 s more per GiB of the model's files", () => {
  const path = join(files, "sized.bin");
  writeFileSync(path, new Uint8Array(1024 * 1024));
  const m = { id: "x", kind: "chat", files: { model: path } } as unknown as ModelManifest;
  expect(loadTimeoutS(m, () => path)).toBe(121); // 120 + 20/1024 s, rounded up
  expect(loadTimeoutS({ ...m, load_timeout_s: 5 }, () => path)).toBe(5);
});
