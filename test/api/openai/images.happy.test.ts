import { afterAll, beforeAll, expect, test } from "bun:test";
import type OpenAI from "openai";
import { ensureZImageModel } from "../../../models/diffusion/z-image";
import { DiffusionPipeline } from "../../../src/3-engines/diffusion/pipeline";
import { imagesTestApp, imageStats, pngInfo, type ImagesTestApp } from "../../helpers/images";

// /v1/images/generations through the official openai client, on the tiny generated sets.
// Most requests use 256x256 and few steps to stay quick; `steps` and `seed` are extensions the
// client passes through as extra body fields.

let t: ImagesTestApp;
let client: OpenAI;
let key: string;
beforeAll(async () => {
  t = imagesTestApp();
  key = await t.key({ creditUsd: 5 });
  client = t.openai(key);
});
afterAll(() => t.close());

type Extra = { seed?: number; steps?: number };
const generate = (body: OpenAI.ImageGenerateParams & Extra) => client.images.generate(body as OpenAI.ImageGenerateParamsNonStreaming);
const small = { model: "turbo", prompt: "a small red boat on a calm lake", size: "256x256" as const, steps: 2 };
const b64 = (r: OpenAI.ImagesResponse, i = 0) => r.data![i]!.b64_json!;

test("the official client gets a base64 PNG of the requested size, with the seed used", async () => {
  const r = await generate({ ...small, size: "384x256" as OpenAI.ImageGenerateParams["size"], seed: 5, response_format: "b64_json" });
  expect(r.created).toBeGreaterThan(1_700_000_000);
  expect(r.data).toHaveLength(1);
  expect(await pngInfo(b64(r))).toEqual({ format: "png", width: 384, height: 256, channels: 3 });
  expect(r.data![0]).toMatchObject({ seed: 5 });
  expect(r).toMatchObject({ size: "384x256", output_format: "png" });
  expect(imageStats(t)).toEqual({ slots: 1, busy: 0, queued: 0 });
});

test("the same model, prompt, size, seed and steps give byte-identical PNGs; another seed another image", async () => {
  const a = await generate({ ...small, seed: 42 });
  const b = await generate({ ...small, seed: 42 });
  const c = await generate({ ...small, seed: 43 });
  expect(b64(a)).toBe(b64(b));
  expect(b64(c)).not.toBe(b64(a));
});

test("n=2 gives two different images, image i being the image of seed + i", async () => {
  const two = await generate({ ...small, seed: 100, n: 2 });
  expect(two.data!.map((d) => (d as { seed?: number }).seed)).toEqual([100, 101]);
  expect(b64(two, 0)).not.toBe(b64(two, 1));
  const second = await generate({ ...small, seed: 101 });
  expect(b64(second)).toBe(b64(two, 1));
});

test("without a seed the server draws one and returns it; sending it back makes the same image", async () => {
  const r = await generate(small);
  const seed = (r.data![0] as { seed?: number }).seed!;
  expect(Number.isInteger(seed)).toBe(true);
  expect(b64(await generate({ ...small, seed }))).toBe(b64(r));
});

test("without size, n and steps: one 512x512 image with the default 9 steps", async () => {
  const r = await generate({ model: "turbo", prompt: "defaults", seed: 9 } as OpenAI.ImageGenerateParams);
  expect(r.data).toHaveLength(1);
  expect(await pngInfo(b64(r))).toMatchObject({ width: 512, height: 512 });
  expect(b64(await generate({ model: "turbo", prompt: "defaults", seed: 9, size: "512x512", steps: 9, n: 1 }))).toBe(b64(r));
});

test("the SD-style set (unet, EulerDiscreteScheduler) makes images as well", async () => {
  const r = await generate({ ...small, model: "sd", seed: 1 });
  expect(await pngInfo(b64(r))).toMatchObject({ format: "png", width: 256, height: 256 });
  const flow = await generate({ ...small, seed: 1 });
  expect(b64(r)).not.toBe(b64(flow));
});

test("the Z-Image bundle layout is served through the same endpoint: n images with seeds seed+i, each the bare pipeline's bytes", async () => {
  const r = await generate({ ...small, model: "z-image", n: 2, seed: 21, steps: 9 });
  expect(r.data!.map((d) => (d as { seed?: number }).seed)).toEqual([21, 22]);
  expect(await pngInfo(b64(r))).toEqual({ format: "png", width: 256, height: 256, channels: 3 });
  const bare = await DiffusionPipeline.load(ensureZImageModel("z-image-tiny"), { device: "cpu", threads: 1 });
  try {
    for (const i of [0, 1]) {
      const png = await bare.generate({ prompt: small.prompt, width: 256, height: 256, seed: 21 + i, steps: 9 });
      expect(b64(r, i)).toBe(Buffer.from(png).toString("base64"));
    }
  } finally {
    await bare.dispose();
  }
});

test("each request is billed once: a usage row with its images and 3000 micro-dollars per image", async () => {
  const res = await t.request("POST", "/v1/images/generations", { key, body: { ...small, n: 3, seed: 1 } });
  expect(res.status).toBe(200);
  const row = t.deps.db!
    .query<{ images: number; cost_micros: number; endpoint: string; model: string; input_tokens: number; output_tokens: number }, [string]>(
      "SELECT images, cost_micros, endpoint, model, input_tokens, output_tokens FROM usage WHERE request_id = ?",
    )
    .get(res.headers.get("x-request-id")!);
  expect(row).toEqual({ images: 3, cost_micros: 9000, endpoint: "/v1/images/generations", model: "turbo", input_tokens: 0, output_tokens: 0 });
});
