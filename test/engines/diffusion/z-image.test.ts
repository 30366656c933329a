import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { cpSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import * as ort from "onnxruntime-node";
import sharp from "sharp";
import { buildBpeVocab, encodeBpe } from "../../../models/gguf/bpe";
import { ensureZImageModel, Z_IMAGE_FILES, Z_IMAGE_PRESETS } from "../../../models/diffusion/z-image";
import { gaussianNoise } from "../../../src/3-engines/diffusion/noise";
import { DiffusionPipeline } from "../../../src/3-engines/diffusion/pipeline";
import { encodePng, toRgb } from "../../../src/3-engines/diffusion/png";
import { fromHalf, toHalf } from "../../../src/3-engines/diffusion/tensors";
import { ZImagePromptEncoder } from "../../../src/3-engines/diffusion/z-image-text-encoder";
import type { ImageRequest } from "../../../src/3-engines/types";
import { tempDir } from "../../helpers/app";

// The Z-Image-Turbo bundle layout (onnx/*_q4f16.onnx with external data, MatMulNBits, float16 I/O,
// Qwen3's tokenizer, no model_index.json) on the generated tiny bundle, in this thread.

const base: ImageRequest = { prompt: "a lighthouse at dusk", width: 256, height: 256, seed: 7, steps: 9 };
const same = (a: Uint8Array, b: Uint8Array) => Buffer.compare(Buffer.from(a), Buffer.from(b)) === 0;
const dir = ensureZImageModel("z-image-tiny");
let p: DiffusionPipeline;
beforeAll(async () => {
  p = await DiffusionPipeline.load(dir, { device: "cpu", threads: 1 });
});
afterAll(() => p.dispose());

test("the bundle is read as Z-Image: its transformer, Qwen3's 512-token window, the FLUX VAE's 16 channels", () => {
  expect(p.info).toEqual({ layout: "z-image", denoiser: "transformer", scheduler: "FlowMatchEulerDiscreteScheduler", latentChannels: 16, scaleFactor: 8, maxPromptTokens: 512, device: "cpu" });
});

test("makes a PNG of the requested size; the same request the same bytes; seed, prompt and steps change them", async () => {
  const a = await p.generate({ ...base, width: 320 });
  const m = await sharp(a).metadata();
  expect([m.format, m.width, m.height, m.channels]).toEqual(["png", 320, 256, 3]);
  expect((await sharp(a).stats()).channels[0]!.stdev).toBeGreaterThan(1);
  expect(same(a, await p.generate({ ...base, width: 320 }))).toBe(true);
  const b = await p.generate(base);
  for (const other of [{ seed: 8 }, { prompt: "a lighthouse at dawn" }, { steps: 4 }]) expect(same(b, await p.generate({ ...base, ...other }))).toBe(false);
});

test("the loop, restated from diffusers' ZImagePipeline and run on the bare graphs, gives the same bytes", async () => {
  // Prompt: Qwen3's chat template around one user turn, tokenised by the reference BPE encoder
  // (special tokens by id), fed as int64 ids with an all-ones mask.
  const vocab = buildBpeVocab({ vocabSize: Z_IMAGE_PRESETS["z-image-tiny"].vocabSize, minPairCount: 1 });
  const sp = vocab.special;
  const ids = [sp["<|im_start|>"], ...encodeBpe(vocab, `user\n${base.prompt}`), sp["<|im_end|>"], ...encodeBpe(vocab, "\n"), sp["<|im_start|>"], ...encodeBpe(vocab, "assistant\n")];
  const opts = { executionProviders: ["cpu"], intraOpNumThreads: 1, interOpNumThreads: 1, graphOptimizationLevel: "all" } as const;
  const [te, tr, vae] = await Promise.all([Z_IMAGE_FILES.textEncoder, Z_IMAGE_FILES.transformer, Z_IMAGE_FILES.vaeDecoder].map((f) => ort.InferenceSession.create(join(dir, f), opts)));
  const half = (v: Float32Array, dims: number[]) => {
    const t = new ort.Tensor("float16", toHalf(v), dims);
    if (!(t.data instanceof Uint16Array)) Object.defineProperty(t, "data", { value: toHalf(v) });
    return t;
  };
  const floats = (t: ort.Tensor) => (t.data instanceof Uint16Array ? fromHalf(t.data) : Float32Array.from(t.data as unknown as ArrayLike<number>));
  const int64 = (v: number[]) => new ort.Tensor("int64", BigInt64Array.from(v, BigInt), [1, v.length]);
  const hidden = (await te!.run({ input_ids: int64(ids), attention_mask: int64(ids.map(() => 1)) })).encoder_hidden_states!;
  const text = half(floats(hidden), [...hidden.dims]); // an fp16 output cannot be fed back as is under Bun (tensors.ts)

  // σ over linspace(1, 0, N) with shift 3, 0 appended; the transformer gets 1 − σ and predicts
  // −velocity: x ← x + (σ' − σ)·(−out). The last step (σ = σ' = 0) moves nothing.
  const N = base.steps;
  const sigma = (i: number) => (i >= N ? 0 : (3 * (1 - i / (N - 1))) / (1 + 2 * (1 - i / (N - 1))));
  const [h, w] = [base.height / 8, base.width / 8];
  const x = gaussianNoise(base.seed, 16 * h * w);
  let runs = 0;
  for (let i = 0; i < N; i++) {
    const dt = Math.fround(sigma(i + 1) - sigma(i));
    if (dt === 0) continue;
    const out = await tr!.run({ hidden_states: half(x, [1, 16, h, w]), timestep: half(new Float32Array([1 - sigma(i)]), [1]), encoder_hidden_states: text });
    runs++;
    const v = floats(out.sample!);
    for (let j = 0; j < x.length; j++) x[j] = x[j]! - dt * v[j]!;
  }
  expect(runs).toBe(N - 1);
  const image = (await vae!.run({ latent_sample: half(x.map((v) => v / 0.3611 + 0.1159), [1, 16, h, w]) })).sample!;
  const png = await encodePng(toRgb(floats(image), base.width, base.height), base.width, base.height);
  await Promise.all([te, tr, vae].map((s) => s!.release()));
  expect(same(png, await p.generate(base))).toBe(true);
});

test("the later contract ([b, 16, 1, h, w] → unified_results) runs too, to the same image", async () => {
  const five = await DiffusionPipeline.load(ensureZImageModel("z-image-tiny-5d"), { device: "cpu", threads: 1 });
  try {
    expect(same(await five.generate(base), await p.generate(base))).toBe(true);
  } finally {
    await five.dispose();
  }
});

describe("the prompt encoder", () => {
  let enc: ZImagePromptEncoder;
  beforeAll(async () => {
    enc = await ZImagePromptEncoder.load(join(dir, "tokenizer"), join(dir, Z_IMAGE_FILES.textEncoder), 512, { device: "cpu", threads: 1 });
  });
  afterAll(() => enc.dispose());

  test("a prompt is encoded unpadded; past 512 tokens it is cut at 512, as diffusers' max_sequence_length", async () => {
    const short = await enc.encode("a cat");
    expect(short.hiddenDims).toEqual([1, 13, 32]); // 13 tokens: the template's 11 and the prompt's 2
    expect(short.pooled).toBeNull();
    const long = await enc.encode("a very long prompt about boats ".repeat(200));
    expect(long.hiddenDims).toEqual([1, 512, 32]);
  });
});

describe("a bundle with a file missing is refused at load, naming it", () => {
  const broken = tempDir("appliance-z-image-broken-");
  afterAll(() => rmSync(broken, { recursive: true, force: true }));
  for (const gone of ["onnx/transformer_model_q4f16.onnx_data_1", "onnx/vae_decoder_model_f16.onnx", "tokenizer/tokenizer.json"]) {
    test(gone, async () => {
      const d = join(broken, gone.replace(/\W/g, "_"));
      cpSync(dir, d, { recursive: true });
      rmSync(join(d, gone));
      const e = await DiffusionPipeline.load(d, { device: "cpu", threads: 1 }).catch((x) => x);
      expect(e).toBeInstanceOf(Error);
      expect((e as Error).message).toContain(gone.endsWith("_data_1") ? "transformer_model_q4f16.onnx_data_1 is missing" : gone.startsWith("onnx/") ? "vae_decoder_model*.onnx is missing" : "tokenizer/tokenizer.json is missing");
    });
  }
});

test("the generated graphs use what the real bundle uses: MatMulNBits (com.microsoft) with float16 scales, external data in two files", () => {
  const graph = readFileSync(join(dir, Z_IMAGE_FILES.transformer)).toString("latin1");
  expect(graph).toContain("MatMulNBits");
  expect(graph).toContain("com.microsoft");
  expect(graph).toContain("transformer_model_q4f16.onnx_data_1");
  expect(readFileSync(join(dir, Z_IMAGE_FILES.textEncoder)).toString("latin1")).toContain("text_encoder_model_q4f16.onnx_data_1");
});
