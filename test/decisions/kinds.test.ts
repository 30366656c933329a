import { afterAll, beforeAll, expect, test } from "bun:test";
import OpenAI from "openai";
import { ensureOnnxModel } from "../../models/onnx/cache";
import { chatTestApp } from "../helpers/chat";

// /v1/decisions on each kind of model (issue 47), through the official `openai` SDK: an NLI
// classifier answers predicate questions by entailment — P(entailment) of (input, instructions),
// exactly /v1/classify's for the same pair — billed at the classifier's own price; other question
// types there, images, and an input past its limit are named 400s; embedding, image and reranker
// models are the wrong kind (400 wrong_model_kind, as every endpoint answers one). Nothing refused is charged or left held.

let t: Awaited<ReturnType<typeof chatTestApp>>;

beforeAll(async () => {
  const [nli, embed] = await Promise.all([ensureOnnxModel("nli"), ensureOnnxModel("embed")]);
  const common = { vision: false, slots: 1, load: "first_use" };
  t = await chatTestApp({
    // a classifier price of its own, and a decisions price that must not apply to it
    config: { prices: { classifier_input_per_m: 0.4, decision_input_per_m: 2 } },
    extraModels: [
      { ...common, id: "nli", name: "Tiny NLI", kind: "classifier", files: { model: nli }, max_context: 8192 },
      { ...common, id: "nli-tight", name: "Tiny NLI, short", kind: "classifier", files: { model: nli }, max_context: 24 },
      { ...common, id: "embed", name: "Tiny embed", kind: "embedding", files: { model: embed }, max_context: 512 },
      // never loaded: a decision is refused from the manifest's kind
      { ...common, id: "turbo", name: "Images", kind: "image", files: { model: "no-such-folder" }, max_context: 77 },
      { ...common, id: "rerank", name: "Reranker", kind: "reranker", files: { model: "no-such-folder" }, max_context: 512 },
    ],
  });
}, 120_000);
afterAll(() => t?.close());

const premise = "A man is playing a guitar on the street while a small crowd listens.";
const statements = ["Nobody is playing music.", "A person is outside.", "The crowd is large."];
const row = (requestId: string) => t.deps.db!.query<Record<string, number | string>, [string]>("SELECT * FROM usage WHERE request_id = ?").get(requestId)!;

async function refusal(p: Promise<unknown>) {
  try {
    await p;
  } catch (e) {
    if (e instanceof OpenAI.APIError) return { status: e.status, code: e.code, param: e.param, message: e.message };
    throw e;
  }
  throw new Error("not refused");
}

test("a classifier's predicates: P(entailment) of (input, instructions), as /v1/classify gives it for the same pairs; usage the pairs' tokens at the classifier's price", async () => {
  const key = await t.key({ account: "nli-decider", creditUsd: 5 });
  const { data, response } = await t
    .openai(key)
    .decisions.create({ model: "nli", input: premise, questions: statements.map((instructions, i) => ({ type: "predicate" as const, name: `s${i}`, instructions })) })
    .withResponse();
  const res = await t.request("POST", "/v1/classify", { key, body: { model: "nli", pairs: statements.map((hypothesis) => ({ premise, hypothesis })) } });
  expect(res.status).toBe(200);
  const classified = (await res.json()) as { data: { probs: number[] }[]; usage: { prompt_tokens: number } };
  expect(data.model).toBe("nli");
  expect(data.answers.map((a) => [a.type, a.name])).toEqual([["predicate", "s0"], ["predicate", "s1"], ["predicate", "s2"]]);
  data.answers.forEach((a, i) => expect((a as OpenAI.Decision.AnswerResourcePredicate).probability).toBeCloseTo(classified.data[i]!.probs[1]!, 6));
  // three different statements: three different probabilities (the hypothesis is each question's own)
  expect(new Set(data.answers.map((a) => (a as OpenAI.Decision.AnswerResourcePredicate).probability.toFixed(6))).size).toBe(3);
  expect(data.usage).toEqual({
    input_tokens: classified.usage.prompt_tokens,
    input_tokens_details: { cached_tokens: 0, cache_write_tokens: 0 },
    output_tokens: 0,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: classified.usage.prompt_tokens,
  });
  const r = row(response.headers.get("x-request-id")!);
  expect(r).toMatchObject({ model: "nli", endpoint: "/v1/decisions", input_tokens: data.usage.input_tokens, output_tokens: 0 });
  // the classifier's own price ($0.40 per million here), not the decisions price ($2)
  expect(Number(r.cost_micros)).toBe(Math.ceil((data.usage.input_tokens * 0.4e6) / 1e6));
  expect(Number(r.cost_micros)).toBeLessThan(Math.ceil((data.usage.input_tokens * 2e6) / 1e6));
});

test("a classifier's premise is the text of every input message, in order, one a line", async () => {
  const key = await t.key({ creditUsd: 5 });
  const d = await t.openai(key).decisions.create({
    model: "nli",
    input: [
      { role: "developer", content: "Street scenes." },
      { role: "user", content: [{ type: "input_text", text: premise }, { type: "input_json", data: { city: "Lisbon" } }] },
    ],
    questions: [{ type: "predicate", instructions: statements[1]! }],
  });
  const res = await t.request("POST", "/v1/classify", { key, body: { model: "nli", pairs: [{ premise: `Street scenes.\n${premise}\n{"city":"Lisbon"}`, hypothesis: statements[1] }] } });
  const classified = (await res.json()) as { data: { probs: number[] }[]; usage: { prompt_tokens: number } };
  expect((d.answers[0] as OpenAI.Decision.AnswerResourcePredicate).probability).toBeCloseTo(classified.data[0]!.probs[1]!, 6);
  expect(d.usage.input_tokens).toBe(classified.usage.prompt_tokens);
});

test("refused on a classifier, by name, nothing charged: a choice or score question, an image, an input past its tokens", async () => {
  const client = t.openai(await t.key({ account: "nli-refused", creditUsd: 5 }));
  const p = { type: "predicate" as const, instructions: statements[0]! };
  const choice = await refusal(client.decisions.create({ model: "nli", input: premise, questions: [p, { type: "choice", instructions: "Which?", choices: [{ value: "a" }, { value: "b" }] }] }));
  expect(choice).toMatchObject({ status: 400, code: "invalid_question", param: "questions[1].type" });
  expect(choice.message).toContain('model "nli" is an NLI classifier and answers predicate questions only');
  expect(choice.message).toContain("a choice question needs a chat model");
  const score = await refusal(client.decisions.create({ model: "nli", input: premise, questions: [{ type: "score", instructions: "How?", levels: [{ label: "low" }, { label: "high" }] }] }));
  expect(score).toMatchObject({ status: 400, code: "invalid_question", param: "questions[0].type" });
  // an image: the 400 chat answers for an image to a text-only model
  const image = await refusal(
    client.decisions.create({ model: "nli", input: [{ role: "user", content: [{ type: "input_text", text: premise }, { type: "input_image", image_url: "data:image/png;base64,AAAA" }] }], questions: [p] }),
  );
  expect(image).toMatchObject({ status: 400, code: "images_not_supported", param: "input[0].content[1]" });
  expect(image.message).toContain('model "nli" does not accept images (supports_vision is false)');
  // nli-tight takes 24 tokens per pair: the premise and hypothesis pair does not fit
  const long = await refusal(client.decisions.create({ model: "nli-tight", input: premise, questions: [p] }));
  expect(long).toMatchObject({ status: 400, code: "context_length_exceeded", param: "input" });
  expect(long.message).toContain("at most 24 tokens");
  const huge = await refusal(client.decisions.create({ model: "nli", input: "word ".repeat(40_000), questions: [p] }));
  expect(huge).toMatchObject({ status: 400, code: "context_length_exceeded", param: "input" });
  const account = await t.deps.accounts.getAccount("nli-refused");
  expect(account.balance_micros).toBe(5_000_000);
  expect(t.deps.db!.query("SELECT COUNT(*) AS n FROM usage WHERE account_id = ?").get(account.id)).toEqual({ n: 0 });
  expect((await t.deps.meter.held(account.id)).micros).toBe(0);
});

test("embedding, image and reranker models are the wrong kind: a 400 on `model` naming the kinds that answer, as other endpoints answer a wrong kind", async () => {
  const client = t.openai(await t.key({ account: "wrong-kind", creditUsd: 5 }));
  const questions = [{ type: "predicate" as const, instructions: "It is about music." }];
  for (const [model, kind] of [["embed", "an embedding"], ["turbo", "an image"], ["rerank", "a reranker"]] as const) {
    const e = await refusal(client.decisions.create({ model, input: premise, questions }));
    expect(e).toMatchObject({ status: 400, code: "wrong_model_kind", param: "model" });
    expect(e.message).toContain(`model "${model}" is ${kind} model and cannot answer decisions`);
    expect(e.message).toContain("use one of: chat, small-chat, tight, nli, nli-tight");
  }
  // as /v1/embeddings answers a model of the wrong kind
  const other = await refusal(client.embeddings.create({ model: "nli", input: "x" }));
  expect(other).toMatchObject({ status: 400, code: "wrong_model_kind", param: "model" });
  expect((await refusal(client.decisions.create({ model: "no-such-model", input: premise, questions }))).status).toBe(404);
  const account = await t.deps.accounts.getAccount("wrong-kind");
  expect(t.deps.db!.query("SELECT COUNT(*) AS n FROM usage WHERE account_id = ?").get(account.id)).toEqual({ n: 0 });
});

test("a /v1/decisions batch takes lines for a chat model and for a classifier; a reranker line fails the batch at validation, named by line", async () => {
  const { fileLines, uploadLines, waitForBatch } = await import("../helpers/batches");
  t.deps.batchWorker.start();
  const client = t.openai(await t.key({ account: "batch-kinds", creditUsd: 1 }));
  const q = { type: "predicate", instructions: statements[1] };
  const lines = ["chat", "nli", "rerank"].map((model) => ({ custom_id: model, url: "/v1/decisions", body: { model, input: premise, questions: [q] } }));
  const endpoint = "/v1/decisions" as OpenAI.BatchCreateParams["endpoint"];
  const b = await waitForBatch(client, (await client.batches.create({ input_file_id: await uploadLines(client, lines), endpoint, completion_window: "24h" })).id);
  // a line of the wrong kind fails validation, and so the whole batch (spec: any line invalid → failed)
  expect(b.status).toBe("failed");
  expect(b.errors?.data?.map((e) => [e.line, e.param])).toEqual([[3, "body.model"]]);
  const ok = lines.slice(0, 2);
  const b2 = await waitForBatch(client, (await client.batches.create({ input_file_id: await uploadLines(client, ok), endpoint, completion_window: "24h" })).id);
  expect(b2.request_counts).toEqual({ total: 2, completed: 2, failed: 0 });
  const out = await fileLines(client, b2.output_file_id);
  expect(out.map((l) => [l.custom_id, l.response.body.model, l.response.body.answers[0].type])).toEqual([
    ["chat", "chat", "predicate"],
    ["nli", "nli", "predicate"],
  ]);
  // the classifier's line is P(entailment), as the live request answers it
  const live = await client.decisions.create({ model: "nli", input: premise, questions: [q] } as never);
  expect(out[1].response.body.answers[0].probability).toBeCloseTo((live as any).answers[0].probability, 6);
});
