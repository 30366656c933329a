import { statSync } from "node:fs";
import { GgmlType, GgufInsights, readGgufFileInfo, type GgufFileInfo, type Llama } from "node-llama-cpp";
import type { Footprint, LoadSettings, ModelProfile } from "./types";
import { fileVersion, noParts, toFootprint, VersionCache, type Parts } from "./footprint";

// A chat model's memory, read from its GGUF's header and tensor table (no weights are read), for
// the settings the chat engine loads it with (src/engines/llama/chat-engine.ts doLoad):
// `gpuLayers` layers offloaded, a context of `contextSize` tokens for each of `slots` sequences
// (node-llama-cpp gives every sequence its own cells: contextSize × slots in all, each padded to
// 256), flash attention "auto", f16 K and V, and node-llama-cpp's batch (min(cells, 512), which
// is also llama.cpp's micro-batch: its addon sets n_ubatch = n_batch).
//
//   weights   each tensor's bytes where llama.cpp puts it: the token embedding always in RAM, the
//             last `gpuLayers - 1` blocks and the output layer on the GPU (GgufInsights' split,
//             which is llama.cpp's `i_gpu_start = n_layer + 1 - n_gpu_layers`)
//   cache     K and V for every layer's cells, on the device of its layer (sliding-window layers
//             hold only their window; GgufInsights' per-layer account)
//   compute   llama.cpp's compute buffers. With a GPU runtime at hand (`llama`), llama.cpp's own
//             dry run: it builds the model and context without allocating (no_alloc) and reports
//             each buffer (GgufInsights' simulation): exact for that backend. Without one, the
//             largest set of activations alive at once in the graph llama.cpp reserves (below).
//   projector the mmproj's tensors, plus the vision tower's activations for one image; on the GPU
//             when layers are (the engine's `useGpu: device !== "cpu"`)
//
// node-llama-cpp's other estimator (estimateContextResourceRequirements, "V1") fits its graph
// term per architecture: on the generated qwen3 models it under-counts the compute buffer by ~30%
// with flash attention and over-counts it 2-8x without; V2 is the dry run above, which needs a
// Llama whose backend is the GPU (a backend-less Llama dry-runs a CPU placement).

export interface GgufProfileOptions {
  /** The mmproj GGUF of a vision model. */
  projectorPath?: string;
  /** The chat engine's runtime. With a GPU backend, compute buffers come from llama.cpp's dry run. */
  llama?: Llama;
  /** The manifest's batch_size, when set (the engine passes it to createContext). */
  batchSize?: number;
}

/** node-llama-cpp 3.22.1 internals used here; each use checks that it is there. */
interface InsightsInternals {
  _estimateContextCacheMemorySplitInBytes?(o: {
    fullAttentionKvSize: number;
    swaKvSize: number;
    sequences: number;
    totalFileLayers: number;
    finalModelGpuLayers: number;
    usingGpu: boolean;
    flashAttention: boolean;
    kvCacheKeyType: GgmlType;
    kvCacheValueType: GgmlType;
  }): { gpuKVCacheSize: number; cpuKVCacheSize: number; gpuRecurrentStateSize: number; cpuRecurrentStateSize: number };
  _simulateContextResourceUsage?(o: {
    contextSize: number;
    modelGpuLayers: number;
    batchSize: number;
    sequences: number;
    flashAttention: "auto";
  }): Promise<{ cpuRam: number; gpuVram: number } | null>;
}

const PAD = 256; // llama.cpp pads a context's cells to 256 (node-llama-cpp's contextSizePad)
/**
 * ggml's Vulkan backend cannot run an operation on a tensor larger than the device's largest
 * storage buffer, and llama.cpp aborts the process when it meets one, in a dry run as in a real
 * load (measured on llvmpipe: a layer's K of 192 MiB aborts, 128 MiB does not). A dry run is not
 * risked on Vulkan past this size: those settings are estimated from the dimensions instead.
 */
const VULKAN_SAFE_TENSOR = 128 * 1024 * 1024;
const pad = (n: number, to: number) => Math.ceil(n / to) * to;
const F32 = 4;

type Meta = Record<string, any>;

/** The dimensions the compute estimate needs, from the architecture's metadata. */
interface Shape {
  blocks: number;
  embd: number;
  ff: number;
  heads: number;
  kvHeads: number;
  headK: number;
  headV: number;
  vocab: number;
  flash: boolean;
}

const maxOf = (v: unknown, fallback: number): number => {
  if (typeof v === "number" && Number.isFinite(v)) return v;
  if (Array.isArray(v) && v.length) return Math.max(...v.map(Number));
  return fallback;
};

function shapeOf(info: GgufFileInfo, insights: GgufInsights): Shape {
  const a = info.architectureMetadata as Meta;
  const embd = maxOf(a.embedding_length, 0);
  const heads = maxOf(a.attention?.head_count, 1);
  const kvHeads = maxOf(a.attention?.head_count_kv, heads);
  const headK = maxOf(a.attention?.key_length, heads ? embd / heads : 0);
  const headV = maxOf(a.attention?.value_length, heads ? embd / heads : 0);
  // Mixture of experts: each token goes through expert_used_count experts' feed-forward.
  const experts = maxOf(a.expert_count, 0);
  const ff = experts > 0 ? maxOf(a.expert_used_count, 2) * maxOf(a.expert_feed_forward_length, maxOf(a.feed_forward_length, 4 * embd)) + experts : maxOf(a.feed_forward_length, 4 * embd);
  const tokens = (info.metadata as Meta).tokenizer?.ggml?.tokens;
  return {
    blocks: insights.totalLayers - 1,
    embd,
    ff,
    heads,
    kvHeads,
    headK,
    headV,
    vocab: maxOf(a.vocab_size, Array.isArray(tokens) ? tokens.length : 32000),
    flash: insights.flashAttentionSupported,
  };
}

/**
 * Compute buffers without a dry run, from what llama.cpp's graph allocator keeps alive at its peak
 * for one micro-batch of `ub` tokens against `kv` cells per sequence (fitted to llama.cpp 3.22.1's
 * dry runs on the generated qwen3 models, Vulkan and CPU backends; within ~15% of the compute
 * part there, conservative more often than not):
 *   a block        feed-forward: gate, up and their product plus two embedding-wide tensors
 *                  (3·ff + 4·embd floats a token), or attention: Q twice, K and V once, two
 *                  embedding-wide (2·q + k + v + 2·embd); plus the KQ mask (f16 [kv, ub] with flash
 *                  attention; without it f32, and the f32 KQ scores of every head)
 *   the output     logits of every token of the micro-batch (vocab + 2·embd floats a token)
 *   partial offload  one block's weights more on the GPU: the scheduler copies CPU-held weights
 *                  over for the big matrix products of a prompt
 * On a GPU the host keeps the mask and the token embeddings it computes (token_embd stays in RAM).
 */
function analyticCompute(s: Shape, o: { gpuLayers: number; layers: number; ub: number; kv: number; blockBytes: number }): { gpu: number; cpu: number } {
  const { ub, kv } = o;
  const q = s.heads * s.headK;
  const kvw = s.kvHeads * (s.headK + s.headV);
  const block = Math.max(3 * s.ff + 4 * s.embd, 2 * q + kvw + 2 * s.embd) * ub * F32;
  const mask = s.flash ? kv * pad(ub, 64) * 2 : kv * ub * F32 * (1 + s.heads);
  const logits = (s.vocab + 2 * s.embd) * ub * F32;
  const graph = Math.max(block + mask, logits);
  if (o.gpuLayers === 0) return { gpu: 0, cpu: graph };
  const host = (s.flash ? kv * pad(ub, 64) * 2 : kv * ub * F32) + 2 * s.embd * ub * F32;
  return { gpu: graph + (o.gpuLayers < o.layers ? o.blockBytes : 0), cpu: host };
}

/** The vision tower's activations for one image: its patches through a block (flash attention: no scores). */
function projectorCompute(mm: GgufFileInfo): number {
  const v = (mm.metadata as Meta).clip?.vision ?? {};
  const side = maxOf(v.image_size, 0);
  const patch = maxOf(v.patch_size, 0);
  const embd = maxOf(v.embedding_length, 0);
  if (!side || !patch || !embd) return 0;
  const patches = (side / patch) ** 2;
  return patches * (3 * maxOf(v.feed_forward_length, 4 * embd) + 4 * embd) * F32;
}

const fileInfos = new VersionCache<GgufFileInfo>();
const readInfo = (path: string) => fileInfos.get(fileVersion(path), () => readGgufFileInfo(path, { readTensorInfo: true, logWarnings: false }));

/** Insights hold their Llama (the dry runs run on it): one cache per Llama, and one for none. */
const insightsByLlama = new WeakMap<object, VersionCache<GgufInsights>>();
const noLlama = {};
function insightsFor(path: string, llama: Llama | undefined): Promise<GgufInsights> {
  const owner = llama ?? noLlama;
  let cache = insightsByLlama.get(owner);
  if (!cache) insightsByLlama.set(owner, (cache = new VersionCache(32)));
  return cache.get(fileVersion(path), async () => GgufInsights.from(await readInfo(path), llama));
}

export async function profileGguf(modelPath: string, o: GgufProfileOptions = {}): Promise<ModelProfile> {
  const info = await readInfo(modelPath);
  const insights = await insightsFor(modelPath, o.llama);
  const internals = insights as unknown as InsightsInternals;
  const mm = o.projectorPath ? await readInfo(o.projectorPath) : null;
  const mmInsights = mm && o.projectorPath ? await insightsFor(o.projectorPath, o.llama) : null;
  const projector = mmInsights ? { weights: mmInsights.modelSize, compute: projectorCompute(mm!) } : null;
  const shape = shapeOf(info, insights);
  const layers = insights.totalLayers;
  const simulate = o.llama !== undefined && o.llama.gpu !== false && typeof internals._simulateContextResourceUsage === "function";
  // One block's weights: what the second offloaded layer adds to the first (the output layer).
  const split = (g: number) => insights.estimateModelResourceRequirements({ gpuLayers: g });
  const blockBytes = layers > 2 ? split(2).gpuVram - split(1).gpuVram : split(layers).gpuVram;

  const kvSplit = (g: number, cells: number, slots: number, batch: number) => {
    const swa = insights.swaSize;
    // Each sequence keeps its own window (llama-kv-cache-iswa.cpp: node-llama-cpp's contexts are not unified).
    const swaCells = swa && swa < cells / slots && (insights.trainContextSize ?? Infinity) > swa ? Math.min(cells, slots * pad(Math.min(cells / slots, swa + batch + 1), PAD)) : cells;
    const est = internals._estimateContextCacheMemorySplitInBytes;
    if (typeof est === "function") {
      const r = est.call(insights, {
        fullAttentionKvSize: cells,
        swaKvSize: swaCells,
        sequences: slots,
        totalFileLayers: shape.blocks,
        finalModelGpuLayers: g,
        usingGpu: g > 0,
        flashAttention: shape.flash,
        kvCacheKeyType: GgmlType.F16,
        kvCacheValueType: GgmlType.F16,
      });
      return { gpu: r.gpuKVCacheSize + r.gpuRecurrentStateSize, cpu: r.cpuKVCacheSize + r.cpuRecurrentStateSize };
    }
    // Without the internal: every block a full-attention layer, f16 K and V.
    const perLayer = cells * shape.kvHeads * (shape.headK + shape.headV) * 2;
    const onGpu = Math.max(0, Math.min(shape.blocks, g - 1));
    return { gpu: onGpu * perLayer, cpu: (shape.blocks - onGpu) * perLayer };
  };

  const memo = new Map<string, Promise<Footprint>>();
  const footprint = async (s: LoadSettings): Promise<Footprint> => {
    const g = s.device === "cpu" ? 0 : Math.max(0, Math.min(layers, Math.floor(s.gpuLayers)));
    const context = pad(Math.max(1, s.contextSize), PAD);
    const slots = Math.max(1, Math.floor(s.slots));
    const key = `${g}/${context}/${slots}`;
    let hit = memo.get(key);
    if (!hit) {
      if (memo.size >= 4096) memo.clear(); // fits ask tens each; a long-running server asks many
      memo.set(key, (hit = compute(g, context, slots)));
    }
    return hit;
  };

  const compute = async (g: number, context: number, slots: number): Promise<Footprint> => {
    const cells = context * slots;
    // node-llama-cpp's default batch (getDefaultContextBatchSize), at least one token per sequence
    const batch = Math.max(o.batchSize ?? Math.min(cells, 512), slots);
    const gpu: Parts = noParts();
    const cpu: Parts = noParts();
    const w = split(g);
    gpu.weights = w.gpuVram;
    cpu.weights = w.cpuRam;
    const kv = kvSplit(g, cells, slots, batch);
    gpu.cache = kv.gpu;
    cpu.cache = kv.cpu;
    let done = false;
    const largestTensor = Math.max(cells * shape.kvHeads * Math.max(shape.headK, shape.headV) * 2, context * pad(batch, 64) * (shape.flash ? 2 : 4));
    if (simulate && g > 0 && (o.llama!.gpu !== "vulkan" || largestTensor <= VULKAN_SAFE_TENSOR)) {
      const r = await internals._simulateContextResourceUsage!.call(insights, { contextSize: context, modelGpuLayers: g, batchSize: batch, sequences: slots, flashAttention: "auto" }).catch(() => null);
      if (r) {
        gpu.compute = Math.max(0, r.gpuVram - kv.gpu);
        cpu.compute = Math.max(0, r.cpuRam - kv.cpu);
        done = true;
      }
    }
    if (!done) {
      const c = analyticCompute(shape, { gpuLayers: g, layers, ub: batch, kv: context, blockBytes });
      gpu.compute = c.gpu;
      // the host's logits buffer: one row per sequence (llama.cpp's output_reserve)
      cpu.compute = c.cpu + shape.vocab * slots * F32;
    }
    if (projector) (g > 0 ? gpu : cpu).projector = projector.weights + projector.compute;
    return toFootprint(gpu, cpu);
  };

  return {
    kind: "chat",
    layers,
    trainedContext: insights.trainContextSize,
    fileBytes: statSync(modelPath).size + (o.projectorPath ? statSync(o.projectorPath).size : 0),
    footprint,
  };
}
