import { afterAll, beforeAll, expect, test } from "bun:test";
import { createCohere } from "@ai-sdk/cohere";
import { rerank } from "ai";
import OpenAI from "openai";
import { ensureOnnxModel } from "../../models/onnx/cache";
import { transformersFactories } from "../../src/3-engines/transformers/factory";
import type { RerankerEngine } from "../../src/3-engines/types";
import { BASE, testApp, type TestApp } from "../helpers/app";
import { parseExposition } from "../helpers/prometheus";

// /v1/rerank and /v2/rerank (issue 47) on the generated cross-encoder (models/onnx presets
// "rerank": the layout of cross-encoder/ms-marco-MiniLM-L6-v2's export) through the real
// transformers.js engine: raw Jina-shaped requests, the AI SDK's rerank through its Cohere
// provider, cuts reported, errors named, billing and batches counted.

let t: TestApp;
let key: string;
const appFetch = (url: string | URL | Request, init?: RequestInit) => t.app.handle(new Request(url, init));

beforeAll(async () => {
  const model = await ensureOnnxModel("rerank");
  const common = { kind: "reranker", vision: false, slots: 1, load: "first_use", files: { model } };
  t = testApp({
    config: {
      engines: { device: "cpu", threads: 1 },
      models: [
        { ...common, id: "rerank", name: "Tiny reranker", max_context: 512 },
        { ...common, id: "rerank-tight", name: "Tiny reranker, short", max_context: 24 },
        { id: "chat", name: "Chat", kind: "chat", files: { model: "chat.gguf" }, max_context: 4096, vision: false, slots: 1, load: "first_use" },
      ],
    },
    engines: (config, logger) => transformersFactories(config, logger),
  });
  await t.deps.accounts.createAccount("ranker", { creditMicros: 1_000_000 });
  key = await t.key({ account: "ranker" });
});
afterAll(() => t.close());

const query = "How do I reset my router?";
const documents = [
  "Unplug the router, wait thirty seconds and plug it back in.",
  "Our store opens at nine on weekdays.",
  "Hold the reset button for ten seconds to restore the factory settings of the router.",
  "Bananas are rich in potassium.",
  "The warranty covers parts and labour for two years.",
];
const rerankRequest = (body: Record<string, unknown>, path = "/v1/rerank", k = key) => t.request("POST", path, { key: k, body });
const engine = () => t.deps.registry.engine("rerank", "reranker") as RerankerEngine;

test("a Jina-shaped request: every document scored as the engine scores it alone, best first, with usage", async () => {
  const res = await rerankRequest({ model: "rerank", query, documents });
  expect(res.status).toBe(200);
  const body = await res.json();
  expect(body.model).toBe("rerank");
  expect(body.results.map((r: { index: number }) => r.index).sort()).toEqual([0, 1, 2, 3, 4]);
  // each score is the engine's for that very document, paired alone (no index mix-up in the batch)
  const alone = await Promise.all(documents.map(async (d) => (await engine().rerank(await engine().tokenizePairs(query, [d])))[0]!));
  for (const r of body.results) expect(Math.abs(r.relevance_score - alone[r.index]!)).toBeLessThan(1e-6);
  const scores = body.results.map((r: { relevance_score: number }) => r.relevance_score);
  expect([...scores].sort((a, b) => b - a)).toEqual(scores);
  for (const s of scores) expect(s > 0 && s < 1).toBe(true);
  // usage: the tokens of the five pairs as the model read them
  const pairs = await engine().tokenizePairs(query, documents);
  const tokens = pairs.reduce((n, p) => n + p.ids.length, 0);
  expect(body.usage).toEqual({ prompt_tokens: tokens, total_tokens: tokens });
  expect(body.meta.truncated).toEqual([]);
  expect(body.meta.warnings).toBeUndefined();
  expect(body.results[0].document).toBeUndefined();
});

test("top_n keeps the best n; return_documents gives each its {text}; object documents are read by text", async () => {
  const all = await (await rerankRequest({ model: "rerank", query, documents })).json();
  const top = await (await rerankRequest({ model: "rerank", query, documents: documents.map((text) => ({ text })), top_n: 2, return_documents: true })).json();
  expect(top.results.map((r: { index: number }) => r.index)).toEqual(all.results.slice(0, 2).map((r: { index: number }) => r.index));
  for (const r of top.results) expect(r.document).toEqual({ text: documents[r.index] });
  const more = await (await rerankRequest({ model: "rerank", query, documents, top_n: 50 })).json();
  expect(more.results).toHaveLength(5);
});

test("the AI SDK's rerank through its Cohere provider (baseURL …/v2) ranks as the raw request does", async () => {
  const raw = await (await rerankRequest({ model: "rerank", query, documents })).json();
  const cohere = createCohere({ baseURL: `${BASE}/v2`, apiKey: key, fetch: appFetch as typeof fetch });
  const { ranking, rerankedDocuments } = await rerank({ model: cohere.reranking("rerank"), query, documents, topN: 3 });
  expect(ranking.map((r) => r.originalIndex)).toEqual(raw.results.slice(0, 3).map((r: { index: number }) => r.index));
  for (const [i, r] of ranking.entries()) expect(r.score).toBeCloseTo(raw.results[i].relevance_score, 9);
  expect(rerankedDocuments[0]).toBe(documents[raw.results[0].index]!);
});

test("1,000 documents, the most a request takes, are all scored; top_n picks from all of them", async () => {
  const many = Array.from({ length: 1000 }, (_, i) => `document number ${i} about ${i % 7 === 0 ? "router resets" : "something else"}`);
  const all = await (await rerankRequest({ model: "rerank", query, documents: many })).json();
  expect(all.results).toHaveLength(1000);
  expect(new Set(all.results.map((r: { index: number }) => r.index)).size).toBe(1000);
  const top = await (await rerankRequest({ model: "rerank", query, documents: many, top_n: 3 })).json();
  expect(top.results).toEqual(all.results.slice(0, 3));
});

test("a pair over the model's length is cut from the document's end: listed in meta, warned of, counted as read", async () => {
  const long = Array.from({ length: 60 }, (_, i) => `word${i}`).join(" ");
  const body = await (await rerankRequest({ model: "rerank-tight", query: "router reset", documents: ["short one", long] })).json();
  expect(body.meta.max_tokens_per_pair).toBe(24);
  expect(body.meta.truncated).toHaveLength(1);
  expect(body.meta.truncated[0].index).toBe(1);
  const full = await t.deps.registry.engine("rerank-tight", "reranker").tokenizePairs("router reset", [long], Infinity);
  expect(body.meta.truncated[0].cut_tokens).toBe(full[0]!.ids.length - 24);
  expect(body.meta.warnings[0]).toContain("cut from their end");
  const short = (await t.deps.registry.engine("rerank-tight", "reranker").tokenizePairs("router reset", ["short one"]))[0]!.ids.length;
  expect(body.usage.prompt_tokens).toBe(short + 24);
  // max_tokens_per_doc (Cohere v2) cuts each document to that many tokens
  const perDoc = await (await rerankRequest({ model: "rerank", query: "router reset", documents: [long], max_tokens_per_doc: 5 })).json();
  const bare = (await engine().tokenizePairs("router reset", [""]))[0]!.ids.length;
  expect(perDoc.meta.max_tokens_per_pair).toBe(bare + 5);
  expect(perDoc.usage.prompt_tokens).toBe(bare + 5);
  expect(perDoc.meta.truncated[0].cut_tokens).toBe(full[0]!.ids.length - bare - 5);
});

test("named 400s: a query with no room, over 1,000 documents, none, a model of another kind, rank_fields; /v2 adds Cohere's message", async () => {
  const cases: [Record<string, unknown>, string, string][] = [
    [{ model: "rerank-tight", query: "a very long query ".repeat(10), documents: ["x"] }, "context_length_exceeded", "query"],
    [{ model: "rerank", query, documents: Array(1001).fill("x") }, "too_many_documents", "documents"],
    [{ model: "rerank", query, documents: [] }, "invalid_request_error", "documents"],
    [{ model: "chat", query, documents }, "wrong_model_kind", "model"],
    [{ model: "rerank", query, documents: [{ text: "a", title: "b" }], rank_fields: ["title"] }, "invalid_request_error", "rank_fields"],
    [{ model: "nope", query, documents }, "model_not_found", "model"],
  ];
  for (const [body, code, param] of cases) {
    const res = await rerankRequest(body);
    const err = (await res.json()).error;
    expect([res.status, err.code ?? err.type, err.param]).toEqual([code === "model_not_found" ? 404 : 400, code, param]);
  }
  const v2 = await rerankRequest({ model: "rerank", query, documents: Array(1001).fill("x") }, "/v2/rerank");
  const body = await v2.json();
  expect(v2.status).toBe(400);
  expect(body.message).toContain("at most 1000");
  expect(body.error.code).toBe("too_many_documents");
  // the AI SDK shows that message
  const cohere = createCohere({ baseURL: `${BASE}/v2`, apiKey: key, fetch: appFetch as typeof fetch });
  await expect(rerank({ model: cohere.reranking("rerank"), query, documents: Array(1001).fill("x"), maxRetries: 0 })).rejects.toThrow("at most 1000");
  // no key: 401 on both paths
  expect((await t.request("POST", "/v1/rerank", { body: { model: "rerank", query, documents } })).status).toBe(401);
  expect((await t.request("POST", "/v2/rerank", { body: { model: "rerank", query, documents } })).status).toBe(401);
});

test("billed at reranker_input_per_m per token read; /v1/models shows the price; /metrics counts documents and tokens", async () => {
  await t.deps.accounts.createAccount("payer", { creditMicros: 1_000_000 });
  const k = await t.key({ account: "payer" });
  const res = await rerankRequest({ model: "rerank", query, documents }, "/v1/rerank", k);
  const body = await res.json();
  const row = t.deps.db!.query<{ input_tokens: number; cost_micros: number; endpoint: string }, [string]>("SELECT input_tokens, cost_micros, endpoint FROM usage WHERE request_id = ?").get(res.headers.get("x-request-id")!)!;
  expect(row.input_tokens).toBe(body.usage.prompt_tokens);
  expect(row.endpoint).toBe("/v1/rerank");
  expect(row.cost_micros).toBe(Math.ceil(body.usage.prompt_tokens * 0.02)); // $0.02 per million = 0.02 µ$ a token
  expect(body.id).toBe(res.headers.get("x-request-id"));
  expect((await t.deps.accounts.getAccount("payer")).balance_micros).toBe(1_000_000 - row.cost_micros);

  const models = await (await t.request("GET", "/v1/models", { key: k })).json();
  const entry = models.data.find((m: { id: string }) => m.id === "rerank");
  expect(entry).toMatchObject({ kind: "reranker", pricing: { input_per_m: 0.02, batch_share: 0.5 } });
  expect(models.data.find((m: { id: string }) => m.id === "chat").pricing).toEqual({ input_per_m: 0.12, output_per_m: 1.7, decision_input_per_m: 0.05, batch_share: 0.5 });

  await t.deps.accounts.createAccount("ops", { role: "admin" });
  const admin = await t.key({ account: "ops" });
  const scrape = async () => parseExposition(await (await t.request("GET", "/metrics", { key: admin })).text());
  const before = await scrape();
  const second = await (await rerankRequest({ model: "rerank", query, documents: documents.slice(0, 3) })).json();
  const after = await scrape();
  const labels = { endpoint: "/v1/rerank", model: "rerank" };
  expect(after.value("appliance_judged_items_total", labels)! - (before.value("appliance_judged_items_total", labels) ?? 0)).toBe(3);
  expect(after.value("appliance_judged_input_tokens_total", labels)! - (before.value("appliance_judged_input_tokens_total", labels) ?? 0)).toBe(second.usage.prompt_tokens);
});

test("/v1/rerank as a batch endpoint: lines answered as live, at the batch price; a bad line fails alone", async () => {
  const { fileLines, uploadLines, waitForBatch } = await import("../helpers/batches");
  t.deps.batchWorker.start();
  const client = new OpenAI({ apiKey: key, baseURL: `${BASE}/v1`, maxRetries: 0, fetch: appFetch as typeof fetch });
  const lines = [0, 1].map((i) => ({ custom_id: `r${i}`, url: "/v1/rerank", body: { model: "rerank", query, documents: documents.slice(i) } }));
  lines.push({ custom_id: "bad", url: "/v1/rerank", body: { model: "rerank", query, documents: Array(1001).fill("x") } });
  const endpoint = "/v1/rerank" as OpenAI.BatchCreateParams["endpoint"];
  const b = await waitForBatch(client, (await client.batches.create({ input_file_id: await uploadLines(client, lines), endpoint, completion_window: "24h" })).id);
  expect(b.request_counts).toEqual({ total: 3, completed: 2, failed: 1 });
  const out = await fileLines(client, b.output_file_id);
  const live = await (await rerankRequest({ model: "rerank", query, documents })).json();
  expect(out[0].response.body.results).toEqual(live.results);
  expect((await fileLines(client, b.error_file_id)).map((l) => [l.custom_id, l.error.code])).toEqual([["bad", "too_many_documents"]]);
  const rows = t.deps.db!.query<{ batch: number; cost_micros: number; input_tokens: number }, [string]>("SELECT batch, cost_micros, input_tokens FROM usage WHERE request_id LIKE ? ORDER BY request_id").all(`req_${b.id.slice(6)}_%`);
  expect(rows.map((r) => r.batch)).toEqual([1, 1]);
  for (const r of rows) expect(r.cost_micros).toBe(Math.ceil(r.input_tokens * 0.02 * 0.5));
});

test("rate limits apply as to every inference route: a key of 1 request a minute gets 429 on its second rerank, at either path", async () => {
  await t.deps.accounts.createAccount("slow", { creditMicros: 1_000_000 });
  const k = await t.key({ account: "slow", rpm: 1 });
  expect((await rerankRequest({ model: "rerank", query, documents }, "/v1/rerank", k)).status).toBe(200);
  const second = await rerankRequest({ model: "rerank", query, documents }, "/v2/rerank", k);
  expect(second.status).toBe(429);
  expect(second.headers.get("retry-after")).not.toBeNull();
  expect((await second.json()).message).toBeString();
});
