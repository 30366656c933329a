import { afterAll, beforeAll, expect, test } from "bun:test";
import type { LlamaModel } from "node-llama-cpp";
import OpenAI from "openai";
import sharp from "sharp";
import { ensureChatModel } from "../../models/cache";
import { ensureProjector } from "../../models/projector-cache";
import { questionMessage, type Question } from "../../src/2-services/decisions/questions";
import type { ChatJob } from "../../src/3-engines/chat-job";
import { decodeImages } from "../../src/3-engines/image-input";
import { chatTestApp } from "../helpers/chat";

// /v1/decisions with images (issue 47), through the official `openai` SDK: on the tiny vision model
// (the tiny qwen3 chat model with a generated Gemma-3-family projector) an image in the input or in
// a question's instructions is seen by the model — its tokens counted as input tokens, as chat
// counts them, the same image read from the slot's cache by the next question, and the answer the
// one the chat route's own generation picks for the same prompt and image; on a text-only model
// an image is chat's 400, and nothing is charged.

let t: Awaited<ReturnType<typeof chatTestApp>>;
let red: Buffer;
let blue: Buffer;

const png = (color: string) => sharp({ create: { width: 40, height: 30, channels: 3, background: color } }).png().toBuffer();
const dataUrl = (b: Buffer) => `data:image/png;base64,${b.toString("base64")}`;
const text = "A photo taken from the window of the harbour office this morning, before the boats left.";
const withImage = (img: Buffer) => [{ role: "user" as const, content: [{ type: "input_text" as const, text }, { type: "input_image" as const, image_url: dataUrl(img) }] }];
const predicate = { type: "predicate" as const, name: "sea", instructions: "The picture shows the sea." };

beforeAll(async () => {
  [red, blue] = await Promise.all([png("#ff0000"), png("#0000ff")]);
  const vision = { id: "vision", name: "Tiny vision chat", kind: "chat", vision: true, files: { model: await ensureChatModel("chat"), mmproj: await ensureProjector() }, max_context: 4096, slots: 2, load: "first_use" };
  t = await chatTestApp({ extraModels: [vision] });
}, 120_000);
afterAll(() => t?.close());

/** Tokens an image takes in the prompt, as the projector itself counts them. */
async function imageTokens(bytes: Buffer): Promise<number> {
  const job = { turns: [{ role: "user", text: "", images: [{ url: dataUrl(bytes), param: "p", at: 0 }] }] } as unknown as ChatJob;
  await decodeImages(job, t.deps.config.image_input);
  const engine = t.deps.registry.chatEngine("vision") as any;
  await engine.load();
  return (await engine.state.projector.span((job.turns[0] as any).images[0].decoded)).tokens;
}

const probability = (d: OpenAI.Decision, i = 0) => (d.answers[i] as OpenAI.Decision.AnswerResourcePredicate).probability;

test("an image in the input: its tokens counted as input, the same image read from the cache, another image answered differently", async () => {
  const client = t.openai(await t.key({ creditUsd: 5 }));
  const plain = await client.decisions.create({ model: "vision", input: text, questions: [predicate] });
  const seen = await client.decisions.create({ model: "vision", input: withImage(red), questions: [predicate] });
  const n = await imageTokens(red);
  expect(n).toBeGreaterThanOrEqual(16);
  expect(seen.usage.input_tokens).toBe(plain.usage.input_tokens + n);
  // the same request again: everything but the prompt's last token from the slot's cache, image included, and the same answer
  const again = await client.decisions.create({ model: "vision", input: withImage(red), questions: [predicate] });
  expect(again.usage.input_tokens_details.cached_tokens).toBe(again.usage.input_tokens - 1);
  expect(probability(again)).toBeCloseTo(probability(seen), 4);
  // another image of the same size: the same tokens, another answer (the model sees the pixels)
  const other = await client.decisions.create({ model: "vision", input: withImage(blue), questions: [predicate] });
  expect(other.usage.input_tokens).toBe(seen.usage.input_tokens);
  expect(Math.abs(probability(other) - probability(seen))).toBeGreaterThan(1e-6);
  // two questions: the second reads the input and its image from the cache
  const two = await client.decisions.create({ model: "vision", input: withImage(blue), questions: [predicate, { type: "predicate", instructions: "It is night." }] });
  expect(two.usage.input_tokens_details.cached_tokens).toBeGreaterThan(two.usage.input_tokens / 2 + n / 2);
  expect(probability(two)).toBeCloseTo(probability(other), 4);
}, 90_000);

test("the choices scored after an image rank as the chat route's greedy generation ranks them, for the same prompt and image", async () => {
  const key = await t.key({ creditUsd: 5 });
  const client = t.openai(key);
  const engine = t.deps.registry.chatEngine("vision") as any;
  await engine.load();
  const model = engine.state.model as LlamaModel;
  const options = ["A", "B", "C", "D", "E", "F"];
  const ids = options.map((o) => model.tokenize(o, false) as number[]);
  expect(ids.every((x) => x.length === 1)).toBe(true); // one token each: an equal logit bias on each keeps their order
  const question: Question = { type: "choice", instructions: "Which letter fits the picture best?", choices: options.map((value) => ({ value })) };
  for (const img of [red, blue]) {
    const d = await client.decisions.create({ model: "vision", input: withImage(img), questions: [question] });
    const answer = d.answers[0] as OpenAI.Decision.AnswerResourceChoice;
    const scored = [...answer.probabilities].sort((a, b) => b.probability - a.probability).map((p) => p.value);
    // the same prompt through chat (the input's message, then the question's, thinking off): greedy
    // over the options still left (+100 each, the others barred) picks the best of them, then the next
    const ranked: string[] = [];
    for (let k = 0; k < options.length; k++) {
      const chat = await client.chat.completions.create({
        model: "vision",
        messages: [
          { role: "user", content: [{ type: "text", text }, { type: "image_url", image_url: { url: dataUrl(img) } }] },
          { role: "user", content: questionMessage(question) },
        ],
        reasoning_effort: "none",
        max_tokens: 1,
        temperature: 0,
        logit_bias: Object.fromEntries(options.map((o, i) => [String(ids[i]![0]), ranked.includes(o) ? -100 : 100])),
      });
      expect(chat.usage!.prompt_tokens).toBe(d.usage.input_tokens);
      ranked.push(chat.choices[0]!.message.content!);
    }
    expect(scored).toEqual(ranked);
  }
}, 90_000);

test("an image in a question's instructions is seen with that question only; its tokens counted", async () => {
  const client = t.openai(await t.key({ creditUsd: 5 }));
  const ask = (img: Buffer | null) =>
    client.decisions.create({
      model: "vision",
      input: text,
      questions: [
        { type: "predicate", instructions: "The sky is clear." },
        { type: "predicate", instructions: img ? [{ type: "input_text", text: "The harbour looks like this:" }, { type: "input_image", image_url: dataUrl(img) }] : "The harbour looks like this:" },
      ],
    });
  const [none, withRed, withBlue] = [await ask(null), await ask(red), await ask(blue)];
  expect(withRed.usage.input_tokens).toBe(none.usage.input_tokens + (await imageTokens(red)));
  // the first question has no image: the same answer whatever the second question shows
  expect(probability(withRed, 0)).toBeCloseTo(probability(none, 0), 4);
  expect(probability(withBlue, 0)).toBeCloseTo(probability(none, 0), 4);
  expect(Math.abs(probability(withRed, 1) - probability(withBlue, 1))).toBeGreaterThan(1e-6);
}, 90_000);

test("refused, nothing charged: an image to a text-only model (chat's 400, in the input or the instructions), 3 images, a broken image", async () => {
  const client = t.openai(await t.key({ account: "vision-refused", creditUsd: 5 }));
  const refused = async (body: Omit<OpenAI.DecisionCreateParams, "questions"> & { questions?: OpenAI.DecisionCreateParams["questions"] }) => {
    try {
      await client.decisions.create({ questions: [predicate], ...body });
    } catch (e) {
      if (e instanceof OpenAI.APIError) return { status: e.status, code: e.code, param: e.param, message: e.message };
      throw e;
    }
    throw new Error("not refused");
  };
  const input = await refused({ model: "chat", input: withImage(red) });
  expect(input).toMatchObject({ status: 400, code: "images_not_supported", param: "input[0].content[1]" });
  expect(input.message).toContain('model "chat" does not accept images');
  // the same words as chat's for an image to this model
  const chat = await client.chat.completions.create({ model: "chat", messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: dataUrl(red) } }] }] }).catch((e) => e);
  expect([chat.status, chat.code]).toEqual([400, "images_not_supported"]);
  expect(chat.message).toContain('model "chat" does not accept images (supports_vision is false)');
  expect(input.message).toContain('model "chat" does not accept images (supports_vision is false)');
  const instructions = await refused({ model: "chat", input: text, questions: [{ type: "predicate", instructions: [{ type: "input_text", text: "Like this:" }, { type: "input_image", image_url: dataUrl(red) }] }] });
  expect(instructions).toMatchObject({ status: 400, code: "images_not_supported", param: "questions[0].instructions[1]" });
  // on the vision model: chat's image limits (2 a request, counted over the input and the questions) and checks
  const three = await refused({ model: "vision", input: withImage(red), questions: [0, 1].map(() => ({ type: "predicate" as const, instructions: [{ type: "input_image" as const, image_url: dataUrl(blue) }, { type: "input_text" as const, text: "Same?" }] })) });
  expect(three).toMatchObject({ status: 400, code: "too_many_images", param: "questions[1].instructions[0]" });
  const broken = await refused({ model: "vision", input: [{ role: "user", content: [{ type: "input_image", image_url: dataUrl(Buffer.from("not an image")) }] }] });
  expect(broken).toMatchObject({ status: 400, code: "invalid_image", param: "input[0].content[0]" });
  // images only in user messages (the SDK's types)
  const developer = await refused({ model: "vision", input: [{ role: "developer", content: [{ type: "input_image", image_url: dataUrl(red) } as never] }, { role: "user", content: text }] });
  expect(developer).toMatchObject({ status: 400, code: null, param: "input[0].content[0]" });
  const account = await t.deps.accounts.getAccount("vision-refused");
  expect(account.balance_micros).toBe(5_000_000);
  expect(t.deps.db!.query("SELECT COUNT(*) AS n FROM usage WHERE account_id = ?").get(account.id)).toEqual({ n: 0 });
  expect((await t.deps.meter.held(account.id)).micros).toBe(0);
}, 60_000);
