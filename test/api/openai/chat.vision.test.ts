import { afterAll, beforeAll, expect, test } from "bun:test";
import sharp from "sharp";
import { ensureProjector } from "../../../models/projector-cache";
import { ensureChatModel } from "../../../models/cache";
import { decodeImages } from "../../../src/3-engines/image-input";
import type { ChatJob } from "../../../src/3-engines/chat-job";
import { chatTestApp, forced } from "../../helpers/chat";
import { anthropicClient } from "../anthropic/client";

// Image input through llama.cpp's multimodal library: the tiny qwen3 chat model with a generated
// Gemma-3-family projector (mmproj), over the three wire formats with the official clients.

let t: Awaited<ReturnType<typeof chatTestApp>>;
let key: string;
let imageServer: ReturnType<typeof Bun.serve>;

const png = (color: string, w = 40, h = 30) => sharp({ create: { width: w, height: h, channels: 3, background: color } }).png().toBuffer();
const dataUrl = (mime: string, b: Buffer) => `data:${mime};base64,${b.toString("base64")}`;
let red: Buffer;
let blue: Buffer;
let jpeg: Buffer;

async function visionModels() {
  const chat = await ensureChatModel("chat");
  return [{ id: "vision", name: "Tiny vision chat", kind: "chat", vision: true, files: { model: chat, mmproj: await ensureProjector() }, max_context: 4096, slots: 2, load: "first_use" }];
}

beforeAll(async () => {
  [red, blue, jpeg] = await Promise.all([png("#ff0000"), png("#0000ff"), sharp({ create: { width: 64, height: 48, channels: 3, background: "#00aa44" } }).jpeg().toBuffer()]);
  t = await chatTestApp({ extraModels: await visionModels() });
  key = await t.key({ kind: "premium", creditUsd: 5 });
  imageServer = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: () => new Response(new Uint8Array(red), { headers: { "content-type": "image/png" } }) });
}, 120_000);

afterAll(async () => {
  imageServer?.stop(true);
  await t?.close();
});

/** Tokens an image takes in the prompt, as the projector itself counts them. */
async function imageTokens(bytes: Buffer, mime: string): Promise<number> {
  const job = { turns: [{ role: "user", text: "", images: [{ url: dataUrl(mime, bytes), param: "p", at: 0 }] }] } as unknown as ChatJob;
  await decodeImages(job, t.deps.config.image_input);
  const engine = t.deps.registry.chatEngine("vision") as any;
  await engine.load();
  return (await engine.state.projector.span((job.turns[0] as any).images[0].decoded)).tokens;
}

const userWith = (text: string, ...urls: string[]) => ({
  role: "user" as const,
  content: [{ type: "text" as const, text }, ...urls.map((url) => ({ type: "image_url" as const, image_url: { url } }))],
});

test("/v1/models marks the vision model", async () => {
  const models = await t.openai(key).models.list();
  const vision = models.data.find((m) => m.id === "vision") as any;
  expect(vision.supports_vision).toBe(true);
  expect((models.data.find((m) => m.id === "chat") as any).supports_vision).toBeUndefined();
});

test("openai client: a PNG and a JPEG data URL; prompt tokens grow by the projector's image token count", async () => {
  const client = t.openai(key);
  const text = await client.chat.completions.create({ model: "vision", messages: [{ role: "user", content: "Describe the picture." }], max_tokens: 4 });
  const withPng = await client.chat.completions.create({ model: "vision", messages: [userWith("Describe the picture.", dataUrl("image/png", red))], max_tokens: 4 });
  const withJpeg = await client.chat.completions.create({ model: "vision", messages: [userWith("Describe the picture.", dataUrl("image/jpeg", jpeg))], max_tokens: 4 });
  const n = await imageTokens(red, "image/png");
  expect(n).toBeGreaterThanOrEqual(16); // 16 image embeddings plus the family's <start_of_image>/<end_of_image> text
  expect(withPng.usage!.prompt_tokens).toBe(text.usage!.prompt_tokens + n);
  expect(withJpeg.usage!.prompt_tokens).toBe(text.usage!.prompt_tokens + (await imageTokens(jpeg, "image/jpeg")));
  expect(withPng.usage!.completion_tokens).toBeGreaterThan(0);
  expect(withPng.usage!.completion_tokens).toBeLessThanOrEqual(4);
}, 60_000);

test("the image is what the model sees: the same image reuses its cached positions, another image does not", async () => {
  const client = t.openai(key);
  const ask = (img: Buffer) =>
    client.chat.completions.create({ model: "vision", messages: [userWith("What colour is this?", dataUrl("image/png", img)), ], max_tokens: 1, temperature: 0 });
  const first = await ask(red);
  const again = await ask(red);
  const other = await ask(blue);
  const n = await imageTokens(red, "image/png");
  // Same image: everything up to the end of the prompt but the last token is found in the slot.
  expect(again.usage!.prompt_tokens_details!.cached_tokens).toBe(again.usage!.prompt_tokens - 1);
  // Another image of the same size: same placeholder tokens, but its positions are evaluated again.
  expect(other.usage!.prompt_tokens).toBe(first.usage!.prompt_tokens);
  expect(other.usage!.prompt_tokens_details!.cached_tokens).toBeLessThan(other.usage!.prompt_tokens - n);
  // And the image changes what the model computes: the same prompt text with another image, greedy, over many tokens.
  const long = (img: Buffer) => client.chat.completions.create({ model: "vision", messages: [userWith("Colour?", dataUrl("image/png", img))], max_tokens: 24, temperature: 0 });
  const [a, a2, b] = [await long(red), await long(red), await long(blue)];
  expect(a2.choices[0]!.message.content).toBe(a.choices[0]!.message.content);
  expect(b.choices[0]!.message.content).not.toBe(a.choices[0]!.message.content);
}, 90_000);

test("anthropic client: a base64 image block", async () => {
  const client = anthropicClient(t, { apiKey: key });
  // greedy: at the default temperature a random-weights model may end before 4 tokens (this SDK's types omit temperature)
  const greedy = <T extends object>(p: T): T => ({ ...p, temperature: 0 });
  const base = await client.messages.create(greedy({ model: "vision", max_tokens: 4, messages: [{ role: "user", content: "What is it?" }] }));
  const msg = await client.messages.create(greedy({
    model: "vision",
    max_tokens: 4,
    messages: [{ role: "user", content: [{ type: "image", source: { type: "base64", media_type: "image/png", data: blue.toString("base64") } }, { type: "text", text: "What is it?" }] }],
  }));
  expect(msg.usage.input_tokens + (msg.usage.cache_read_input_tokens ?? 0)).toBe(base.usage.input_tokens + (base.usage.cache_read_input_tokens ?? 0) + (await imageTokens(blue, "image/png")));
  expect(msg.stop_reason).toBe("max_tokens");
}, 60_000);

test("responses: an input_image part", async () => {
  const client = t.openai(key);
  const base = await client.responses.create({ model: "vision", max_output_tokens: 4, temperature: 0, input: [{ role: "user", content: [{ type: "input_text", text: "Look." }] }] });
  const r = await client.responses.create({
    model: "vision",
    max_output_tokens: 4,
    temperature: 0, // greedy, so "incomplete" does not hang on the sampler
    input: [{ role: "user", content: [{ type: "input_text", text: "Look." }, { type: "input_image", image_url: dataUrl("image/png", red), detail: "auto" }] }],
  });
  expect(r.status).toBe("incomplete");
  expect(r.usage!.input_tokens).toBe(base.usage!.input_tokens + (await imageTokens(red, "image/png")));
}, 60_000);

test("text-only requests on the vision model keep streaming and tools", async () => {
  // greedy: at the default temperature this random-weights model ends its answer at once about 1 time in 300
  const client = t.openai(key);
  const stream = await client.chat.completions.create({ model: "vision", messages: [{ role: "user", content: "Hello" }], max_tokens: 5, temperature: 0, stream: true, stream_options: { include_usage: true } });
  let usage: any = null;
  let deltas = 0;
  for await (const c of stream) {
    if (c.usage) usage = c.usage;
    if (c.choices[0]?.delta?.content) deltas++;
  }
  expect(deltas).toBeGreaterThan(0);
  expect(usage.completion_tokens).toBe(5);
  const tools = await client.chat.completions.create({
    model: "vision",
    messages: [userWith(`Weather in Oslo? ${forced('<tool_call>\n{"name": "get_weather", "arguments": ')}`, dataUrl("image/png", red))],
    tools: [{ type: "function", function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } }],
    parallel_tool_calls: false,
    max_tokens: 60,
    temperature: 0,
  });
  expect(tools.choices[0]!.finish_reason).toBe("tool_calls");
  const call = tools.choices[0]!.message.tool_calls![0]! as { function: { name: string; arguments: string } };
  expect(call.function.name).toBe("get_weather");
  expect(typeof JSON.parse(call.function.arguments).city).toBe("string");
}, 60_000);

test("3 images → 400 naming the limit; a text file disguised as PNG → 400 naming the part; an https URL at 127.0.0.1 → 400", async () => {
  const client = t.openai(key);
  const err = (p: Promise<unknown>) => p.then(() => { throw new Error("expected a 400"); }, (e) => e);
  const u = dataUrl("image/png", red);
  const three = await err(client.chat.completions.create({ model: "vision", messages: [userWith("a", u, u), userWith("b", u)], max_tokens: 1 }));
  expect([three.status, three.code]).toEqual([400, "too_many_images"]);
  expect(three.message).toContain("at most 2 images");
  const fake = await err(client.chat.completions.create({ model: "vision", messages: [userWith("a", dataUrl("image/png", Buffer.from("hello, I am text")))], max_tokens: 1 }));
  expect([fake.status, fake.code]).toEqual([400, "invalid_image"]);
  expect(fake.message).toContain("messages[0].content[1]");
  const local = await err(client.chat.completions.create({ model: "vision", messages: [userWith("a", `https://127.0.0.1:${imageServer.port}/x.png`)], max_tokens: 1 }));
  expect([local.status, local.code]).toEqual([400, "invalid_image_url"]);
  expect(local.message).toContain("internal address");
}, 60_000);

test("a URL served by a local server works when the admin allows private and http URLs", async () => {
  const allowed = await chatTestApp({ extraModels: await visionModels(), config: { image_input: { allow_private_urls: true, allow_http_urls: true } } });
  try {
    const k = await allowed.key({ kind: "premium", creditUsd: 5 });
    const r = await allowed.openai(k).chat.completions.create({ model: "vision", messages: [userWith("What is it?", `http://127.0.0.1:${imageServer.port}/red.png`)], max_tokens: 2 });
    const text = await allowed.openai(k).chat.completions.create({ model: "vision", messages: [userWith("What is it?")], max_tokens: 2 });
    expect(r.usage!.prompt_tokens).toBe(text.usage!.prompt_tokens + (await imageTokens(red, "image/png")));
  } finally {
    await allowed.close();
  }
}, 60_000);
