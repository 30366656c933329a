// Streaming GGUF v3 writer: header, typed metadata, tensor infos, then tensor data written tensor by
// tensor from chunked float32 sources, so a large model is never held in memory whole.

import { closeSync, openSync, writeSync } from "node:fs";
import { encodeInto } from "./encode";
import {
  GGUF_DEFAULT_ALIGNMENT,
  GGUF_MAGIC,
  GGUF_VERSION,
  GgmlType,
  GgufValueType,
  Q8_0_BLOCK,
  tensorByteSize,
  u32,
  type GgufScalar,
  type GgufScalarType,
  type GgufValue,
} from "./types";

export interface GgufTensor {
  name: string;
  /** Dimensions in GGML order: dims[0] is ne[0], the innermost (fastest varying) dimension. */
  dims: readonly number[];
  type: GgmlType;
  /** Yields the tensor's values in memory order, in chunks of any length. */
  data: () => Iterable<Float32Array>;
}

export interface GgufFile {
  /** Metadata in the order it is written. `general.alignment` is added when absent. */
  metadata: ReadonlyArray<readonly [string, GgufValue]>;
  tensors: readonly GgufTensor[];
}

export interface GgufWriteResult {
  bytes: number;
  /** Sum over tensors of the product of their dims. */
  parameters: number;
}

/** Little-endian byte builder for the (small) header part of the file. */
class ByteBuilder {
  private buf = new Uint8Array(1 << 16);
  private view = new DataView(this.buf.buffer);
  length = 0;
  private static encoder = new TextEncoder();

  private reserve(n: number): void {
    if (this.length + n <= this.buf.length) return;
    let size = this.buf.length * 2;
    while (size < this.length + n) size *= 2;
    const next = new Uint8Array(size);
    next.set(this.buf.subarray(0, this.length));
    this.buf = next;
    this.view = new DataView(next.buffer);
  }
  u8(v: number) { this.reserve(1); this.view.setUint8(this.length, v); this.length += 1; }
  i8(v: number) { this.reserve(1); this.view.setInt8(this.length, v); this.length += 1; }
  u16(v: number) { this.reserve(2); this.view.setUint16(this.length, v, true); this.length += 2; }
  i16(v: number) { this.reserve(2); this.view.setInt16(this.length, v, true); this.length += 2; }
  u32(v: number) { this.reserve(4); this.view.setUint32(this.length, v, true); this.length += 4; }
  i32(v: number) { this.reserve(4); this.view.setInt32(this.length, v, true); this.length += 4; }
  u64(v: number | bigint) { this.reserve(8); this.view.setBigUint64(this.length, BigInt(v), true); this.length += 8; }
  i64(v: number | bigint) { this.reserve(8); this.view.setBigInt64(this.length, BigInt(v), true); this.length += 8; }
  f32(v: number) { this.reserve(4); this.view.setFloat32(this.length, v, true); this.length += 4; }
  f64(v: number) { this.reserve(8); this.view.setFloat64(this.length, v, true); this.length += 8; }
  /** GGUF string: uint64 byte length then UTF-8 bytes, no terminator. */
  string(s: string) {
    const bytes = ByteBuilder.encoder.encode(s);
    this.u64(bytes.length);
    this.reserve(bytes.length);
    this.buf.set(bytes, this.length);
    this.length += bytes.length;
  }
  padTo(alignment: number) {
    const pad = (alignment - (this.length % alignment)) % alignment;
    this.reserve(pad);
    this.buf.fill(0, this.length, this.length + pad);
    this.length += pad;
  }
  bytes(): Uint8Array { return this.buf.subarray(0, this.length); }
}

function writeScalar(b: ByteBuilder, type: GgufScalarType, value: GgufScalar): void {
  const num = () => {
    if (typeof value !== "number") throw new Error(`expected a number for GGUF type ${GgufValueType[type]}, got ${typeof value}`);
    return value;
  };
  switch (type) {
    case GgufValueType.UINT8: return b.u8(num());
    case GgufValueType.INT8: return b.i8(num());
    case GgufValueType.UINT16: return b.u16(num());
    case GgufValueType.INT16: return b.i16(num());
    case GgufValueType.UINT32: return b.u32(num());
    case GgufValueType.INT32: return b.i32(num());
    case GgufValueType.FLOAT32: return b.f32(num());
    case GgufValueType.FLOAT64: return b.f64(num());
    case GgufValueType.UINT64: return b.u64(value as number | bigint);
    case GgufValueType.INT64: return b.i64(value as number | bigint);
    case GgufValueType.BOOL: return b.u8(value ? 1 : 0);
    case GgufValueType.STRING:
      if (typeof value !== "string") throw new Error(`expected a string, got ${typeof value}`);
      return b.string(value);
  }
}

function writeValue(b: ByteBuilder, value: GgufValue): void {
  b.u32(value.type);
  if (value.type === GgufValueType.ARRAY) {
    b.u32(value.itemType);
    b.u64(value.items.length);
    for (const item of value.items) writeScalar(b, value.itemType, item);
  } else {
    writeScalar(b, value.type, value.value);
  }
}

function elementCount(t: GgufTensor): number {
  return t.dims.reduce((a, b) => a * b, 1);
}

/** What the preamble says of a tensor: name, GGML-order dims, ggml type id. */
export interface GgufTensorInfo {
  name: string;
  dims: readonly number[];
  type: number;
}

function resolveAlignment(file: Pick<GgufFile, "metadata">): { alignment: number; metadata: Array<readonly [string, GgufValue]> } {
  const metadata = [...file.metadata];
  const existing = metadata.find(([k]) => k === "general.alignment");
  if (!existing) {
    metadata.splice(1, 0, ["general.alignment", u32(GGUF_DEFAULT_ALIGNMENT)]);
    return { alignment: GGUF_DEFAULT_ALIGNMENT, metadata };
  }
  const v = existing[1];
  if (v.type !== GgufValueType.UINT32 || typeof v.value !== "number" || v.value <= 0 || v.value % 8 !== 0)
    throw new Error("general.alignment must be a uint32 multiple of 8");
  return { alignment: v.value, metadata };
}

/** The data bytes of a tensor this writer streams (F32, F16, Q8_0). */
function streamedBytes(t: GgufTensorInfo): number {
  if (t.type === GgmlType.Q8_0 && t.dims[0]! % Q8_0_BLOCK !== 0) throw new Error(`${t.name}: Q8_0 needs ne[0] to be a multiple of ${Q8_0_BLOCK}`);
  return tensorByteSize(t.type as GgmlType, t.dims.reduce((a, b) => a * b, 1));
}

/**
 * Serialises everything before the tensor data (header, KV, tensor infos, padding). `bytesOf`
 * sizes each tensor's data (default: the types this writer streams; sparse.ts passes the K-quants').
 * `dataBytes` is the data section's size, padding included.
 */
export function encodeGgufPreamble(
  file: { metadata: GgufFile["metadata"]; tensors: readonly GgufTensorInfo[] },
  bytesOf: (t: GgufTensorInfo) => number = streamedBytes,
): { preamble: Uint8Array; alignment: number; offsets: number[]; dataBytes: number } {
  const { alignment, metadata } = resolveAlignment(file);
  const keys = new Set<string>();
  for (const [key] of metadata) {
    if (keys.has(key)) throw new Error(`duplicate metadata key ${key}`);
    keys.add(key);
  }
  const b = new ByteBuilder();
  b.u32(GGUF_MAGIC);
  b.u32(GGUF_VERSION);
  b.u64(file.tensors.length);
  b.u64(metadata.length);
  for (const [key, value] of metadata) {
    b.string(key);
    writeValue(b, value);
  }
  const offsets: number[] = [];
  const names = new Set<string>();
  let offset = 0;
  for (const t of file.tensors) {
    if (names.has(t.name)) throw new Error(`duplicate tensor ${t.name}`);
    names.add(t.name);
    if (t.dims.length < 1 || t.dims.length > 4) throw new Error(`${t.name}: ggml tensors have 1 to 4 dims`);
    const bytes = bytesOf(t);
    b.string(t.name);
    b.u32(t.dims.length);
    for (const d of t.dims) b.u64(d);
    b.u32(t.type);
    b.u64(offset);
    offsets.push(offset);
    offset += bytes;
    offset += (alignment - (offset % alignment)) % alignment;
  }
  b.padTo(alignment);
  return { preamble: b.bytes(), alignment, offsets, dataBytes: offset };
}

/** Elements staged before each encode+write; a multiple of the Q8_0 block size. */
const STAGE_ELEMENTS = 1 << 16;

/**
 * Writes `file` to `path`, streaming each tensor's data chunk by chunk. Yields to the event loop
 * between tensors so that a long generation does not starve other work in the process.
 */
export async function writeGguf(path: string, file: GgufFile): Promise<GgufWriteResult> {
  const { preamble, alignment } = encodeGgufPreamble(file);
  const fd = openSync(path, "w");
  let position = 0;
  let parameters = 0;
  const write = (bytes: Uint8Array) => {
    let done = 0;
    while (done < bytes.length) done += writeSync(fd, bytes, done, bytes.length - done, position + done);
    position += bytes.length;
  };
  try {
    write(preamble);
    const stage = new Float32Array(STAGE_ELEMENTS);
    const out = new Uint8Array(STAGE_ELEMENTS * 4);
    const zeros = new Uint8Array(alignment);
    for (const t of file.tensors) {
      const expected = elementCount(t);
      parameters += expected;
      let staged = 0;
      let total = 0;
      const flush = () => {
        if (staged === 0) return;
        write(out.subarray(0, encodeInto(t.type, stage.subarray(0, staged), out)));
        staged = 0;
      };
      for (const chunk of t.data()) {
        total += chunk.length;
        if (total > expected) throw new Error(`${t.name}: data source yielded more than ${expected} values`);
        let at = 0;
        while (at < chunk.length) {
          const n = Math.min(chunk.length - at, STAGE_ELEMENTS - staged);
          stage.set(chunk.subarray(at, at + n), staged);
          staged += n;
          at += n;
          if (staged === STAGE_ELEMENTS) flush();
        }
      }
      if (total !== expected) throw new Error(`${t.name}: data source yielded ${total} values, expected ${expected}`);
      flush();
      const pad = (alignment - (position % alignment)) % alignment;
      if (pad > 0) write(zeros.subarray(0, pad));
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
  } finally {
    closeSync(fd);
  }
  return { bytes: position, parameters };
}
