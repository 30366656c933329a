import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { ApiError } from "../../src/1-api/http/errors";
import { SlidingWindow } from "../../src/4-store/window";
import { ManualClock } from "../../src/lib/clock";
import { testApp, type TestApp } from "../helpers/app";
import { BACKENDS, backendApp } from "../helpers/backends";

describe("requests per minute on a free key", async () => {
  const clock = new ManualClock();
  const t = testApp({ clock });
  afterAll(() => t.close());
  const key = await t.key({ kind: "free" });
  const get = () => t.request("GET", "/v1/models", { key });

  test("the 21st request in a minute is refused with Retry-After, and the window moves", async () => {
    for (let i = 0; i < 20; i++) {
      const res = await get();
      expect(res.status).toBe(200);
      expect(res.headers.get("x-ratelimit-remaining-requests")).toBe(String(19 - i));
      clock.advance(1000); // requests at t = 0 s, 1 s, … 19 s
    }
    const refused = await get(); // t = 20 s
    expect(refused.status).toBe(429);
    expect(refused.headers.get("retry-after")).toBe("40"); // the request at 0 s leaves the window at 60 s
    expect(refused.headers.get("retry-after-ms")).toBe("40000");
    expect(refused.headers.get("x-ratelimit-remaining-requests")).toBe("0");
    const body = await refused.json();
    expect(body.error).toMatchObject({ type: "rate_limit_error", code: "rate_limit_exceeded" });
    expect(body.error.message).toContain("20 requests per minute");

    clock.advance(39_999);
    expect((await get()).status).toBe(429);
    clock.advance(1); // t = 60 s: the first request has left the window
    expect((await get()).status).toBe(200);
    expect((await get()).status).toBe(429); // only one slot freed
    clock.advance(60_000);
    expect((await get()).status).toBe(200);
  });

  test("refused requests do not use up the window", async () => {
    const k = await t.key({ kind: "free" });
    for (let i = 0; i < 20; i++) expect((await t.request("GET", "/v1/models", { key: k })).status).toBe(200);
    for (let i = 0; i < 50; i++) expect((await t.request("GET", "/v1/models", { key: k })).status).toBe(429);
    clock.advance(60_000);
    for (let i = 0; i < 20; i++) expect((await t.request("GET", "/v1/models", { key: k })).status).toBe(200);
  });

  test("limits are per key", async () => {
    const a = await t.key({ kind: "free" });
    const b = await t.key({ kind: "free" });
    for (let i = 0; i < 20; i++) await t.request("GET", "/v1/models", { key: a });
    expect((await t.request("GET", "/v1/models", { key: a })).status).toBe(429);
    expect((await t.request("GET", "/v1/models", { key: b })).status).toBe(200);
  });

  test("a premium key without a cap sends no request-limit headers; one with a cap is limited", async () => {
    const open = await t.request("GET", "/v1/models", { key: await t.key({ kind: "premium" }) });
    expect(open.headers.get("x-ratelimit-limit-requests")).toBeNull();
    const capped = await t.key({ kind: "premium", rpm: 2 });
    expect((await t.request("GET", "/v1/models", { key: capped })).status).toBe(200);
    expect((await t.request("GET", "/v1/models", { key: capped })).status).toBe(200);
    expect((await t.request("GET", "/v1/models", { key: capped })).status).toBe(429);
  });
});

describe("image quotas", () => {
  const clock = new ManualClock(Date.UTC(2026, 5, 1, 23, 58));
  const t = testApp({ clock });
  afterAll(() => t.close());
  const principal = async (kind: "free" | "premium") => (await t.deps.accounts.authenticate(await t.key({ kind, creditUsd: 5 })))!;
  const settleImages = async (p: Awaited<ReturnType<typeof principal>>, n: number) =>
    (await t.deps.meter.reserve(p, { requestId: crypto.randomUUID(), model: { id: "img", kind: "image" }, endpoint: "/v1/images/generations", inputTokens: 0, maxOutputTokens: 0, images: n })).settle({
      inputTokens: 0,
      outputTokens: 0,
      images: n,
    });
  const code = async (f: () => Promise<unknown>) => {
    try {
      await f();
    } catch (e) {
      return (e as ApiError).code;
    }
    return "ok";
  };

  test("a free key gets 2 images a minute and 5 a day; the day resets at 00:00 UTC", async () => {
    const p = await principal("free");
    await settleImages(p, 2);
    expect(await code(() => settleImages(p, 1))).toBe("rate_limit_exceeded");
    clock.advance(60_000);
    await settleImages(p, 2);
    clock.advance(60_000); // 00:00 of the next day: the day count starts again
    await settleImages(p, 2);
    clock.advance(60_000);
    await settleImages(p, 2); // 4 today
    clock.advance(60_000);
    expect(await code(() => settleImages(p, 2))).toBe("daily_limit_exceeded"); // would be 6
    expect(await code(() => settleImages(p, 1))).toBe("ok"); // 5
    clock.advance(60_000);
    expect(await code(() => settleImages(p, 1))).toBe("daily_limit_exceeded");
  });

  test("asking for more images than a cap allows at all is a 400 naming n", async () => {
    expect(await code(async () => settleImages(await principal("free"), 3))).toBe("invalid_request");
  });

  test("a premium key gets 300 images a day", async () => {
    const p = await principal("premium");
    for (let i = 0; i < 75; i++) await settleImages(p, 4);
    expect(await code(() => settleImages(p, 1))).toBe("daily_limit_exceeded");
  });
});

// In-flight caps need no clock: one suite on both stores (issue 44). The per-minute windows above
// advance a ManualClock; on PostgreSQL windows are timed by the database's clock, and the
// three-process test (test/store/appliance-postgres.multi.test.ts) checks them there.
for (const backend of BACKENDS)
  describe(`in-flight caps on ${backend}`, () => {
    let t: TestApp;
    beforeAll(async () => void (t = (await backendApp(backend)).t));
    afterAll(() => t.close());

    test("a premium key with an in-flight cap is refused past it until a request finishes", async () => {
      const p = (await t.deps.accounts.authenticate(await t.key({ kind: "premium", inflight: 2, creditUsd: 1 })))!;
      const req = (id: string) => ({ requestId: id, model: { id: "m", kind: "chat" as const }, endpoint: "/v1/chat/completions", inputTokens: 1, maxOutputTokens: 1 });
      const a = await t.deps.meter.reserve(p, req("a"));
      await t.deps.meter.reserve(p, req("b"));
      await expect(t.deps.meter.reserve(p, req("c"))).rejects.toThrow(/in flight/);
      // Batch lines do not count toward in-flight limits (spec §8).
      await (await t.deps.meter.reserve(p, { ...req("batch"), batch: true })).release();
      await a.release();
      await a.release(); // a second release gives nothing back twice
      await t.deps.meter.reserve(p, req("d"));
      await expect(t.deps.meter.reserve(p, req("e"))).rejects.toThrow(/in flight/);
    });
  });

test("a sliding window admits a weight whole or not at all", () => {
  const w = new SlidingWindow(1000);
  expect(w.take("k", 3, 0, 2).ok).toBe(true);
  const r = w.take("k", 3, 10, 2);
  expect(r).toMatchObject({ ok: false, remaining: 1, retryAfterMs: 990 });
  expect(w.take("k", 3, 10, 1).ok).toBe(true);
  expect(w.take("k", 3, 1000, 2).ok).toBe(true);
});
