import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";

// What the engines need to know about a model folder in the Hugging Face layout, read from the
// folder's own files (web/docs/api-capabilities.md, "Embedding and classifier folders"):
//   max tokens  min of config.json max_position_embeddings (less the position offset of the
//               RoBERTa family), tokenizer_config.json model_max_length (when not a "no limit"
//               sentinel) and sentence_bert_config.json max_seq_length (sentence-transformers)
//   weights     onnx/model.onnx (fp32), else onnx/model_quantized.onnx (q8), else model_fp16.onnx
//   pooling     the sentence-transformers Pooling module named in modules.json (1_Pooling/config.json);
//               mean when the folder has none
//   labels      config.json id2label, which must be exactly entailment / contradiction / neutral
//   relevance   (rerankers) config.json id2label / num_labels: one label (one logit: sigmoid), or two
//               of which exactly one is named as the positive class (softmax: its probability)

export type Dtype = "fp32" | "q8" | "fp16";
export type Pooling = "mean" | "cls" | "max" | "lasttoken";

/** The API's fixed probability order (spec §2.7). */
export const NLI_LABELS = ["contradiction", "entailment", "neutral"] as const;
export type NliLabel = (typeof NLI_LABELS)[number];

export interface FolderInfo {
  modelType: string;
  hidden: number;
  maxTokens: number;
  dtype: Dtype;
  /** config.json vocab_size (rows of the embedding table), when given. */
  vocabSize?: number;
}

export interface EmbedderInfo extends FolderInfo {
  pooling: Pooling;
  /** Where the pooling came from (logged at load). */
  poolingSource: string;
  dimensions: number;
}

export interface ClassifierInfo extends FolderInfo {
  /** config.json id2label as given. */
  labels: Record<string, string>;
  /** For each API label (NLI_LABELS order), the model's logit index. */
  logitIndex: [number, number, number];
}

export interface RerankerInfo extends FolderInfo {
  /** config.json id2label as given (or LABEL_i for num_labels). */
  labels: Record<string, string>;
  /** Logits per pair: 1 (relevance = sigmoid) or 2 (relevance = softmax at `positive`). */
  logits: 1 | 2;
  /** The logit whose probability is the relevance: 0 for a one-logit model. */
  positive: number;
  /** config.json type_vocab_size: 1 (XLM-RoBERTa) means the model has a single segment embedding. */
  typeVocabSize?: number;
}

const ROBERTA_FAMILY = new Set(["roberta", "xlm-roberta", "camembert", "mpnet", "longformer", "xlm-roberta-xl"]);
// tokenizers write 1e30 (VERY_LARGE_INTEGER) when the length is unknown.
const NO_LIMIT = 1e9;

function readJson(folder: string, file: string): any {
  const path = join(folder, file);
  if (!existsSync(path)) return undefined;
  try {
    return JSON.parse(readFileSync(path, "utf8"));
  } catch (e) {
    throw new Error(`${path}: ${(e as Error).message}`);
  }
}

export function readFolder(folder: string): FolderInfo & { config: any } {
  const config = readJson(folder, "config.json");
  if (!config) throw new Error(`${folder}: no config.json (a transformers model folder needs config.json, tokenizer.json, tokenizer_config.json and onnx/model.onnx)`);
  for (const f of ["tokenizer.json", "tokenizer_config.json"])
    if (!existsSync(join(folder, f))) throw new Error(`${folder}: no ${f}`);
  const tokenizerConfig = readJson(folder, "tokenizer_config.json") ?? {};
  const st = readJson(folder, "sentence_bert_config.json");
  const limits: number[] = [];
  if (Number.isInteger(config.max_position_embeddings)) {
    const offset = ROBERTA_FAMILY.has(config.model_type) ? (config.pad_token_id ?? 1) + 1 : 0;
    limits.push(config.max_position_embeddings - offset);
  }
  if (Number.isInteger(tokenizerConfig.model_max_length) && tokenizerConfig.model_max_length < NO_LIMIT) limits.push(tokenizerConfig.model_max_length);
  if (Number.isInteger(st?.max_seq_length)) limits.push(st.max_seq_length);
  if (!limits.length) throw new Error(`${folder}: no length limit in config.json (max_position_embeddings) or tokenizer_config.json (model_max_length)`);
  return { config, modelType: String(config.model_type ?? "unknown"), hidden: Number(config.hidden_size ?? config.d_model ?? 0), maxTokens: Math.min(...limits), dtype: dtypeOf(folder), vocabSize: Number.isInteger(config.vocab_size) ? config.vocab_size : undefined };
}

function dtypeOf(folder: string): Dtype {
  if (existsSync(join(folder, "onnx", "model.onnx"))) return "fp32";
  if (existsSync(join(folder, "onnx", "model_quantized.onnx"))) return "q8";
  if (existsSync(join(folder, "onnx", "model_fp16.onnx"))) return "fp16";
  throw new Error(`${folder}: no onnx/model.onnx (nor model_quantized.onnx, model_fp16.onnx)`);
}

export function readEmbedderFolder(folder: string): EmbedderInfo {
  const base = readFolder(folder);
  const modules: { type?: string; path?: string }[] = readJson(folder, "modules.json") ?? [];
  const unsupported = modules.find((m) => m.type && /\.(Dense|LayerNorm|WeightedLayerPooling|CNN|LSTM)$/.test(m.type));
  if (unsupported) throw new Error(`${folder}: sentence-transformers module ${unsupported.type} is not supported (only Transformer, Pooling, Normalize)`);
  const poolingPath = modules.find((m) => m.type?.endsWith(".Pooling"))?.path ?? "1_Pooling";
  const file = join(poolingPath, "config.json");
  const pc = readJson(folder, file);
  if (!pc) return { ...base, pooling: "mean", poolingSource: "default (no sentence-transformers Pooling config)", dimensions: base.hidden };
  const modes = Object.entries(pc)
    .filter(([k, v]) => k.startsWith("pooling_mode_") && v === true)
    .map(([k]) => k.slice("pooling_mode_".length));
  if (modes.length !== 1) throw new Error(`${join(folder, file)}: exactly one pooling mode must be set (found ${modes.join(", ") || "none"})`);
  const mode = modes[0]!;
  // After L2 normalisation mean_sqrt_len has the direction of mean.
  const pooling = ({ mean_tokens: "mean", mean_sqrt_len_tokens: "mean", cls_token: "cls", max_tokens: "max", lasttoken: "lasttoken" } as Record<string, Pooling>)[mode];
  if (!pooling) throw new Error(`${join(folder, file)}: pooling mode ${mode} is not supported`);
  return { ...base, pooling, poolingSource: file, dimensions: Number(pc.word_embedding_dimension ?? base.hidden) };
}

export function readClassifierFolder(folder: string): ClassifierInfo {
  const base = readFolder(folder);
  const id2label: Record<string, string> = base.config.id2label ?? {};
  const entries = Object.entries(id2label).map(([i, l]) => [Number(i), String(l).toLowerCase()] as const);
  const names = entries.map(([, l]) => l).sort();
  if (entries.length !== 3 || names.join() !== [...NLI_LABELS].sort().join())
    throw new Error(`${folder}: config.json id2label must be exactly entailment, contradiction and neutral (found ${JSON.stringify(id2label)})`);
  const logitIndex = NLI_LABELS.map((name) => entries.find(([, l]) => l === name)![0]) as [number, number, number];
  if (logitIndex.some((i) => !Number.isInteger(i) || i < 0 || i > 2)) throw new Error(`${folder}: config.json id2label ids must be 0, 1 and 2`);
  return { ...base, labels: id2label, logitIndex };
}

/**
 * A two-label cross-encoder's positive class, by name: "LABEL_1" (transformers' default name for
 * class 1, which binary relevance training uses for "relevant"), or a name that says so. Compared
 * lower-case and whole (so "irrelevant" and "not_relevant" never match).
 */
const POSITIVE_LABELS = new Set(["label_1", "1", "relevant", "positive", "pos", "yes", "true", "match", "related"]);

/** config.json's labels: id2label, else num_labels as LABEL_0…; null when it gives neither. */
function labelsOf(config: { id2label?: unknown; num_labels?: unknown; label2id?: unknown }): Record<string, string> | null {
  if (config.id2label && typeof config.id2label === "object" && Object.keys(config.id2label).length)
    return Object.fromEntries(Object.entries(config.id2label as Record<string, unknown>).map(([i, l]) => [i, String(l)]));
  if (config.label2id && typeof config.label2id === "object" && Object.keys(config.label2id).length)
    return Object.fromEntries(Object.entries(config.label2id as Record<string, unknown>).map(([l, i]) => [String(i), l]));
  if (Number.isInteger(config.num_labels) && (config.num_labels as number) > 0) return Object.fromEntries(Array.from({ length: config.num_labels as number }, (_, i) => [String(i), `LABEL_${i}`]));
  return null;
}

/**
 * Whether a config.json is a one-logit cross-encoder (the layout of bge-reranker and the ms-marco
 * cross-encoders): one label, and no architecture other than a sequence classifier. `models add`
 * reads such a folder as a reranker.
 */
export function isRerankerConfig(config: { architectures?: unknown; id2label?: unknown; num_labels?: unknown; label2id?: unknown }): boolean {
  const labels = labelsOf(config);
  if (!labels || Object.keys(labels).length !== 1) return false;
  const arch = Array.isArray(config.architectures) ? config.architectures.filter((a): a is string => typeof a === "string") : [];
  return arch.length === 0 || arch.some((a) => a.endsWith("ForSequenceClassification"));
}

/**
 * A cross-encoder folder (Hugging Face sequence-classification layout): one logit, whose sigmoid is
 * the relevance (bge-reranker, ms-marco cross-encoders), or two labels of which one is named as
 * the positive class (POSITIVE_LABELS), whose softmax probability is the relevance.
 */
export function readRerankerFolder(folder: string): RerankerInfo {
  const base = readFolder(folder);
  const config = base.config;
  const arch: string[] = Array.isArray(config.architectures) ? config.architectures.filter((a: unknown): a is string => typeof a === "string") : [];
  if (arch.length && !arch.some((a) => a.endsWith("ForSequenceClassification")))
    throw new Error(`${folder}: config.json architectures ${JSON.stringify(arch)} is not a sequence classifier (a cross-encoder reranker is *ForSequenceClassification)`);
  const labels = labelsOf(config);
  if (!labels) throw new Error(`${folder}: config.json has neither id2label nor num_labels (a cross-encoder reranker has one label, or two with the positive one named)`);
  const n = Object.keys(labels).length;
  if (Number.isInteger(config.num_labels) && config.num_labels !== n)
    throw new Error(`${folder}: config.json num_labels ${config.num_labels} disagrees with id2label's ${n} labels`);
  const ids = Object.keys(labels).map(Number).sort((a, b) => a - b);
  if (ids.some((id, k) => id !== k)) throw new Error(`${folder}: config.json id2label ids must be 0…${n - 1} (found ${JSON.stringify(labels)})`);
  const typeVocabSize = Number.isInteger(config.type_vocab_size) ? (config.type_vocab_size as number) : undefined;
  if (n === 1) return { ...base, labels, logits: 1, positive: 0, typeVocabSize };
  if (n !== 2)
    throw new Error(`${folder}: config.json has ${n} labels (${JSON.stringify(labels)}); a reranker has one relevance logit, or two labels with the positive one named`);
  const positives = ids.filter((id) => POSITIVE_LABELS.has(labels[String(id)]!.trim().toLowerCase()));
  if (positives.length !== 1)
    throw new Error(
      `${folder}: config.json id2label ${JSON.stringify(labels)}: cannot tell which of the two labels means relevant (one must be named ${[...POSITIVE_LABELS].map((l) => `"${l}"`).join(", ")}, any case)`,
    );
  return { ...base, labels, logits: 2, positive: positives[0]!, typeVocabSize };
}
