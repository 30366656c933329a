// Encoders from float32 values to the on-disk ggml tensor encodings (F32, F16, Q8_0).

import { GgmlType, Q8_0_BLOCK, Q8_0_BLOCK_BYTES, tensorByteSize } from "./types";

const scratchF32 = new Float32Array(1);
const scratchU32 = new Uint32Array(scratchF32.buffer);

/** IEEE 754 binary32 -> binary16 bits, rounding to nearest even. */
export function floatToHalf(value: number): number {
  scratchF32[0] = value;
  const bits = scratchU32[0]!;
  const sign = (bits >>> 16) & 0x8000;
  const exp = (bits >>> 23) & 0xff;
  const mant = bits & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant !== 0 ? 0x200 : 0); // inf / nan
  const e = exp - 112; // rebias 127 -> 15
  if (e >= 0x1f) return sign | 0x7c00; // overflow -> inf
  if (e <= 0) {
    // result is a half subnormal (or zero): value = h * 2^-24
    if (e < -10) return sign;
    const full = mant | 0x800000;
    const shift = 14 - e;
    const rest = full & ((1 << shift) - 1);
    const halfway = 1 << (shift - 1);
    let h = full >>> shift;
    if (rest > halfway || (rest === halfway && (h & 1) === 1)) h++;
    return sign | h;
  }
  let h = (e << 10) | (mant >>> 13);
  const rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest === 0x1000 && (h & 1) === 1)) h++; // may carry into the exponent, which is correct
  return sign | h;
}

/** binary16 bits -> number. */
export function halfToFloat(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >>> 10) & 0x1f;
  const mant = h & 0x3ff;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 0x1f) return mant === 0 ? sign * Infinity : NaN;
  return sign * (1 + mant / 1024) * 2 ** (exp - 15);
}

/** C `roundf`: halves go away from zero (Math.round sends -2.5 to -2). */
function roundAway(x: number): number {
  return x < 0 ? -Math.round(-x) : Math.round(x);
}

/**
 * Encodes `values` as `type` into `out` (which must have room for tensorByteSize(type, values.length))
 * and returns the number of bytes written.
 */
export function encodeInto(type: GgmlType, values: Float32Array, out: Uint8Array): number {
  const size = tensorByteSize(type, values.length);
  if (out.byteLength < size) throw new Error(`output buffer too small: ${out.byteLength} < ${size}`);
  switch (type) {
    case GgmlType.F32:
      out.set(new Uint8Array(values.buffer, values.byteOffset, size));
      return size;
    case GgmlType.F16:
      for (let i = 0; i < values.length; i++) {
        const h = floatToHalf(values[i]!);
        out[2 * i] = h & 0xff;
        out[2 * i + 1] = h >>> 8;
      }
      return size;
    case GgmlType.Q8_0:
      encodeQ8_0(values, out);
      return size;
  }
}

/** Q8_0: per block of 32 values, one f16 scale d = max|x| / 127 then 32 int8 q = round(x / d). */
function encodeQ8_0(values: Float32Array, out: Uint8Array): void {
  const blocks = values.length / Q8_0_BLOCK;
  for (let b = 0; b < blocks; b++) {
    const start = b * Q8_0_BLOCK;
    let amax = 0;
    for (let j = 0; j < Q8_0_BLOCK; j++) {
      const a = Math.abs(values[start + j]!);
      if (a > amax) amax = a;
    }
    const d = amax / 127;
    const inv = d === 0 ? 0 : 1 / d;
    const at = b * Q8_0_BLOCK_BYTES;
    const h = floatToHalf(d);
    out[at] = h & 0xff;
    out[at + 1] = h >>> 8;
    for (let j = 0; j < Q8_0_BLOCK; j++) {
      out[at + 2 + j] = roundAway(values[start + j]! * inv) & 0xff; // two's complement int8
    }
  }
}

/** Decodes an encoded tensor back to float32 (used by tests to check the encoders). */
export function decode(type: GgmlType, bytes: Uint8Array, elements: number): Float32Array {
  const out = new Float32Array(elements);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  switch (type) {
    case GgmlType.F32:
      for (let i = 0; i < elements; i++) out[i] = view.getFloat32(4 * i, true);
      break;
    case GgmlType.F16:
      for (let i = 0; i < elements; i++) out[i] = halfToFloat(view.getUint16(2 * i, true));
      break;
    case GgmlType.Q8_0:
      for (let b = 0; b < elements / Q8_0_BLOCK; b++) {
        const at = b * Q8_0_BLOCK_BYTES;
        const d = halfToFloat(view.getUint16(at, true));
        for (let j = 0; j < Q8_0_BLOCK; j++) out[b * Q8_0_BLOCK + j] = d * view.getInt8(at + 2 + j);
      }
      break;
  }
  return out;
}
