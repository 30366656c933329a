import { afterEach, expect, test } from "bun:test";
import { cpSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ensureChatModel } from "../models/cache";
import { ensureOnnxModel } from "../models/onnx/cache";
import { ConfigError, validateConfig, type Config } from "../src/lib/config";
import type { ModelManifest } from "../src/lib/manifest";
import { serveDemoModels } from "../src/ops/demo";
import { applyReload } from "../src/ops/reload";
import { writeRealModel } from "../models/gguf/real-archs";
import { loadSignalOf } from "../src/3-engines/load-signal";
import { llamaRuntime } from "../src/3-engines/llama/runtime";
import { ModelRemovedError } from "../src/3-engines/residency";
import { memoryLogger } from "../src/lib/log";
import { tempDir } from "./helpers/app";
import { chatTestApp } from "./helpers/chat";
import { cli, serveCli } from "./helpers/cli";

// SIGHUP's reload applies model changes (src/ops/reload.ts, registry.apply): a new model is listed and
// answers at once; a removed one answers 404 to new requests at once while the requests already on
// it finish, and its engine is unloaded only after them; a changed one gets a new engine the same way.

let t: Awaited<ReturnType<typeof chatTestApp>> | null = null;
const dirs: string[] = [];
const children: ReturnType<typeof Bun.spawn>[] = [];
afterEach(async () => {
  await t?.close();
  t = null;
  for (const c of children.splice(0)) c.kill("SIGKILL");
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

/** The running config with its models replaced by `models(current)`, validated as a reload reads it. */
function nextConfig(models: (current: ModelManifest[]) => unknown[]): Config {
  const cur = structuredClone(t!.deps.config);
  const next = validateConfig({ ...cur, models: models(cur.models) });
  next.models_dir = cur.models_dir;
  return next;
}

/** A schema the answer cannot end before: at least 150 integers (the grammar enforces minItems). */
const LONG = {
  type: "json_schema",
  json_schema: { name: "long", schema: { type: "object", properties: { xs: { type: "array", items: { type: "integer" }, minItems: 150 } }, required: ["xs"] } },
};

const ask = (key: string, model: string, extra: Record<string, unknown> = {}) =>
  t!.request("POST", "/v1/chat/completions", { key, body: { model, messages: [{ role: "user", content: "hi" }], max_tokens: 3, ...extra } });
const listed = async (key: string) => (((await (await t!.request("GET", "/v1/models", { key })).json()) as any).data as { id: string }[]).map((m) => m.id);

test("a reload adds models: listed at once, answering at once; load = start loads in the background", async () => {
  t = await chatTestApp();
  const key = await t.key({ kind: "premium", creditUsd: 5 });
  const chat = await ensureChatModel("chat");
  const embed = await ensureOnnxModel("embed");
  expect(await listed(key)).toEqual(["chat", "small-chat", "tight"]);
  expect((await ask(key, "chat-2")).status).toBe(404);
  const r = applyReload(
    t.deps,
    nextConfig((ms) => [
      ...ms,
      { id: "chat-2", name: "Second chat", kind: "chat", files: { model: chat }, max_context: 2048, slots: 1, load: "first_use" },
      { id: "chat-3", name: "Third chat", kind: "chat", files: { model: chat }, max_context: 1024, slots: 1, load: "start" },
      { id: "embed", name: "Embedder", kind: "embedding", files: { model: embed }, max_context: 512, load: "first_use" },
    ]),
  );
  expect(r.models).toEqual({ added: ["chat-2", "chat-3", "embed"], removed: [], replaced: [] });
  expect(r.needsRestart).toEqual([]);
  expect(await listed(key)).toEqual(["chat", "small-chat", "tight", "chat-2", "chat-3", "embed"]);
  expect(t.deps.config.models.map((m) => m.id)).toEqual(["chat", "small-chat", "tight", "chat-2", "chat-3", "embed"]);
  // load = "start": loading already, without a request.
  const third = t.deps.registry.chatEngine("chat-3");
  for (let i = 0; i < 200 && !third.loaded; i++) await Bun.sleep(20);
  expect(third.loaded).toBe(true);
  expect(t.deps.registry.chatEngine("chat-2").loaded).toBe(false); // first_use
  const res = await ask(key, "chat-2");
  expect(res.status).toBe(200);
  expect(((await res.json()) as any).model).toBe("chat-2");
  const e = await t.request("POST", "/v1/embeddings", { key, body: { model: "embed", input: "hello" } });
  expect(e.status).toBe(200);
  // billed like any model: a usage row under the new id
  expect(t.deps.db!.query("SELECT COUNT(*) AS n FROM usage WHERE model = 'chat-2'").get()).toEqual({ n: 1 });
}, 60_000);

test("removing a model while it streams: the stream completes, new requests get 404 at once, the engine is unloaded only after the stream", async () => {
  t = await chatTestApp();
  const key = await t.key({ kind: "premium", creditUsd: 5 });
  expect((await ask(key, "chat")).status).toBe(200); // loaded
  const engine = t.deps.registry.chatEngine("chat");
  const unloads: { busy: number; chunksAfterReload: number }[] = [];
  let chunksAfterReload = 0;
  const unload = engine.unload.bind(engine);
  engine.unload = async () => {
    unloads.push({ busy: engine.stats().busy, chunksAfterReload });
    return unload();
  };

  const res = await ask(key, "chat", { stream: true, max_tokens: 3000, response_format: LONG, chat_template_kwargs: { enable_thinking: false } });
  expect(res.status).toBe(200);
  const reader = res.body!.getReader();
  let text = new TextDecoder().decode((await reader.read()).value);
  expect(engine.stats().busy).toBe(1); // generating

  const r = applyReload(t.deps, nextConfig((ms) => ms.filter((m) => m.id !== "chat")));
  expect(r.models).toEqual({ added: [], removed: ["chat"], replaced: [] });
  // At once: not listed, and a new request is the usual 404 — while the stream runs on.
  expect(await listed(key)).toEqual(["small-chat", "tight"]);
  const refused = await ask(key, "chat");
  expect(refused.status).toBe(404);
  expect(((await refused.json()) as any).error).toMatchObject({ code: "model_not_found", message: 'model not found: "chat"' });
  expect(unloads).toEqual([]);
  expect(engine.loaded).toBe(true);

  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    chunksAfterReload++;
    text += new TextDecoder().decode(value);
  }
  // The stream finished normally, long after the removal.
  expect(text.trim().endsWith("data: [DONE]")).toBe(true);
  expect(text).toContain('"finish_reason"');
  expect(Number(/"completion_tokens":(\d+)/.exec(text)?.[1])).toBeGreaterThanOrEqual(300);
  await t.deps.registry.settled();
  // Unloaded once, after the generation had let go of its slot.
  expect(unloads).toHaveLength(1);
  expect(unloads[0]!.busy).toBe(0);
  expect(unloads[0]!.chunksAfterReload).toBeGreaterThan(10);
  expect(engine.loaded).toBe(false);
  expect(t.deps.registry.engines()).not.toContain(engine);
}, 60_000);

test("a model whose manifest changed gets a new engine for new requests; the old one unloads after its running request", async () => {
  t = await chatTestApp();
  const key = await t.key({ kind: "premium", creditUsd: 5 });
  expect((await ask(key, "chat")).status).toBe(200);
  const old = t.deps.registry.chatEngine("chat");
  expect(old.contextSize).toBe(4096);
  const unloaded: { busy: number | null } = { busy: null };
  const unload = old.unload.bind(old);
  old.unload = async () => {
    unloaded.busy = old.stats().busy;
    return unload();
  };
  const res = await ask(key, "chat", { stream: true, max_tokens: 3000, response_format: LONG, chat_template_kwargs: { enable_thinking: false } });
  const reader = res.body!.getReader();
  await reader.read();

  // a price change alone is applied in place: same engine
  let r = applyReload(t.deps, nextConfig((ms) => ms.map((m) => (m.id === "chat" ? { ...m, price: { input_per_m: 9, output_per_m: 9 } } : m))));
  expect(r.models.replaced).toEqual([]);
  expect(r.applied).toEqual(["models.chat.price"]);
  expect(t.deps.registry.chatEngine("chat")).toBe(old);

  r = applyReload(t.deps, nextConfig((ms) => ms.map((m) => (m.id === "chat" ? { ...m, max_context: 2048 } : m))));
  expect(r.models).toEqual({ added: [], removed: [], replaced: ["chat"] });
  expect(old.stats().busy).toBe(1); // the stream runs on the old engine
  const fresh = t.deps.registry.chatEngine("chat");
  expect(fresh).not.toBe(old);
  expect(((await t.request("GET", "/v1/models/chat", { key }).then((x) => x.json())) as any).max_context).toBe(2048);
  expect((await ask(key, "chat")).status).toBe(200); // on the new engine
  expect(fresh.contextSize).toBe(2048);
  expect(unloaded.busy).toBeNull();
  let text = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    text += new TextDecoder().decode(value);
  }
  expect(text.trim().endsWith("data: [DONE]")).toBe(true);
  await t.deps.registry.settled();
  expect(unloaded.busy).toBe(0);
  expect(old.loaded).toBe(false);
  expect(fresh.loaded).toBe(true);
}, 60_000);

test("a reload whose new model's file is missing is refused whole: nothing changes", async () => {
  t = await chatTestApp();
  const key = await t.key({ kind: "premium", creditUsd: 5 });
  const price = t.deps.config.prices.chat_input_per_m;
  const next = nextConfig((ms) => [...ms.filter((m) => m.id !== "tight"), { id: "ghost", name: "g", kind: "chat", files: { model: "/nonexistent/ghost.gguf" }, max_context: 512 }]);
  next.prices.chat_input_per_m = price * 2;
  expect(() => applyReload(t!.deps, next)).toThrow(ConfigError);
  expect(() => applyReload(t!.deps, next)).toThrow("models[2].files.model: file not found: /nonexistent/ghost.gguf");
  expect(await listed(key)).toEqual(["chat", "small-chat", "tight"]);
  expect(t.deps.config.prices.chat_input_per_m).toBe(price);
  expect((await ask(key, "tight")).status).toBe(200);
}, 60_000);

test("with --demo, the demo models (not in the file) stay on a reload", async () => {
  const demo = { id: "demo-extra", name: "d", kind: "chat" as const, files: { model: await ensureChatModel("chat") }, max_context: 512, load: "first_use" as const };
  t = await chatTestApp({ config: { demo: true }, extraModels: [demo] });
  serveDemoModels(t.deps.config, [validateConfig({ models: [demo] }).models[0]!]); // as the start records them (src/main.ts)
  const r = applyReload(t.deps, nextConfig((ms) => ms.filter((m) => m.id !== "demo-extra" && m.id !== "tight")));
  expect(r.models.removed).toEqual(["tight"]);
  expect(t.deps.registry.list().map((m) => m.id)).toEqual(["chat", "small-chat", "demo-extra"]);
}, 60_000);

test("end to end: `models add` then `kill -HUP` serves the new model; removing it from the file and HUP again answers 404", async () => {
  const dir = tempDir("appliance-hup-");
  dirs.push(dir);
  const chat = await ensureChatModel("chat");
  const embed = await ensureOnnxModel("embed");
  mkdirSync(join(dir, "models"));
  cpSync(embed, join(dir, "models", "tiny-embed"), { recursive: true });
  const config = join(dir, "config.toml");
  const base =
    `models_dir = "${join(dir, "models")}"\n[server]\nlog_level = "info"\n[engines]\ndevice = "cpu"\nthreads = 1\n[rentals]\ndiscover = false\n` +
    `[[models]]\nid = "chat"\nname = "chat"\nkind = "chat"\nfiles = { model = "${chat}" }\nmax_context = 4096\nslots = 1\nload = "start"\n`;
  writeFileSync(config, base);
  const { child, url, banner } = await serveCli(dir, ["--port", "0"], { APPLIANCE_CONFIG: config });
  children.push(child);
  const key = /(sk-apl-[0-9A-Za-z]{44})/.exec(banner)![1]!;
  const logs: string[] = [];
  void (async () => {
    for await (const chunk of child.stdout as ReadableStream<Uint8Array>) logs.push(new TextDecoder().decode(chunk));
  })();
  const embedReq = () =>
    fetch(`${url}/v1/embeddings`, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, body: JSON.stringify({ model: "tiny-embed", input: "hi" }) });
  const models = async () => (((await (await fetch(`${url}/v1/models`, { headers: { authorization: `Bearer ${key}` } })).json()) as any).data as { id: string }[]).map((m) => m.id);
  const until = async (what: string) => {
    for (let i = 0; i < 250 && !logs.join("").includes(what); i++) await Bun.sleep(20);
    expect(logs.join("")).toContain(what);
  };
  expect((await embedReq()).status).toBe(404);

  const added = cli(dir, ["models", "add", "tiny-embed"], { APPLIANCE_CONFIG: config });
  expect(added.stderr).toBe("");
  expect(added.stdout).toContain(`kill -HUP ${child.pid}`); // it names the running server
  child.kill("SIGHUP");
  await until('"msg":"config reloaded"');
  expect(logs.join("")).toContain('"added":["tiny-embed"]');
  expect(await models()).toEqual(["chat", "tiny-embed"]);
  const res = await embedReq();
  expect(res.status).toBe(200);
  expect(((await res.json()) as any).data[0].embedding).toHaveLength(384);

  writeFileSync(config, base);
  child.kill("SIGHUP");
  await until('"removed":["tiny-embed"]');
  expect(await models()).toEqual(["chat"]);
  expect((await embedReq()).status).toBe(404);
  await until("model engine unloaded");
}, 90_000);

test("a reload that removes a model while it loads stops the load: node-llama-cpp's load is aborted, nothing is left loaded, nothing finishes later", async () => {
  t = await chatTestApp();
  // A real model's shape (qwen3-1.7b, 1.2 GB with its weights left sparse): its load takes seconds here.
  const big = tempDir("appliance-reload-big-");
  dirs.push(big);
  const path = writeRealModel("qwen3-1.7b", big, { model: { path: "qwen3-1.7b.gguf" } }).model!.path;
  // The chat engines' runtime (one per process): its loadModel watched, to see how the load ends.
  const { llama } = await llamaRuntime({ device: "cpu", threads: 1, logger: memoryLogger() });
  const original = llama.loadModel.bind(llama);
  const seen: { started: number; ended?: number; outcome?: "loaded" | unknown }[] = [];
  llama.loadModel = async (o) => {
    if (o.modelPath !== path) return original(o);
    const call: (typeof seen)[number] = { started: performance.now() };
    seen.push(call);
    try {
      const m = await original(o);
      call.outcome = "loaded";
      return m;
    } catch (e) {
      call.outcome = e;
      throw e;
    } finally {
      call.ended = performance.now();
    }
  };
  try {
    applyReload(t.deps, nextConfig((ms) => [...ms, { id: "big", name: "Big", kind: "chat", files: { model: path }, max_context: 2048, slots: 1, load: "start" }]));
    const engine = t.deps.registry.chatEngine("big");
    for (let i = 0; i < 1500 && seen.length === 0; i++) await Bun.sleep(10);
    expect(seen).toHaveLength(1); // node-llama-cpp is reading the model
    await Bun.sleep(300);
    expect(seen[0]!.ended).toBeUndefined(); // still loading
    const signal = loadSignalOf(engine)!;
    expect(signal.aborted).toBe(false);
    expect(t.deps.registry.status().find((m) => m.id === "big")!.state).toBe("loading");

    const r = applyReload(t.deps, nextConfig((ms) => ms.filter((m) => m.id !== "big")));
    expect(r.models.removed).toEqual(["big"]);
    expect(signal.aborted).toBe(true);
    expect(signal.reason).toBeInstanceOf(ModelRemovedError);
    await t.deps.registry.settled();
    // node-llama-cpp stopped at its next check (llama.cpp maps the file in one call first; it frees
    // what it loaded) and rejected with the reason it was given: no model came back.
    expect(seen[0]!.outcome).toBe(signal.reason);
    expect(engine.loaded).toBe(false);
    expect(t.deps.registry.engines()).not.toContain(engine);
    // A load that had gone on would end within a few seconds and be unloaded with a warning: none comes.
    await Bun.sleep(5000);
    expect(engine.loaded).toBe(false);
    expect(t.logs.filter((l) => l.model === "big").map((l) => l.msg)).not.toContainAnyValues(["chat model loaded", "a model load given up on finished later: unloading it", "model failed to load"]);
  } finally {
    llama.loadModel = original;
  }
}, 90_000);
