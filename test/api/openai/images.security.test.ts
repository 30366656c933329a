import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { rmSync } from "node:fs";
import { ensureDiffusionModel } from "../../../models/diffusion/cache";
import { ManualClock } from "../../../src/lib/clock";
import { validateConfig } from "../../../src/lib/config";
import { memoryLogger } from "../../../src/lib/log";
import { startServer } from "../../../src/main";
import { tempDir } from "../../helpers/app";
import { authSuite } from "../http/auth-suite";
import { imagesTestApp, imageStats, postImages, type ImagesTestApp } from "../../helpers/images";

// Keys, limits and workers on /v1/images/generations: every image counts toward the key's limits
// (free: 2 a minute, 5 a day), all through the meter before any work; a busy worker (no queue) is a 503
// with Retry-After; a client that leaves frees its worker.

authSuite({
  name: "image generations",
  scope: "inference",
  format: "openai",
  routes: [{ method: "POST", path: "/v1/images/generations", body: { model: "turbo", prompt: "a boat", size: "256x256", steps: 1 } }],
});

const quick = { model: "turbo", prompt: "a boat", size: "256x256", steps: 1 };
const slow = { model: "turbo", prompt: "a slow one", size: "1536x1536", steps: 50 };
const until = async (cond: () => boolean) => {
  for (let i = 0; i < 400 && !cond(); i++) await Bun.sleep(5);
  expect(cond()).toBe(true);
};
const usageRows = (t: ImagesTestApp, keyFilter = "") =>
  (t.deps.db!.query(`SELECT COUNT(*) AS n FROM usage ${keyFilter}`).get() as { n: number }).n;

describe("free key image limits", () => {
  const clock = new ManualClock(Date.UTC(2026, 5, 1, 12, 0));
  let t: ImagesTestApp;
  beforeAll(() => (t = imagesTestApp({ clock })));
  afterAll(() => t.close());
  const gen = async (key: string, n: number) => {
    const res = await t.request("POST", "/v1/images/generations", { key, body: { ...quick, n } });
    const body = (await res.json()) as { data?: unknown[]; error?: { code: string; param: string | null; message: string } };
    return { status: res.status, retry: res.headers.get("retry-after"), body };
  };

  test("the third image in a minute is 429 with Retry-After; the sixth of the day is 429 daily", async () => {
    const key = await t.key({ kind: "free" });
    expect((await gen(key, 2)).body.data).toHaveLength(2);
    const third = await gen(key, 1);
    expect([third.status, third.body.error!.code]).toEqual([429, "rate_limit_exceeded"]);
    expect(Number(third.retry)).toBeGreaterThan(0);
    clock.advance(60_000);
    expect((await gen(key, 2)).status).toBe(200); // 4 today
    clock.advance(60_000);
    const sixth = await gen(key, 2); // would make 6
    expect([sixth.status, sixth.body.error!.code]).toEqual([429, "daily_limit_exceeded"]);
    expect(Number(sixth.retry)).toBeGreaterThan(0);
    expect((await gen(key, 1)).status).toBe(200); // the 5th
    clock.advance(60_000);
    expect((await gen(key, 1)).body.error!.code).toBe("daily_limit_exceeded");
    expect(imageStats(t).busy).toBe(0);
  });

  test("n counts each image: n=3 on a free key is refused by the meter as a 400 naming n", async () => {
    const key = await t.key({ kind: "free" });
    const r = await gen(key, 3);
    expect([r.status, r.body.error!.param]).toEqual([400, "n"]);
    expect(r.body.error!.message).toContain("at most 2 images per minute");
    expect((await gen(key, 2)).status).toBe(200); // nothing was used up
  });

  test("a free key's images cost nothing but are recorded with their count", async () => {
    const key = await t.key({ kind: "free", account: "free-billing" });
    const res = await t.request("POST", "/v1/images/generations", { key, body: { ...quick, n: 2 } });
    const row = t.deps.db!.query("SELECT images, cost_micros FROM usage WHERE request_id = ?").get(res.headers.get("x-request-id")!);
    expect(row).toEqual({ images: 2, cost_micros: 0 });
  });
});

describe("payment", () => {
  let t: ImagesTestApp;
  beforeAll(() => (t = imagesTestApp()));
  afterAll(() => t.close());

  test("a premium key without balance gets 402 insufficient_balance and no image", async () => {
    const res = await t.request("POST", "/v1/images/generations", { key: await t.key({ kind: "premium" }), body: quick });
    expect(res.status).toBe(402);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe("insufficient_balance");
    expect(imageStats(t).busy).toBe(0);
  });
});

describe("image workers", () => {
  let t: ImagesTestApp;
  let key: string;
  beforeAll(async () => {
    t = imagesTestApp({ slots: 1, queue: 0 }); // busy means busy at once: no request waits
    key = await t.key({ creditUsd: 5 });
  });
  afterAll(() => t.close());

  test("when every image worker is busy the answer is 503 with Retry-After; a client that leaves frees its worker", async () => {
    await postImages(t, key, quick); // loads the model
    const controller = new AbortController();
    const first = postImages(t, key, slow, controller.signal).then((r) => r.status, (e) => (e as Error).name);
    await until(() => imageStats(t).busy === 1);
    const busy = await postImages(t, key, quick);
    expect(busy.status).toBe(503);
    expect(busy.headers.get("retry-after")).toBe("1");
    expect(((await busy.json()) as { error: unknown }).error).toMatchObject({ type: "server_error", code: "workers_busy" });

    const left = performance.now();
    controller.abort();
    await first;
    await until(() => imageStats(t).busy === 0);
    expect(performance.now() - left).toBeLessThan(2000);
    const next = await postImages(t, key, quick);
    expect(next.status).toBe(200);
    expect(imageStats(t)).toEqual({ slots: 1, busy: 0, queued: 0 });
  });

  test("a generation the client left is not billed", async () => {
    const before = usageRows(t);
    const controller = new AbortController();
    const pending = postImages(t, key, slow, controller.signal).catch(() => null);
    await until(() => imageStats(t).busy === 1);
    controller.abort();
    await pending;
    await until(() => imageStats(t).busy === 0);
    expect(usageRows(t)).toBe(before);
  });

  test("a busy refusal spends none of a free key's per-minute image allowance", async () => {
    const free = await t.key({ kind: "free" });
    const controller = new AbortController();
    const pending = postImages(t, key, slow, controller.signal).catch(() => null);
    await until(() => imageStats(t).busy === 1);
    for (let i = 0; i < 3; i++) expect((await postImages(t, free, quick)).status).toBe(503);
    controller.abort();
    await pending;
    await until(() => imageStats(t).busy === 0);
    const res = await postImages(t, free, { ...quick, n: 2 });
    expect(res.status).toBe(200);
  });
});

test("through a real server, a client that disconnects mid-generation frees the worker at once (logged as 499)", async () => {
  const dir = tempDir();
  const logger = memoryLogger();
  const banner: string[] = [];
  const config = validateConfig({
    server: { data_dir: dir, port: 0 },
    engines: { device: "cpu", threads: 1 },
    models: [{ id: "turbo", name: "Tiny turbo", kind: "image", files: { model: ensureDiffusionModel("diffusion-turbo") }, max_context: 77, slots: 1, load: "start" }],
  });
  const s = await startServer(config, { logger, banner: (l) => banner.push(l) });
  try {
    const key = /sk-apl-[0-9A-Za-z]{44}/.exec(banner.join("\n"))![0];
    const post = (body: unknown, signal?: AbortSignal) =>
      fetch(`${s.url}/v1/images/generations`, { method: "POST", signal, headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, body: JSON.stringify(body) });
    const engine = s.deps.registry.engine("turbo", "image");
    const controller = new AbortController();
    const pending = post(slow, controller.signal).catch((e) => (e as Error).name);
    await until(() => engine.stats().busy === 1);
    await Bun.sleep(100);
    controller.abort();
    expect(await pending).toBe("AbortError");
    await until(() => engine.stats().busy === 0);
    expect((await post(quick)).status).toBe(200);
    await Bun.sleep(20);
    expect(logger.lines.filter((l) => l.msg === "request").map((l) => l.status)).toEqual([499, 200]);
    expect(logger.lines.some((l) => l.level === "error")).toBe(false);
  } finally {
    await s.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});
