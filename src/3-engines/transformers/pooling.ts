import type { Pooling } from "./model-folder";

// Pooling of a padded batch of token states [batch, sequence, hidden] into one L2-normalised
// vector per sequence, over the real (unpadded) tokens only, as sentence-transformers does.

export function poolAndNormalise(hidden: Float32Array, dims: readonly number[], lengths: readonly number[], mode: Pooling): Float32Array[] {
  const [batch, seq, width] = dims as [number, number, number];
  const out: Float32Array[] = [];
  for (let b = 0; b < batch; b++) {
    const n = lengths[b]!;
    const v = new Float32Array(width);
    const row = (t: number) => hidden.subarray((b * seq + t) * width, (b * seq + t + 1) * width);
    if (mode === "cls") v.set(row(0));
    else if (mode === "lasttoken") v.set(row(n - 1));
    else if (mode === "max") {
      v.fill(-Infinity);
      for (let t = 0; t < n; t++) {
        const r = row(t);
        for (let i = 0; i < width; i++) if (r[i]! > v[i]!) v[i] = r[i]!;
      }
    } else {
      for (let t = 0; t < n; t++) {
        const r = row(t);
        for (let i = 0; i < width; i++) v[i]! += r[i]!;
      }
      for (let i = 0; i < width; i++) v[i]! /= n;
    }
    out.push(normalise(v));
  }
  return out;
}

export function normalise(v: Float32Array): Float32Array {
  let sum = 0;
  for (let i = 0; i < v.length; i++) sum += v[i]! * v[i]!;
  const norm = Math.sqrt(sum);
  if (norm > 0) for (let i = 0; i < v.length; i++) v[i]! /= norm;
  return v;
}

/** Softmax of one row of logits (float64 accumulation). */
export function softmax(logits: ArrayLike<number>): number[] {
  let max = -Infinity;
  for (let i = 0; i < logits.length; i++) max = Math.max(max, logits[i]!);
  const e = Array.from(logits, (x) => Math.exp(x - max));
  const sum = e.reduce((a, b) => a + b, 0);
  return e.map((x) => x / sum);
}
