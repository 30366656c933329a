import { ELEM, GraphBuilder } from "../onnx/graph";
import { Weights } from "./weights";

// A one-layer CLIP-shaped text encoder with the I/O of optimum's CLIPTextModel export:
//   input_ids int64 [batch, sequence] → last_hidden_state [batch, sequence, hidden],
//                                       pooler_output [batch, hidden] (the hidden state at the
//                                       end-of-text token, the highest id, as CLIP pools).
// Token and position embeddings, causal single-head self-attention, a quick-GELU MLP, final norm.

export interface TextEncoderSpec {
  vocabSize: number;
  hidden: number;
  maxLength: number;
  seed: string;
}

export function textEncoderGraph(spec: TextEncoderSpec): Uint8Array {
  const { hidden: H, maxLength: L } = spec;
  const g = new GraphBuilder("clip_text_model");
  const w = new Weights(g, `${spec.seed}/text_encoder`);
  const ids = g.input("input_ids", ELEM.int64, ["batch_size", "sequence_length"]);

  const tok = g.node("Gather", [w.random("text_model.embeddings.token_embedding.weight", [spec.vocabSize, H], 1), ids], { axis: 0 });
  const seqLen = g.node("Shape", [ids], { start: 1, end: 2 });
  const zero = g.ints("const.zero", [0]);
  const positions = g.node("Slice", [w.random("text_model.embeddings.position_embedding.weight", [L, H], 4), zero, seqLen, zero]);
  const x = g.node("Add", [tok, positions]);

  // Self-attention with CLIP's causal mask, cut to the actual sequence length.
  const p = "text_model.encoder.layers.0";
  const h = w.layerNorm(x, `${p}.layer_norm1`, H);
  const q = w.linear(h, `${p}.self_attn.q_proj`, H, H);
  const k = w.linear(h, `${p}.self_attn.k_proj`, H, H);
  const v = w.linear(h, `${p}.self_attn.v_proj`, H, H);
  const scores = g.node("Mul", [g.node("MatMul", [q, g.node("Transpose", [k], { perm: [0, 2, 1] })]), g.scalar("attn.scale", 1 / Math.sqrt(H))]);
  const mask = new Float32Array(L * L);
  for (let i = 0; i < L; i++) for (let j = i + 1; j < L; j++) mask[i * L + j] = -1e4;
  const square = g.node("Concat", [seqLen, seqLen], { axis: 0 });
  const cut = g.node("Slice", [g.weight("attn.causal_mask", [L, L], mask), g.ints("const.zeros2", [0, 0]), square]);
  const probs = g.node("Softmax", [g.node("Add", [scores, cut])], { axis: -1 });
  const attn = w.linear(g.node("MatMul", [probs, v]), `${p}.self_attn.out_proj`, H, H);
  const x2 = g.node("Add", [x, attn]);

  const m = w.linear(w.layerNorm(x2, `${p}.layer_norm2`, H), `${p}.mlp.fc1`, H, 4 * H);
  const gelu = g.node("Mul", [m, g.node("Sigmoid", [g.node("Mul", [m, g.scalar("quick_gelu.alpha", 1.702)])])]);
  const x3 = g.node("Add", [x2, w.linear(gelu, `${p}.mlp.fc2`, 4 * H, H)]);
  g.node("Identity", [w.layerNorm(x3, "text_model.final_layer_norm", H)], {}, ["last_hidden_state"]);
  g.output("last_hidden_state", ELEM.float, ["batch_size", "sequence_length", H]);

  // pooler_output: gather each row's hidden state at argmax(input_ids).
  const at = g.node("ArgMax", [g.node("Cast", [ids], { to: ELEM.float })], { axis: 1, keepdims: 1 }); // [b, 1]
  const batch = g.node("Shape", [ids], { start: 0, end: 1 });
  const gatherShape = g.node("Concat", [batch, g.ints("const.one", [1]), g.ints("const.hidden", [H])], { axis: 0 });
  const index = g.node("Expand", [g.node("Unsqueeze", [at, g.ints("const.axis2", [2])]), gatherShape]); // [b, 1, H]
  const pooled = g.node("GatherElements", ["last_hidden_state", index], { axis: 1 });
  g.node("Squeeze", [pooled, g.ints("const.axis1", [1])], {}, ["pooler_output"]);
  g.output("pooler_output", ELEM.float, ["batch_size", H]);
  return g.toBytes();
}
