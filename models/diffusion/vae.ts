import { ELEM, GraphBuilder } from "../onnx/graph";
import { Weights } from "./weights";

// A tiny VAE decoder with the I/O of optimum's vae_decoder export:
//   latent_sample [b, C, h, w] → sample [b, 3, 8h, 8w] in about [-1, 1]
// (float32, or float16 in and out as fp16 exports such as Z-Image-Turbo's vae_decoder_model_f16 are)
// A convolution in, then three rounds of (nearest ×2 upsampling, 3×3 convolution, SiLU), a
// convolution out and tanh. `widths` are the channels at latent size and after each upsampling.

export interface VaeSpec {
  channels: number;
  widths: [number, number, number, number];
  seed: string;
  io?: "float32" | "float16";
}

export function vaeDecoderGraph(spec: VaeSpec): Uint8Array {
  const g = new GraphBuilder("vae_decoder");
  const w = new Weights(g, `${spec.seed}/vae_decoder`);
  const half = spec.io === "float16";
  const io = half ? ELEM.float16 : ELEM.float;
  const input = g.input("latent_sample", io, ["batch_size", spec.channels, "height_latent", "width_latent"]);
  const z = half ? g.node("Cast", [input], { to: ELEM.float }) : input;
  const twice = g.weight("const.scales", [4], new Float32Array([1, 1, 2, 2]));
  let h = w.silu(w.conv3(z, "decoder.conv_in", spec.channels, spec.widths[0]));
  for (let i = 1; i < 4; i++) {
    const up = g.node("Resize", [h, "", twice], { mode: "nearest" });
    h = w.silu(w.conv3(up, `decoder.up_blocks.${i - 1}.conv`, spec.widths[i - 1]!, spec.widths[i]!));
  }
  const out = g.node("Tanh", [w.conv3(h, "decoder.conv_out", spec.widths[3], 3, 2)], {}, half ? undefined : ["sample"]);
  if (half) g.node("Cast", [out], { to: ELEM.float16 }, ["sample"]);
  g.output("sample", io, ["batch_size", 3, "height", "width"]);
  return g.toBytes();
}
