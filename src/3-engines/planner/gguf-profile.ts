import { statSync } from "node:fs";
import { GgmlType, GgufInsights, readGgufFileInfo, type GgufFileInfo, type Llama } from "node-llama-cpp";
import { vulkanMaxTensorBytes } from "./devices";
import type { DeviceKind, Footprint, LoadSettings, ModelProfile } from "./types";
import { fileVersion, noParts, toFootprint, VersionCache, type Parts } from "./footprint";
import { ggufVerdict, withSplitParts } from "../gguf-check";

// A chat model's memory, read from its GGUF's header and tensor table (no weights are read), for
// the settings the chat engine loads it with (src/3-engines/llama/chat-engine.ts doLoad):
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
// A CPU placement (no layer offloaded) inside a GPU runtime is not GPU-free: ggml's scheduler runs
// every operation of a micro-batch of 32 tokens or more whose weights are in RAM on the GPU
// (`op_offload`, which node-llama-cpp leaves on), copying the weights and K/V over, so llama.cpp
// reserves a GPU compute buffer for it. Measured on llvmpipe (Vulkan0 compute buffer, batch 512,
// one sequence): the tiny model 5.3 MiB at 4k tokens, 19.5 at 16k; long-chat 76.5 at 64k (its
// f16 KQ mask is 64 of them); bench-64m 24.6 at 4k, 20.0 at 1k × 4, 8.1 with a batch of 128 and
// 0.06 with one of 16 (below the offload threshold); qwen3-1.7b's shapes 61 at 4k, 130 at 16k.
// The dry run reproduces each to the 0.01 MiB; from dimensions it is the full offload's graph plus
// one layer's K and V copied over (-9% to +15% on these). Its host side is the inputs alone.
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
  /** false: estimate from the dimensions even with a GPU runtime at hand (tests compare both). */
  dryRun?: boolean;
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
/** ggml offloads an operation on RAM-held weights to the GPU from this many tokens in a micro-batch (CUDA's and Vulkan's op_offload_min_batch_size). */
const OFFLOAD_MIN_BATCH = 32;
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
 * On a GPU the host keeps the mask and the token embeddings it computes (token_embd stays in RAM),
 * and the logits where the device cannot hold them or the output weight (`logitsOnHost`: ggml
 * runs an operation on a tensor over the device's limit on the CPU).
 */
function analyticCompute(s: Shape, o: { gpuLayers: number; layers: number; ub: number; kv: number; slots: number; blockBytes: number; gpuRuntime: boolean; logitsOnHost: boolean }): { gpu: number; cpu: number } {
  const { ub, kv } = o;
  const q = s.heads * s.headK;
  const kvw = s.kvHeads * (s.headK + s.headV);
  const block = Math.max(3 * s.ff + 4 * s.embd, 2 * q + kvw + 2 * s.embd) * ub * F32;
  const mask = s.flash ? kv * pad(ub, 64) * 2 : kv * ub * F32 * (1 + s.heads);
  const logits = (s.vocab + 2 * s.embd) * ub * F32;
  const cpuGraph = Math.max(block + mask, logits);
  const graph = o.logitsOnHost ? block + mask : cpuGraph;
  const host = (s.flash ? kv * pad(ub, 64) * 2 : kv * ub * F32) + 2 * s.embd * ub * F32 + (o.logitsOnHost ? logits : 0);
  if (o.gpuLayers === 0) {
    if (!o.gpuRuntime || ub < OFFLOAD_MIN_BATCH) return { gpu: 0, cpu: cpuGraph };
    // a CPU placement in a GPU runtime: the graph on the GPU, with one layer's K and V (RAM-held) copied over
    return { gpu: graph + kv * o.slots * s.kvHeads * (s.headK + s.headV) * 2, cpu: host };
  }
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

/**
 * The offloadable weights larger than `limit` bytes and their layer (a block's index; the output
 * layer's is `blocks`), sized by their offsets in the file (the last of a split file's later parts
 * is left out: its part's size is not at hand). Input-layer weights are in RAM anyway.
 */
function oversizedWeights(info: GgufFileInfo, path: string, limit: number, blocks: number): { layer: number; bytes: number }[] {
  const tensors = [...(info.fullTensorInfo ?? [])].sort((a, b) => (a.filePart ?? 1) - (b.filePart ?? 1) || (a.fileOffset as number) - (b.fileOffset as number));
  const end = statSync(path).size;
  const out: { layer: number; bytes: number }[] = [];
  tensors.forEach((t, i) => {
    const block = /^blk\.(\d+)\./.exec(t.name);
    if (!block && !t.name.startsWith("output")) return;
    const next = tensors[i + 1];
    const part = t.filePart ?? 1;
    const stop = next && (next.filePart ?? 1) === part ? Number(next.fileOffset) : part === 1 ? end : null;
    if (stop === null || stop - Number(t.fileOffset) <= limit) return;
    out.push({ layer: block ? Number(block[1]) : blocks, bytes: stop - Number(t.fileOffset) });
  });
  return out;
}

const fileInfos = new VersionCache<GgufFileInfo>();
// The header checked first (src/3-engines/gguf-check.ts): node-llama-cpp's reader loops on a corrupt file's counts.
const readInfo = (path: string) =>
  fileInfos.get(fileVersion(path), async () => {
    for (const part of withSplitParts(path)) await ggufVerdict(part);
    return readGgufFileInfo(path, { readTensorInfo: true, logWarnings: false });
  });

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
  const runtimeGpu: DeviceKind | undefined = o.llama?.gpu === "cuda" || o.llama?.gpu === "vulkan" ? o.llama.gpu : undefined;
  const simulate = o.dryRun !== false && o.llama !== undefined && o.llama.gpu !== false && typeof internals._simulateContextResourceUsage === "function";
  // ggml's Vulkan backend cannot run an operation on a tensor larger than the device allows (its
  // largest storage buffer; devices.ts reads it, else the spec's 128 MiB) and llama.cpp aborts the
  // process when a cache tensor is, in a dry run as in a real load (llvmpipe: a 128 MiB K loads,
  // 128 MiB + 256 tokens' worth aborts). A dry run is not risked past it: those settings are
  // estimated from the dimensions (and the fitter never chooses them for the device).
  const vulkanLimit = o.llama?.gpu === "vulkan" ? vulkanMaxTensorBytes() : Infinity;
  // llama.cpp keeps a weight larger than the device allows a tensor in RAM (llama-model.cpp asks the
  // device whether it can run the weight's operation; measured on llvmpipe: qwen3-1.7b's 243 MiB
  // output.weight stays in RAM, its Vulkan0 model buffer is 807 MiB where the whole split says 1,050).
  const heldBack = vulkanLimit < Infinity ? oversizedWeights(info, modelPath, vulkanLimit, shape.blocks) : [];
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

  // One layer's K (or V) for every sequence: llama.cpp's cache tensor is [embd_gqa, cells per sequence, sequences], f16.
  const kvTensor = (cells: number) => cells * shape.kvHeads * Math.max(shape.headK, shape.headV) * 2;

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
    // a weight of layer `il` is offloaded when il >= blocks + 1 - g (the output layer is il = blocks)
    const kept = heldBack.reduce((n, t) => n + (t.layer >= shape.blocks + 1 - g ? t.bytes : 0), 0);
    gpu.weights = w.gpuVram - kept;
    cpu.weights = w.cpuRam + kept;
    const kv = kvSplit(g, cells, slots, batch);
    gpu.cache = kv.gpu;
    cpu.cache = kv.cpu;
    let done = false;
    const largestTensor = Math.max(kvTensor(cells), context * pad(batch, 64) * (shape.flash ? 2 : 4));
    if (simulate && largestTensor <= vulkanLimit) {
      const r = await internals._simulateContextResourceUsage!.call(insights, { contextSize: context, modelGpuLayers: g, batchSize: batch, sequences: slots, flashAttention: "auto" }).catch(() => null);
      if (r) {
        gpu.compute = Math.max(0, r.gpuVram - kv.gpu);
        cpu.compute = Math.max(0, r.cpuRam - kv.cpu);
        done = true;
      }
    }
    if (!done) {
      const logitsOnHost = heldBack.some((t) => t.layer === shape.blocks) || shape.vocab * batch * F32 > vulkanLimit;
      const c = analyticCompute(shape, { gpuLayers: g, layers, ub: batch, kv: context, slots, blockBytes, gpuRuntime: runtimeGpu !== undefined, logitsOnHost });
      gpu.compute = c.gpu;
      // the host's logits buffer: one row per sequence (llama.cpp's output_reserve)
      cpu.compute = c.cpu + shape.vocab * slots * F32;
    }
    if (projector) (g > 0 ? gpu : cpu).projector = projector.weights + projector.compute;
    return toFootprint(gpu, cpu);
  };

  const profile: ModelProfile = {
    kind: "chat",
    layers,
    trainedContext: insights.trainContextSize,
    fileBytes: statSync(modelPath).size + (o.projectorPath ? statSync(o.projectorPath).size : 0),
    footprint,
    runtimeGpu,
    // The K and V caches of offloaded blocks are on the device (the output layer is the first offloaded).
    largestTensorBytes: (s) => (s.device !== "cpu" && s.gpuLayers >= 2 ? kvTensor(pad(Math.max(1, s.contextSize), PAD) * Math.max(1, Math.floor(s.slots))) : 0),
  };
  return profile;
}
