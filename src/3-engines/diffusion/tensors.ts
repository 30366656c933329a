import "../onnx-telemetry"; // before ONNX Runtime starts: no telemetry, no mat-debug log
import * as ort from "onnxruntime-node";

// Feeding an exported graph whatever element type it declares: fp32 exports take float32, fp16
// exports (common for GPU) take float16, and a UNet's timestep may be int64, float32 or float16,
// a scalar or a [1] vector. The pipeline works in float32 and converts at the session boundary.

export type InputMeta = { type: string; rank: number };

export function inputMeta(session: ort.InferenceSession, name: string): InputMeta {
  const i = session.inputNames.indexOf(name);
  const m = session.inputMetadata[i];
  if (!m) throw new Error(`the graph has no input "${name}" (inputs: ${session.inputNames.join(", ")})`);
  if (!m.isTensor) throw new Error(`input "${name}" is not a tensor`);
  return { type: m.type, rank: m.shape.length };
}

/** A tensor of `meta.type` holding `data` (float32 values) with `dims`. */
export function toTensor(meta: InputMeta, data: Float32Array, dims: number[]): ort.Tensor {
  switch (meta.type) {
    case "float32":
      return new ort.Tensor("float32", data, dims);
    case "float16": {
      // Where the runtime has Float16Array, ORT wraps the bits in one, which the Node binding cannot
      // read ("not enough space"); it is handed the raw Uint16Array bits instead.
      const bits = toHalf(data);
      const t = new ort.Tensor("float16", bits, dims);
      if (!(t.data instanceof Uint16Array)) Object.defineProperty(t, "data", { value: bits });
      return t;
    }
    case "int64":
      return new ort.Tensor("int64", BigInt64Array.from(data, (v) => BigInt(Math.round(v))), dims);
    case "int32":
      return new ort.Tensor("int32", Int32Array.from(data, Math.round), dims);
    default:
      throw new Error(`input element type ${meta.type} is not supported`);
  }
}

/** The values of an output tensor as float32. */
export function toFloat32(t: ort.Tensor): Float32Array {
  if (t.type === "float32") return t.data as Float32Array;
  if (t.type === "float16") {
    const d = t.data as unknown as ArrayLike<number>;
    return d instanceof Uint16Array ? fromHalf(d) : Float32Array.from(d);
  }
  throw new Error(`output element type ${t.type} is not supported`);
}

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

// The runtime's own Float16Array (Bun has it) converts in native code, rounding to nearest even as
// the functions below do (checked bit for bit over every half value and a million random floats:
// test/engines/diffusion/tensors.test.ts); they are the fallback where it is missing.
type HalfArray = ArrayLike<number> & { buffer: ArrayBufferLike };
const Native = (globalThis as { Float16Array?: { new (values: ArrayLike<number>): HalfArray; new (buffer: ArrayBufferLike, offset: number, length: number): HalfArray } }).Float16Array;

/** IEEE half-precision bits, rounded to nearest even; overflow → ±Inf, tiny values → subnormals or 0. */
export function toHalf(data: Float32Array): Uint16Array {
  return Native ? new Uint16Array(new Native(data).buffer) : toHalfJs(data);
}

export function fromHalf(bits: Uint16Array): Float32Array {
  return Native ? Float32Array.from(new Native(bits.buffer, bits.byteOffset, bits.length)) : fromHalfJs(bits);
}

export function toHalfJs(data: Float32Array): Uint16Array {
  const out = new Uint16Array(data.length);
  for (let i = 0; i < data.length; i++) {
    f32[0] = data[i]!;
    const x = u32[0]!;
    const sign = (x >>> 16) & 0x8000;
    const exp = (x >>> 23) & 0xff;
    let mant = x & 0x7fffff;
    if (exp === 0xff) {
      out[i] = sign | 0x7c00 | (mant ? 0x200 : 0);
      continue;
    }
    const e = exp - 127 + 15;
    if (e >= 0x1f) out[i] = sign | 0x7c00;
    else if (e <= 0) {
      if (e < -10) out[i] = sign;
      else {
        mant |= 0x800000;
        const shift = 14 - e;
        const half = mant >>> shift;
        const rest = mant & ((1 << shift) - 1);
        const mid = 1 << (shift - 1);
        out[i] = sign | (half + (rest > mid || (rest === mid && half & 1) ? 1 : 0));
      }
    } else {
      const half = (e << 10) | (mant >>> 13);
      const rest = mant & 0x1fff;
      out[i] = sign | (half + (rest > 0x1000 || (rest === 0x1000 && half & 1) ? 1 : 0));
    }
  }
  return out;
}

export function fromHalfJs(bits: Uint16Array): Float32Array {
  const out = new Float32Array(bits.length);
  for (let i = 0; i < bits.length; i++) {
    const h = bits[i]!;
    const sign = h & 0x8000 ? -1 : 1;
    const exp = (h >>> 10) & 0x1f;
    const mant = h & 0x3ff;
    out[i] = exp === 0 ? sign * mant * 2 ** -24 : exp === 0x1f ? (mant ? NaN : sign * Infinity) : sign * (1 + mant / 1024) * 2 ** (exp - 15);
  }
  return out;
}
