import { afterAll, expect, test } from "bun:test";
import { rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ConfigError, validateConfig } from "../../src/lib/config";
import { checkModelFiles } from "../../src/3-engines/registry";
import { memoryLogger } from "../../src/lib/log";
import { startServer } from "../../src/main";
import { tempDir } from "../helpers/app";
import { cli } from "../helpers/cli";
import { ensureChatModel } from "../../models/cache";
import { applyReload } from "../../src/ops/reload";
import { attackGguf } from "../models/gguf-bytes";

// A model file the engine cannot read (an empty file left by an interrupted copy, or not a model
// at all) stops the start with one line naming the model and the file — never a TypeError or an
// engine library's stack.

const dirs: string[] = [];
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

function dataDir(): string {
  const d = tempDir();
  dirs.push(d);
  return d;
}

const chatModel = (file: string, load: "start" | "first_use" = "start") => ({ id: "odd-chat", name: "Odd", kind: "chat", files: { model: file }, max_context: 512, load });

test("an empty model file is refused by the start-up check, naming the model's field and the file", () => {
  const dir = dataDir();
  writeFileSync(join(dir, "empty.gguf"), "");
  const config = validateConfig({ models: [chatModel("empty.gguf", "first_use")], server: { data_dir: dir } });
  expect(() => checkModelFiles(config.models, dir)).toThrow(ConfigError);
  expect(() => checkModelFiles(config.models, dir)).toThrow(`models[0].files.model: file is empty: ${join(dir, "empty.gguf")}`);
});

test("a model file that is not a model stops the start with a ConfigError naming the model; the data dir is released", async () => {
  const dir = dataDir();
  writeFileSync(join(dir, "odd.gguf"), "this is not a GGUF file, only text\n");
  const config = validateConfig({ models: [chatModel("odd.gguf")], server: { data_dir: dir, port: 0 }, engines: { device: "cpu", threads: 1 } });
  config.models_dir = dir;
  const err = await startServer(config, { logger: memoryLogger(), banner: () => {} }).catch((e) => e);
  expect(err).toBeInstanceOf(ConfigError);
  expect(err.message).toStartWith(`models[0] "odd-chat": cannot load its files (model ${join(dir, "odd.gguf")}): `);
  expect(err.message).toContain("GGUF");
  // The failed start let go of the store and its lock: the next start on the same dir works.
  const ok = validateConfig({ server: { data_dir: dir, port: 0 } });
  const s = await startServer(ok, { logger: memoryLogger(), banner: () => {} });
  await s.stop();
});

test("`appliance serve` on an empty model file prints one error line and exits 1, with no stack", () => {
  const dir = dataDir();
  writeFileSync(join(dir, "empty.gguf"), "");
  const conf = join(dir, "appliance.toml");
  writeFileSync(conf, `models_dir = ${JSON.stringify(dir)}\n[server]\nport = 0\n[[models]]\nid = "odd-chat"\nname = "Odd"\nkind = "chat"\nfiles = { model = "empty.gguf" }\nmax_context = 512\n`);
  const r = cli(dir, ["--config", conf, "serve"]);
  expect(r.code).toBe(1);
  expect(r.stderr.trim()).toBe(`error: models[0].files.model: file is empty: ${join(dir, "empty.gguf")}`);
});

// A GGUF whose header does not hold together (issue 41 M2: 24 bytes claiming 2^63 key-value pairs
// kept node-llama-cpp's reader busy for good): refused before anything reads it, with its reason.

test("a pinned model whose GGUF claims 2^63 key-value pairs stops the start at once, naming the field", async () => {
  const dir = dataDir();
  writeFileSync(join(dir, "attack.gguf"), attackGguf());
  const config = validateConfig({ models: [chatModel("attack.gguf")], server: { data_dir: dir, port: 0 }, engines: { device: "cpu", threads: 1 } });
  config.models_dir = dir;
  expect(checkModelFiles(config.models, dir).map((p) => [p.id, p.field, p.error.problem])).toEqual([["odd-chat", "models[0].files.model", "too_many_kvs"]]);
  const err = await startServer(config, { logger: memoryLogger(), banner: () => {} }).catch((e) => e);
  expect(err).toBeInstanceOf(ConfigError);
  expect(err.message).toStartWith(`models[0] "odd-chat": cannot load its files (model ${join(dir, "attack.gguf")}): model "odd-chat" cannot be loaded: its model file is not a valid GGUF file (too_many_kvs): kv_count at byte 16: `);
}, 30_000);

test("a first_use model with a corrupt GGUF: the server starts, logs it once with its path, lists it as failed and answers 503 model_load_failed for it", async () => {
  const dir = dataDir();
  writeFileSync(join(dir, "attack.gguf"), attackGguf());
  const small = await ensureChatModel("small-chat");
  const config = validateConfig({
    models: [chatModel("attack.gguf", "first_use"), { id: "small", name: "Small", kind: "chat", files: { model: small }, max_context: 512, load: "start" }],
    server: { data_dir: dir, port: 0 },
    engines: { device: "cpu", threads: 1 },
  });
  config.models_dir = dir;
  const logger = memoryLogger();
  const banner: string[] = [];
  const s = await startServer(config, { logger, banner: (l) => banner.push(l) });
  try {
    const logged = logger.lines.filter((l) => l.msg?.startsWith("model cannot load: its file is not a valid GGUF"));
    expect(logged).toHaveLength(1);
    expect(logged[0]).toMatchObject({ model: "odd-chat", field: "models[0].files.model" });
    expect(logged[0]!.error).toStartWith(`${join(dir, "attack.gguf")}: not a valid GGUF file (too_many_kvs): kv_count at byte 16`);
    const listed = s.deps.registry.status().find((x) => x.id === "odd-chat")!;
    expect(listed.state).toBe("failed");
    expect(listed.error).toStartWith('model "odd-chat" cannot be loaded: its model file is not a valid GGUF file (too_many_kvs)');
    const key = /sk-apl-[0-9A-Za-z]{44}/.exec(banner.join("\n"))![0];
    const ask = (model: string) =>
      fetch(`${s.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
        body: JSON.stringify({ model, messages: [{ role: "user", content: "hi" }], max_tokens: 2 }),
      });
    const refused = await ask("odd-chat");
    expect(refused.status).toBe(503);
    const body = (await refused.json()) as any;
    expect(body.error.code).toBe("model_load_failed");
    expect(body.error.message).toStartWith('model "odd-chat" cannot be loaded: its model file is not a valid GGUF file (too_many_kvs): kv_count at byte 16: ');
    expect(body.error.message).not.toContain(dir);
    expect((await ask("small")).status).toBe(200);
  } finally {
    await s.stop();
  }
}, 60_000);

test("a reload that adds a model with a corrupt GGUF is refused, naming the field; the served set stays", async () => {
  const dir = dataDir();
  writeFileSync(join(dir, "attack.gguf"), attackGguf());
  const small = await ensureChatModel("small-chat");
  const before = validateConfig({ models: [{ id: "small", name: "Small", kind: "chat", files: { model: small }, max_context: 512 }], server: { data_dir: dir, port: 0 }, engines: { device: "cpu", threads: 1 } });
  before.models_dir = dir;
  const s = await startServer(before, { logger: memoryLogger(), banner: () => {} });
  try {
    const next = validateConfig({ ...structuredClone(before), models: [...before.models, chatModel("attack.gguf", "first_use")] });
    next.models_dir = dir;
    expect(() => applyReload(s.deps, next)).toThrow(`models[1].files.model: ${join(dir, "attack.gguf")}: not a valid GGUF file (too_many_kvs)`);
    expect(s.deps.registry.list().map((m) => m.id)).toEqual(["small"]);
  } finally {
    await s.stop();
  }
}, 60_000);
