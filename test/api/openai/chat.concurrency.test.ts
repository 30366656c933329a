import { afterAll, beforeAll, expect, test } from "bun:test";
import type { TestApp } from "../../helpers/app";
import { chatTestApp } from "../../helpers/chat";

let t: TestApp;
let key: string;
beforeAll(async () => {
  t = await chatTestApp({ slots: 1, queue: 1, queueWaitS: 20 });
  key = await t.key({ creditUsd: 5 });
});
afterAll(() => t.close());

const body = (extra: Record<string, unknown> = {}) => ({
  model: "chat",
  messages: [{ role: "user", content: "Count slowly." }],
  max_tokens: 40,
  temperature: 0,
  chat_template_kwargs: { enable_thinking: false },
  ...extra,
});
const stats = () => t.deps.registry.chatEngine("chat").stats();

test("more simultaneous requests than slots: the queue waits, the rest get 429 with Retry-After, none hang", async () => {
  await t.request("POST", "/v1/chat/completions", { key, body: body({ max_tokens: 1 }) }); // load the model
  const results = await Promise.all(
    Array.from({ length: 5 }, () => t.request("POST", "/v1/chat/completions", { key, body: body() }).then(async (r) => ({ status: r.status, retry: r.headers.get("retry-after"), json: await r.json() }))),
  );
  const ok = results.filter((r) => r.status === 200);
  const busy = results.filter((r) => r.status === 429);
  expect(ok.length).toBe(2); // one slot + one queue place
  expect(busy.length).toBe(3);
  for (const b of busy) {
    expect(b.retry).toBe("1");
    expect(b.json.error.code).toBe("workers_busy");
    expect(b.json.error.message).toContain("every worker for this model is busy");
  }
  expect(stats()).toEqual({ slots: 1, busy: 0, queued: 0, batchQueued: 0 });
}, 60_000);

test("an aborted stream releases its slot at once, and what was generated is billed", async () => {
  const controller = new AbortController();
  const res = await t.app.handle(
    new Request("http://localhost/v1/chat/completions", {
      method: "POST",
      signal: controller.signal,
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify(body({ max_tokens: 3000, stream: true })),
    }),
  );
  const requestId = res.headers.get("x-request-id")!;
  const reader = res.body!.getReader();
  await reader.read();
  await reader.read();
  expect(stats().busy).toBe(1);
  await reader.cancel();
  controller.abort();
  for (let i = 0; i < 50 && stats().busy > 0; i++) await Bun.sleep(20);
  expect(stats()).toEqual({ slots: 1, busy: 0, queued: 0, batchQueued: 0 });
  const row = t.deps.db!.query<{ output_tokens: number }, [string]>("SELECT output_tokens FROM usage WHERE request_id = ?").get(requestId);
  expect(row!.output_tokens).toBeGreaterThan(0);
  expect(row!.output_tokens).toBeLessThan(3000);
  // The slot works for the next request.
  const next = await t.request("POST", "/v1/chat/completions", { key, body: body({ max_tokens: 2 }) });
  expect(next.status).toBe(200);
}, 60_000);

test("a client that gives up on a non-streamed request frees the slot", async () => {
  const controller = new AbortController();
  const pending = t.app
    .handle(
      new Request("http://localhost/v1/chat/completions", {
        method: "POST",
        signal: controller.signal,
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
        body: JSON.stringify(body({ max_tokens: 3000 })),
      }),
    )
    .catch((e) => e);
  for (let i = 0; i < 100 && stats().busy === 0; i++) await Bun.sleep(5);
  expect(stats().busy).toBe(1);
  controller.abort();
  await pending;
  for (let i = 0; i < 50 && stats().busy > 0; i++) await Bun.sleep(20);
  expect(stats()).toEqual({ slots: 1, busy: 0, queued: 0, batchQueued: 0 });
}, 60_000);

test("a waiter whose client leaves gives its queue place back", async () => {
  const first = t.request("POST", "/v1/chat/completions", { key, body: body({ max_tokens: 200 }) });
  for (let i = 0; i < 100 && stats().busy === 0; i++) await Bun.sleep(5);
  const controller = new AbortController();
  const waiting = t.app
    .handle(new Request("http://localhost/v1/chat/completions", { method: "POST", signal: controller.signal, headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, body: JSON.stringify(body()) }))
    .catch((e) => e);
  for (let i = 0; i < 100 && stats().queued === 0; i++) await Bun.sleep(5);
  expect(stats().queued).toBe(1);
  controller.abort();
  await waiting;
  expect(stats().queued).toBe(0);
  expect((await first).status).toBe(200);
  expect(stats()).toEqual({ slots: 1, busy: 0, queued: 0, batchQueued: 0 });
}, 60_000);

test("a stream cancelled before its first chunk is read still frees the slot", async () => {
  const res = await t.request("POST", "/v1/chat/completions", { key, body: body({ max_tokens: 3000, stream: true }) });
  await res.body!.cancel();
  for (let i = 0; i < 100 && stats().busy > 0; i++) await Bun.sleep(20);
  expect(stats()).toEqual({ slots: 1, busy: 0, queued: 0, batchQueued: 0 });
}, 60_000);
