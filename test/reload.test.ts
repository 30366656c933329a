import { afterEach, expect, test } from "bun:test";
import { validateConfig } from "../src/lib/config";
import { applyReload } from "../src/ops/reload";
import { chatTestApp } from "./helpers/chat";

// SIGHUP's reload (src/ops/reload.ts) on a real app: prices and limits change in place and the next
// request is billed and limited by them; what needs a restart is reported, not applied.

let t: Awaited<ReturnType<typeof chatTestApp>> | null = null;
afterEach(async () => {
  await t?.close();
  t = null;
});

const costOf = (requestId: string) => (t!.deps.db!.query("SELECT cost_micros FROM usage WHERE request_id = ?").get(requestId) as { cost_micros: number }).cost_micros;

test("a new price applies to the next request; other changes are reported as needing a restart", async () => {
  t = await chatTestApp();
  const key = await t.key({ kind: "premium", creditUsd: 5 });
  const ask = async () => {
    const res = await t!.request("POST", "/v1/chat/completions", { key, body: { model: "chat", messages: [{ role: "user", content: "hi" }], max_tokens: 3 } });
    expect(res.status).toBe(200);
    return { id: res.headers.get("x-request-id")!, usage: ((await res.json()) as any).usage };
  };
  const before = await ask();
  const next = validateConfig(structuredClone({ ...t.deps.config, prices: { ...t.deps.config.prices, chat_input_per_m: t.deps.config.prices.chat_input_per_m * 10, chat_output_per_m: t.deps.config.prices.chat_output_per_m * 10 } }));
  next.engines.threads = 2; // needs a restart
  next.store.url = "postgres://appliance@db.lan/appliance"; // so does another store
  const r = applyReload(t.deps, next);
  expect(r.applied.sort()).toEqual(["prices.chat_input_per_m", "prices.chat_output_per_m"]);
  expect(r.needsRestart).toEqual(["[engines]", "[store]"]);
  expect(t.deps.config.store.url).toBe("");
  expect(t.deps.config.engines.threads).toBe(1); // not applied
  const after = await ask();
  // Same request shape, ten times the price (up to rounding to the micro-dollar).
  expect(after.usage.prompt_tokens).toBe(before.usage.prompt_tokens);
  expect(costOf(before.id)).toBeGreaterThan(0);
  const perToken = (c: number, u: any) => c / (u.prompt_tokens + u.completion_tokens);
  expect(perToken(costOf(after.id), after.usage)).toBeGreaterThan(perToken(costOf(before.id), before.usage) * 5);
}, 60_000);

test("a new storage quota applies to the next upload ([files] is applied in place)", async () => {
  t = await chatTestApp();
  const key = await t.key({ kind: "premium", creditUsd: 1 });
  const upload = () => {
    const form = new FormData();
    form.set("purpose", "batch");
    form.set("file", new File(["x".repeat(2 * 1024 * 1024)], "in.jsonl"));
    return t!.app.handle(new Request("http://localhost/v1/files", { method: "POST", headers: { authorization: `Bearer ${key}` }, body: form }));
  };
  expect((await upload()).status).toBe(200);
  const next = validateConfig(structuredClone({ ...t.deps.config, files: { ...t.deps.config.files, quota_mb: 3 } }));
  expect(applyReload(t.deps, next).applied).toContain("files.quota_mb");
  const refused = await upload();
  expect(refused.status).toBe(413);
  expect(((await refused.json()) as { error: { code: string } }).error.code).toBe("storage_quota_exceeded");
});

// Issue 42: hosted tools are a 400 by the contract; [compat] ignore_hosted_tools accepts and ignores
// them, read on every request, so a reload applies it to the next one on both formats.
test("[compat] ignore_hosted_tools: hosted tools are a 400 naming tools[n] until a reload turns it on, then accepted and not offered", async () => {
  t = await chatTestApp();
  const key = await t.key({ creditUsd: 5 });
  const responses = () => t!.request("POST", "/v1/responses", { key, body: { model: "chat", input: "hi", max_output_tokens: 3, tools: [{ type: "function", name: "f" }, { type: "web_search" }] } });
  const messages = () => t!.request("POST", "/v1/messages", { key, body: { model: "chat", max_tokens: 3, messages: [{ role: "user", content: "hi" }], tools: [{ type: "web_search_20250305", name: "web_search" }] } });
  const refused = await responses();
  expect(refused.status).toBe(400);
  expect(((await refused.json()) as any).error).toMatchObject({ type: "invalid_request_error", param: "tools[1]" });
  const refusedMessages = await messages();
  expect(refusedMessages.status).toBe(400);
  expect(((await refusedMessages.json()) as any).error.message).toStartWith('tools[0]: the server tool "web_search_20250305" does not run on this server');
  const next = validateConfig(structuredClone({ ...t.deps.config, compat: { ignore_hosted_tools: true } }));
  expect(applyReload(t.deps, next).applied).toEqual(["compat.ignore_hosted_tools"]);
  const accepted = await responses();
  expect(accepted.status).toBe(200);
  expect(((await accepted.json()) as any).tools.map((x: any) => x.type)).toEqual(["function", "web_search"]);
  expect((await messages()).status).toBe(200);
}, 60_000);
