import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type OpenAI from "openai";
import { imagesTestApp, imageStats, postImages, type ImagesTestApp } from "../../helpers/images";

// The wait for a free image worker: a bounded queue in front of the workers (manifest `queue`,
// `queue_wait_s`; 4 requests for 60 s by default). Clients fan `n: 3` out as three concurrent n=1
// requests (the Vercel AI SDK does): one worker serves them one after another. Past the queue's
// length or its wait, 503 image_workers_busy with Retry-After.

const quick = { model: "turbo", prompt: "a boat", size: "256x256", steps: 1 };
const slow = { model: "turbo", prompt: "a slow one", size: "1536x1536", steps: 50 };
const until = async (cond: () => boolean) => {
  for (let i = 0; i < 400 && !cond(); i++) await Bun.sleep(5);
  expect(cond()).toBe(true);
};

describe("the default queue", () => {
  let t: ImagesTestApp;
  let client: OpenAI;
  beforeAll(async () => {
    t = imagesTestApp({ slots: 1 });
    client = t.openai(await t.key({ creditUsd: 5 }));
  });
  afterAll(() => t.close());

  test("three concurrent n=1 requests to a one-worker model all succeed", async () => {
    const one = () => client.images.generate({ ...quick, n: 1 } as OpenAI.ImageGenerateParamsNonStreaming);
    const all = await Promise.all([one(), one(), one()]);
    expect(all.map((r) => r.data!.length)).toEqual([1, 1, 1]);
    expect(imageStats(t)).toEqual({ slots: 1, busy: 0, queued: 0 });
  });
});

describe("past the queue", () => {
  let t: ImagesTestApp;
  let key: string;
  beforeAll(async () => {
    t = imagesTestApp({ slots: 1, queue: 1, queueWaitS: 0.3 });
    key = await t.key({ creditUsd: 5 });
  });
  afterAll(() => t.close());

  test("a request past the queue's length is refused at once with 503 and Retry-After; the one waiting gets the worker", async () => {
    await postImages(t, key, quick); // loads the model
    const controller = new AbortController();
    const first = postImages(t, key, slow, controller.signal).catch(() => null);
    await until(() => imageStats(t).busy === 1);
    const waiting = postImages(t, key, quick);
    await until(() => imageStats(t).queued === 1);
    const started = performance.now();
    const refused = await postImages(t, key, quick);
    expect(performance.now() - started).toBeLessThan(200);
    expect(refused.status).toBe(503);
    expect(refused.headers.get("retry-after")).toBe("1");
    expect(((await refused.json()) as { error: unknown }).error).toMatchObject({ type: "server_error", code: "workers_busy" });
    controller.abort();
    await first;
    expect((await waiting).status).toBe(200);
    expect(imageStats(t)).toEqual({ slots: 1, busy: 0, queued: 0 });
  });

  test("a request that waits longer than queue_wait_s is refused with 503 and Retry-After", async () => {
    const controller = new AbortController();
    const first = postImages(t, key, slow, controller.signal).catch(() => null);
    await until(() => imageStats(t).busy === 1);
    const started = performance.now();
    const waited = await postImages(t, key, quick);
    const ms = performance.now() - started;
    expect(ms).toBeGreaterThanOrEqual(250);
    expect(ms).toBeLessThan(2000);
    expect(waited.status).toBe(503);
    expect(waited.headers.get("retry-after")).toBe("1");
    expect(imageStats(t).queued).toBe(0);
    controller.abort();
    await first;
    await until(() => imageStats(t).busy === 0);
  });

  test("a client that leaves while waiting leaves the queue", async () => {
    const controller = new AbortController();
    const first = postImages(t, key, slow, controller.signal).catch(() => null);
    await until(() => imageStats(t).busy === 1);
    const leaving = new AbortController();
    const waiting = postImages(t, key, quick, leaving.signal).catch(() => null);
    await until(() => imageStats(t).queued === 1);
    leaving.abort();
    await waiting;
    await until(() => imageStats(t).queued === 0);
    controller.abort();
    await first;
    await until(() => imageStats(t).busy === 0);
  });
});
