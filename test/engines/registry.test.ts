import { afterAll, expect, test } from "bun:test";
import { rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ConfigError, validateConfig } from "../../src/config";
import { checkModelFiles } from "../../src/engines/registry";
import { memoryLogger } from "../../src/log";
import { startServer } from "../../src/main";
import { tempDir } from "../helpers/app";
import { cli } from "../helpers/cli";

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
