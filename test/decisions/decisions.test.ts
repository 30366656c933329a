import { afterAll, beforeAll, expect, test } from "bun:test";
import OpenAI from "openai";
import type { TestApp } from "../helpers/app";
import { ensureChatModel } from "../../models/cache";
import { chatTestApp } from "../helpers/chat";

// POST /v1/decisions (issue 47) through the official `openai` SDK's decisions.create, unmodified, on
// the tiny chat model: answers in question order in the SDK's shapes, probabilities that sum to
// one, the input read once for all questions (cached tokens), the usage row charged once at the
// decisions price, and the refusals of malformed questions and of an input past the context window
// in OpenAI's envelope.

let t: TestApp & { openai: (key: string) => OpenAI };
beforeAll(async () => {
  // a chat model with a decisions price of its own
  const priced = { id: "priced", name: "Tiny chat, priced", kind: "chat", files: { model: await ensureChatModel("chat") }, max_context: 4096, slots: 1, load: "first_use", price: { input_per_m: 0.2, output_per_m: 0.5, decision_input_per_m: 3.7 } };
  t = await chatTestApp({ extraModels: [priced], config: { prices: { decision_input_per_m: 0.9 } } });
});
afterAll(() => t.close());

const row = (requestId: string) => t.deps.db!.query<Record<string, number | string>, [string]>("SELECT * FROM usage WHERE request_id = ?").get(requestId);
const ticket = "Ticket 4411: I was charged twice for the same subscription renewal this month. " + "Please refund the second charge to my card as soon as you can. ".repeat(4);

test("decisions.create: a predicate, a choice and a score answered in order, from the model's probabilities, billed once", async () => {
  const key = await t.key({ account: "decider", creditUsd: 1 });
  const client = t.openai(key);
  const before = (await t.deps.accounts.getAccount("decider")).balance_micros;
  const { data, response } = await client.decisions
    .create({
      model: "chat",
      input: ticket,
      questions: [
        { type: "predicate", name: "double_charge", instructions: "The customer reports being charged more than once." },
        { type: "choice", name: "category", instructions: "Classify the ticket.", choices: [{ value: "billing" }, { value: "technical", description: "Software errors and outages" }, { value: true }] },
        { type: "score", instructions: "How urgent is the ticket?", levels: [{ label: "low" }, { label: "medium" }, { label: "high" }] },
      ],
    })
    .withResponse();
  expect(data.model).toBe("chat");
  expect(data.answers.map((a) => a.type)).toEqual(["predicate", "choice", "score"]);
  const [p, c, s] = data.answers as [OpenAI.Decision.AnswerResourcePredicate, OpenAI.Decision.AnswerResourceChoice, OpenAI.Decision.AnswerResourceScore];
  expect(p.name).toBe("double_charge");
  expect(p.probability).toBeGreaterThan(0);
  expect(p.probability).toBeLessThan(1);
  expect(c.name).toBe("category");
  expect(c.probabilities.map((x) => x.value)).toEqual(["billing", "technical", true]);
  expect(c.probabilities.reduce((sum, x) => sum + x.probability, 0)).toBeCloseTo(1, 9);
  const best = c.probabilities.reduce((m, x) => (x.probability > m.probability ? x : m));
  expect(c.choice).toBe(best.value);
  expect(c.confidence).toBe(best.probability);
  expect(s.name).toBeNull();
  expect(s.probabilities.map((x) => [x.label, x.value])).toEqual([["low", 0], ["medium", 1], ["high", 2]]);
  expect(s.score).toBeCloseTo(s.probabilities.reduce((sum, x) => sum + x.probability * x.value, 0), 9);
  // the input read once: the second and third questions start from it in the slot's cache
  const u = data.usage;
  expect(u.output_tokens).toBe(0);
  expect(u.input_tokens_details.cached_tokens).toBeGreaterThan(100);
  expect(u.total_tokens).toBe(u.input_tokens);
  const r = row(response.headers.get("x-request-id")!)!;
  expect(r).toMatchObject({ model: "chat", endpoint: "/v1/decisions", input_tokens: u.input_tokens, output_tokens: 0, cached_tokens: u.input_tokens_details.cached_tokens, batch: 0 });
  expect((await t.deps.accounts.getAccount("decider")).balance_micros).toBe(before - Number(r.cost_micros));
  expect(Number(r.cost_micros)).toBeGreaterThan(0);
});

test("messages as input; the same question twice gives the same answer", async () => {
  const client = t.openai(await t.key({ creditUsd: 1 }));
  const ask = () =>
    client.decisions.create({
      model: "chat",
      input: [
        { role: "developer", content: "You triage support tickets." },
        { role: "user", content: [{ type: "input_text", text: ticket }, { type: "input_json", data: { plan: "annual", region: "EU" } }] },
      ],
      questions: [{ type: "predicate", instructions: "The customer wants money back." }],
    });
  const [a, b] = [await ask(), await ask()];
  expect((a.answers[0] as OpenAI.Decision.AnswerResourcePredicate).probability).toBeCloseTo((b.answers[0] as OpenAI.Decision.AnswerResourcePredicate).probability, 5);
});

test("refused in OpenAI's envelope, each by name: too many questions, a choice list outside 2–255 or repeated, one level, an image to a text-only model, an unknown model", async () => {
  const client = t.openai(await t.key({ account: "refused", creditUsd: 1 }));
  const before = (await t.deps.accounts.getAccount("refused")).balance_micros;
  const p = { type: "predicate" as const, instructions: "It is about billing." };
  const refused = async (body: Record<string, unknown>) => {
    try {
      await client.decisions.create({ model: "chat", input: ticket, questions: [p], ...body } as OpenAI.DecisionCreateParams);
    } catch (e) {
      if (e instanceof OpenAI.APIError) return { status: e.status, code: e.code, param: e.param };
      throw e;
    }
    throw new Error("not refused");
  };
  expect(await refused({ questions: Array(11).fill(p) })).toEqual({ status: 400, code: "too_many_questions", param: "questions" });
  expect(await refused({ questions: [{ type: "choice", instructions: "Pick.", choices: [{ value: "a" }] }] })).toEqual({ status: 400, code: "invalid_question", param: "questions[0].choices" });
  expect(await refused({ questions: [{ type: "choice", instructions: "Pick.", choices: [{ value: "a" }, { value: "a" }] }] })).toEqual({ status: 400, code: "invalid_question", param: "questions[0].choices[1]" });
  expect(await refused({ questions: [{ type: "score", instructions: "Rate.", levels: [{ label: "only" }] }] })).toEqual({ status: 400, code: "invalid_question", param: "questions[0].levels" });
  expect(await refused({ input: [{ role: "user", content: [{ type: "input_image", image_url: "data:image/png;base64,AAAA" }] }] })).toEqual({
    status: 400,
    code: "images_not_supported",
    param: "input[0].content[0]",
  });
  expect(await refused({ input: [{ type: "function_call", call_id: "c1", name: "lookup", arguments: "{}" }] })).toEqual({ status: 400, code: null, param: "input[0]" });
  expect((await refused({ model: "no-such-model" })).status).toBe(404);
  // nothing charged for any of them, and nothing left held
  expect(t.deps.db!.query("SELECT COUNT(*) AS n FROM usage WHERE account_id = (SELECT id FROM accounts WHERE name = 'refused')").get()).toEqual({ n: 0 });
  const account = await t.deps.accounts.getAccount("refused");
  expect(account.balance_micros).toBe(before);
  expect((await t.deps.meter.held(account.id)).micros).toBe(0);
});

test("/v1/decisions as a batch endpoint: each line answered as the live route answers it, at the batch price", async () => {
  const { fileLines, uploadLines, waitForBatch } = await import("../helpers/batches");
  t.deps.batchWorker.start();
  const client = t.openai(await t.key({ account: "batch-decider", creditUsd: 1 }));
  const q = { type: "predicate", instructions: "The customer wants money back." };
  const lines = [0, 1, 2].map((i) => ({ custom_id: `d${i}`, url: "/v1/decisions", body: { model: "chat", input: `${ticket} (${i})`, questions: [q] } }));
  lines.push({ custom_id: "bad", url: "/v1/decisions", body: { model: "chat", input: ticket, questions: Array(11).fill(q) } });
  // the SDK's type lists the endpoints OpenAI batches; the appliance takes /v1/decisions too
  const endpoint = "/v1/decisions" as OpenAI.BatchCreateParams["endpoint"];
  const b = await waitForBatch(client, (await client.batches.create({ input_file_id: await uploadLines(client, lines), endpoint, completion_window: "24h" })).id);
  expect(b.request_counts).toEqual({ total: 4, completed: 3, failed: 1 });
  const out = await fileLines(client, b.output_file_id);
  expect(out.map((l) => [l.custom_id, l.response.body.answers[0].type])).toEqual([
    ["d0", "predicate"],
    ["d1", "predicate"],
    ["d2", "predicate"],
  ]);
  const errors = await fileLines(client, b.error_file_id);
  expect(errors.map((l) => [l.custom_id, l.error.code])).toEqual([["bad", "too_many_questions"]]);
  const rows = t.deps.db!.query<{ batch: number; endpoint: string; input_tokens: number }, [string]>("SELECT batch, endpoint, input_tokens FROM usage WHERE request_id LIKE ?").all(`req_${b.id.slice(6)}_%`);
  expect(rows.map((r) => [r.batch, r.endpoint])).toEqual([[1, "/v1/decisions"], [1, "/v1/decisions"], [1, "/v1/decisions"]]);
  expect(rows.map((r) => r.input_tokens)).toEqual(out.map((l) => l.response.body.usage.input_tokens));
});

test("billed at the decisions price: the config's prices.decision_input_per_m, or the model's price.decision_input_per_m, per input token", async () => {
  const client = t.openai(await t.key({ creditUsd: 1 }));
  const q = [{ type: "predicate" as const, instructions: "The customer wants money back." }];
  for (const [model, perM] of [["chat", 0.9], ["priced", 3.7]] as const) {
    const { data, response } = await client.decisions.create({ model, input: ticket, questions: q }).withResponse();
    const r = row(response.headers.get("x-request-id")!)!;
    expect(r).toMatchObject({ model, endpoint: "/v1/decisions", input_tokens: data.usage.input_tokens, output_tokens: 0 });
    // micro-dollars, rounded up: input tokens × USD per million (nothing for output)
    expect(Number(r.cost_micros)).toBe(Math.ceil((data.usage.input_tokens * perM * 1e6) / 1e6));
  }
});

test("an input past the context window: 400 context_length_exceeded on input, refused before any credit is held", async () => {
  // a premium key with no credit: any hold would be refused with 402 first
  const broke = t.openai(await t.key({ account: "broke" }));
  const q = [{ type: "predicate" as const, instructions: "The customer wants money back." }];
  const refused = (p: Promise<unknown>) => p.then(() => { throw new Error("not refused"); }, (e: InstanceType<typeof OpenAI.APIError>) => ({ status: e.status, code: e.code, param: e.param, message: e.message }));
  expect(await refused(broke.decisions.create({ model: "tight", input: "A short ticket.", questions: q }))).toMatchObject({ status: 402, code: "insufficient_balance" });
  // "tight" holds 256 tokens: the input grown a word at a time is refused for its length as soon as
  // the prompt leaves no room for an answer, not for the balance
  let over: Awaited<ReturnType<typeof refused>> | null = null;
  for (let words = 40; words < 400 && !over; words++) {
    const e = await refused(broke.decisions.create({ model: "tight", input: "word ".repeat(words), questions: q }));
    if (e.status !== 402) over = e;
  }
  expect(over).toMatchObject({ status: 400, code: "context_length_exceeded", param: "input" });
  expect(over!.message).toContain("context window is 256 tokens");
  expect(over!.message).toContain("leaving no room for an answer");
  expect(await refused(broke.decisions.create({ model: "tight", input: ticket.repeat(3), questions: q }))).toMatchObject({ status: 400, code: "context_length_exceeded", param: "input" });
  // far past it: refused from the text's length before the template renders it
  expect(await refused(broke.decisions.create({ model: "chat", input: "word ".repeat(20_000), questions: q }))).toMatchObject({ status: 400, code: "context_length_exceeded", param: "input" });
  // a prompt that fits with an answer that does not: the engine refuses it, the hold released, nothing charged
  const client = t.openai(await t.key({ account: "long-answer", creditUsd: 1 }));
  const long = "the refund of the second charge on the card as soon as possible ".repeat(3).trim();
  const choice = { type: "choice" as const, instructions: "What is asked for?", choices: [{ value: "nothing" }, { value: long }] };
  let engineRefusal: { status?: number; code?: string | null; message: string; requestId: string | null } | null = null;
  for (let words = 1; words < 200 && !engineRefusal; words++) {
    const e = await client.decisions.create({ model: "tight", input: "word ".repeat(words), questions: [choice] }).then(
      () => null,
      (e: InstanceType<typeof OpenAI.APIError>) => ({ status: e.status, code: e.code, message: e.message, requestId: e.headers?.get("x-request-id") ?? null }),
    );
    if (e) {
      expect(e).toMatchObject({ status: 400, code: "context_length_exceeded" });
      engineRefusal = e;
    }
  }
  expect(engineRefusal!.message).toContain("the longest answer");
  expect(row(engineRefusal!.requestId!)).toBeNull();
  const account = await t.deps.accounts.getAccount("long-answer");
  expect((await t.deps.meter.held(account.id)).micros).toBe(0);
});

test("/metrics counts each request's questions and input tokens under endpoint /v1/decisions", async () => {
  const { parseExposition } = await import("../helpers/prometheus");
  await t.deps.accounts.createAccount("metrics-admin", { role: "admin", creditMicros: 1_000_000 });
  const admin = await t.key({ account: "metrics-admin" });
  const scrape = async () => parseExposition(await (await t.request("GET", "/metrics", { key: admin })).text());
  const labels = { endpoint: "/v1/decisions", model: "chat" };
  const before = await scrape();
  const q = { type: "predicate" as const, instructions: "The customer wants money back." };
  const r = await t.openai(admin).decisions.create({ model: "chat", input: ticket, questions: [q, { ...q, instructions: "The ticket is about shipping." }] });
  const after = await scrape();
  expect(after.value("appliance_judged_items_total", labels)! - (before.value("appliance_judged_items_total", labels) ?? 0)).toBe(2);
  expect(after.value("appliance_judged_input_tokens_total", labels)! - (before.value("appliance_judged_input_tokens_total", labels) ?? 0)).toBe(r.usage.input_tokens);
});
