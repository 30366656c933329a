import { afterAll, expect, test } from "bun:test";
import { ensureDiffusionModel } from "../../../models/diffusion/cache";
import { ApiError } from "../../../src/1-api/http/errors";
import { DiffusionImageEngine, type DiffusionEngineOptions } from "../../../src/3-engines/diffusion/engine";
import { DiffusionPipeline } from "../../../src/3-engines/diffusion/pipeline";
import { probeWebGpu } from "../../../src/3-engines/onnx-device";
import type { ImageRequest } from "../../../src/3-engines/types";
import { memoryLogger } from "../../../src/lib/log";

// The engine: image workers on their own threads behind a slot pool.

const dir = ensureDiffusionModel("diffusion-turbo");
const engines: DiffusionImageEngine[] = [];
function engine(o: Partial<DiffusionEngineOptions> = {}) {
  const logger = memoryLogger();
  const e = new DiffusionImageEngine({ modelId: "turbo", dir, slots: 1, threads: 1, device: "cpu", maxQueue: 0, maxWaitMs: 5000, logger, ...o });
  engines.push(e);
  return Object.assign(e, { logs: logger.lines });
}
afterAll(() => Promise.all(engines.map((e) => e.unload())));

const req: ImageRequest = { prompt: "a red boat", width: 256, height: 256, seed: 3, steps: 3 };
const slow: ImageRequest = { prompt: "slow", width: 1536, height: 1536, seed: 1, steps: 50 };
const until = async (cond: () => boolean) => {
  for (let i = 0; i < 400 && !cond(); i++) await Bun.sleep(5);
  expect(cond()).toBe(true);
};

test("a worker thread makes the same bytes as the bare pipeline", async () => {
  const e = engine();
  const w = await e.acquire();
  const fromWorker = await w.generate(req).finally(() => w.release());
  const bare = await DiffusionPipeline.load(dir, { device: "cpu", threads: 1 });
  const fromBare = await bare.generate(req).finally(() => bare.dispose());
  expect(Buffer.from(fromWorker).equals(Buffer.from(fromBare))).toBe(true);
  expect(e.loaded).toBe(true);
  expect(e.logs.find((l) => l.msg === "image model loaded")).toMatchObject({ workers: 1, threads_per_worker: 1, scheduler: "FlowMatchEulerDiscreteScheduler" });
});

test("when every worker is busy, acquiring is refused at once with 503 image_workers_busy and Retry-After", async () => {
  const e = engine({ slots: 2 });
  const [a, b] = [await e.acquire(), await e.acquire()];
  expect(e.stats()).toEqual({ slots: 2, busy: 2, queued: 0 });
  const refused = await e.acquire().catch((x) => x);
  expect(refused).toBeInstanceOf(ApiError);
  expect(refused.code).toBe("image_workers_busy");
  expect(refused.status).toBe(503);
  expect(refused.headers["retry-after"]).toBe("1");
  a.release();
  b.release();
  expect(e.stats().busy).toBe(0);
});

test("with a queue, a request waits for the worker and gets it when the first is done", async () => {
  const e = engine({ maxQueue: 1 });
  const first = await e.acquire();
  const second = e.acquire();
  await until(() => e.stats().queued === 1);
  first.release();
  const w = await second;
  expect((await w.generate(req)).length).toBeGreaterThan(0);
  w.release();
});

test("a stopped generation rejects with the caller's reason once the thread is idle, and the worker works on", async () => {
  const e = engine();
  const w = await e.acquire();
  await w.generate(req); // the thread runs and its pipeline is loaded: the next job is posted at once
  const controller = new AbortController();
  const pending = w.generate(slow, controller.signal).then(
    () => "finished all 50 steps",
    (x: Error) => x,
  );
  await Bun.sleep(0); // the job is on the thread now (posted within the microtasks above)
  controller.abort(new Error("client left"));
  // Not a finished image and not a local refusal: the thread's own stop (checked before every step).
  const stopped = await pending;
  expect(stopped).toBeInstanceOf(Error);
  expect((stopped as Error).message).toBe("client left");
  expect((await w.generate(req)).length).toBeGreaterThan(0);
  w.release();
});

test("unloading ends the threads; the next request loads the model again", async () => {
  const e = engine();
  await e.load();
  await e.unload();
  expect(e.loaded).toBe(false);
  const w = await e.acquire();
  expect((await w.generate(req)).length).toBeGreaterThan(0);
  w.release();
});

test("a model that cannot load is 503 model_unavailable, with the reason in the log only", async () => {
  const e = engine({ dir: "/nonexistent/model" });
  const err = await e.acquire().catch((x) => x);
  expect(err).toBeInstanceOf(ApiError);
  expect(err.code).toBe("model_unavailable");
  expect(err.message).not.toContain("/nonexistent");
  expect(e.logs.find((l) => l.msg === "image model failed to load")!.error).toContain("not a folder");
  expect(e.stats().busy).toBe(0);
});

const noAdapter = await probeWebGpu();
test.skipIf(noAdapter === null)("device webgpu with no WebGPU adapter (this machine): 503 model_unavailable saying so, no worker started", async () => {
  const e = engine({ device: "webgpu" });
  const err = await e.acquire().catch((x) => x);
  expect(err).toBeInstanceOf(ApiError);
  expect(err.code).toBe("model_unavailable");
  expect(err.message).toBe(`image model "turbo" cannot load: no WebGPU adapter found: ${noAdapter}; set device = "cpu" or "cuda" in its manifest`);
  expect(e.loaded).toBe(false);
  expect((e as any).workers.every((w: any) => w.thread === null)).toBe(true);
});
