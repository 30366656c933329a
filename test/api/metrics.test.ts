import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type OpenAI from "openai";
import type { TestApp } from "../helpers/app";
import { chatTestApp } from "../helpers/chat";
import { parseExposition, type Exposition } from "../helpers/prometheus";

let t: TestApp & { openai: (key: string) => OpenAI };
let adminKey: string;
let userKey: string;
beforeAll(async () => {
  t = await chatTestApp();
  await t.deps.accounts.createAccount("ops-admin", { role: "admin" });
  adminKey = await t.key({ account: "ops-admin", kind: "free" });
  userKey = await t.key({ account: "metrics-user", creditUsd: 5 });
});
afterAll(() => t.close());

async function scrape(): Promise<Exposition> {
  const res = await t.request("GET", "/metrics", { key: adminKey });
  expect(res.status).toBe(200);
  return parseExposition(await res.text());
}

const chatBody = (content: string, extra: Record<string, unknown> = {}) => ({
  model: "chat",
  messages: [{ role: "user", content }],
  max_tokens: 8,
  temperature: 0,
  chat_template_kwargs: { enable_thinking: false },
  ...extra,
});

const num = (e: Exposition, name: string, labels: Record<string, string> = {}) => e.value(name, labels) ?? 0;

describe("protection", () => {
  test("no key is a 401 in the OpenAI envelope", async () => {
    const res = await t.request("GET", "/metrics");
    expect(res.status).toBe(401);
    expect((await res.json()).error.code).toBe("invalid_api_key");
  });

  test("a revoked key is a 401", async () => {
    const key = await t.key({ account: "ops-admin", kind: "premium" });
    await t.deps.accounts.revokeKey(key);
    expect((await t.request("GET", "/metrics", { key })).status).toBe(401);
  });

  test("a valid key of a non-admin account is a 403 admin_only", async () => {
    const res = await t.request("GET", "/metrics", { key: userKey });
    expect(res.status).toBe(403);
    expect((await res.json()).error.code).toBe("admin_only");
  });

  test("an admin account's key gets text/plain; version=0.0.4 that parses line by line", async () => {
    const res = await t.request("GET", "/metrics", { key: adminKey });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("text/plain; version=0.0.4; charset=utf-8");
    const e = parseExposition(await res.text());
    for (const name of e.types.keys()) {
      expect(name).toMatch(/^appliance_[a-z0-9_]+$/);
      if (e.types.get(name) === "counter") expect(name).toEndWith("_total");
      expect(e.help.get(name)?.length).toBeGreaterThan(0);
    }
    expect(e.value("appliance_build_info", { version: (await import("../../package.json")).version })).toBe(1);
    expect(num(e, "appliance_process_resident_memory_bytes")).toBeGreaterThan(1_000_000);
    const start = num(e, "appliance_process_start_time_seconds");
    expect(start).toBeLessThanOrEqual(Date.now() / 1000);
    expect(start).toBeGreaterThan(Date.now() / 1000 - 3600);
  });
});

describe("chat", () => {
  test("a non-streamed request moves tokens, cached tokens, TTFT and the route counter by its usage", async () => {
    const before = await scrape();
    const res = await t.request("POST", "/v1/chat/completions", { key: userKey, body: chatBody("Count to three.") });
    expect(res.status).toBe(200);
    const { usage } = await res.json();
    const after = await scrape();
    const delta = (name: string, labels: Record<string, string> = {}) => num(after, name, labels) - num(before, name, labels);
    expect(delta("appliance_chat_tokens_total", { model: "chat", direction: "input" })).toBe(usage.prompt_tokens);
    expect(delta("appliance_chat_tokens_total", { model: "chat", direction: "output" })).toBe(usage.completion_tokens);
    expect(delta("appliance_chat_cached_tokens_total", { model: "chat" })).toBe(usage.prompt_tokens_details.cached_tokens);
    expect(delta("appliance_chat_time_to_first_token_seconds_count", { model: "chat" })).toBe(1);
    expect(delta("appliance_chat_time_per_output_token_seconds_count", { model: "chat" })).toBe(usage.completion_tokens > 1 ? 1 : 0);
    expect(delta("appliance_http_requests_total", { route: "/v1/chat/completions", method: "POST", status: "200" })).toBe(1);
    expect(delta("appliance_http_request_duration_seconds_count", { route: "/v1/chat/completions", method: "POST" })).toBe(1);
  });

  test("a streamed request counts the same, and a repeated prompt shows cached tokens", async () => {
    const body = chatBody("Say a word about rivers, please.", { stream: true, stream_options: { include_usage: true } });
    const before = await scrape();
    let usage: any;
    for (let i = 0; i < 2; i++) {
      const res = await t.request("POST", "/v1/chat/completions", { key: userKey, body });
      expect(res.status).toBe(200);
      for (const line of (await res.text()).split("\n"))
        if (line.startsWith("data: {") && line.includes('"usage":{')) {
          const u = JSON.parse(line.slice(6)).usage;
          usage = usage ? { prompt: usage.prompt + u.prompt_tokens, output: usage.output + u.completion_tokens, cached: usage.cached + u.prompt_tokens_details.cached_tokens } : { prompt: u.prompt_tokens, output: u.completion_tokens, cached: u.prompt_tokens_details.cached_tokens };
        }
    }
    const after = await scrape();
    const delta = (name: string, labels: Record<string, string> = {}) => num(after, name, labels) - num(before, name, labels);
    expect(delta("appliance_chat_tokens_total", { model: "chat", direction: "input" })).toBe(usage.prompt);
    expect(delta("appliance_chat_tokens_total", { model: "chat", direction: "output" })).toBe(usage.output);
    expect(delta("appliance_chat_cached_tokens_total", { model: "chat" })).toBe(usage.cached);
    expect(usage.cached).toBeGreaterThan(0);
    expect(delta("appliance_chat_time_to_first_token_seconds_count", { model: "chat" })).toBe(2);
    expect(delta("appliance_http_requests_total", { route: "/v1/chat/completions", method: "POST", status: "200" })).toBe(2);
  });

  test("credits consumed equal the usage table's cost, by key kind", async () => {
    const e = await scrape();
    const cost = t.deps.db!.query<{ c: number }, []>("SELECT COALESCE(SUM(cost_micros), 0) AS c FROM usage").get()!.c;
    expect(cost).toBeGreaterThan(0);
    expect(num(e, "appliance_credits_consumed_usd_total", { kind: "premium" })).toBeCloseTo(cost / 1e6, 9);
    expect(num(e, "appliance_credits_consumed_usd_total", { kind: "free" })).toBe(0);
  });
});

describe("scrape-time state", () => {
  test("slot gauges show the configured slots of loaded models", async () => {
    await t.request("POST", "/v1/chat/completions", { key: userKey, body: chatBody("hi", { max_tokens: 1 }) });
    const e = await scrape();
    expect(e.value("appliance_model_loaded", { model: "chat", kind: "chat" })).toBe(1);
    expect(e.value("appliance_model_loaded", { model: "small-chat", kind: "chat" })).toBe(0);
    expect(e.value("appliance_model_slots", { model: "chat" })).toBe(2);
    expect(e.value("appliance_model_slots_busy", { model: "chat" })).toBe(0);
    expect(e.value("appliance_model_queue_depth", { model: "chat" })).toBe(0);
    expect(e.value("appliance_model_slots", { model: "small-chat" })).toBeUndefined();
  });

  test("batches, batch lines, rentals and images are read from the store", async () => {
    const key = (await t.deps.accounts.listKeys("metrics-user"))[0]!;
    const account = await t.deps.accounts.getAccount("metrics-user");
    const now = Date.now();
    const db = t.deps.db!;
    db.run("INSERT INTO files (id, key_id, account_id, filename, purpose, bytes, created_at) VALUES ('file-m1', ?, ?, 'in.jsonl', 'batch', 1, ?)", [key.id, account.id, now]);
    db.run(
      "INSERT INTO batches (id, key_id, account_id, endpoint, input_file_id, completion_window, status, total, completed, failed, created_at, expires_at) VALUES ('batch_m1', ?, ?, '/v1/chat/completions', 'file-m1', '24h', 'in_progress', 3, 1, 1, ?, ?)",
      [key.id, account.id, now, now + 86_400_000],
    );
    for (const [line, state] of [[0, "completed"], [1, "failed"], [2, "pending"]] as const)
      db.run("INSERT INTO batch_lines (batch_id, line, custom_id, model, body, state) VALUES ('batch_m1', ?, ?, 'chat', '{}', ?)", [line, `c${line}`, state]);
    db.run(
      "INSERT INTO rentals (id, key_id, account_id, node_id, type, status, price_per_hour_micros, token, launcher, created_at, billed_minutes, cost_micros) VALUES ('rent_m1', ?, ?, 'n1', 'gpu', 'stopped', 600000, 't', 'process', ?, 7, 70000)",
      [key.id, account.id, now],
    );
    // An image row for a model no longer configured: counted, under "other" (labels stay bounded).
    db.run(
      "INSERT INTO usage (request_id, account_id, key_id, model, endpoint, images, cost_micros, created_at) VALUES ('req_img', ?, ?, 'retired-image-model', '/v1/images/generations', 3, 9000, ?)",
      [account.id, key.id, now],
    );
    const e = await scrape();
    expect(e.value("appliance_batches", { status: "in_progress" })).toBe(1);
    expect(e.value("appliance_batches", { status: "completed" })).toBe(0);
    expect(e.value("appliance_batch_lines", { state: "pending" })).toBe(1);
    expect(e.value("appliance_batch_lines", { state: "completed" })).toBe(1);
    expect(e.value("appliance_batch_lines", { state: "failed" })).toBe(1);
    expect(e.value("appliance_rentals_active")).toBe(0);
    expect(e.value("appliance_rental_gpu_minutes_total")).toBe(7);
    expect(e.value("appliance_rental_credits_consumed_usd_total")).toBeCloseTo(0.07, 9);
    expect(e.value("appliance_images_generated_total", { model: "other" })).toBe(3);
    db.run("UPDATE rentals SET status = 'running' WHERE id = 'rent_m1'");
    expect((await scrape()).value("appliance_rentals_active")).toBe(1);
    db.run("UPDATE rentals SET status = 'stopped' WHERE id = 'rent_m1'");
    // Summed once: a second scrape does not count the same usage rows again.
    expect((await scrape()).value("appliance_images_generated_total", { model: "other" })).toBe(3);
  });
});

describe("bounded labels", () => {
  test("routes are patterns, never raw paths; no label holds a key id, a key or an account name", async () => {
    await t.request("GET", "/v1/files/file_abc", { key: userKey });
    await t.request("GET", "/v1/files/file_abc");
    await t.request("GET", "/v1/no/such/path_xyz", { key: userKey });
    await t.request("GET", "/console/nothing-here_xyz");
    const e = await scrape();
    expect(e.value("appliance_http_requests_total", { route: "/v1/files/:id", method: "GET", status: "404" })).toBe(1);
    expect(e.value("appliance_http_requests_total", { route: "/v1/files/:id", method: "GET", status: "401" })).toBe(1);
    expect(e.value("appliance_http_requests_total", { route: "unmatched", method: "GET", status: "404" })).toBeGreaterThanOrEqual(1);
    expect(e.value("appliance_http_requests_total", { route: "/metrics", method: "GET", status: "403" })).toBe(1);
    const forbidden = [
      "file_abc",
      "path_xyz",
      "ops-admin",
      "metrics-user",
      "sk-",
      ...(await t.deps.accounts.listKeys()).map((k) => k.id),
      ...(await t.deps.accounts.listAccounts()).map((a) => a.id),
    ];
    const values = e.samples.flatMap((s) => Object.values(s.labels));
    for (const v of values) for (const f of forbidden) expect(v).not.toContain(f);
    const patterns = new Set(e.samples.filter((s) => s.labels.route !== undefined).map((s) => s.labels.route));
    for (const p of patterns) expect(p === "unmatched" || !/_(abc|xyz)/.test(p!)).toBe(true);
  });
});
