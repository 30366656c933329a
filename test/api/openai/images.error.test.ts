import { afterAll, beforeAll, expect, test } from "bun:test";
import OpenAI from "openai";
import { imagesTestApp, imageStats, type ImagesTestApp } from "../../helpers/images";

// Refusals of /v1/images/generations: every one a 400/404 that names what is wrong, before any
// image work and without a charge.

let t: ImagesTestApp;
let key: string;
beforeAll(async () => {
  t = imagesTestApp();
  key = await t.key({ creditUsd: 5 });
});
afterAll(() => t.close());

const ok = { model: "turbo", prompt: "a boat", size: "256x256", steps: 1 };
async function post(body: unknown) {
  const res = await t.request("POST", "/v1/images/generations", { key, body });
  return { status: res.status, error: ((await res.json()) as { error: { message: string; type: string; param: string | null; code: string | null } }).error };
}

const cases: { name: string; body: Record<string, unknown>; param: string }[] = [
  { name: "a size that is not <W>x<H>", body: { ...ok, size: "big" }, param: "size" },
  { name: "a side under 256", body: { ...ok, size: "128x256" }, param: "size" },
  { name: "a side over 1536", body: { ...ok, size: "2048x1024" }, param: "size" },
  { name: "a side that is not a multiple of 16", body: { ...ok, size: "264x256" }, param: "size" },
  { name: "n = 0", body: { ...ok, n: 0 }, param: "n" },
  { name: "n = 5", body: { ...ok, n: 5 }, param: "n" },
  { name: "n = 1.5", body: { ...ok, n: 1.5 }, param: "n" },
  { name: "steps = 0", body: { ...ok, steps: 0 }, param: "steps" },
  { name: "steps = 51", body: { ...ok, steps: 51 }, param: "steps" },
  { name: "a negative seed", body: { ...ok, seed: -1 }, param: "seed" },
  { name: "a seed of 2^32", body: { ...ok, seed: 2 ** 32 }, param: "seed" },
  { name: "no prompt", body: { model: "turbo" }, param: "prompt" },
  { name: "an empty prompt", body: { ...ok, prompt: "" }, param: "prompt" },
  { name: "no model", body: { prompt: "a boat" }, param: "model" },
  { name: "response_format url (nothing is hosted)", body: { ...ok, response_format: "url" }, param: "response_format" },
  { name: "output_format jpeg", body: { ...ok, output_format: "jpeg" }, param: "output_format" },
  { name: "quality hd", body: { ...ok, quality: "hd" }, param: "quality" },
  { name: "a style preset", body: { ...ok, style: "vivid" }, param: "style" },
  { name: "a transparent background", body: { ...ok, background: "transparent" }, param: "background" },
  { name: "streaming", body: { ...ok, stream: true }, param: "stream" },
];

for (const c of cases)
  test(`${c.name} is a 400 naming ${c.param}`, async () => {
    const r = await post(c.body);
    expect(r.status).toBe(400);
    expect(r.error).toMatchObject({ type: "invalid_request_error", param: c.param });
    expect(r.error.message).toContain(c.param);
  });

test("refusals take no worker and write no usage", async () => {
  for (const c of cases) await post(c.body);
  expect(imageStats(t)).toEqual({ slots: 1, busy: 0, queued: 0 });
  expect(t.deps.db!.query("SELECT COUNT(*) AS n FROM usage").get()).toEqual({ n: 0 });
});

test("an unknown model is 404 model not found", async () => {
  const r = await post({ ...ok, model: "dall-e-3" });
  expect(r.status).toBe(404);
  expect(r.error).toMatchObject({ code: "model_not_found", param: "model" });
  expect(r.error.message).toContain("model not found");
});

test("a chat model's id is a 400 naming model, with the image models to use", async () => {
  const r = await post({ ...ok, model: "chat" });
  expect(r.status).toBe(400);
  expect(r.error).toMatchObject({ type: "invalid_request_error", param: "model" });
  expect(r.error.message).toContain('"chat" is a chat model');
  expect(r.error.message).toContain("turbo, sd");
});

test("editing endpoints do not exist: /v1/images/edits and /v1/images/variations are 404", async () => {
  for (const path of ["/v1/images/edits", "/v1/images/variations"]) {
    const res = await t.request("POST", path, { key, body: ok });
    expect(res.status).toBe(404);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe("not_found");
  }
});

test("a body that is not JSON is a 400", async () => {
  const res = await t.request("POST", "/v1/images/generations", { key, body: "{nope", headers: { "content-type": "application/json" } });
  expect(res.status).toBe(400);
});

test("the official client raises BadRequestError with the param", async () => {
  const client = t.openai(key);
  const err = await client.images.generate({ model: "turbo", prompt: "a boat", size: "1792x1024" }).catch((e) => e);
  expect(err).toBeInstanceOf(OpenAI.BadRequestError);
  expect(err.param).toBe("size");
});
