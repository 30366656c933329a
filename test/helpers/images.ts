import OpenAI from "openai";
import sharp from "sharp";
import { ensureDiffusionModel } from "../../models/diffusion/cache";
import { ensureZImageModel } from "../../models/diffusion/z-image";
import type { Clock } from "../../src/lib/clock";
import { diffusionFactory } from "../../src/3-engines/diffusion/factory";
import { BASE, testApp, type TestApp } from "./app";

// A real app serving the generated tiny diffusion sets through the real diffusion engine (worker
// threads, ONNX Runtime, transformers.js, sharp):
//   "turbo" flow-matching set (FlowMatchEulerDiscreteScheduler, transformer/)
//   "sd"    SD-style set (EulerDiscreteScheduler, epsilon, unet/)
//   "z-image" the tiny bundle in webnn/Z-Image-Turbo's layout (MatMulNBits q4f16, Qwen3 encoder)
//   "chat"  a chat manifest (never loaded), to ask the images endpoint for a model of another kind.

export interface ImagesTestOptions {
  /** Image workers of "turbo". */
  slots?: number;
  queue?: number;
  queueWaitS?: number;
  clock?: Clock;
}

export type ImagesTestApp = TestApp & { openai: (key: string) => OpenAI };

export function imagesTestApp(o: ImagesTestOptions = {}): ImagesTestApp {
  const turbo = ensureDiffusionModel("diffusion-turbo");
  const sd = ensureDiffusionModel("diffusion-sd");
  const t = testApp({
    clock: o.clock,
    config: {
      engines: { device: "cpu", threads: 1 },
      models: [
        { id: "turbo", name: "Tiny turbo", kind: "image", files: { model: turbo }, max_context: 77, slots: o.slots ?? 1, queue: o.queue, queue_wait_s: o.queueWaitS, load: "first_use" },
        { id: "sd", name: "Tiny SD", kind: "image", files: { model: sd }, max_context: 77, slots: 1, load: "first_use" },
        { id: "z-image", name: "Tiny Z-Image", kind: "image", files: { model: ensureZImageModel("z-image-tiny") }, max_context: 512, slots: 1, load: "first_use" },
        { id: "chat", name: "Chat", kind: "chat", files: { model: "chat.gguf" }, max_context: 4096, load: "first_use" },
      ],
    },
    engines: (config, logger) => diffusionFactory(config, logger),
  });
  return Object.assign(t, {
    openai: (key: string) =>
      new OpenAI({ apiKey: key, baseURL: `${BASE}/v1`, maxRetries: 0, fetch: (url, init) => t.app.handle(new Request(url, init)) }),
  });
}

export const imageStats = (t: TestApp, model = "turbo") => t.deps.registry.engine(model, "image").stats();

/** Width, height and channels of a base64 PNG, as sharp reads it. */
export async function pngInfo(b64: string) {
  const m = await sharp(Buffer.from(b64, "base64")).metadata();
  return { format: m.format, width: m.width, height: m.height, channels: m.channels };
}

/** Posts to /v1/images/generations with a signal the test controls. */
export function postImages(t: TestApp, key: string, body: unknown, signal?: AbortSignal): Promise<Response> {
  return t.app.handle(
    new Request(`${BASE}/v1/images/generations`, {
      method: "POST",
      signal,
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify(body),
    }),
  );
}
