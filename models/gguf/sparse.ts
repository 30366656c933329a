// Sparse GGUF files: a real model's header (metadata and the full tensor table, with each tensor's
// real name, shape and ggml type) followed by a hole where the tensor data would be. The file has the
// real file's size, so everything that reads a GGUF's header — node-llama-cpp's readGgufFileInfo and
// GgufInsights, the memory planner — sees the real model, while the disk holds only the header.
//
// models/gguf/writer.ts streams real tensor data and knows the sizes of F32, F16 and Q8_0 only; a
// quantised real model needs the K-quant sizes and no data, so writer.ts's preamble encoder is given
// those sizes here. The layout is the one writer.ts writes and GGUF v3 specifies (ggml/docs/gguf.md): header, KV pairs,
// tensor infos, padding to `general.alignment`, then each tensor at an aligned offset relative to the
// start of the data section, with padding after every tensor (gguf-py's GGUFWriter does the same).

import { closeSync, ftruncateSync, openSync, writeSync } from "node:fs";
import type { GgufValue } from "./types";
import { encodeGgufPreamble } from "./writer";

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

/** The bytes before the data section, and where everything after it lies (writer.ts's encoder, K-quant sizes). */
export function encodeSparsePreamble(file: SparseGgufFile): { preamble: Uint8Array; layout: SparseLayout } {
  const { preamble, offsets, dataBytes } = encodeGgufPreamble(file, (t) => ggmlTensorBytes(t.type as GgmlTypeId, t.dims));
  const parameters = file.tensors.reduce((n, t) => n + elementCount(t.dims), 0);
  return { preamble, layout: { dataOffset: preamble.length, offsets, dataBytes, fileBytes: preamble.length + dataBytes, parameters } };
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
