import { toHalf } from "../../src/3-engines/diffusion/tensors";
import { ELEM, GraphBuilder, MS_DOMAIN } from "../onnx/graph";
import { quantizeQ4 } from "../onnx/quant";
import { Rng } from "../random";

// Tiny graphs with the I/O, element types and operators of the Z-Image-Turbo ONNX bundle
// (webnn/Z-Image-Turbo, q4f16): float16 activations, every linear layer a 4-bit MatMulNBits
// (com.microsoft) with float16 block scales, float16 embeddings, math that needs range (norms,
// softmax, the timestep embedding) in float32 between Casts, as the exporter leaves it.
//   text encoder (Qwen3-shaped, one layer):  input_ids, attention_mask int64 [b, s]
//                                            → encoder_hidden_states fp16 [b, s, D]
//   transformer:  hidden_states fp16 [b, 16, h, w] (or [b, 16, 1, h, w]), timestep fp16 [b],
//                 encoder_hidden_states fp16 [b, s, D] → sample fp16 (or unified_results [16, 1, h, w])
//                 2×2 patches as tokens, caption tokens projected, one cross-attention block
//   VAE decoder (f16): see vae.ts (io float16)

const BLOCK = 32;

class Q4Graph {
  constructor(
    readonly g: GraphBuilder,
    private readonly seed: string,
  ) {}

  private values(name: string, n: number, std: number): Float32Array {
    const v = new Float32Array(n);
    new Rng(`${this.seed}/${name}`).fillNormalish(v, std);
    return v;
  }

  half(name: string, dims: number[], std: number): string {
    const bits = toHalf(this.values(name, dims.reduce((a, b) => a * b, 1), std));
    return this.g.raw(name, ELEM.float16, dims, new Uint8Array(bits.buffer));
  }

  float(name: string, dims: number[], std: number): string {
    return this.g.weight(name, dims, this.values(name, dims.reduce((a, b) => a * b, 1), std));
  }

  /** y = x·Wᵀ with W [n, k] stored as MatMulNBits' 4-bit blocks (x and y float16). */
  linear(x: string, name: string, k: number, n: number, gain = 1): string {
    const q = quantizeQ4(this.values(`${name}.weight`, n * k, gain / Math.sqrt(k)), n, k, BLOCK, "float16");
    const blocks = Math.ceil(k / BLOCK);
    const b = this.g.raw(`${name}.MatMul.weight_Q4`, ELEM.uint8, [n, blocks, BLOCK / 2], q.packed);
    const s = this.g.raw(`${name}.MatMul.weight_scales`, ELEM.float16, [n * blocks], new Uint8Array(q.scales.buffer));
    return this.g.node("MatMulNBits", [x, b, s], { K: k, N: n, bits: 4, block_size: BLOCK, accuracy_level: 0 }, [this.g.fresh(`${name}.MatMul`)], MS_DOMAIN);
  }

  toFloat(x: string): string {
    return this.g.node("Cast", [x], { to: ELEM.float });
  }

  toHalf(x: string): string {
    return this.g.node("Cast", [x], { to: ELEM.float16 });
  }

  /** RMS norm over the last axis, in float32, with a weight near 1 (float16 in and out). */
  rmsNorm(x: string, name: string, dim: number): string {
    const xf = this.toFloat(x);
    const ms = this.g.node("ReduceMean", [this.g.node("Mul", [xf, xf])], { axes: [-1], keepdims: 1 });
    const inv = this.g.node("Reciprocal", [this.g.node("Sqrt", [this.g.node("Add", [ms, this.g.scalar(`${name}.eps`, 1e-6)])])]);
    const w = this.values(`${name}.weight`, dim, 0.02).map((v) => 1 + v);
    return this.toHalf(this.g.node("Mul", [this.g.node("Mul", [xf, inv]), this.g.weight(`${name}.weight`, [dim], w)]));
  }

  /** Softmax(q·kᵀ/√d + mask)·v for [b, tq, d] queries and [b, tk, d] keys/values (float16 in, float32 math). */
  attention(q: string, k: string, v: string, dim: number, mask?: string): string {
    const scores = this.g.node("Mul", [this.g.node("MatMul", [this.toFloat(q), this.g.node("Transpose", [this.toFloat(k)], { perm: [0, 2, 1] })]), this.g.scalar(this.g.fresh("attn.scale"), 1 / Math.sqrt(dim))]);
    const probs = this.g.node("Softmax", [mask ? this.g.node("Add", [scores, mask]) : scores], { axis: -1 });
    return this.toHalf(this.g.node("MatMul", [probs, this.toFloat(v)]));
  }
}

export interface ZImageTextEncoderSpec {
  vocabSize: number;
  hidden: number;
  seed: string;
}

export function zImageTextEncoderGraph(spec: ZImageTextEncoderSpec): GraphBuilder {
  const { hidden: D } = spec;
  const g = new GraphBuilder("qwen3_text_encoder");
  const q = new Q4Graph(g, `${spec.seed}/text_encoder`);
  const ids = g.input("input_ids", ELEM.int64, ["batch_size", "sequence_length"]);
  const attnMask = g.input("attention_mask", ELEM.int64, ["batch_size", "total_sequence_length"]);
  const x = g.node("Gather", [q.half("model.embed_tokens.weight", [spec.vocabSize, D], 1), ids], { axis: 0 });

  // Causal mask plus the padding mask from attention_mask, as additive float32 [b, s, s].
  const s = g.node("Shape", [ids], { start: 1, end: 2 });
  const scalarS = g.node("Squeeze", [s, g.ints("const.axis0", [0])]);
  const pos = g.node("Range", [g.ints("const.zero", [0], []), scalarS, g.ints("const.one", [1], [])]);
  const future = g.node("Greater", [g.node("Unsqueeze", [pos, g.ints("const.axis_last", [1])]), g.node("Unsqueeze", [pos, g.ints("const.axis_first", [0])])]); // [s, s]: key > query
  const padded = g.node("Equal", [g.node("Unsqueeze", [attnMask, g.ints("const.axis1", [1])]), g.ints("const.zero_mask", [0], [])]); // [b, 1, s]
  const blocked = g.node("Or", [g.node("Unsqueeze", [future, g.ints("const.axis0b", [0])]), padded]);
  const mask = g.node("Where", [blocked, g.scalar("const.neg", -1e4), g.scalar("const.zero_f", 0)]);

  const p = "model.layers.0";
  const h = q.rmsNorm(x, `${p}.input_layernorm`, D);
  const attn = q.attention(q.linear(h, `${p}.attn.q_proj`, D, D), q.linear(h, `${p}.attn.k_proj`, D, D), q.linear(h, `${p}.attn.v_proj`, D, D), D, mask);
  const x2 = g.node("Add", [x, q.linear(attn, `${p}.attn.o_proj`, D, D, 0.5)]);
  const h2 = q.rmsNorm(x2, `${p}.post_attention_layernorm`, D);
  const gate = q.toFloat(q.linear(h2, `${p}.mlp.gate_proj`, D, 2 * D));
  const act = q.toHalf(g.node("Mul", [g.node("Mul", [gate, g.node("Sigmoid", [gate])]), q.toFloat(q.linear(h2, `${p}.mlp.up_proj`, D, 2 * D))]));
  const x3 = g.node("Add", [x2, q.linear(act, `${p}.mlp.down_proj`, 2 * D, D, 0.5)]);
  g.node("Identity", [q.rmsNorm(x3, "model.norm", D)], {}, ["encoder_hidden_states"]);
  g.output("encoder_hidden_states", ELEM.float16, ["batch_size", "sequence_length", D]);
  return g;
}

export interface ZImageTransformerSpec {
  channels: number;
  textHidden: number;
  width: number;
  seed: string;
  /** The bundle's contract: "pinned" (4-D hidden_states → sample) or "5d" ([b, C, 1, h, w] → unified_results [C, 1, h, w]). */
  io: "pinned" | "5d";
}

export function zImageTransformerGraph(spec: ZImageTransformerSpec): GraphBuilder {
  const { channels: C, width: D, textHidden: T } = spec;
  const P = 4 * C; // a 2×2 patch of C channels
  const g = new GraphBuilder("z_image_transformer");
  const q = new Q4Graph(g, `${spec.seed}/transformer`);
  const five = spec.io === "5d";
  const hs = g.input("hidden_states", ELEM.float16, five ? ["batch_size", C, 1, "height", "width"] : ["batch_size", C, "height", "width"]);
  const t = g.input("timestep", ELEM.float16, ["batch_size"]);
  const ctx = g.input("encoder_hidden_states", ELEM.float16, ["batch_size", "sequence_length", T]);

  const x4 = five ? g.node("Squeeze", [hs, g.ints("const.frame_axis", [2])]) : hs;
  const patches = g.node("SpaceToDepth", [x4], { blocksize: 2 }); // [b, 4C, h/2, w/2]
  const gridShape = g.node("Shape", [patches]);
  const tokens = g.node("Transpose", [g.node("Reshape", [patches, g.ints("const.flat", [0, P, -1])])], { perm: [0, 2, 1] }); // [b, n, 4C]
  let x = q.linear(tokens, "all_x_embedder.2-1", P, D);

  // Timestep: sinusoidal features of t·1000 → linear → SiLU, added to every image token.
  const K = 8;
  const freqs = new Float32Array(K).map((_, i) => Math.exp((-Math.log(10000) * i) / K));
  const tf = g.node("Mul", [q.toFloat(t), g.scalar("t_embedder.scale", 1000)]);
  const arg = g.node("MatMul", [g.node("Reshape", [tf, g.ints("const.col", [-1, 1])]), g.weight("t_embedder.freqs", [1, K], freqs)]);
  const temb = g.node("MatMul", [g.node("Concat", [g.node("Sin", [arg]), g.node("Cos", [arg])], { axis: 1 }), q.float("t_embedder.mlp.0.weight", [2 * K, D], 1 / Math.sqrt(2 * K))]);
  const tact = q.toHalf(g.node("Mul", [temb, g.node("Sigmoid", [temb])]));
  x = g.node("Add", [x, g.node("Unsqueeze", [tact, g.ints("const.axis1", [1])])]);

  // Caption tokens → one cross-attention block.
  const cap = q.linear(ctx, "cap_embedder.1", T, D);
  const b = "layers.0";
  const h = q.rmsNorm(x, `${b}.attention_norm1`, D);
  const attn = q.attention(q.linear(h, `${b}.attention.to_q`, D, D), q.linear(cap, `${b}.attention.to_k`, D, D), q.linear(cap, `${b}.attention.to_v`, D, D), D);
  x = g.node("Add", [x, q.linear(attn, `${b}.attention.to_out.0`, D, D)]);
  const out = q.linear(q.rmsNorm(x, "final_layer.norm", D), "all_final_layer.2-1.linear", D, P);

  const grid = g.node("Reshape", [g.node("Transpose", [out], { perm: [0, 2, 1] }), gridShape]);
  const sample = g.node("DepthToSpace", [grid], { blocksize: 2, mode: "DCR" }); // [b, C, h, w]
  if (five) {
    g.node("Unsqueeze", [g.node("Squeeze", [sample, g.ints("const.batch_axis", [0])]), g.ints("const.frame_axis_out", [1])], {}, ["unified_results"]);
    g.output("unified_results", ELEM.float16, [C, 1, "height", "width"]);
  } else {
    g.node("Identity", [sample], {}, ["sample"]);
    g.output("sample", ELEM.float16, ["batch_size", C, "height", "width"]);
  }
  return g;
}
