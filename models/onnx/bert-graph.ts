import { Rng } from "../random";
import { ELEM, GraphBuilder } from "./graph";
import type { BertModelSpec } from "./presets";

// The ONNX graph of a BERT encoder as Hugging Face exports it: inputs input_ids, attention_mask
// and token_type_ids ([batch, sequence] int64); word + position + token-type embeddings and a
// LayerNorm; per layer multi-head self-attention with the additive padding mask, then a GELU
// feed-forward, each with a residual and a LayerNorm. The feature extractor outputs
// last_hidden_state [batch, sequence, hidden]; the sequence classifier (NLI, or a one-label
// reranker) puts BERT's pooler (tanh dense on [CLS]) and a linear head on top and outputs
// logits [batch, labels].
// Weights are seeded and scaled 1/sqrt(fan_in) so that random models still mix tokens visibly.

const LN_EPS = 1e-12;

export function buildBertGraph(spec: BertModelSpec, vocabSize: number): Uint8Array {
  const rng = new Rng(spec.seed);
  const g = new GraphBuilder(spec.task === "feature-extraction" ? "bert-feature-extraction" : "bert-sequence-classification");
  const H = spec.hidden;
  const headDim = H / spec.heads;
  if (!Number.isInteger(headDim)) throw new Error(`hidden ${H} is not divisible by ${spec.heads} heads`);

  const random = (name: string, dims: number[], std: number) => {
    const v = new Float32Array(dims.reduce((a, b) => a * b, 1));
    rng.fillNormalish(v, std);
    return g.weight(name, dims, v);
  };
  const filled = (name: string, n: number, value: number) => g.weight(name, [n], new Float32Array(n).fill(value));
  const layerNorm = (x: string, prefix: string) =>
    g.node("LayerNormalization", [x, filled(`${prefix}.weight`, H, 1), filled(`${prefix}.bias`, H, 0)], { axis: -1, epsilon: LN_EPS });
  // Linear weights are stored [in, out] (as exporters fold the transpose of torch's [out, in]).
  const linear = (x: string, prefix: string, inDim: number, outDim: number) =>
    g.node("Add", [g.node("MatMul", [x, random(`${prefix}.weight`, [inDim, outDim], 1 / Math.sqrt(inDim))]), random(`${prefix}.bias`, [outDim], 0.02)]);

  const inputIds = g.input("input_ids", ELEM.int64, ["batch_size", "sequence_length"]);
  const mask = g.input("attention_mask", ELEM.int64, ["batch_size", "sequence_length"]);
  const types = g.input("token_type_ids", ELEM.int64, ["batch_size", "sequence_length"]);

  // Embeddings: positions 0..sequence_length-1 from the input's own shape.
  const seqLen = g.node("Gather", [g.node("Shape", [inputIds]), g.ints("one_index", [1], [])], { axis: 0 });
  const positions = g.node("Range", [g.ints("zero", [0], []), seqLen, g.ints("one", [1], [])]);
  const words = g.node("Gather", [random("embeddings.word_embeddings.weight", [vocabSize, H], 1), inputIds]);
  const pos = g.node("Gather", [random("embeddings.position_embeddings.weight", [spec.maxPositions, H], 0.5), positions]);
  const typ = g.node("Gather", [random("embeddings.token_type_embeddings.weight", [2, H], 1), types]);
  let x = layerNorm(g.node("Add", [g.node("Add", [words, pos]), typ]), "embeddings.LayerNorm");

  // Padding mask: 0 where attended, -10000 where padded, broadcast over heads and query positions.
  const keep = g.node("Cast", [mask], { to: ELEM.float });
  const blocked = g.node("Mul", [g.node("Sub", [g.scalar("one_f", 1), keep]), g.scalar("mask_value", -10000)]);
  const extended = g.node("Unsqueeze", [blocked, g.ints("mask_axes", [1, 2])]);

  const headShape = g.ints("head_shape", [0, 0, spec.heads, headDim]);
  const mergedShape = g.ints("merged_shape", [0, 0, H]);
  for (let l = 0; l < spec.layers; l++) {
    const p = `encoder.layer.${l}`;
    const split = (t: string, perm: number[]) => g.node("Transpose", [g.node("Reshape", [t, headShape])], { perm });
    const q = split(linear(x, `${p}.attention.self.query`, H, H), [0, 2, 1, 3]);
    const k = split(linear(x, `${p}.attention.self.key`, H, H), [0, 2, 3, 1]);
    const v = split(linear(x, `${p}.attention.self.value`, H, H), [0, 2, 1, 3]);
    const scores = g.node("Add", [g.node("Mul", [g.node("MatMul", [q, k]), g.scalar(`${p}.scale`, 1 / Math.sqrt(headDim))]), extended]);
    const context = g.node("MatMul", [g.node("Softmax", [scores], { axis: -1 }), v]);
    const merged = g.node("Reshape", [g.node("Transpose", [context], { perm: [0, 2, 1, 3] }), mergedShape]);
    x = layerNorm(g.node("Add", [linear(merged, `${p}.attention.output.dense`, H, H), x]), `${p}.attention.output.LayerNorm`);
    const inner = linear(x, `${p}.intermediate.dense`, H, spec.intermediate);
    const gelu = g.node("Mul", [
      g.node("Mul", [inner, g.scalar(`${p}.half`, 0.5)]),
      g.node("Add", [g.scalar(`${p}.one`, 1), g.node("Erf", [g.node("Mul", [inner, g.scalar(`${p}.rsqrt2`, Math.SQRT1_2)])])]),
    ]);
    x = layerNorm(g.node("Add", [linear(gelu, `${p}.output.dense`, spec.intermediate, H), x]), `${p}.output.LayerNorm`);
  }

  if (spec.task === "feature-extraction") {
    g.node("Identity", [x], {}, ["last_hidden_state"]);
    g.output("last_hidden_state", ELEM.float, ["batch_size", "sequence_length", H]);
  } else {
    const labels = spec.labels?.length ?? 0;
    if (!labels) throw new Error(`a ${spec.task} model needs labels`);
    const cls = g.node("Gather", [x, g.ints("cls_index", [0], [])], { axis: 1 });
    const pooled = g.node("Tanh", [linear(cls, "pooler.dense", H, H)]);
    const logits = g.node("MatMul", [pooled, random("classifier.weight", [H, labels], 2 / Math.sqrt(H))]);
    g.node("Add", [logits, random("classifier.bias", [labels], 0.1)], {}, ["logits"]);
    g.output("logits", ELEM.float, ["batch_size", labels]);
  }
  return g.toBytes();
}
