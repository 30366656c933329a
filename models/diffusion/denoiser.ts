import { ELEM, GraphBuilder } from "../onnx/graph";
import { Weights } from "./weights";

// A tiny denoiser with the I/O of real ONNX exports, conditioned on the timestep (sinusoidal
// embedding → MLP) and on the text (mean of encoder_hidden_states, plus pooled_projections for the
// transformer), added to the features of three 3×3 convolutions.
//   unet (optimum UNet2DConditionModel export):
//     sample [b, C, h, w], timestep int64 scalar, encoder_hidden_states [b, s, H] → out_sample
//   transformer (optimum SD3Transformer2DModel export):
//     hidden_states [b, C, h, w], timestep float [step], encoder_hidden_states [b, s, H],
//     pooled_projections [b, H] → out_hidden_states

export interface DenoiserSpec {
  kind: "unet" | "transformer";
  /** Element type of the float inputs and the output, as fp16 GPU exports have them (math stays fp32). */
  io?: "float32" | "float16";
  channels: number;
  hidden: number;
  width: number;
  seed: string;
}

export function denoiserGraph(spec: DenoiserSpec): Uint8Array {
  const { channels: C, hidden: H, width: F } = spec;
  const unet = spec.kind === "unet";
  const g = new GraphBuilder(unet ? "unet" : "transformer");
  const w = new Weights(g, `${spec.seed}/${spec.kind}`);
  const half = spec.io === "float16";
  const io = half ? ELEM.float16 : ELEM.float;
  const float = (name: string, dims: (number | string)[]) => {
    g.input(name, io, dims);
    return half ? g.node("Cast", [name], { to: ELEM.float }) : name;
  };
  const x = float(unet ? "sample" : "hidden_states", ["batch_size", C, "height", "width"]);
  const t = unet ? g.input("timestep", ELEM.int64, []) : float("timestep", ["step"]);
  const ctx = float("encoder_hidden_states", ["batch_size", "sequence_length", H]);
  const pooled = unet ? null : float("pooled_projections", ["batch_size", H]);

  // Timestep embedding: [sin, cos](t · 10000^(-i/K)) → linear → SiLU.
  const K = 8;
  const freqs = new Float32Array(K).map((_, i) => Math.exp((-Math.log(10000) * i) / K));
  const tf = unet ? g.node("Cast", [t], { to: ELEM.float }) : t;
  const arg = g.node("MatMul", [g.node("Reshape", [tf, g.ints("const.col", [-1, 1])]), g.weight("time_proj.freqs", [1, K], freqs)]);
  const sincos = g.node("Concat", [g.node("Sin", [arg]), g.node("Cos", [arg])], { axis: 1 });
  const temb = w.silu(w.linear(sincos, "time_embedding.linear_1", 2 * K, F));

  // Text conditioning.
  let cemb = w.linear(g.node("ReduceMean", [ctx], { axes: [1], keepdims: 0 }), "context_embedder", H, F, 2);
  if (pooled) cemb = g.node("Add", [cemb, w.linear(pooled, "pooled_embedder", H, F, 2)]);
  const cond = g.node("Unsqueeze", [g.node("Add", [temb, cemb]), g.ints("const.hw", [2, 3])]); // [b, F, 1, 1]

  const h1 = w.silu(g.node("Add", [w.conv3(x, "conv_in", C, F), cond]));
  const h2 = w.silu(w.conv3(h1, "block.conv", F, F));
  const out = w.conv3(h2, "conv_out", F, C);
  const name = unet ? "out_sample" : "out_hidden_states";
  g.node(half ? "Cast" : "Identity", [out], half ? { to: ELEM.float16 } : {}, [name]);
  g.output(name, io, ["batch_size", C, "height", "width"]);
  return g.toBytes();
}
