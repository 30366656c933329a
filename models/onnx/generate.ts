import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { buildBertGraph } from "./bert-graph";
import type { BertModelSpec } from "./presets";
import { buildVocab, specialTokensMapJson, tokenizerConfigJson, tokenizerJson } from "./wordpiece";

// Writes a generated model folder in the layout of a Hugging Face ONNX export (as transformers.js
// loads it), plus the sentence-transformers files for embedders:
//   config.json  tokenizer.json  tokenizer_config.json  special_tokens_map.json  vocab.txt
//   onnx/model.onnx
//   modules.json  sentence_bert_config.json  1_Pooling/config.json      (embedders only)

/** Bump when the bytes a spec produces change. */
export const ONNX_GENERATOR_VERSION = "bert-gen-1";

const json = (path: string, value: unknown) => writeFileSync(path, JSON.stringify(value, null, 2) + "\n");

export function writeBertModel(folder: string, spec: BertModelSpec): void {
  const vocab = buildVocab();
  mkdirSync(join(folder, "onnx"), { recursive: true });
  writeFileSync(join(folder, "onnx", "model.onnx"), buildBertGraph(spec, vocab.length));
  json(join(folder, "config.json"), configJson(spec, vocab.length));
  json(join(folder, "tokenizer.json"), tokenizerJson(vocab));
  json(join(folder, "tokenizer_config.json"), tokenizerConfigJson(spec.modelMaxLength));
  json(join(folder, "special_tokens_map.json"), specialTokensMapJson());
  writeFileSync(join(folder, "vocab.txt"), vocab.join("\n") + "\n");
  if (spec.task === "feature-extraction") {
    json(join(folder, "modules.json"), [
      { idx: 0, name: "0", path: "", type: "sentence_transformers.models.Transformer" },
      { idx: 1, name: "1", path: "1_Pooling", type: "sentence_transformers.models.Pooling" },
      { idx: 2, name: "2", path: "2_Normalize", type: "sentence_transformers.models.Normalize" },
    ]);
    json(join(folder, "sentence_bert_config.json"), { max_seq_length: spec.maxSeqLength ?? spec.modelMaxLength, do_lower_case: false });
    mkdirSync(join(folder, "1_Pooling"), { recursive: true });
    json(join(folder, "1_Pooling", "config.json"), {
      word_embedding_dimension: spec.hidden,
      pooling_mode_cls_token: spec.pooling === "cls",
      pooling_mode_mean_tokens: (spec.pooling ?? "mean") === "mean",
      pooling_mode_max_tokens: false,
      pooling_mode_mean_sqrt_len_tokens: false,
      pooling_mode_weightedmean_tokens: false,
      pooling_mode_lasttoken: false,
      include_prompt: true,
    });
  }
}

function configJson(spec: BertModelSpec, vocabSize: number) {
  const labels = spec.labels ?? [];
  return {
    architectures: [spec.task === "feature-extraction" ? "BertModel" : "BertForSequenceClassification"],
    model_type: "bert",
    hidden_size: spec.hidden,
    num_hidden_layers: spec.layers,
    num_attention_heads: spec.heads,
    intermediate_size: spec.intermediate,
    hidden_act: "gelu",
    max_position_embeddings: spec.maxPositions,
    type_vocab_size: 2,
    vocab_size: vocabSize,
    layer_norm_eps: 1e-12,
    pad_token_id: 0,
    ...(labels.length
      ? {
          id2label: Object.fromEntries(labels.map((l, i) => [String(i), l])),
          label2id: Object.fromEntries(labels.map((l, i) => [l, i])),
        }
      : {}),
    transformers_version: "4.44.0",
  };
}
