import { afterAll, expect, test } from "bun:test";
import { cpSync, mkdirSync, readFileSync, rmSync, statSync, truncateSync, writeFileSync } from "node:fs";
import { basename, join } from "node:path";
import { ensureChatModel } from "../../models/cache";
import { catalogue, isDownload, modelFolder } from "../../models/catalogue";
import { ensureDiffusionModel } from "../../models/diffusion/cache";
import { ensureZImageModel } from "../../models/diffusion/z-image";
import { ensureOnnxModel } from "../../models/onnx/cache";
import { ensureProjector } from "../../models/projector-cache";
import { loadConfig } from "../../src/lib/config";
import { checkModelFiles } from "../../src/3-engines/registry";
import { memoryLogger } from "../../src/lib/log";
import { startServer } from "../../src/main";
import { AddError, inspectModelFolder, manifestForFolder, withModelBlock } from "../../src/ops/pull/add";
import type { ModelManifest } from "../../src/lib/manifest";
import { tempDir } from "../helpers/app";
import { cli } from "../helpers/cli";
import { attackGguf } from "./gguf-bytes";

// `appliance models add ID` as an operator runs it (the real CLI in a child process): the entry is
// made from the pulled folder's own files, appended to the config file with the rest of the file
// untouched, and the config it leaves validates and serves over real HTTP.

const dirs: string[] = [];
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

const HEADER = `# my appliance: keep this comment
[server]
log_level = "warn"   # quiet

[engines]
device = "cpu"
threads = 1

[rentals]
discover = false
`;

/** A data dir with `<data>/models/<id>/` holding copies of `files` (files or folders), and a config file. */
function setup(models: Record<string, string[]>, configText: string | null = HEADER) {
  const dir = tempDir("appliance-add-");
  dirs.push(dir);
  for (const [id, files] of Object.entries(models)) {
    mkdirSync(join(dir, "models", id), { recursive: true });
    for (const f of files) cpSync(f, join(dir, "models", id, statSync(f).isDirectory() ? "" : basename(f)), { recursive: true });
  }
  const config = join(dir, "config.toml");
  if (configText !== null) writeFileSync(config, configText);
  const run = (...args: string[]) => cli(dir, ["models", ...args], { APPLIANCE_CONFIG: config });
  return { dir, config, run, text: () => readFileSync(config, "utf8") };
}

async function serve(config: string) {
  const { config: cfg } = loadConfig({ file: config, env: { APPLIANCE_DATA_DIR: dirs.at(-1)! } });
  cfg.server.port = 0;
  checkModelFiles(cfg.models, cfg.models_dir);
  const banner: string[] = [];
  const s = await startServer(cfg, { logger: memoryLogger(), banner: (l) => banner.push(l) });
  const key = /sk-apl-[0-9A-Za-z]{44}/.exec(banner.join("\n"))![0];
  const post = (path: string, body: unknown) =>
    fetch(`${s.url}${path}`, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, body: JSON.stringify(body) });
  return { s, key, post };
}

test("models add writes a chat model's entry from its GGUF, keeps the file's comments, and the config serves it over HTTP", async () => {
  const chat = await ensureChatModel("chat");
  const t = setup({ "tiny-chat": [chat] });
  const r = t.run("add", "tiny-chat");
  expect(r.stderr).toBe("");
  expect(r.code).toBe(0);
  expect(r.stdout).toContain(`added to ${t.config}`);
  expect(r.stdout).toContain("kill -HUP");
  // What was there is there, byte for byte; the block comes after it.
  expect(t.text().startsWith(HEADER)).toBe(true);
  const { config } = loadConfig({ file: t.config, env: { APPLIANCE_DATA_DIR: t.dir } });
  expect(config.engines).toEqual({ device: "cpu", threads: 1, keep_alive_s: 300, gpu_memory_mb: 0, cpu_memory_mb: 0 });
  expect(config.models).toEqual([
    expect.objectContaining({
      id: "tiny-chat",
      kind: "chat",
      // the GGUF's own name and trained context (8,192 for the tiny model: below the 16,384 cap)
      name: "appliance-qwen3-chat-tiny",
      max_context: 8192,
      context: "auto", // per slot: the planner fits it at load, up to max_context
      // relative to models_dir, which is the config file's folder here
      files: { model: `models/tiny-chat/${basename(chat)}` },
      vision: false,
      slots: 2,
      load: "first_use", // the default: loaded on demand
    }),
  ]);
  const { s, post } = await serve(t.config);
  try {
    const res = await post("/v1/chat/completions", { model: "tiny-chat", messages: [{ role: "user", content: "hi" }], max_tokens: 3 });
    expect(res.status).toBe(200);
    expect(((await res.json()) as any).usage.completion_tokens).toBeGreaterThan(0);
  } finally {
    await s.stop();
  }
}, 60_000);

test("models add reads an ONNX folder: embedding and classifier by config.json; a new config file is created with models_dir", async () => {
  const [embed, nli] = await Promise.all([ensureOnnxModel("embed"), ensureOnnxModel("nli")]);
  const t = setup({ "tiny-embed": [embed], "tiny-nli": [nli] }, null);
  expect(t.run("add", "tiny-embed").code).toBe(0);
  const second = t.run("add", "tiny-nli", "--json");
  expect(second.code).toBe(0);
  expect(second.json()).toMatchObject({ created: false, replaced: false, manifest: { id: "tiny-nli", kind: "classifier", files: { model: "tiny-nli" }, max_context: 8192, slots: 1 } });
  // The first add created the file: models_dir is the models dir, so the paths are the folders' names.
  expect(t.text()).toContain(`models_dir = ${JSON.stringify(join(t.dir, "models"))}`);
  writeFileSync(t.config, t.text() + "\n[engines]\ndevice = \"cpu\"\nthreads = 1\n[rentals]\ndiscover = false\n");
  const { config } = loadConfig({ file: t.config, env: { APPLIANCE_DATA_DIR: t.dir } });
  expect(config.models.map((m) => [m.id, m.kind, m.files.model, m.max_context])).toEqual([
    ["tiny-embed", "embedding", "tiny-embed", 512],
    ["tiny-nli", "classifier", "tiny-nli", 8192],
  ]);
  const { s, post } = await serve(t.config);
  try {
    const res = await post("/v1/embeddings", { model: "tiny-embed", input: "hello" });
    expect(res.status).toBe(200);
    expect(((await res.json()) as any).data[0].embedding).toHaveLength(384);
    const c = await post("/v1/classify", { model: "tiny-nli", pairs: [{ premise: "a", hypothesis: "b" }] });
    expect(c.status).toBe(200);
  } finally {
    await s.stop();
  }
}, 60_000);

test("models add reads a one-logit cross-encoder folder as a reranker; a copy without its tokenizer is refused with the reason", async () => {
  const rerank = await ensureOnnxModel("rerank");
  const dir = tempDir("appliance-add-rerank-");
  dirs.push(dir);
  expect(await inspectModelFolder(rerank)).toEqual({ kind: "reranker", files: { model: "." }, max_context: 512, vision: false });
  // The manifest `models add` writes for it serves as the reranker kind, one slot.
  const m = await manifestForFolder({ id: "tiny-rerank", dir: rerank, modelsDir: dir });
  expect(m).toMatchObject({ id: "tiny-rerank", kind: "reranker", max_context: 512, slots: 1 });
  // Without the tokenizer it is what the engine would refuse at load.
  const broken = join(dir, "broken");
  cpSync(rerank, broken, { recursive: true });
  rmSync(join(broken, "tokenizer.json"));
  await expect(inspectModelFolder(broken)).rejects.toThrow("no tokenizer.json (read as a reranker)");
});

test("the catalogue's bge-reranker-v2-m3, laid out as a pull writes it (sizes exact, weights sparse), is added as a reranker at the entry's window", async () => {
  const entry = catalogue().find((e) => e.id === "bge-reranker-v2-m3");
  if (!entry || !isDownload(entry)) throw new Error("no bge-reranker-v2-m3 download entry");
  const dir = join(tempDir("appliance-add-bge-"), modelFolder(entry));
  dirs.push(join(dir, ".."));
  // BAAI/bge-reranker-v2-m3's config.json fields the reader uses, padded to the pinned size.
  const config = JSON.stringify({
    architectures: ["XLMRobertaForSequenceClassification"],
    model_type: "xlm-roberta",
    hidden_size: 1024,
    id2label: { 0: "LABEL_0" },
    label2id: { LABEL_0: 0 },
    max_position_embeddings: 8194,
    pad_token_id: 1,
    type_vocab_size: 1,
    vocab_size: 250002,
  });
  const json: Record<string, string> = { "config.json": config, "tokenizer_config.json": JSON.stringify({ model_max_length: 8192, tokenizer_class: "XLMRobertaTokenizer" }) };
  for (const f of Object.values(entry.files)) {
    const path = join(dir, f.path);
    const bytes = f.bytes!;
    mkdirSync(join(path, ".."), { recursive: true });
    writeFileSync(path, json[f.path]?.padEnd(bytes, " ") ?? "");
    truncateSync(path, bytes);
  }
  expect(await inspectModelFolder(dir)).toMatchObject({ kind: "reranker", max_context: 8192 });
  const m = await manifestForFolder({ id: entry.id, dir, modelsDir: join(dir, ".."), entry });
  expect(m).toMatchObject({ id: "bge-reranker-v2-m3", kind: "reranker", max_context: 512, slots: 1, files: { model: "bge-reranker-v2-m3" } });
});

test("models add refuses with one line: no folder, an unfinished pull, an unknown layout, an id already served (--force replaces it)", async () => {
  const chat = await ensureChatModel("chat");
  const t = setup({ half: [chat], odd: [], dup: [chat] });
  writeFileSync(join(t.dir, "models", "half", "more.gguf.part"), "xx");
  writeFileSync(join(t.dir, "models", "odd", "weights.bin"), "xx");
  const refusal = (r: ReturnType<typeof t.run>) => {
    expect(r.code).toBe(1);
    expect(r.stdout).toBe("");
    expect(r.stderr.trim().split("\n")).toHaveLength(1);
    return r.stderr;
  };
  expect(refusal(t.run("add", "missing"))).toContain("no such folder; pull the model first (appliance models pull missing)");
  expect(refusal(t.run("add", "half"))).toContain("more.gguf.part is an unfinished download; run `appliance models pull half` again");
  expect(refusal(t.run("add", "odd"))).toContain("cannot tell what model this is");
  expect(t.text()).toBe(HEADER); // nothing written by a refusal

  expect(t.run("add", "dup").code).toBe(0);
  const once = t.text();
  expect(refusal(t.run("add", "dup"))).toContain('model "dup" is already in it (--force replaces its entry)');
  expect(t.text()).toBe(once);
  // --force: the block is replaced in place; a comment after it and the tables after it stay.
  writeFileSync(t.config, once.replace("slots = 2", "slots = 7") + "\n# trailing comment\n[limits]\nfree_rpm = 3\n");
  expect(t.run("add", "dup", "--force").code).toBe(0);
  expect(t.text()).toBe(once + "\n# trailing comment\n[limits]\nfree_rpm = 3\n");
});

test("models add takes a catalogue entry's manifest extras and checks the catalogue's files are all there", async () => {
  const embed = await ensureOnnxModel("embed");
  const t = setup({ "cat-embed": [embed] });
  const catalogueDir = join(t.dir, "catalogue");
  mkdirSync(catalogueDir);
  const file = (path: string) => ({ url: `https://example.invalid/${path}`, path, bytes: statSync(join(embed, path)).size, sha256: null });
  const entry = {
    id: "cat-embed",
    name: "Catalogued embedder",
    kind: "embedding",
    description: "test",
    max_context: 256,
    files: { config: file("config.json"), tokenizer: file("tokenizer.json"), weights: file("onnx/model.onnx") },
    manifest: { files: { model: "." }, slots: 3, price: { input_per_m: 0.5 }, device: "cpu" },
  };
  writeFileSync(join(catalogueDir, "cat-embed.json"), JSON.stringify(entry));
  const r = t.run("add", "cat-embed", "--catalogue", catalogueDir, "--json");
  expect(r.stderr).toBe("");
  expect(r.json().manifest).toEqual({
    id: "cat-embed",
    name: "Catalogued embedder",
    kind: "embedding",
    files: { model: "models/cat-embed" },
    max_context: 256, // the catalogue's window, below the folder's 512
    vision: false,
    slots: 3,
    price: { input_per_m: 0.5 },
    load: "first_use", // the default: loaded on demand
    device: "cpu",
  });
  // A file the catalogue names but the folder lacks: incomplete.
  rmSync(join(t.dir, "models", "cat-embed", "tokenizer.json"));
  const again = t.run("add", "cat-embed", "--catalogue", catalogueDir, "--force");
  expect(again.code).toBe(1);
  expect(again.stderr).toContain("incomplete: tokenizer.json missing; run `appliance models pull cat-embed`");
});

test("a folder's kind comes from its files: GGUF with a projector is vision chat; diffusers and Z-Image layouts are image", async () => {
  const [chat, proj] = await Promise.all([ensureChatModel("chat"), ensureProjector("chat-vision")]);
  const dir = tempDir("appliance-add-kinds-");
  dirs.push(dir);
  mkdirSync(join(dir, "vision"));
  cpSync(chat, join(dir, "vision", "model-Q8_0.gguf"));
  cpSync(proj, join(dir, "vision", "mmproj-model-f16.gguf"));
  expect(await inspectModelFolder(join(dir, "vision"))).toMatchObject({ kind: "chat", vision: true, files: { model: "model-Q8_0.gguf", mmproj: "mmproj-model-f16.gguf" } });

  expect(await inspectModelFolder(ensureDiffusionModel("diffusion-turbo"))).toMatchObject({ kind: "image", files: { model: "." }, max_context: 77 });

  const z = join(dir, "z");
  cpSync(ensureZImageModel("z-image-tiny"), z, { recursive: true });
  expect(await inspectModelFolder(z)).toMatchObject({ kind: "image", files: { model: "." }, max_context: 512 });
  rmSync(join(z, "onnx/transformer_model_q4f16.onnx_data_1"));
  await expect(inspectModelFolder(z)).rejects.toThrow("its external data file transformer_model_q4f16.onnx_data_1 is missing");
  cpSync(join(ensureZImageModel("z-image-tiny"), "onnx/transformer_model_q4f16.onnx_data_1"), join(z, "onnx/transformer_model_q4f16.onnx_data_1"));
  rmSync(join(z, "onnx/vae_decoder_model_f16.onnx"));
  await expect(inspectModelFolder(z)).rejects.toThrow("onnx/vae_decoder_model*.onnx is missing");

  // Two different GGUF models: which one is meant cannot be told.
  cpSync(chat, join(dir, "vision", "other-Q4_K_M.gguf"));
  await expect(inspectModelFolder(join(dir, "vision"))).rejects.toThrow("2 model GGUFs");
  // Not a GGUF at all.
  mkdirSync(join(dir, "bad"));
  writeFileSync(join(dir, "bad", "model.gguf"), "not a gguf");
  await expect(inspectModelFolder(join(dir, "bad"))).rejects.toBeInstanceOf(AddError);
});

test("`models add` of a folder whose GGUF claims 2^63 key-value pairs is refused at once with the named problem; the config is left as it was", () => {
  const t = setup({});
  mkdirSync(join(t.dir, "models", "attack"), { recursive: true });
  writeFileSync(join(t.dir, "models", "attack", "attack-Q4_K_M.gguf"), attackGguf());
  const r = t.run("add", "attack");
  expect(r.code).toBe(1);
  expect(r.stderr.trim()).toBe(
    `error: ${join(t.dir, "models", "attack", "attack-Q4_K_M.gguf")}: not a valid GGUF file (too_many_kvs): kv_count at byte 16: 9223372036854775808 key-value pairs: the 0 bytes after the header hold at most 0 (14 bytes each at least; limit 65536)`,
  );
  expect(t.text()).toBe(HEADER);
}, 30_000);

const M = { id: "m", name: "m", kind: "chat", files: { model: "m.gguf" }, max_context: 4096, vision: false, slots: 2, load: "start" } as ModelManifest;

test.each([
  { name: "an empty file gets just the block", input: "", expected: `[[models]]\nid = "m"\nname = "m"\nkind = "chat"\nfiles = { model = "m.gguf" }\nmax_context = 4096\nvision = false\nslots = 2\nload = "start"\n` },
  { name: "after a table, one blank line, then the block", input: "[limits]\nfree_rpm = 3 # c\n\n\n", expected: `[limits]\nfree_rpm = 3 # c\n\n[[models]]\nid = "m"\nname = "m"\nkind = "chat"\nfiles = { model = "m.gguf" }\nmax_context = 4096\nvision = false\nslots = 2\nload = "start"\n` },
])("withModelBlock: $name", ({ input, expected }) => {
  expect(withModelBlock(input, M)).toBe(expected);
});

test("withModelBlock replaces a block with its [models.price] subtable and refuses what it cannot edit safely", () => {
  const text = `# top\n[[models]]\nid = "m"\nname = "old"\nkind = "chat"\nfiles = { model = "old.gguf" }\nmax_context = 1\n[models.price]\ninput_per_m = 1\n\n# other\n[[models]]\nid = "n"\nname = "n"\nkind = "chat"\nfiles = { model = "n.gguf" }\nmax_context = 1\n`;
  const out = withModelBlock(text, M, { replace: true });
  expect(out.startsWith(`# top\n[[models]]\nid = "m"\nname = "m"`)).toBe(true);
  expect(out).not.toContain("input_per_m");
  expect(out).toContain(`load = "start"\n\n# other\n[[models]]\nid = "n"`);
  expect(() => withModelBlock(text, M)).toThrow('model "m" is already in it');
  // models as an inline array: appending [[models]] would not be TOML
  expect(() => withModelBlock(`models = [{ id = "x", name = "x", kind = "chat", files = { model = "x" }, max_context = 1 }]\n`, M)).toThrow(AddError);
});
