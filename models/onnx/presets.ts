// Named specs of the generated BERT-shaped ONNX models: a 384-d sentence embedder, a 3-label NLI
// classifier and a one-logit cross-encoder reranker for tests and the demo, and a MiniLM-L6-shaped
// embedder for the benchmark.

export interface BertModelSpec {
  /**
   * "feature-extraction": last_hidden_state out; "nli": logits [batch, labels.length] out;
   * "rerank": the same sequence-classification graph with one label (logits [batch, 1]).
   */
  task: "feature-extraction" | "nli" | "rerank";
  hidden: number;
  layers: number;
  heads: number;
  intermediate: number;
  /** config.json max_position_embeddings (rows of the position table). */
  maxPositions: number;
  /** tokenizer_config.json model_max_length. */
  modelMaxLength: number;
  /** Classifier labels in id order (config.json id2label); deliberately not the API's order. */
  labels?: readonly string[];
  /** Sentence-transformers pooling written to 1_Pooling/config.json (embedders). */
  pooling?: "mean" | "cls";
  /** sentence_bert_config.json max_seq_length (embedders), when set. */
  maxSeqLength?: number;
  /** PRNG seed: same spec + seed gives byte-identical files. */
  seed: number;
}

export const ONNX_PRESETS = {
  /** Tests and demo: one attention + FFN layer, 384-d mean-pooled output, 512 positions. */
  embed: { task: "feature-extraction", hidden: 384, layers: 1, heads: 6, intermediate: 768, maxPositions: 512, modelMaxLength: 512, pooling: "mean", seed: 11 },
  /** Tests and demo: NLI head over one layer, id2label in a non-canonical order; 8192 positions so the API's 4,096 cap binds. */
  nli: {
    task: "nli",
    hidden: 128,
    layers: 1,
    heads: 4,
    intermediate: 256,
    maxPositions: 8192,
    modelMaxLength: 8192,
    labels: ["neutral", "contradiction", "entailment"],
    seed: 12,
  },
  /**
   * Tests and demo: a cross-encoder laid out as cross-encoder/ms-marco-MiniLM-L6-v2's export
   * (BertForSequenceClassification, id2label {"0": "LABEL_0"}, logits [batch, 1], 512 positions).
   */
  rerank: {
    task: "rerank",
    hidden: 128,
    layers: 1,
    heads: 4,
    intermediate: 256,
    maxPositions: 512,
    modelMaxLength: 512,
    labels: ["LABEL_0"],
    seed: 14,
  },
  /** Benchmark: the shape of all-MiniLM-L6-v2 (6 layers, 12 heads, 384-d, FFN 1536). */
  "embed-bench": { task: "feature-extraction", hidden: 384, layers: 6, heads: 12, intermediate: 1536, maxPositions: 512, modelMaxLength: 512, pooling: "mean", seed: 13 },
} as const satisfies Record<string, BertModelSpec>;

export type OnnxPresetName = keyof typeof ONNX_PRESETS;
