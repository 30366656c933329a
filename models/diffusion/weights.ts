import type { GraphBuilder } from "../onnx/graph";
import { Rng } from "../random";

// Seeded random weights for the tiny diffusion graphs: every tensor's values depend only on the
// set's seed and the tensor's name, so a set is byte-identical wherever it is generated.

export class Weights {
  constructor(
    private readonly g: GraphBuilder,
    private readonly seed: string,
  ) {}

  /** Normal-ish values with std 1/sqrt(fanIn) (times `gain`), named as in real exports. */
  random(name: string, dims: number[], fanIn: number, gain = 1): string {
    const values = new Float32Array(dims.reduce((a, b) => a * b, 1));
    new Rng(`${this.seed}/${name}`).fillNormalish(values, gain / Math.sqrt(fanIn));
    return this.g.weight(name, dims, values);
  }

  constant(name: string, dims: number[], value: number): string {
    return this.g.weight(name, dims, new Float32Array(dims.reduce((a, b) => a * b, 1)).fill(value));
  }

  /** A linear layer y = x·W + b (W stored [in, out], as MatMul wants it). */
  linear(x: string, name: string, inDim: number, outDim: number, gain = 1): string {
    const y = this.g.node("MatMul", [x, this.random(`${name}.weight`, [inDim, outDim], inDim, gain)]);
    return this.g.node("Add", [y, this.random(`${name}.bias`, [outDim], inDim, 0.1)]);
  }

  /** A 3×3 convolution with padding 1 (NCHW). */
  conv3(x: string, name: string, inC: number, outC: number, gain = 1): string {
    const w = this.random(`${name}.weight`, [outC, inC, 3, 3], inC * 9, gain);
    const b = this.random(`${name}.bias`, [outC], inC * 9, 0.1);
    return this.g.node("Conv", [x, w, b], { kernel_shape: [3, 3], pads: [1, 1, 1, 1] });
  }

  layerNorm(x: string, name: string, dim: number): string {
    const scale = this.constant(`${name}.weight`, [dim], 1);
    const bias = this.constant(`${name}.bias`, [dim], 0);
    return this.g.node("LayerNormalization", [x, scale, bias], { axis: -1, epsilon: { float: 1e-5 } });
  }

  silu(x: string): string {
    return this.g.node("Mul", [x, this.g.node("Sigmoid", [x])]);
  }
}
