import { join } from "node:path";
import * as ort from "onnxruntime-node";
import { readRerankerFolder } from "../../src/3-engines/transformers/model-folder";
import type { TokenizedItem } from "../../src/3-engines/types";

// A cross-encoder run the bare way, as a reference for the reranker engine (tests) and its
// benchmark: one onnxruntime-node InferenceSession on the folder's weights, fed already tokenized
// pairs (the engine's own tokenizePairs), the relevance computed here by hand: sigmoid of the one
// logit, or the softmax probability of the positive label of two (readRerankerFolder says which).

export interface BareReranker {
  session: ort.InferenceSession;
  /**
   * Relevance per pair, in order. `batch` pairs per session call, right-padded to the longest with
   * the pad id 0 and attention_mask 0 (default 1: each pair alone).
   */
  score(pairs: TokenizedItem[], o?: { batch?: number }): Promise<number[]>;
  /** The raw logits of one pair. */
  logits(pair: TokenizedItem): Promise<number[]>;
  close(): Promise<void>;
}

const ONNX_FILE = { fp32: "model.onnx", q8: "model_quantized.onnx", fp16: "model_fp16.onnx" } as const;

/** A bare session's inputs for these pairs: right-padded to the longest, mask 1 on real tokens, segment ids when the graph takes them. */
export function pairFeeds(rows: readonly TokenizedItem[], withTypes: boolean): Record<string, ort.Tensor> {
  const seq = Math.max(...rows.map((r) => r.ids.length));
  const ids = new BigInt64Array(rows.length * seq);
  const mask = new BigInt64Array(rows.length * seq);
  const types = new BigInt64Array(rows.length * seq);
  rows.forEach((r, b) =>
    r.ids.forEach((id, i) => {
      ids[b * seq + i] = BigInt(id);
      mask[b * seq + i] = 1n;
      types[b * seq + i] = BigInt(r.typeIds?.[i] ?? 0);
    }),
  );
  const dims = [rows.length, seq];
  const feeds: Record<string, ort.Tensor> = { input_ids: new ort.Tensor("int64", ids, dims), attention_mask: new ort.Tensor("int64", mask, dims) };
  if (withTypes) feeds.token_type_ids = new ort.Tensor("int64", types, dims);
  return feeds;
}

export async function bareReranker(folder: string, o: { threads?: number } = {}): Promise<BareReranker> {
  const info = readRerankerFolder(folder);
  const session = await ort.InferenceSession.create(join(folder, "onnx", ONNX_FILE[info.dtype]), {
    executionProviders: ["cpu"],
    intraOpNumThreads: o.threads ?? 1,
  });
  const run = async (rows: TokenizedItem[]) => {
    const out = (await session.run(pairFeeds(rows, session.inputNames.includes("token_type_ids")))).logits!;
    const width = out.dims[1]!;
    const data = out.data as Float32Array;
    return rows.map((_, b) => Array.from(data.subarray(b * width, (b + 1) * width)));
  };
  const relevance = (l: number[]) => {
    if (l.length === 1) return 1 / (1 + Math.exp(-l[0]!));
    const m = Math.max(...l);
    const e = l.map((x) => Math.exp(x - m));
    return e[info.positive]! / e.reduce((a, b) => a + b, 0);
  };
  return {
    session,
    async score(pairs, { batch = 1 } = {}) {
      const out: number[] = [];
      for (let i = 0; i < pairs.length; i += batch) for (const l of await run(pairs.slice(i, i + batch))) out.push(relevance(l));
      return out;
    },
    async logits(pair) {
      return (await run([pair]))[0]!;
    },
    close: () => session.release(),
  };
}
