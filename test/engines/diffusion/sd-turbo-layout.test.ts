import { AutoTokenizer, type PreTrainedTokenizer } from "@huggingface/transformers";
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { cpSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import sharp from "sharp";
import { catalogue, type HubEntry } from "../../../models/catalogue";
import { ensureDiffusionModel } from "../../../models/diffusion/cache";
import { DIFFUSION_PRESETS } from "../../../models/diffusion/generate";
import { buildClipVocab, clipTokenizerFiles, pythonJson } from "../../../models/diffusion/tokenizer";
import { readModelFolder } from "../../../src/3-engines/diffusion/model-folder";
import { DiffusionPipeline } from "../../../src/3-engines/diffusion/pipeline";
import { clipTokenizerJson, encodePrompt, loadTokenizer } from "../../../src/3-engines/diffusion/text-encoder";
import type { ImageRequest } from "../../../src/3-engines/types";
import { tempDir } from "../../helpers/app";

// onnxruntime/sd-turbo's layout (Olive's export, saved by diffusers' OnnxStableDiffusionPipeline):
// CLIP's slow-tokenizer files instead of tokenizer.json, no config.json beside the graphs, int32
// input_ids, float16 in and out, SD 2.x's "!" padding; the tiny set in exactly that layout
// ("diffusion-sd-turbo-ort") goes through the same loading code a pulled sd-turbo does.

const dir = ensureDiffusionModel("diffusion-sd-turbo-ort");
const dirs: string[] = [];
const scratch = () => {
  const d = tempDir("appliance-sd-turbo-");
  dirs.push(d);
  return d;
};
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));
const files = (root: string) =>
  readdirSync(root, { recursive: true, encoding: "utf8" })
    .filter((f) => statSync(join(root, f)).isFile())
    .sort();

describe("the engine on the SD-Turbo layout", () => {
  let p: DiffusionPipeline;
  beforeAll(async () => {
    p = await DiffusionPipeline.load(dir, { device: "cpu", threads: 1 });
  });
  afterAll(() => p.dispose());
  const req: ImageRequest = { prompt: "a lighthouse at dusk!", width: 256, height: 256, seed: 7, steps: 2 };

  test("reads the folder: vocab.json + merges.txt for the tokenizer, Stable Diffusion's VAE scaling where no VAE config is", () => {
    const f = readModelFolder(dir);
    expect(f.tokenizerFiles).toBe("vocab.json+merges.txt");
    expect(f.denoiser.kind).toBe("unet");
    expect(f.vae).toEqual({ latentChannels: 4, scalingFactor: 0.18215, shiftFactor: 0, scaleFactor: 8 });
    expect(p.info).toMatchObject({ denoiser: "unet", scheduler: "EulerDiscreteScheduler", maxPromptTokens: 77, scaleFactor: 8, latentChannels: 4 });
  });

  test("makes a PNG of the requested size through the float16 graphs, the same bytes for the same request", async () => {
    const png = await p.generate({ ...req, width: 320 });
    const m = await sharp(png).metadata();
    expect([m.format, m.width, m.height, m.channels]).toEqual(["png", 320, 256, 3]);
    expect((await sharp(png).stats()).channels[0]!.stdev).toBeGreaterThan(1);
    const a = await p.generate(req);
    expect(Buffer.from(a).equals(Buffer.from(await p.generate(req)))).toBe(true);
    expect(Buffer.from(a).equals(Buffer.from(await p.generate({ ...req, prompt: "a lighthouse at dawn!" })))).toBe(false);
  });
});

// Prompts that exercise CLIP's normaliser and split: case, punctuation runs and contractions, the
// "!" that SD 2.x's tokenizer treats as its pad token, accents (NFC), CJK, emoji (bytes), runs of
// whitespace, digits one by one, and one longer than the 77-token window.
const PROMPTS = [
  "A Photo of a CAT!",
  "it's a dog's life... isn't it?! (really)",
  "Café naïve — ÉTÉ, 東京 🙂 crème brûlée",
  "  spaces\tand\nnew   lines  ",
  "1989 cars, 85mm lens, f/1.8",
  "",
  "a watercolor painting of a lighthouse on a rocky coast at sunset, dramatic clouds, ".repeat(4),
];

describe("the tokenizer built from vocab.json + merges.txt", () => {
  const ids = (t: PreTrainedTokenizer, prompt: string) => encodePrompt(t, prompt, 77).ids;

  test("gives the ids of the tokenizer.json transformers writes for the same files (SD 2.x: pad \"!\")", async () => {
    const fromSlow = await loadTokenizer(join(dir, "tokenizer"));
    // The same vocabulary written as tokenizer.json by the generator's own writer, "!" padding.
    const ref = scratch();
    const spec = DIFFUSION_PRESETS["diffusion-sd-turbo-ort"];
    for (const [name, text] of Object.entries(clipTokenizerFiles(buildClipVocab(spec.merges, "clip"), 77, "!"))) writeFileSync(join(ref, name), text);
    const fromJson = await AutoTokenizer.from_pretrained(ref, { local_files_only: true });
    for (const prompt of PROMPTS) {
      expect(fromSlow.encode(prompt)).toEqual(fromJson.encode(prompt));
      expect(ids(fromSlow, prompt)).toEqual(ids(fromJson, prompt));
    }
    expect(ids(fromSlow, "A Photo of a CAT!").slice(-3)).toEqual([0, 0, 0]); // padded with "!"
    expect(fromSlow.encode("cat!").at(-2)).toBe(0); // "!" is the added token, id 0, as in transformers
  });

  test("gives the ids of the diffusion-sd set's tokenizer.json when that set is saved as vocab.json + merges.txt (SD 1.x: pad <|endoftext|>)", async () => {
    const sd = ensureDiffusionModel("diffusion-sd");
    const json = JSON.parse(readFileSync(join(sd, "tokenizer/tokenizer.json"), "utf8"));
    const slow = scratch();
    writeFileSync(join(slow, "vocab.json"), pythonJson(json.model.vocab));
    writeFileSync(join(slow, "merges.txt"), ["#version: 0.2", ...json.model.merges].join("\n") + "\n");
    cpSync(join(sd, "tokenizer/tokenizer_config.json"), join(slow, "tokenizer_config.json"));
    const [fromSlow, fromJson] = [await loadTokenizer(slow), await loadTokenizer(join(sd, "tokenizer"))];
    for (const prompt of PROMPTS) expect(ids(fromSlow, prompt)).toEqual(ids(fromJson, prompt));
    const eos = json.model.vocab["<|endoftext|>"];
    expect(ids(fromSlow, "a cat").slice(-2)).toEqual([eos, eos]);
  });

  test("cuts a long prompt as CLIP does: <bos>, the first 75 tokens, <eos>; pads a short one after <eos>", async () => {
    const t = await loadTokenizer(join(dir, "tokenizer"));
    const [bos, eos] = [t.bos_token_id!, t.eos_token_id!];
    const long = PROMPTS.at(-1)!;
    const plain = t.encode(long, { add_special_tokens: false });
    expect(plain.length).toBeGreaterThan(75);
    const cut = encodePrompt(t, long, 77);
    expect(cut).toEqual({ ids: [bos, ...plain.slice(0, 75), eos], length: 77 });
    const short = encodePrompt(t, "a cat", 77);
    expect(short.ids.slice(0, short.length)).toEqual([bos, ...t.encode("a cat", { add_special_tokens: false }), eos]);
    expect(short.ids.slice(short.length)).toEqual(new Array(77 - short.length).fill(t.pad_token_id));
    expect(short.ids).toHaveLength(77);
  });

  test("is the converter's tokenizer.json: CLIP's normaliser, split, byte level, RobertaProcessing, and the config's added tokens", () => {
    const json = clipTokenizerJson({ "!": 0, a: 1, b: 2, "a</w>": 3, ab: 4, "<|startoftext|>": 5, "<|endoftext|>": 6 }, "#version: 0.2\na b\n", {
      pad_token: "!",
      added_tokens_decoder: { "0": { content: "!", normalized: false, special: true } },
    }) as Record<string, any>;
    expect(json.model).toMatchObject({ type: "BPE", merges: ["a b"], end_of_word_suffix: "</w>", continuing_subword_prefix: "", unk_token: "<|endoftext|>", fuse_unk: false });
    expect(json.added_tokens.map((t: { id: number; content: string; normalized: boolean }) => [t.id, t.content, t.normalized])).toEqual([
      [0, "!", false],
      [5, "<|startoftext|>", true],
      [6, "<|endoftext|>", true],
    ]);
    expect(json.post_processor).toEqual({ type: "RobertaProcessing", sep: ["<|endoftext|>", 6], cls: ["<|startoftext|>", 5], trim_offsets: false, add_prefix_space: false });
    expect(json.pre_tokenizer.pretokenizers[0].pattern.Regex).toBe("'s|'t|'re|'ve|'m|'ll|'d|[\\p{L}]+|[\\p{N}]|[^\\s\\p{L}\\p{N}]+");
  });
});

test("the sd-turbo catalogue entry pins a commit and pulls exactly the files of this layout", () => {
  const e = catalogue().find((x) => x.id === "sd-turbo") as HubEntry;
  expect(e).toMatchObject({ kind: "image", source: "hf", hf: { repo: "onnxruntime/sd-turbo" }, manifest: { files: { model: "." }, device: "cuda" } });
  expect(e.hf.revision).toMatch(/^[0-9a-f]{40}$/);
  const paths = Object.values(e.hf.files).map((f) => (typeof f === "string" ? f : (f as { path: string }).path));
  expect(paths.sort()).toEqual(files(dir));
});

describe("folders this engine cannot run are refused at load, naming what is missing", () => {
  const copy = () => {
    const d = join(scratch(), "model");
    cpSync(dir, d, { recursive: true });
    return d;
  };
  const load = (d: string) => DiffusionPipeline.load(d, { device: "cpu", threads: 1 });

  test("an SDXL export (onnxruntime/sdxl-turbo's layout: text_encoder_2/, tokenizer_2/)", async () => {
    const d = copy();
    for (const sub of ["text_encoder_2", "tokenizer_2"]) {
      mkdirSync(join(d, sub));
      cpSync(join(d, sub.replace("_2", "")), join(d, sub), { recursive: true });
    }
    await expect(load(d)).rejects.toThrow(/an SDXL pipeline \(text_encoder_2\/, tokenizer_2\/\) is not supported: .*text_embeds and time_ids/);
  });

  test("a tokenizer folder with neither tokenizer.json nor vocab.json + merges.txt", async () => {
    const d = copy();
    rmSync(join(d, "tokenizer/merges.txt"));
    await expect(load(d)).rejects.toThrow("tokenizer/tokenizer.json is missing (nor are CLIP's tokenizer/vocab.json and tokenizer/merges.txt there)");
  });
});
