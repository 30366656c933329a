// GGUF v3 constants: metadata value types and the ggml tensor types this project writes.

/** Metadata value type ids, as numbered by the GGUF v3 format. */
export enum GgufValueType {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
}

/** ggml tensor type ids (only the ones the writer can encode). */
export enum GgmlType {
  F32 = 0,
  F16 = 1,
  Q8_0 = 8,
}

/** llama.cpp `general.file_type` values for the encodings above. */
export const FILE_TYPE_FOR: Record<GgmlType, number> = {
  [GgmlType.F32]: 0, // LLAMA_FTYPE_ALL_F32
  [GgmlType.F16]: 1, // LLAMA_FTYPE_MOSTLY_F16
  [GgmlType.Q8_0]: 7, // LLAMA_FTYPE_MOSTLY_Q8_0
};

export const GGUF_MAGIC = 0x46554747; // "GGUF" read as little-endian uint32
export const GGUF_VERSION = 3;
export const GGUF_DEFAULT_ALIGNMENT = 32;

/** Elements per Q8_0 block and bytes per block (f16 scale + 32 int8). */
export const Q8_0_BLOCK = 32;
export const Q8_0_BLOCK_BYTES = 2 + Q8_0_BLOCK;

export type GgufScalarType = Exclude<GgufValueType, GgufValueType.ARRAY>;

export type GgufScalar = number | bigint | boolean | string;

/** A typed metadata value. Arrays hold scalars of one element type. */
export type GgufValue =
  | { type: GgufScalarType; value: GgufScalar }
  | { type: GgufValueType.ARRAY; itemType: GgufScalarType; items: readonly GgufScalar[] };

// Small constructors so call sites read as `u32(4096)` rather than object literals.
export const u8 = (value: number): GgufValue => ({ type: GgufValueType.UINT8, value });
export const i8 = (value: number): GgufValue => ({ type: GgufValueType.INT8, value });
export const u16 = (value: number): GgufValue => ({ type: GgufValueType.UINT16, value });
export const i16 = (value: number): GgufValue => ({ type: GgufValueType.INT16, value });
export const u32 = (value: number): GgufValue => ({ type: GgufValueType.UINT32, value });
export const i32 = (value: number): GgufValue => ({ type: GgufValueType.INT32, value });
export const u64 = (value: number | bigint): GgufValue => ({ type: GgufValueType.UINT64, value });
export const i64 = (value: number | bigint): GgufValue => ({ type: GgufValueType.INT64, value });
export const f32 = (value: number): GgufValue => ({ type: GgufValueType.FLOAT32, value });
export const f64 = (value: number): GgufValue => ({ type: GgufValueType.FLOAT64, value });
export const bool = (value: boolean): GgufValue => ({ type: GgufValueType.BOOL, value });
export const str = (value: string): GgufValue => ({ type: GgufValueType.STRING, value });
export const arr = (itemType: GgufScalarType, items: readonly GgufScalar[]): GgufValue => ({
  type: GgufValueType.ARRAY,
  itemType,
  items,
});

/** Bytes a tensor of `elements` elements occupies when encoded as `type`. */
export function tensorByteSize(type: GgmlType, elements: number): number {
  switch (type) {
    case GgmlType.F32:
      return elements * 4;
    case GgmlType.F16:
      return elements * 2;
    case GgmlType.Q8_0:
      if (elements % Q8_0_BLOCK !== 0) throw new Error(`Q8_0 needs a multiple of ${Q8_0_BLOCK} elements, got ${elements}`);
      return (elements / Q8_0_BLOCK) * Q8_0_BLOCK_BYTES;
  }
}
