import { afterAll, beforeAll, expect, test } from "bun:test";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { cpSync, mkdirSync, rmSync } from "node:fs";
import { join, resolve } from "node:path";
import sharp from "sharp";
import { buildExecutable } from "../../src/ops/build/executable";
import { tempDir } from "../helpers/app";
import { untilListening } from "../helpers/cli";

// The shipped thing: `bun run build` (CPU and Vulkan backends), copied into a temporary prefix,
// started with the demo models in a clean environment (no Bun, working directory outside the
// checkout) and used over HTTP with the official clients, plus the keys CLI and doctor from the
// executable. The build checkout's node_modules is hidden from every run of the executable (an
// empty folder mounted over it in a mount namespace of its own): the bundler bakes absolute build
// paths into what it resolves at build time, and a host running the executable has no checkout.

const prefix = tempDir("appliance-exe-");
const exe = join(prefix, "appliance", "appliance");
const env = { HOME: prefix, PATH: "/usr/bin:/bin", TMPDIR: process.env.TMPDIR ?? "/tmp", XDG_CONFIG_HOME: join(prefix, "no-config") };
const data = join(prefix, "data");
const NODE_MODULES = resolve(import.meta.dir, "..", "..", "node_modules");
const empty = join(prefix, "empty");
let child: ReturnType<typeof Bun.spawn>;
let url = "";
let key = "";
let banner = "";

/** `args` run with the checkout's node_modules hidden (unshare: a user and mount namespace). */
const hidden = (args: string[]) => ["unshare", "-rm", "sh", "-c", 'mount --bind "$1" "$2" && shift 2 && exec "$@"', "sh", empty, NODE_MODULES, ...args];
const run = (args: string[]) => Bun.spawnSync(hidden([exe, ...args]), { cwd: prefix, env });

beforeAll(async () => {
  mkdirSync(empty);
  const probe = Bun.spawnSync(hidden(["ls", "-A", NODE_MODULES]), { env });
  if (probe.exitCode !== 0 || probe.stdout.toString() !== "") throw new Error(`cannot hide node_modules with unshare (needs user namespaces): ${probe.stderr}`);
  const out = join(prefix, "build");
  await buildExecutable({ out, cuda: false, log: () => {} });
  cpSync(out, join(prefix, "appliance"), { recursive: true });
  rmSync(out, { recursive: true, force: true });
  child = Bun.spawn(hidden([exe, "serve", "--demo", "--port", "0", "-d", data]), { cwd: prefix, env, stdout: "ignore", stderr: "pipe" });
  const started = await untilListening(child.stderr as ReadableStream<Uint8Array>);
  if (!started.key) throw new Error(`the first start printed no admin key: ${started.banner}`);
  ({ url, key, banner } = { url: started.url, key: started.key, banner: started.banner });
}, 240_000);

afterAll(async () => {
  child?.kill("SIGTERM");
  await child?.exited;
  rmSync(prefix, { recursive: true, force: true });
});

const openai = () => new OpenAI({ apiKey: key, baseURL: `${url}/v1`, maxRetries: 0 });

test("--version and the keys CLI run from the executable; a key it creates works on the running server", async () => {
  const v = run(["--version"]);
  expect(v.stdout.toString().trim()).toMatch(/^\d+\.\d+\.\d+$/);
  const created = run(["-d", data, "keys", "create", "--account", "admin", "--premium", "--name", "smoke", "--json"]);
  expect(created.stderr.toString()).toBe("");
  expect(created.exitCode).toBe(0);
  const made = JSON.parse(created.stdout.toString()).key as string;
  expect(made).toMatch(/^sk-apl-/);
  const list = run(["-d", data, "keys", "list", "--account", "admin", "--json"]);
  expect(list.stdout.toString()).toContain("smoke");
  expect((await fetch(`${url}/v1/models`, { headers: { authorization: `Bearer ${made}` } })).status).toBe(200);
});

test("models list and doctor run from the executable, finding the backends in its lib/", () => {
  const list = run(["-d", data, "models", "list"]);
  expect(list.exitCode).toBe(0);
  expect(list.stdout.toString()).toContain("gemma-3-27b-it"); // the catalogue is embedded
  const doctor = run(["-d", data, "doctor", "--json", "--port", "0"]);
  const report = JSON.parse(doctor.stdout.toString());
  const line = (name: string) => report.checks.find((c: any) => c.name === name);
  expect(line("image input").status).toBe("ok"); // lib/appliance-llama.node found beside it
  // node-llama-cpp's Vulkan build is shipped in lib/ (it was "not installed": doctor looked in node_modules)
  expect(line("vulkan").detail).toContain("node-llama-cpp Vulkan build: installed");
  expect(line("chat engine").detail).not.toContain("not installed");
  expect(doctor.exitCode).toBe(0);
});

test("models, chat (streamed), responses, messages", async () => {
  const models = (await openai().models.list()).data.map((m) => m.id);
  expect(models).toEqual(expect.arrayContaining(["demo-chat", "demo-embed", "demo-nli", "demo-image"]));
  const stream = await openai().chat.completions.create({ model: "demo-chat", messages: [{ role: "user", content: "hi" }], max_tokens: 6, stream: true, stream_options: { include_usage: true } });
  let usage: any = null;
  for await (const c of stream) if (c.usage) usage = c.usage;
  expect(usage.completion_tokens).toBeGreaterThan(0);
  const r = await openai().responses.create({ model: "demo-chat", input: "hello", max_output_tokens: 16 });
  expect(r.usage!.output_tokens).toBeGreaterThan(0);
  const anthropic = new Anthropic({ apiKey: key, baseURL: url, maxRetries: 0 });
  const m = await anthropic.messages.create({ model: "demo-chat", max_tokens: 6, messages: [{ role: "user", content: "hi" }] });
  expect(m.usage.output_tokens).toBeGreaterThan(0);
}, 60_000);

test("structured output and a strict tool call compile their grammars in the executable (llama.cpp's converter, node-llama-cpp's patched call grammar)", async () => {
  const schema = { type: "object", properties: { n: { type: "integer", minimum: 0, maximum: 9 } }, required: ["n"], additionalProperties: false };
  const r = await openai().chat.completions.create({
    model: "demo-chat", messages: [{ role: "user", content: "JSON" }], max_tokens: 40, temperature: 0, chat_template_kwargs: { enable_thinking: false },
    response_format: { type: "json_schema", json_schema: { name: "n", schema } },
  } as any);
  if (r.choices[0]!.finish_reason === "stop") expect(JSON.parse(r.choices[0]!.message.content!).n).toBeLessThanOrEqual(9);
  const c = await openai().chat.completions.create({
    model: "demo-chat", messages: [{ role: "user", content: "Go" }], max_tokens: 40, temperature: 0,
    tools: [{ type: "function", function: { name: "f", strict: true, parameters: schema } }], tool_choice: { type: "function", function: { name: "f" } },
  });
  if (c.choices[0]!.finish_reason === "tool_calls") expect(JSON.parse((c.choices[0]!.message.tool_calls![0] as { function: { arguments: string } }).function.arguments).n).toBeLessThanOrEqual(9);
  expect(["stop", "length", "tool_calls"]).toContain(c.choices[0]!.finish_reason);
}, 60_000);

test("embeddings, classify, image generation, and image input through the shipped llama addon", async () => {
  const e = await openai().embeddings.create({ model: "demo-embed", input: ["hello", "world"] });
  expect(e.data[0]!.embedding.length).toBe(384);
  const c = await fetch(`${url}/v1/classify`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "demo-nli", pairs: [{ premise: "a cat sleeps", hypothesis: "an animal rests" }] }),
  });
  expect(c.status).toBe(200);
  const img = await openai().images.generate({ model: "demo-image", prompt: "a red square", size: "256x256" });
  const meta = await sharp(Buffer.from(img.data![0]!.b64_json!, "base64")).metadata();
  expect([meta.format, meta.width, meta.height]).toEqual(["png", 256, 256]);
  // install.sh builds the addon, so the executable ships it and serves the demo vision model.
  expect((await openai().models.list()).data.map((m) => m.id)).toContain("demo-vision");
  {
    const png = await sharp({ create: { width: 16, height: 16, channels: 3, background: "#f00" } }).png().toBuffer();
    const v = await openai().chat.completions.create({
      model: "demo-vision",
      max_tokens: 2,
      messages: [{ role: "user", content: [{ type: "text", text: "what" }, { type: "image_url", image_url: { url: `data:image/png;base64,${png.toString("base64")}` } }] }],
    });
    expect(v.usage!.prompt_tokens).toBeGreaterThan(16);
  }
}, 90_000);

// Issue 43: the manual (web/docs/) is embedded, so an installed executable's console has it.
test("the console of the executable serves the manual: the Docs page and every page of web/docs", async () => {
  expect((await fetch(`${url}/console/docs.js`)).status).toBe(200);
  const password = /password ([0-9A-Za-z]{20})/.exec(banner)![1]!;
  const login = await fetch(`${url}/console/api/login`, { method: "POST", headers: { "content-type": "application/json", origin: url }, body: JSON.stringify({ account: "admin", password }) });
  expect(login.status).toBe(200);
  const cookie = login.headers.getSetCookie().map((c) => c.split(";")[0]).join("; ");
  const list = (await (await fetch(`${url}/console/api/docs`, { headers: { cookie } })).json()) as { data: { name: string; title: string }[] };
  expect(list.data.length).toBeGreaterThan(10);
  for (const { name } of list.data) {
    const page = (await (await fetch(`${url}/console/api/docs/${name}`, { headers: { cookie } })).json()) as { tree: unknown[] };
    expect(page.tree.length).toBeGreaterThan(1);
  }
});
