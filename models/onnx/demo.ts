import type { DemoGenerator } from "../../src/ops/demo";
import { ensureOnnxModel } from "./cache";
import { ONNX_PRESETS } from "./presets";

// `--demo`: the generated 384-d embedder, the 3-label NLI classifier and the one-logit reranker
// (random weights: the vectors, labels and relevance scores are noise, but tokenizer, template,
// pooling, cutting, batching and billing are real).

const defaults = { vision: false, slots: 1, load: "start" as const, queue_wait_s: 30 };

export const ONNX_DEMO_GENERATORS: DemoGenerator[] = [
  {
    kind: "embedding",
    ensure: async (dir) => ({
      ...defaults,
      id: "demo-embed",
      name: "Demo embeddings (tiny random BERT, 384 dimensions, mean pooling)",
      kind: "embedding",
      files: { model: await ensureOnnxModel("embed", dir) },
      max_context: ONNX_PRESETS.embed.modelMaxLength,
    }),
  },
  {
    kind: "classifier",
    ensure: async (dir) => ({
      ...defaults,
      id: "demo-nli",
      name: "Demo NLI classifier (tiny random BERT, 3 labels)",
      kind: "classifier",
      files: { model: await ensureOnnxModel("nli", dir) },
      max_context: 4096,
    }),
  },
  {
    kind: "reranker",
    ensure: async (dir) => ({
      ...defaults,
      id: "demo-rerank",
      name: "Demo reranker (tiny random BERT cross-encoder, one relevance logit)",
      kind: "reranker",
      files: { model: await ensureOnnxModel("rerank", dir) },
      max_context: ONNX_PRESETS.rerank.modelMaxLength,
    }),
  },
];
