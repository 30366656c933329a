import type { Dtype, Pooling } from "./model-folder";
import { normalise, poolAndNormalise, softmax } from "./pooling";
import type { OnnxBackend } from "../onnx-device";
import { sessionOptions, transformersRuntime } from "./runtime";

// The worker thread that owns one model's ONNX session. onnxruntime-node's run() computes on the
// calling thread, so on the main thread every batch would stall the whole server (chat streams
// included); here the main thread keeps serving, and requests that arrive during a run form the
// next batch. Messages: load → loaded | failed; run → result | failed; unload → unloaded.
// Pooling (embeddings), softmax (classifier) and the relevance (reranker) happen here too: only
// results go back.

export type Head =
  | { task: "embedding"; pooling: Pooling }
  | { task: "classifier"; logitIndex: [number, number, number] }
  /** One value per pair: sigmoid of the one logit, or the softmax probability of logit `positive` of two. */
  | { task: "reranker"; logits: 1 | 2; positive: number };

export interface LoadMessage {
  type: "load";
  folder: string;
  device: OnnxBackend;
  threads: number;
  dtype: Dtype;
  padId: number;
  head: Head;
}

export interface RunMessage {
  type: "run";
  id: number;
  /** Token ids of all sequences, concatenated; `lengths` splits them. */
  ids: Int32Array;
  lengths: Int32Array;
  /** token_type_ids in the same layout, when any is non-zero. */
  types: Uint8Array | null;
  /** Padded tokens per model call (the batch is length-sorted and split). */
  callTokens: number;
}

export type WorkerRequest = LoadMessage | RunMessage | { type: "unload" };

export type WorkerReply =
  | { type: "loaded"; device: OnnxBackend; fallback?: string }
  | { type: "result"; id: number; width: number; data: Float32Array | Float64Array; calls: number }
  | { type: "failed"; id: number | null; message: string }
  | { type: "unloaded" };

declare const self: Worker;

let model: any = null;
let config: LoadMessage | null = null;
let T: Awaited<ReturnType<typeof transformersRuntime>> | null = null;

const reply = (m: WorkerReply, transfer: Transferable[] = []) => self.postMessage(m, transfer);

// Messages are handled one at a time: a run's model calls yield to the event loop between them, and
// an unload arriving then must wait for the run, not dispose of the session under it.
let queue: Promise<void> = Promise.resolve();
self.onmessage = (event: MessageEvent<WorkerRequest>) => {
  queue = queue.then(() => handle(event.data));
};

async function handle(m: WorkerRequest): Promise<void> {
  if (m.type === "load") {
    try {
      reply({ type: "loaded", ...(await load(m)) });
    } catch (e) {
      reply({ type: "failed", id: null, message: (e as Error).message });
    }
  } else if (m.type === "run") {
    try {
      const { width, data, calls } = await run(m);
      reply({ type: "result", id: m.id, width, data, calls }, [data.buffer]);
    } catch (e) {
      reply({ type: "failed", id: m.id, message: (e as Error).message });
    }
  } else {
    await model?.dispose().catch(() => {});
    model = null;
    reply({ type: "unloaded" });
  }
}

async function load(m: LoadMessage): Promise<{ device: OnnxBackend; fallback?: string }> {
  T = await transformersRuntime();
  const Auto = m.head.task === "embedding" ? T.AutoModel : T.AutoModelForSequenceClassification;
  const open = (device: OnnxBackend) =>
    Auto.from_pretrained(m.folder, { local_files_only: true, device, dtype: m.dtype, session_options: sessionOptions(device, m.threads) });
  let fallback: string | undefined;
  try {
    model = await open(m.device);
  } catch (e) {
    // CUDA wanted but unusable (provider, driver): CPU rather than no model; the main thread logs it.
    // WebGPU is only ever asked for by name: its failure is the load's failure.
    if (m.device !== "cuda") throw e;
    fallback = (e as Error).message;
    model = await open("cpu");
  }
  config = m;
  return { device: fallback ? "cpu" : m.device, fallback };
}

interface Row {
  ids: Int32Array;
  types: Uint8Array | null;
}

/**
 * One batch: sorted by length and run as consecutive calls of at most `callTokens` padded tokens
 * each (on CPU one call padded to the longest sequence is no faster than single runs: see
 * factory.ts), results put back in batch order.
 */
async function run(m: RunMessage): Promise<{ width: number; data: Float32Array | Float64Array; calls: number }> {
  if (!model || !config) throw new Error("model is not loaded");
  const rows: Row[] = [];
  for (let r = 0, at = 0; r < m.lengths.length; r++) {
    const n = m.lengths[r]!;
    rows.push({ ids: m.ids.subarray(at, at + n), types: m.types?.subarray(at, at + n) ?? null });
    at += n;
  }
  const order = rows.map((_, i) => i).sort((a, b) => rows[a]!.ids.length - rows[b]!.ids.length);
  let data: Float32Array | Float64Array | null = null;
  let width = 0;
  let calls = 0;
  for (let i = 0; i < order.length; ) {
    let j = i + 1;
    while (j < order.length && (j - i + 1) * rows[order[j]!]!.ids.length <= m.callTokens) j++;
    const part = order.slice(i, j);
    const out = await forward(part.map((k) => rows[k]!));
    calls++;
    width = out.width;
    data ??= out.data instanceof Float64Array ? new Float64Array(rows.length * width) : new Float32Array(rows.length * width);
    part.forEach((k, p) => data!.set(out.data.subarray(p * width, (p + 1) * width), k * width));
    i = j;
  }
  return { width, data: data ?? new Float32Array(0), calls };
}

/** One call of the model on `rows`, right-padded to the longest. */
async function forward(rows: Row[]): Promise<{ width: number; data: Float32Array | Float64Array }> {
  const seq = Math.max(...rows.map((r) => r.ids.length));
  const ids = new BigInt64Array(rows.length * seq).fill(BigInt(config!.padId));
  const mask = new BigInt64Array(rows.length * seq);
  const types = new BigInt64Array(rows.length * seq);
  rows.forEach((row, r) => {
    for (let i = 0; i < row.ids.length; i++) {
      ids[r * seq + i] = BigInt(row.ids[i]!);
      mask[r * seq + i] = 1n;
      if (row.types) types[r * seq + i] = BigInt(row.types[i]!);
    }
  });
  const dims = [rows.length, seq];
  const out = await model({
    input_ids: new T!.Tensor("int64", ids, dims),
    attention_mask: new T!.Tensor("int64", mask, dims),
    token_type_ids: new T!.Tensor("int64", types, dims),
  });
  const head = config!.head;
  if (head.task === "embedding") return embeddings(out, head.pooling, rows.map((r) => r.ids.length));
  return head.task === "classifier" ? probabilities(out, head.logitIndex) : relevance(out, head.logits, head.positive);
}

function embeddings(out: Record<string, { data: Float32Array; dims: number[] }>, pooling: Pooling, lengths: number[]) {
  const states = out.last_hidden_state ?? out.token_embeddings;
  if (states) return flatten(poolAndNormalise(states.data, states.dims, lengths, pooling), states.dims[2]!);
  // Exports with the pooling inside the graph (sentence-transformers ONNX) give the vector itself.
  const pooled = out.sentence_embedding;
  if (!pooled) throw new Error("the model has no last_hidden_state, token_embeddings or sentence_embedding output");
  const width = pooled.dims[1]!;
  return flatten(lengths.map((_, b) => normalise(pooled.data.slice(b * width, (b + 1) * width))), width);
}

/** Softmax per row, reordered to the API's [contradiction, entailment, neutral]. */
function probabilities(out: Record<string, { data: Float32Array; dims: number[] }>, logitIndex: [number, number, number]) {
  const logits = out.logits;
  if (!logits) throw new Error("the model has no logits output");
  const [rows, classes] = logits.dims as [number, number];
  const data = new Float64Array(rows * 3);
  for (let b = 0; b < rows; b++) {
    const p = softmax(logits.data.subarray(b * classes, (b + 1) * classes));
    logitIndex.forEach((i, k) => (data[b * 3 + k] = p[i]!));
  }
  return { width: 3, data };
}

/**
 * A cross-encoder's relevance per row, in [0, 1]: the sigmoid of its one logit (bge-reranker,
 * ms-marco cross-encoders: sentence-transformers' CrossEncoder applies the same), or with two
 * labels the softmax probability of the positive one (model-folder.ts says which). Computed in
 * float64 from the float32 logits.
 */
function relevance(out: Record<string, { data: Float32Array; dims: number[] }>, logits: 1 | 2, positive: number) {
  const t = out.logits;
  if (!t) throw new Error("the model has no logits output");
  const [rows, width] = t.dims as [number, number];
  if (width !== logits) throw new Error(`the model's logits are [batch, ${width}], its config.json says ${logits}`);
  const data = new Float64Array(rows);
  for (let b = 0; b < rows; b++) {
    // softmax of two = sigmoid of their difference
    const x = logits === 1 ? t.data[b]! : t.data[b * 2 + positive]! - t.data[b * 2 + 1 - positive]!;
    data[b] = 1 / (1 + Math.exp(-x));
  }
  return { width: 1, data };
}

function flatten(vectors: Float32Array[], width: number) {
  const data = new Float32Array(vectors.length * width);
  vectors.forEach((v, b) => data.set(v, b * width));
  return { width, data };
}
