import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join } from "node:path";
import { MAX_CLASSIFY_TOKENS, MAX_SIDE } from "../../lib/bounds";
import { isZImageBundle, readZImageBundle, Z_IMAGE_MAX_PROMPT_TOKENS } from "../diffusion/z-image-bundle";
import { readModelFolder } from "../diffusion/model-folder";
import { DEFAULT_BATCH_LIMITS } from "../transformers/micro-batcher";
import { readFolder, type Dtype } from "../transformers/model-folder";
import { fileVersion, MiB, noParts, toFootprint, VersionCache, type Parts } from "./footprint";
import { elemBytes, readGraphSummary, type GraphSummary } from "./onnx-graph";
import type { Footprint, LoadSettings, ModelProfile } from "./types";

// ONNX models' memory: what each engine loads, counted from the files, plus the activations ONNX
// Runtime's arena grows to for the engine's largest call, and each engine worker's own runtime.
// Weights are counted from the files (the graph file, the external data files its initializers
// name, the tokenizer held in memory; on the CPU ONNX Runtime holds them CPU_WEIGHT_COPIES over);
// activations are an estimate from the graph's and config's dimensions (what is approximate is said
// at each), times what the arena keeps of them (ARENA_REPEAT, VAE_ARENA).
//
// Embedding and classifier (src/3-engines/transformers): one worker thread, one session, whatever
// the manifest's slots; the graph is onnx/model.onnx, else model_quantized.onnx, else
// model_fp16.onnx (model-folder.ts dtypeOf). A call is a length-sorted run of at most
// `callTokens` padded tokens, and never less than one whole sequence: 256 on a CPU (factory.ts
// CPU_CALL_TOKENS), the batch's maxTokens (16,384) on a GPU. `contextSize` is the longest
// sequence (the engine's max tokens; a classifier's is capped at the API's 4,096).
//
// Image (src/3-engines/diffusion): `slots` workers, each with its own pipeline: text encoder,
// denoiser and VAE decoder sessions (engine.ts, pipeline.ts). `contextSize` is the image's side in
// pixels. Each session's arena keeps its own peak, so a worker's activations are the three added.
//
// Checked against what the engines really add to the process's RSS (test/planner/onnx-measure.test.ts:
// each generated model loaded by its own engine in a process of its own, its largest call made
// twice; 2 cores, onnxruntime-node 1.30, Bun 1.4.5; MB = MiB, the high-water mark over the load):
//   model (generated)                  settings       measured   before   now
//   embed (1 layer, 384, 6 MB)         512 tokens       84–86       23      96
//   embedder 2 layers × 768, 59 MB     1,024 tokens       424      179     435
//   embedder 4 layers × 768, 113 MB    1,024 tokens   545–548      233     570
//   nli (1 layer, 128, 4 heads)        2,048 tokens       332      139     328
//   nli                                4,096 tokens     1,145      529   1,108
//   diffusion-turbo, 1 worker          1,536 px       833–834      222     963
//   diffusion-turbo, 1 worker          512 px         152–153       26     151
// What the estimates missed, each measured:
//   - a worker's runtime (WORKER_RUNTIME): the thread, transformers.js and ONNX Runtime in it;
//   - on the CPU, the weights held about 2.5 times over (CPU_WEIGHT_COPIES);
//   - the arena: a session's second call of a shape takes its memory again (ARENA_REPEAT), and a
//     VAE decoder's first call already holds twice its live peak (VAE_ARENA).
// The live peaks themselves held: nli's 2,048 tokens took 139 MB on the first call, 134 estimated.
// On a GPU nothing was measured (no GPU here): the activations get the same arena factors, the
// weights are counted once. The tiny Z-Image bundle's transformer only cross-attends (the real one
// attends over image and caption tokens together, as estimated): at 1,536 px it took 910 MB, 1,404
// estimated.

/**
 * One engine worker before its weights, on the host: the worker thread with its own transformers.js
 * (a Bun worker with transformers.js imported: 14–18 MB), the session's intra-op thread pool and
 * allocator state, and the kernels' code and scratch the first call touches. Measured: the 6 MB
 * embed model's load and a first call of 16 tokens added 63–68 MB, of which its weights
 * (× CPU_WEIGHT_COPIES) 15; the 4 MB NLI model's with 24 tokens 52–60; an image worker's three tiny
 * sessions 43 at load. Per worker: an image model's slots each have one.
 */
export const WORKER_RUNTIME = 48 * MiB;

/**
 * RSS per byte of graph on the CPU. ONNX Runtime parses the file into memory, makes the initializers
 * tensors and prepacks every fp32 MatMul weight for MLAS (a second copy: with
 * session.disable_prepacking, a 113 MB graph's session took 139 MB instead of 212, in a worker,
 * without transformers.js); what the load frees stays in glibc's arenas (malloc_trim after the load
 * gave back only 25–70 MB of it). Measured through the embedding engine: load added 53–57 MB for a
 * 6 MB graph, 171–173 for 59 MB and 308–316 for 113 MB: 2.2–2.6 per byte beyond WORKER_RUNTIME.
 */
export const CPU_WEIGHT_COPIES = 2.5;

/**
 * A session's arena after repeated calls of the largest shape, per byte of one call's live
 * activations. ONNX Runtime's first call of a shape allocates each tensor from the BFC arena; from
 * the second on, it has a memory pattern for the shape and allocates the planned block as one more
 * chunk beside the first call's, which the arena keeps (it never shrinks). Measured with the NLI
 * model at 2,048 tokens: +139 MB after one call (134 estimated), +278 after two, +280 after four;
 * with enableMemPattern = false a VAE decoder stayed at its first call's 489 MB however many calls.
 */
export const ARENA_REPEAT = 2;

/**
 * The VAE decoder's arena per byte of the live peak imageActivations estimates: its tensors change
 * size at every step (channels and resolution), so the first call's chunks are not reused by the
 * next sizes and the arena holds 2.2–2.3 times the live peak after one image (the generated
 * decoder alone, at 512 to 1,536 px); the memory-pattern block comes on top, and with the arena
 * growing by powers of two the total after two or more images was 3.3× (768, 1,536 px) to 4.1×
 * (1,280 px). Never more after the second.
 */
export const VAE_ARENA = 4;

/** factory.ts CPU_CALL_TOKENS (not exported there): padded tokens per encoder call on a CPU. */
export const CPU_CALL_TOKENS = 256;
const F32 = 4;

interface Graph {
  path: string;
  /** The graph file and its external data files. */
  bytes: number;
  summary: GraphSummary;
}

const graphs = new VersionCache<Graph>(128);

/** A graph's bytes as ONNX Runtime reads them, and its summary (cached per file version). */
export function readGraph(path: string): Promise<Graph> {
  return graphs.get(fileVersion(path), async () => {
    const summary = readGraphSummary(path);
    let bytes = statSync(path).size;
    for (const name of summary.externalFiles) {
      const data = join(dirname(path), name);
      if (!existsSync(data)) throw new Error(`${path}: its external data file ${name} is missing`);
      bytes += statSync(data).size;
    }
    return { path, bytes, summary };
  });
}

const folderBytes = (dir: string): number =>
  existsSync(dir) ? readdirSync(dir, { withFileTypes: true }).reduce((n, e) => n + (e.isFile() ? statSync(join(dir, e.name)).size : 0), 0) : 0;

const readJson = (path: string): Record<string, any> => (existsSync(path) ? JSON.parse(readFileSync(path, "utf8")) : {});

const num = (v: unknown, fallback: number): number => (typeof v === "number" && Number.isFinite(v) && v > 0 ? v : Array.isArray(v) && typeof v[0] === "number" ? v[0] : fallback);

/** The last dimension of a graph output, when it is a number. */
const lastDim = (g: GraphSummary, names: string[]): number | undefined => {
  const o = g.outputs.find((x) => names.includes(x.name)) ?? g.outputs[0];
  const d = o?.dims[o.dims.length - 1];
  return typeof d === "number" && d > 0 ? d : undefined;
};

/** Score matrices exist where attention is computed by Softmax nodes rather than a fused operator. */
const unfused = (g: GraphSummary) => g.softmax > 0 && !g.fusedAttention;

/**
 * One transformer encoder call of `tokens` padded tokens in sequences of `length`: the widest
 * tensors of a block (intermediate + 4 hidden-wide, fp32) and, where attention is unfused, each
 * head's score matrix and its softmax (2 × tokens × heads × length floats).
 */
function encoderActivations(o: { tokens: number; length: number; hidden: number; intermediate: number; heads: number; graph: GraphSummary }): number {
  const block = o.tokens * (o.intermediate + 4 * o.hidden) * F32;
  const scores = unfused(o.graph) ? 2 * o.tokens * o.heads * o.length * F32 : 0;
  return block + scores;
}

const ONNX_SUFFIX: Record<Dtype, string> = { fp32: "", q8: "_quantized", fp16: "_fp16" };

/**
 * `weights` are the graphs' bytes; `host` is what stays in the process wherever the model computes:
 * the tokenizer (weights), the workers' runtimes and what they hold in their heaps (compute).
 */
function placed(device: LoadSettings["device"], weights: number, compute: number, host: { tokenizer: number; workers: number; compute?: number }): Footprint {
  const gpu: Parts = noParts();
  const cpu: Parts = noParts();
  // On a GPU, ONNX Runtime copies the initializers to the device and frees the host copies; on the
  // CPU it holds them CPU_WEIGHT_COPIES over. The tokenizer stays in the process's heap.
  if (device === "cpu") {
    cpu.weights = weights * CPU_WEIGHT_COPIES;
    cpu.compute = compute;
  } else {
    gpu.weights = weights;
    gpu.compute = compute;
  }
  cpu.weights += host.tokenizer;
  cpu.compute += host.workers * WORKER_RUNTIME + (host.compute ?? 0);
  return toFootprint(gpu, cpu);
}

/** An embedding, classifier or reranker model folder (HF layout) as the transformers engines load it. */
export async function profileEncoder(kind: "embedding" | "classifier" | "reranker", folder: string, o: { maxTokens?: number } = {}): Promise<ModelProfile> {
  const info = readFolder(folder);
  const graph = await readGraph(join(folder, "onnx", `model${ONNX_SUFFIX[info.dtype]}.onnx`));
  const tokenizer = statSync(join(folder, "tokenizer.json")).size;
  const hidden = info.hidden || lastDim(graph.summary, ["last_hidden_state", "token_embeddings"]) || 768;
  const intermediate = num(info.config.intermediate_size, 4 * hidden);
  const heads = num(info.config.num_attention_heads, Math.max(1, Math.round(hidden / 64)));
  // The classification service refuses items over 4,096 tokens whatever the model takes.
  const maxTokens = Math.min(info.maxTokens, o.maxTokens ?? Infinity, kind === "classifier" ? MAX_CLASSIFY_TOKENS : Infinity);
  return {
    kind,
    layers: 1,
    trainedContext: maxTokens,
    fileBytes: graph.bytes + tokenizer,
    footprint: async (s) => {
      // never longer than the engine serves (the manifest's max_context can be above it)
      const length = Math.max(1, Math.min(Math.floor(s.contextSize), maxTokens));
      const callTokens = s.device === "cpu" ? CPU_CALL_TOKENS : DEFAULT_BATCH_LIMITS.maxTokens;
      const act = encoderActivations({ tokens: Math.max(callTokens, length), length, hidden, intermediate, heads, graph: graph.summary });
      return placed(s.device, graph.bytes, ARENA_REPEAT * act, { tokenizer, workers: 1 });
    },
  };
}

interface ImageParts {
  text: Graph;
  denoiser: Graph;
  vae: Graph;
  tokenizerBytes: number;
  promptTokens: number;
  text_: { hidden: number; intermediate: number; heads: number };
  denoiserKind: "unet" | "transformer";
  denoiserConfig: Record<string, any>;
  /** The VAE config's block_out_channels; null: read from the graph. */
  vaeChannels: number[] | null;
  scaleFactor: number;
}

async function imageParts(dir: string): Promise<ImageParts> {
  if (isZImageBundle(dir)) {
    const b = readZImageBundle(dir);
    const [text, denoiser, vae] = await Promise.all([readGraph(b.textEncoderPath), readGraph(b.transformerPath), readGraph(b.vaeDecoderPath)]);
    // No configs in the bundle: the text encoder's width from its output, its feed-forward's from its
    // widest matrix (the token embedding, if wider: conservative).
    const hidden = lastDim(text.summary, ["encoder_hidden_states", "last_hidden_state"]) ?? 2560;
    const vc = readJson(join(dir, "vae/config.json"));
    return {
      text,
      denoiser,
      vae,
      tokenizerBytes: folderBytes(b.tokenizerDir),
      promptTokens: Z_IMAGE_MAX_PROMPT_TOKENS,
      text_: { hidden, intermediate: Math.max(text.summary.maxRows, hidden), heads: Math.max(1, Math.round(hidden / 128)) },
      denoiserKind: "transformer",
      denoiserConfig: readJson(join(dir, "transformer/config.json")),
      vaeChannels: Array.isArray(vc.block_out_channels) ? vc.block_out_channels : null,
      scaleFactor: b.vae.scaleFactor,
    };
  }
  const f = readModelFolder(dir);
  const [text, denoiser, vae] = await Promise.all([readGraph(join(f.textEncoderDir, "model.onnx")), readGraph(f.denoiser.path), readGraph(f.vaeDecoderPath)]);
  const tc = readJson(join(f.textEncoderDir, "config.json"));
  const hidden = num(tc.hidden_size, lastDim(text.summary, ["last_hidden_state"]) ?? 768);
  const vc = readJson(join(dir, "vae_decoder/config.json"));
  return {
    text,
    denoiser,
    vae,
    tokenizerBytes: folderBytes(f.tokenizerDir),
    promptTokens: num(tc.max_position_embeddings, 77),
    text_: { hidden, intermediate: num(tc.intermediate_size, 4 * hidden), heads: num(tc.num_attention_heads, Math.max(1, Math.round(hidden / 64))) },
    denoiserKind: f.denoiser.kind,
    denoiserConfig: readJson(join(dirname(f.denoiser.path), "config.json")),
    vaeChannels: Array.isArray(vc.block_out_channels) ? vc.block_out_channels : null,
    scaleFactor: f.vae.scaleFactor,
  };
}

/**
 * One image's memory at `side` pixels as a worker's arenas keep it after repeated images (live
 * peaks × ARENA_REPEAT, the VAE's × VAE_ARENA), plus the decoded image in the worker's heap (the
 * output tensor as floats, the RGB bytes, the PNG). The live peaks, per session (widths from the
 * configs, else from the graph's own weights; attention scores only where the graph computes them
 * unfused):
 *   text encoder  the prompt's tokens through a block (encoderActivations)
 *   UNet          at the top resolution, (side/8)² latent tokens: ~12 feature maps of the first
 *                 block's width (resnets, the skips kept for the up path), and each head's scores
 *   transformer   its tokens (latent patches + prompt), ~4 of its widest tensors each, and scores
 *   VAE decoder   the last up-blocks at full resolution (the second width once, the first twice)
 *                 and the mid-block's single-head attention over (side/8)² latents
 * Element size from the graph's sample input (fp16 bundles: 2 bytes).
 */
function imageActivations(p: ImageParts, side: number): { device: number; host: number } {
  const latent = Math.max(1, Math.ceil(side / p.scaleFactor));
  const n = latent * latent;
  const text = encoderActivations({ tokens: p.promptTokens, length: p.promptTokens, ...p.text_, graph: p.text.summary });
  const g = p.denoiser.summary;
  const sample = g.inputs.find((i) => i.name === "sample" || i.name === "hidden_states");
  const e = elemBytes(sample?.elemType ?? 1);
  const channels = typeof sample?.dims[1] === "number" ? sample.dims[1] : 4;
  const c = p.denoiserConfig;
  let denoiser: number;
  if (p.denoiserKind === "unet") {
    const width = num(c.block_out_channels, g.convWidths.find((w) => w > channels) ?? 320);
    const heads = num(c.attention_head_dim, 8);
    denoiser = e * (12 * n * width + (unfused(g) ? 2 * n * n * heads : 0));
  } else {
    const patch = num(c.patch_size, 2);
    const tokens = Math.ceil(n / (patch * patch)) + p.promptTokens;
    const width = c.num_attention_heads && c.attention_head_dim ? 4 * c.num_attention_heads * c.attention_head_dim : Math.max(g.maxRows, p.text_.hidden);
    const heads = num(c.num_attention_heads, Math.max(1, Math.round(p.text_.hidden / 128)));
    denoiser = e * (4 * tokens * width + (unfused(g) ? 2 * tokens * tokens * heads : 0));
  }
  const v = p.vae.summary;
  const ve = elemBytes(v.inputs.find((i) => i.name === "latent_sample")?.elemType ?? 1);
  const [c0 = 128, c1 = c0] = p.vaeChannels ?? v.convWidths.filter((w) => w > 3);
  const vae = ve * (side * side * (c1 + 2 * c0) + (unfused(v) ? n * n : 0));
  // the decoded image in the worker's heap: floats, RGB bytes, the PNG (at most a byte a channel)
  return { device: ARENA_REPEAT * (text + denoiser) + VAE_ARENA * vae, host: side * side * 3 * (4 + 1 + 1) };
}

/** A diffusers-style export folder or a Z-Image bundle, as the image engine loads it: a pipeline per worker. */
export async function profileImage(dir: string): Promise<ModelProfile> {
  const p = await imageParts(dir);
  const weights = p.text.bytes + p.denoiser.bytes + p.vae.bytes;
  return {
    kind: "image",
    layers: 1,
    trainedContext: MAX_SIDE,
    fileBytes: weights + p.tokenizerBytes,
    footprint: async (s) => {
      const workers = Math.max(1, Math.floor(s.slots));
      const act = imageActivations(p, Math.max(p.scaleFactor, Math.floor(s.contextSize)));
      return placed(s.device, workers * weights, workers * act.device, { tokenizer: workers * p.tokenizerBytes, workers, compute: workers * act.host });
    },
  };
}
