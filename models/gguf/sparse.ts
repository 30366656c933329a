// Sparse GGUF files: a real model's header (metadata and the full tensor table, with each tensor's
// real name, shape and ggml type) followed by a hole where the tensor data would be. The file has the
// real file's size, so everything that reads a GGUF's header — node-llama-cpp's readGgufFileInfo and
// GgufInsights, the memory planner — sees the real model, while the disk holds only the header.
//
// models/gguf/writer.ts streams real tensor data and knows the sizes of F32, F16 and Q8_0 only; a
// quantised real model needs the K-quant sizes and no data, so the preamble is encoded here. The
// layout is the one writer.ts writes and GGUF v3 specifies (ggml/docs/gguf.md): header, KV pairs,
// tensor infos, padding to `general.alignment`, then each tensor at an aligned offset relative to the
// start of the data section, with padding after every tensor (gguf-py's GGUFWriter does the same).

import { closeSync, ftruncateSync, openSync, writeSync } from "node:fs";
import {
  GGUF_DEFAULT_ALIGNMENT,
  GGUF_MAGIC,
  GGUF_VERSION,
  GgufValueType,
  u32,
  type GgufScalar,
  type GgufScalarType,
  type GgufValue,
} from "./types";

/** ggml tensor type ids (ggml.h `enum ggml_type`); F32, F16 and Q8_0 are types.ts's GgmlType values. */
export const GGML = { F32: 0, F16: 1, Q8_0: 8, Q4_K: 12, Q5_K: 13, Q6_K: 14 } as const;
export type GgmlTypeId = (typeof GGML)[keyof typeof GGML];

/** [elements per block, bytes per block] (ggml.c type_traits: blck_size, type_size). */
const BLOCKS: Record<GgmlTypeId, readonly [number, number]> = {
  [GGML.F32]: [1, 4],
  [GGML.F16]: [1, 2],
  [GGML.Q8_0]: [32, 34], // f16 scale + 32 int8
  [GGML.Q4_K]: [256, 144], // 2 f16 + 12 scale bytes + 128 nibble bytes
  [GGML.Q5_K]: [256, 176], // Q4_K + 32 high-bit bytes
  [GGML.Q6_K]: [256, 210], // 128 low + 64 high + 16 scales + f16
};

export const GGML_TYPE_NAME: Record<GgmlTypeId, string> = {
  [GGML.F32]: "F32",
  [GGML.F16]: "F16",
  [GGML.Q8_0]: "Q8_0",
  [GGML.Q4_K]: "Q4_K",
  [GGML.Q5_K]: "Q5_K",
  [GGML.Q6_K]: "Q6_K",
};

export interface SparseTensor {
  name: string;
  /** GGML order: dims[0] is ne[0], the row length. */
  dims: readonly number[];
  type: GgmlTypeId;
}

export interface SparseGgufFile {
  /** Written in this order; `general.alignment` is added (second) when absent, as writer.ts does. */
  metadata: ReadonlyArray<readonly [string, GgufValue]>;
  tensors: readonly SparseTensor[];
}

export interface SparseLayout {
  /** Bytes before the data section (header, metadata, tensor infos, padding). */
  dataOffset: number;
  /** Each tensor's offset, relative to the data section. */
  offsets: number[];
  /** Bytes of the data section, padding included. */
  dataBytes: number;
  /** dataOffset + dataBytes: the file's size. */
  fileBytes: number;
  /** Sum over tensors of their element counts. */
  parameters: number;
}

export function elementCount(dims: readonly number[]): number {
  return dims.reduce((a, b) => a * b, 1);
}

/** Bytes a tensor takes; its rows must be whole blocks, as ggml requires of quantised types. */
export function ggmlTensorBytes(type: GgmlTypeId, dims: readonly number[]): number {
  const block = BLOCKS[type];
  if (!block) throw new Error(`unknown ggml type ${type}`);
  const [per, bytes] = block;
  if (dims[0]! % per !== 0) throw new Error(`${GGML_TYPE_NAME[type]} needs ne[0] to be a multiple of ${per}, got ${dims[0]}`);
  return (elementCount(dims) / per) * bytes;
}

/** Little-endian bytes in one growing buffer (the header of a 262k-token vocabulary is ~6 MB). */
class Bytes {
  private buf = new Uint8Array(1 << 20);
  private view = new DataView(this.buf.buffer);
  length = 0;
  private static utf8 = new TextEncoder();

  private room(n: number): void {
    if (this.length + n <= this.buf.length) return;
    let size = this.buf.length * 2;
    while (size < this.length + n) size *= 2;
    const next = new Uint8Array(size);
    next.set(this.buf.subarray(0, this.length));
    this.buf = next;
    this.view = new DataView(next.buffer);
  }
  put(kind: "u8" | "i8" | "u16" | "i16" | "u32" | "i32" | "f32" | "f64" | "u64" | "i64", v: number | bigint): void {
    const size = { u8: 1, i8: 1, u16: 2, i16: 2, u32: 4, i32: 4, f32: 4, f64: 8, u64: 8, i64: 8 }[kind];
    this.room(size);
    const at = this.length;
    const n = Number(v);
    switch (kind) {
      case "u8": this.view.setUint8(at, n); break;
      case "i8": this.view.setInt8(at, n); break;
      case "u16": this.view.setUint16(at, n, true); break;
      case "i16": this.view.setInt16(at, n, true); break;
      case "u32": this.view.setUint32(at, n, true); break;
      case "i32": this.view.setInt32(at, n, true); break;
      case "f32": this.view.setFloat32(at, n, true); break;
      case "f64": this.view.setFloat64(at, n, true); break;
      case "u64": this.view.setBigUint64(at, BigInt(v), true); break;
      case "i64": this.view.setBigInt64(at, BigInt(v), true); break;
    }
    this.length += size;
  }
  /** GGUF string: uint64 byte length, then UTF-8 bytes without a terminator. */
  string(s: string): void {
    const bytes = Bytes.utf8.encode(s);
    this.put("u64", bytes.length);
    this.room(bytes.length);
    this.buf.set(bytes, this.length);
    this.length += bytes.length;
  }
  padTo(alignment: number): void {
    const pad = (alignment - (this.length % alignment)) % alignment;
    this.room(pad);
    this.buf.fill(0, this.length, this.length + pad);
    this.length += pad;
  }
  bytes(): Uint8Array {
    return this.buf.subarray(0, this.length);
  }
}

const SCALAR_KIND: Partial<Record<GgufScalarType, Parameters<Bytes["put"]>[0]>> = {
  [GgufValueType.UINT8]: "u8",
  [GgufValueType.INT8]: "i8",
  [GgufValueType.UINT16]: "u16",
  [GgufValueType.INT16]: "i16",
  [GgufValueType.UINT32]: "u32",
  [GgufValueType.INT32]: "i32",
  [GgufValueType.FLOAT32]: "f32",
  [GgufValueType.FLOAT64]: "f64",
  [GgufValueType.UINT64]: "u64",
  [GgufValueType.INT64]: "i64",
};

function scalar(b: Bytes, type: GgufScalarType, value: GgufScalar): void {
  if (type === GgufValueType.STRING) {
    if (typeof value !== "string") throw new Error(`expected a string, got ${typeof value}`);
    return b.string(value);
  }
  if (type === GgufValueType.BOOL) return b.put("u8", value ? 1 : 0);
  const kind = SCALAR_KIND[type];
  if (!kind || typeof value === "string" || typeof value === "boolean") throw new Error(`bad value for GGUF type ${GgufValueType[type]}`);
  b.put(kind, value);
}

function value(b: Bytes, v: GgufValue): void {
  b.put("u32", v.type);
  if (v.type === GgufValueType.ARRAY) {
    b.put("u32", v.itemType);
    b.put("u64", v.items.length);
    for (const item of v.items) scalar(b, v.itemType, item);
  } else {
    scalar(b, v.type, v.value);
  }
}

function withAlignment(file: SparseGgufFile): { alignment: number; metadata: Array<readonly [string, GgufValue]> } {
  const metadata = [...file.metadata];
  const given = metadata.find(([k]) => k === "general.alignment");
  if (!given) {
    metadata.splice(1, 0, ["general.alignment", u32(GGUF_DEFAULT_ALIGNMENT)]);
    return { alignment: GGUF_DEFAULT_ALIGNMENT, metadata };
  }
  const v = given[1];
  if (v.type !== GgufValueType.UINT32 || typeof v.value !== "number" || v.value <= 0 || v.value % 8 !== 0)
    throw new Error("general.alignment must be a uint32 multiple of 8");
  return { alignment: v.value, metadata };
}

/** The bytes before the data section, and where everything after it lies. */
export function encodeSparsePreamble(file: SparseGgufFile): { preamble: Uint8Array; layout: SparseLayout } {
  const { alignment, metadata } = withAlignment(file);
  const seen = new Set<string>();
  for (const [key] of metadata) {
    if (seen.has(key)) throw new Error(`duplicate metadata key ${key}`);
    seen.add(key);
  }
  const names = new Set<string>();
  const b = new Bytes();
  b.put("u32", GGUF_MAGIC);
  b.put("u32", GGUF_VERSION);
  b.put("u64", file.tensors.length);
  b.put("u64", metadata.length);
  for (const [key, v] of metadata) {
    b.string(key);
    value(b, v);
  }
  const offsets: number[] = [];
  let offset = 0;
  let parameters = 0;
  for (const t of file.tensors) {
    if (names.has(t.name)) throw new Error(`duplicate tensor ${t.name}`);
    names.add(t.name);
    if (t.dims.length < 1 || t.dims.length > 4) throw new Error(`${t.name}: ggml tensors have 1 to 4 dims`);
    b.string(t.name);
    b.put("u32", t.dims.length);
    for (const d of t.dims) b.put("u64", d);
    b.put("u32", t.type);
    b.put("u64", offset);
    offsets.push(offset);
    offset += ggmlTensorBytes(t.type, t.dims);
    offset += (alignment - (offset % alignment)) % alignment;
    parameters += elementCount(t.dims);
  }
  b.padTo(alignment);
  const preamble = b.bytes();
  return {
    preamble,
    layout: { dataOffset: preamble.length, offsets, dataBytes: offset, fileBytes: preamble.length + offset, parameters },
  };
}

/**
 * Writes the preamble and extends the file to its full size with ftruncate, which allocates no
 * blocks on the file systems Linux uses for /tmp and home (ext4, xfs, btrfs, tmpfs): the data section
 * reads back as zeros and takes no disk.
 */
export function writeSparseGguf(path: string, file: SparseGgufFile): SparseLayout {
  const { preamble, layout } = encodeSparsePreamble(file);
  const fd = openSync(path, "w");
  try {
    let done = 0;
    while (done < preamble.length) done += writeSync(fd, preamble, done, preamble.length - done, done);
    ftruncateSync(fd, layout.fileBytes);
  } finally {
    closeSync(fd);
  }
  return layout;
}
