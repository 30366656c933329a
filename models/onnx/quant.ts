import { fromHalf, toHalf } from "../../src/3-engines/diffusion/tensors";

// Block-wise 4-bit weights in the layout of ONNX Runtime's MatMulNBits (com.microsoft), as
// q4/q4f16 exports (onnxruntime-genai's builder, Olive) store linear layers:
//   B       uint8 [N, K/block, block/2]   two 4-bit values per byte, the lower index in the low nibble
//   scales  [N · K/block]                  one scale per block (float16 for q4f16, float32 otherwise)
//   no zero points                         the zero point is then 8: w = (q − 8) · scale
// where W is the layer's [N, K] weight (out × in) and Y = A · Wᵀ. Symmetric quantisation: the block's
// largest magnitude maps to ±7.

export interface Q4Weight {
  packed: Uint8Array;
  /** One scale per (row, block), row-major: float16 bits or float32 values. */
  scales: Uint16Array | Float32Array;
  /** The values the kernel computes with, W dequantised ([N, K] row-major). */
  dequantized: Float32Array;
}

export function quantizeQ4(w: Float32Array, n: number, k: number, block: number, scaleType: "float16" | "float32"): Q4Weight {
  if (w.length !== n * k) throw new Error(`quantizeQ4: ${w.length} values for [${n}, ${k}]`);
  if (block < 16 || (block & (block - 1)) !== 0) throw new Error("quantizeQ4: block must be a power of two ≥ 16");
  const blocks = Math.ceil(k / block);
  const packed = new Uint8Array(n * blocks * (block / 2));
  const raw = new Float32Array(n * blocks);
  for (let r = 0; r < n; r++)
    for (let b = 0; b < blocks; b++) {
      let max = 0;
      for (let i = b * block; i < Math.min(k, (b + 1) * block); i++) max = Math.max(max, Math.abs(w[r * k + i]!));
      raw[r * blocks + b] = max / 7;
    }
  // The scale the kernel sees is the stored one (rounded to float16 where stored so).
  const stored = scaleType === "float16" ? toHalf(raw) : raw;
  const scale = scaleType === "float16" ? fromHalf(stored as Uint16Array) : raw;
  const dequantized = new Float32Array(n * k);
  for (let r = 0; r < n; r++)
    for (let b = 0; b < blocks; b++) {
      const s = scale[r * blocks + b]!;
      for (let j = 0; j < block; j++) {
        const i = b * block + j;
        const q = i < k && s > 0 ? Math.max(0, Math.min(15, Math.round(w[r * k + i]! / s) + 8)) : 8;
        if (i < k) dequantized[r * k + i] = (q - 8) * s;
        const at = (r * blocks + b) * (block / 2) + (j >> 1);
        packed[at] = packed[at]! | (j & 1 ? q << 4 : q);
      }
    }
  return { packed, scales: stored, dequantized };
}
