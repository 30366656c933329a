import { afterAll, beforeAll, expect, test } from "bun:test";
import { createOpenAI } from "@ai-sdk/openai";
import { experimental_decide as decide } from "ai";
import OpenAI from "openai";
import sharp from "sharp";
import { ensureChatModel } from "../../models/cache";
import { ensureOnnxModel } from "../../models/onnx/cache";
import { ensureProjector } from "../../models/projector-cache";
import { BASE } from "../helpers/app";
import { chatTestApp } from "../helpers/chat";

// The AI SDK's `decide` (ai 7.0, experimental_decide) with `openai.decisionModel(id)` from
// @ai-sdk/openai 4.0, unmodified, pointed at the appliance (issue 47): what it sends is accepted —
// choice and score questions without `instructions` (it leaves them out when the options' criteria
// define the judgment), a boolean as a predicate, JSON state as input_json, an image as an
// input_image data URL — and what comes back passes its own checks (one answer per named question,
// complete distributions, the score the probability-weighted mean of its levels), the same answers
// the official `openai` SDK gets for the same body.

let t: Awaited<ReturnType<typeof chatTestApp>>;
let key: string;
/** The bodies the AI SDK posted, in order. */
const sent: Record<string, any>[] = [];

beforeAll(async () => {
  const [nli, chat, mmproj] = await Promise.all([ensureOnnxModel("nli"), ensureChatModel("chat"), ensureProjector()]);
  t = await chatTestApp({
    extraModels: [
      { id: "nli", name: "Tiny NLI", kind: "classifier", files: { model: nli }, max_context: 8192, vision: false, slots: 1, load: "first_use" },
      { id: "vision", name: "Tiny vision chat", kind: "chat", vision: true, files: { model: chat, mmproj }, max_context: 4096, slots: 1, load: "first_use" },
    ],
  });
  key = await t.key({ creditUsd: 5 });
}, 120_000);
afterAll(() => t?.close());

const provider = () =>
  createOpenAI({
    apiKey: key,
    baseURL: `${BASE}/v1`,
    fetch: (async (url: string | URL | Request, init?: RequestInit) => {
      sent.push(JSON.parse(String(init?.body)));
      return t.app.handle(new Request(url, init));
    }) as typeof fetch,
  });

const ticket = "Ticket 4411: I was charged twice for the same subscription renewal this month. Please refund the second charge to my card.";

test("decide on a chat model: a choice, a score and a boolean, as the AI SDK sends them, answered as decisions.create answers the same body", async () => {
  const r = await decide({
    model: provider().decisionModel("chat"),
    state: ticket,
    questions: {
      category: { type: "choice", criteria: { billing: "Payments, charges and refunds", technical: "Software errors and outages", other: null } },
      urgency: { type: "score", instructions: "How urgent is the ticket?", criteria: ["not urgent", null, "very urgent"] },
      refund: { type: "boolean", criteria: { true: "The customer asks for money back." } },
    },
    maxRetries: 0,
  });
  const body = sent.at(-1)!;
  // what the AI SDK sent: no instructions on the choice (its criteria define it), levels labelled by index
  expect(body.questions.map((q: any) => [q.type, q.name, "instructions" in q])).toEqual([
    ["choice", "category", false],
    ["score", "urgency", true],
    ["predicate", "refund", true],
  ]);
  expect(body.questions[1].levels.map((l: any) => l.label)).toEqual(["0", "1", "2"]);
  expect(body.input).toEqual([{ role: "user", content: [{ type: "input_text", text: ticket }] }]);
  // the AI SDK's own checks passed; the answers are the official SDK's for the same body
  const same = await t.openai(key).decisions.create(body as OpenAI.DecisionCreateParams);
  const [c, s, p] = same.answers as [OpenAI.Decision.AnswerResourceChoice, OpenAI.Decision.AnswerResourceScore, OpenAI.Decision.AnswerResourcePredicate];
  expect(r.answers.category.type).toBe("choice");
  expect(r.answers.category.choice).toBe(c.choice as "billing");
  expect(r.answers.category.probabilities!.billing).toBeCloseTo(c.probabilities[0]!.probability, 5);
  expect(Object.keys(r.answers.category.probabilities!)).toEqual(["billing", "technical", "other"]);
  expect(r.answers.urgency.score).toBeCloseTo(s.score, 5);
  expect(r.answers.urgency.score).toBeGreaterThanOrEqual(0);
  expect(r.answers.urgency.score).toBeLessThanOrEqual(2);
  expect(r.answers.refund.probability).toBeCloseTo(p.probability, 5);
  expect(r.usage.inputTokens).toBe(same.usage.input_tokens);
  expect(r.usage.outputTokens).toBe(0);
  expect(r.response.modelId).toBe("chat");
});

test("decide with JSON state and a prompt cache key; on the classifier, a boolean by entailment", async () => {
  const order = { id: 4411, items: [{ sku: "annual-plan", charged: 2 }], note: "charged twice" };
  const r = await decide({
    model: provider().decisionModel("chat"),
    state: order,
    questions: { duplicate: { type: "boolean", instructions: "The order was charged more than once." } },
    providerOptions: { openai: { promptCacheKey: "orders" } },
    maxRetries: 0,
  });
  expect(sent.at(-1)!.input[0].content).toEqual([{ type: "input_json", data: order }]);
  expect(sent.at(-1)!.prompt_cache_key).toBe("orders");
  expect(r.answers.duplicate.probability).toBeGreaterThan(0);
  expect(r.answers.duplicate.probability).toBeLessThan(1);
  const premise = "A man is playing a guitar on the street.";
  const nli = await decide({ model: provider().decisionModel("nli"), state: premise, questions: { outside: { type: "boolean", instructions: "A person is outside." } }, maxRetries: 0 });
  const res = await t.request("POST", "/v1/classify", { key, body: { model: "nli", pairs: [{ premise, hypothesis: "A person is outside." }] } });
  const classified = (await res.json()) as { data: { probs: number[] }[] };
  expect(nli.answers.outside.probability).toBeCloseTo(classified.data[0]!.probs[1]!, 6);
});

test("decide with an image in the state: sent as an input_image data URL, seen by the vision model", async () => {
  const image = (color: string) => sharp({ create: { width: 40, height: 30, channels: 3, background: color } }).png().toBuffer();
  const ask = async (png: Buffer | null) =>
    decide({
      model: provider().decisionModel("vision"),
      state: [{ type: "text", text: "The view from the harbour office." }, ...(png ? [{ type: "file" as const, mediaType: "image/png", data: new Uint8Array(png) }] : [])],
      questions: { sea: { type: "boolean", instructions: "The picture shows the sea." } },
      maxRetries: 0,
    });
  const red = await image("#ff0000");
  const [plain, seen, other] = [await ask(null), await ask(red), await ask(await image("#0000ff"))];
  expect(sent.at(-2)!.input[0].content[1]).toEqual({ type: "input_image", image_url: `data:image/png;base64,${red.toString("base64")}` });
  expect(seen.usage.inputTokens!).toBeGreaterThan(plain.usage.inputTokens! + 15);
  expect(other.answers.sea.probability).not.toBe(seen.answers.sea.probability);
  // to a text-only model the image is refused (the AI SDK surfaces the 400)
  const refused = await decide({
    model: provider().decisionModel("chat"),
    state: [{ type: "text", text: "x" }, { type: "file", mediaType: "image/png", data: new Uint8Array(red) }],
    questions: { sea: { type: "boolean", instructions: "The picture shows the sea." } },
    maxRetries: 0,
  }).then(() => null, (e: { statusCode?: number; message: string }) => e);
  expect(refused?.statusCode).toBe(400);
  expect(refused?.message).toContain('model "chat" does not accept images');
}, 60_000);
