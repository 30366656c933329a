import { ELEM, GraphBuilder } from "../onnx/graph";
import { Weights } from "./weights";

// A tiny VAE decoder with the I/O of optimum's vae_decoder export:
//   latent_sample [b, C, h, w] → sample [b, 3, 8h, 8w] in about [-1, 1]
// A convolution in, then three rounds of (nearest ×2 upsampling, 3×3 convolution, SiLU), a
// convolution out and tanh. `widths` are the channels at latent size and after each upsampling.

export interface VaeSpec {
  channels: number;
  widths: [number, number, number, number];
  seed: string;
}

export function vaeDecoderGraph(spec: VaeSpec): Uint8Array {
  const g = new GraphBuilder("vae_decoder");
  const w = new Weights(g, `${spec.seed}/vae_decoder`);
  const z = g.input("latent_sample", ELEM.float, ["batch_size", spec.channels, "height_latent", "width_latent"]);
  const twice = g.weight("const.scales", [4], new Float32Array([1, 1, 2, 2]));
  let h = w.silu(w.conv3(z, "decoder.conv_in", spec.channels, spec.widths[0]));
  for (let i = 1; i < 4; i++) {
    const up = g.node("Resize", [h, "", twice], { mode: "nearest" });
    h = w.silu(w.conv3(up, `decoder.up_blocks.${i - 1}.conv`, spec.widths[i - 1]!, spec.widths[i]!));
  }
  g.node("Tanh", [w.conv3(h, "decoder.conv_out", spec.widths[3], 3, 2)], {}, ["sample"]);
  g.output("sample", ELEM.float, ["batch_size", 3, "height", "width"]);
  return g.toBytes();
}
