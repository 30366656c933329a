import { describe, expect, test } from "bun:test";
import { ApiError } from "../../src/1-api/http/errors";
import type { ImagesRequest } from "../../src/2-services/images/request";
import { randomSeed, toImageJob } from "../../src/2-services/images/from-request";

const req = (extra: Partial<ImagesRequest> = {}): ImagesRequest => ({ model: "m", prompt: "p", ...extra });
const fixedSeed = () => 1234;

describe("defaults", () => {
  test("no size, n, steps or seed: 512x512, one image, 9 steps, a drawn seed", () => {
    expect(toImageJob(req(), fixedSeed)).toEqual({ model: "m", prompt: "p", width: 512, height: 512, n: 1, steps: 9, seed: 1234 });
  });

  test("null fields and size \"auto\" mean the defaults too", () => {
    expect(toImageJob(req({ size: "auto", n: null, steps: null, seed: null, response_format: null }), fixedSeed)).toMatchObject({ width: 512, n: 1, steps: 9, seed: 1234 });
  });

  test("random seeds are 32-bit and vary", () => {
    const seeds = new Set(Array.from({ length: 20 }, randomSeed));
    expect(seeds.size).toBeGreaterThan(15);
    for (const s of seeds) expect(Number.isInteger(s) && s >= 0 && s < 2 ** 32).toBe(true);
  });
});

const sizes: { name: string; size: string; expected: [number, number] | null }[] = [
  { name: "the smallest square", size: "256x256", expected: [256, 256] },
  { name: "the largest square", size: "1536x1536", expected: [1536, 1536] },
  { name: "a landscape size", size: "1024x768", expected: [1024, 768] },
  { name: "a side below 256", size: "240x256", expected: null },
  { name: "a side above 1536", size: "1792x1024", expected: null },
  { name: "a side not a multiple of 16", size: "520x512", expected: null },
  { name: "a capital X", size: "512X512", expected: null },
  { name: "spaces", size: "512 x 512", expected: null },
  { name: "one number", size: "512", expected: null },
  { name: "a DALL-E name", size: "large", expected: null },
];

describe("size", () => {
  for (const c of sizes)
    test(`${c.name} (${JSON.stringify(c.size)}) is ${c.expected ? "accepted" : "a 400 naming size"}`, () => {
      if (c.expected) {
        const job = toImageJob(req({ size: c.size }), fixedSeed);
        expect([job.width, job.height]).toEqual(c.expected);
      } else {
        const e = catchError(() => toImageJob(req({ size: c.size }), fixedSeed));
        expect([e.code, e.param]).toEqual(["invalid_request", "size"]);
        expect(e.message).toContain("from 256 to 1536, multiples of 16");
      }
    });
});

const fields: { name: string; extra: Partial<ImagesRequest>; param: string | null }[] = [
  { name: "response_format b64_json", extra: { response_format: "b64_json" }, param: null },
  { name: "response_format url", extra: { response_format: "url" }, param: "response_format" },
  { name: "response_format something else", extra: { response_format: "png" }, param: "response_format" },
  { name: "output_format png", extra: { output_format: "png" }, param: null },
  { name: "output_format webp", extra: { output_format: "webp" }, param: "output_format" },
  { name: "output_compression", extra: { output_compression: 80 }, param: "output_compression" },
  { name: "quality auto / standard", extra: { quality: "standard" }, param: null },
  { name: "quality hd", extra: { quality: "hd" }, param: "quality" },
  { name: "quality high", extra: { quality: "high" }, param: "quality" },
  { name: "style", extra: { style: "vivid" }, param: "style" },
  { name: "background opaque", extra: { background: "opaque" }, param: null },
  { name: "background transparent", extra: { background: "transparent" }, param: "background" },
  { name: "moderation low", extra: { moderation: "low" }, param: null },
  { name: "moderation strict", extra: { moderation: "strict" }, param: "moderation" },
  { name: "stream false", extra: { stream: false }, param: null },
  { name: "stream true", extra: { stream: true }, param: "stream" },
  { name: "partial_images", extra: { partial_images: 2 }, param: "partial_images" },
  { name: "user", extra: { user: "end-user-42" }, param: null },
];

describe("other OpenAI fields", () => {
  for (const c of fields)
    test(`${c.name} is ${c.param ? `a 400 naming ${c.param}` : "accepted"}`, () => {
      if (!c.param) expect(toImageJob(req(c.extra), fixedSeed).width).toBe(512);
      else {
        const e = catchError(() => toImageJob(req(c.extra), fixedSeed));
        expect([e.code, e.param, e.status]).toEqual(["invalid_request", c.param, 400]);
        expect(e.message.startsWith(`${c.param}: `)).toBe(true);
      }
    });
});

function catchError(f: () => unknown): ApiError {
  try {
    f();
  } catch (e) {
    if (e instanceof ApiError) return e;
    throw e;
  }
  throw new Error("expected an ApiError");
}
