import { closeSync, existsSync, fstatSync, openSync, readSync, statSync } from "node:fs";
import { open } from "node:fs/promises";

// A GGUF file's header checked before anything else reads it. node-llama-cpp's reader
// (readGgufFileInfo, which loadModel runs first) loops over the counts the header states and reads
// past the end of the file as zeros: a 24-byte file whose key-value count is 2^63 kept it busy for
// good, its memory growing by gigabytes. Here every count, length and offset is checked against
// the bytes the file has left before it is used, and the file is read forward through one buffer of
// CHUNK bytes: nothing is allocated in proportion to a number the file states until that number is
// checked (the sets of keys and tensor names grow with what was actually read).
//
// The rules are llama.cpp's own reader's (ggml/src/gguf.cpp, as bundled with node-llama-cpp 3.22.1),
// so a file that passes here is not refused there for its layout:
//   header        "GGUF", version 2 or 3 (1 is no longer read), tensor and key-value counts as u64
//   key-values    a non-empty key of at most 65535 bytes (the GGUF spec's limit), unique; a value
//                 type 0-12; an array's element type 0-12 but not an array (llama.cpp reads no
//                 arrays of arrays), at most 2^30 elements; strings at most 2^30 bytes;
//                 general.alignment a u32 power of two (default 32)
//   tensor infos  a unique name shorter than 64 bytes (GGML_MAX_NAME), at most 4 dimensions
//                 (GGML_MAX_DIMS), none negative, their product below 2^63, a ggml type that
//                 exists (not one of the removed ones), rows a whole number of blocks, the data
//                 offset a multiple of the alignment
//   data          every tensor's bytes inside the file, after the aligned end of the tensor infos,
//                 and no two tensors overlapping
// Each problem is a GgufFormatError naming the rule (`problem`), the field and its byte offset.

export type GgufProblem =
  | "truncated"
  | "bad_magic"
  | "bad_version"
  | "too_many_kvs"
  | "too_many_tensors"
  | "empty_key"
  | "key_too_long"
  | "duplicate_key"
  | "unknown_value_type"
  | "nested_array"
  | "array_too_long"
  | "string_too_long"
  | "bad_alignment"
  | "tensor_name_too_long"
  | "duplicate_tensor"
  | "too_many_dims"
  | "bad_dimension"
  | "too_many_elements"
  | "unknown_tensor_type"
  | "bad_row_size"
  | "misaligned_tensor"
  | "tensor_past_end"
  | "overlapping_tensors";

export class GgufFormatError extends Error {
  override name = "GgufFormatError";
  constructor(
    readonly path: string,
    readonly problem: GgufProblem,
    /** The field, e.g. `kv_count`, `kv[3] "general.name" string length`, `tensor[7] "blk.0.attn_q.weight" offset`. */
    readonly field: string,
    /** Byte offset in the file where that field starts. */
    readonly offset: number,
    readonly detail: string,
  ) {
    super(`${path}: ${describe(problem, field, offset, detail)}`);
  }
  /** The message without the file's path: what an API client may be told. */
  get reason(): string {
    return describe(this.problem, this.field, this.offset, this.detail);
  }
}

const describe = (problem: GgufProblem, field: string, offset: number, detail: string) =>
  `not a valid GGUF file (${problem}): ${field} at byte ${offset}: ${detail}`;

export interface GgufSummary {
  version: number;
  tensorCount: number;
  kvCount: number;
  alignment: number;
  /** Where the tensor data starts (the tensor infos' end, aligned). */
  dataOffset: number;
  fileBytes: number;
}

/** The smallest key-value pair: key length (8) + a 1-byte key + value type (4) + a 1-byte value. */
export const MIN_KV_BYTES = 14;
/** The smallest tensor info: name length (8) + an empty name + dimension count (4) + type (4) + offset (8). */
export const MIN_TENSOR_INFO_BYTES = 24;
/** Caps beyond the file's size (llama.cpp's GGUF_MAX_STRING_LENGTH and GGUF_MAX_ARRAY_ELEMENTS). */
export const MAX_STRING_BYTES = 1 << 30;
export const MAX_ARRAY_ELEMENTS = 1 << 30;
/** The GGUF spec: a key is at most 65535 bytes. */
export const MAX_KEY_BYTES = 65535;
/** Far above any real model (tens of keys, a few thousand tensors), low enough that their sets stay small. */
export const MAX_KVS = 1 << 16;
export const MAX_TENSORS = 1 << 18;
const MAX_NAME_BYTES = 63; // GGML_MAX_NAME is 64 with the terminating NUL
const MAX_DIMS = 4; // GGML_MAX_DIMS
const INT64_MAX = (1n << 63n) - 1n;
const CHUNK = 1 << 20;

/** Value type id → bytes of one value (strings: their length prefix; arrays: none). */
const VALUE_BYTES = [1, 1, 2, 2, 4, 4, 4, 1, 8, 0, 8, 8, 8];
const VALUE_NAMES = ["u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"];
const STRING = 8;
const ARRAY = 9;
const U32 = 4;

/** ggml type id → [name, elements per block, bytes per block]; null: removed from ggml (ggml.h). */
const GGML_TYPES: ([string, number, number] | null)[] = [
  ["F32", 1, 4], ["F16", 1, 2], ["Q4_0", 32, 18], ["Q4_1", 32, 20], null, null, ["Q5_0", 32, 22], ["Q5_1", 32, 24],
  ["Q8_0", 32, 34], ["Q8_1", 32, 36], ["Q2_K", 256, 84], ["Q3_K", 256, 110], ["Q4_K", 256, 144], ["Q5_K", 256, 176],
  ["Q6_K", 256, 210], ["Q8_K", 256, 292], ["IQ2_XXS", 256, 66], ["IQ2_XS", 256, 74], ["IQ3_XXS", 256, 98], ["IQ1_S", 256, 50],
  ["IQ4_NL", 32, 18], ["IQ3_S", 256, 110], ["IQ2_S", 256, 82], ["IQ4_XS", 256, 136], ["I8", 1, 1], ["I16", 1, 2],
  ["I32", 1, 4], ["I64", 1, 8], ["F64", 1, 8], ["IQ1_M", 256, 56], ["BF16", 1, 2], null, null, null,
  ["TQ1_0", 256, 54], ["TQ2_0", 256, 66], null, null, null, ["MXFP4", 32, 17], ["NVFP4", 64, 36], ["Q1_0", 128, 18],
  ["Q2_0", 64, 18],
];

/** The file read forward through one buffer; the parser yields when it needs bytes the buffer lacks. */
class Cursor {
  readonly buf = new Uint8Array(CHUNK);
  readonly view = new DataView(this.buf.buffer);
  /** File offset of buf[0], and how many bytes of buf are filled. */
  start = 0;
  len = 0;
  pos = 0;
  constructor(
    readonly path: string,
    readonly size: number,
  ) {}
  fail(problem: GgufProblem, field: string, at: number, detail: string): never {
    throw new GgufFormatError(this.path, problem, field, at, detail);
  }
  /** Bytes after `pos` to the end of the file. */
  left(): number {
    return this.size - this.pos;
  }
  has(n: number): boolean {
    return this.pos >= this.start && this.pos + n <= this.start + this.len;
  }
  at(): number {
    return this.pos - this.start;
  }
  u32(): number {
    const v = this.view.getUint32(this.at(), true);
    this.pos += 4;
    return v;
  }
  u64(): bigint {
    const v = this.view.getBigUint64(this.at(), true);
    this.pos += 8;
    return v;
  }
  text(n: number): string {
    const s = new TextDecoder().decode(this.buf.subarray(this.at(), this.at() + n));
    this.pos += n;
    return s;
  }
  skip(n: number): void {
    this.pos += n;
  }
}

/** `n` bytes at the cursor (n ≤ CHUNK): yields for a read when the buffer does not hold them. */
function* need(c: Cursor, n: number, field: string): Generator<number, void, void> {
  if (n > c.left()) c.fail("truncated", field, c.pos, `${n} bytes needed, the file ends at byte ${c.size}`);
  if (!c.has(n)) yield n;
  if (!c.has(n)) c.fail("truncated", field, c.pos, `${n} bytes needed, the file ends at byte ${c.start + c.len}`);
}

/** A u64 length checked against a cap and the bytes left, as a number. */
function length(c: Cursor, v: bigint, cap: number, problem: GgufProblem, field: string, at: number, what: string): number {
  if (v > BigInt(cap)) c.fail(problem, field, at, `${what} ${v} is over the limit of ${cap}`);
  const n = Number(v);
  if (n > c.left()) c.fail(problem, field, at, `${what} ${v} is more than the ${c.left()} bytes left in the file`);
  return n;
}

/** A string: its length checked, its bytes skipped, or read when `keep` (they are at most CHUNK then). */
function* string(c: Cursor, field: string, o: { cap: number; problem: GgufProblem; keep?: boolean }): Generator<number, string, void> {
  yield* need(c, 8, `${field} length`);
  const at = c.pos;
  const n = length(c, c.u64(), o.cap, o.problem, `${field} length`, at, "length");
  if (!o.keep) return (c.skip(n), "");
  yield* need(c, n, field);
  return c.text(n);
}

function* parse(c: Cursor): Generator<number, GgufSummary, void> {
  yield* need(c, 8, "magic");
  const magic = c.buf.subarray(c.at(), c.at() + 4);
  if (String.fromCharCode(...magic) !== "GGUF")
    c.fail("bad_magic", "magic", 0, `the file starts with ${[...magic].map((b) => b.toString(16).padStart(2, "0")).join(" ")}, not "GGUF" (47 47 55 46)`);
  c.skip(4);
  const version = c.u32();
  if (version !== 2 && version !== 3) {
    const swapped = ((version & 0xff) << 24) | ((version & 0xff00) << 8) | ((version >>> 8) & 0xff00) | (version >>> 24);
    const why = version === 1 ? "version 1 is no longer read (llama.cpp reads 2 and 3)" : swapped === 2 || swapped === 3 ? `version ${version} is ${swapped} byte-swapped: a big-endian file` : `version ${version}: llama.cpp reads 2 and 3`;
    c.fail("bad_version", "version", 4, why);
  }
  yield* need(c, 16, "tensor_count");
  const tensorCount = c.u64();
  const kvCount = c.u64();
  const left = BigInt(c.left());
  if (kvCount > BigInt(MAX_KVS) || kvCount * BigInt(MIN_KV_BYTES) > left)
    c.fail("too_many_kvs", "kv_count", 16, `${kvCount} key-value pairs: the ${left} bytes after the header hold at most ${left / BigInt(MIN_KV_BYTES)} (${MIN_KV_BYTES} bytes each at least; limit ${MAX_KVS})`);
  const kvBytes = kvCount * BigInt(MIN_KV_BYTES);
  if (tensorCount > BigInt(MAX_TENSORS) || tensorCount * BigInt(MIN_TENSOR_INFO_BYTES) > left - kvBytes)
    c.fail("too_many_tensors", "tensor_count", 8, `${tensorCount} tensors: the ${left - kvBytes} bytes after the header and key-value pairs hold at most ${(left - kvBytes) / BigInt(MIN_TENSOR_INFO_BYTES)} (${MIN_TENSOR_INFO_BYTES} bytes each at least; limit ${MAX_TENSORS})`);

  let alignment = 32;
  const keys = new Set<string>();
  for (let i = 0; i < Number(kvCount); i++) {
    const keyAt = c.pos;
    const key = yield* string(c, `kv[${i}] key`, { cap: MAX_KEY_BYTES, problem: "key_too_long", keep: true });
    if (!key) c.fail("empty_key", `kv[${i}] key`, keyAt, "the key is empty");
    const name = `kv[${i}] ${JSON.stringify(key)}`;
    if (keys.has(key)) c.fail("duplicate_key", name, keyAt, "the key appears twice");
    keys.add(key);
    yield* need(c, 4, `${name} type`);
    const typeAt = c.pos;
    const type = c.u32();
    if (type >= VALUE_BYTES.length) c.fail("unknown_value_type", `${name} type`, typeAt, `value type ${type} is not a GGUF type (0-12)`);
    if (type === ARRAY) {
      yield* need(c, 12, `${name} array`);
      const itemAt = c.pos;
      const item = c.u32();
      if (item === ARRAY) c.fail("nested_array", `${name} element type`, itemAt, "an array of arrays (llama.cpp reads none)");
      if (item >= VALUE_BYTES.length) c.fail("unknown_value_type", `${name} element type`, itemAt, `element type ${item} is not a GGUF type (0-12)`);
      const countAt = c.pos;
      const count = c.u64();
      const each = VALUE_BYTES[item]!; // a string's length prefix for strings: the least each takes
      if (count > BigInt(MAX_ARRAY_ELEMENTS) || count * BigInt(each) > BigInt(c.left()))
        c.fail("array_too_long", `${name} length`, countAt, `${count} elements of ${VALUE_NAMES[item]} (${each} bytes each at least) do not fit in the ${c.left()} bytes left in the file (limit ${MAX_ARRAY_ELEMENTS})`);
      const n = Number(count);
      if (item !== STRING) c.skip(n * each);
      else
        for (let j = 0; j < n; j++) {
          // inline rather than string(): vocabularies hold hundreds of thousands of strings
          if (!c.has(8)) yield* need(c, 8, `${name}[${j}] length`);
          const at = c.pos;
          c.skip(length(c, c.u64(), MAX_STRING_BYTES, "string_too_long", `${name}[${j}] length`, at, "length"));
        }
    } else if (type === STRING) {
      yield* string(c, name, { cap: MAX_STRING_BYTES, problem: "string_too_long" });
    } else {
      yield* need(c, VALUE_BYTES[type]!, name);
      if (key === "general.alignment") {
        if (type !== U32) c.fail("bad_alignment", name, c.pos, `general.alignment is a ${VALUE_NAMES[type]}; llama.cpp reads a u32`);
        alignment = c.u32();
        if (alignment === 0 || (alignment & (alignment - 1)) !== 0) c.fail("bad_alignment", name, c.pos - 4, `alignment ${alignment} is not a power of two`);
      } else c.skip(VALUE_BYTES[type]!);
    }
    // Skipped bytes past the end show here rather than at the next read.
    if (c.pos > c.size) c.fail("truncated", name, keyAt, `its value runs past the end of the file (byte ${c.size})`);
  }

  const n = Number(tensorCount);
  const names = new Set<string>();
  // Offset and size of each tensor (bytes, below 2^53: each was checked against the file's size).
  const spans = new Float64Array(2 * n);
  const infoAt = new Float64Array(n);
  const labels: string[] = [];
  for (let i = 0; i < n; i++) {
    infoAt[i] = c.pos;
    const tname = yield* string(c, `tensor[${i}] name`, { cap: MAX_NAME_BYTES, problem: "tensor_name_too_long", keep: true });
    const name = `tensor[${i}] ${JSON.stringify(tname)}`;
    labels.push(name);
    if (names.has(tname)) c.fail("duplicate_tensor", name, infoAt[i]!, "the name appears twice");
    names.add(tname);
    yield* need(c, 4, `${name} dimension count`);
    const dimsAt = c.pos;
    const dimCount = c.u32();
    if (dimCount > MAX_DIMS) c.fail("too_many_dims", `${name} dimension count`, dimsAt, `${dimCount} dimensions; ggml has at most ${MAX_DIMS}`);
    yield* need(c, 8 * dimCount + 12, `${name} dimensions`);
    const dims: bigint[] = [];
    for (let d = 0; d < dimCount; d++) {
      const v = c.u64();
      if (v > INT64_MAX) c.fail("bad_dimension", `${name} dimension ${d}`, c.pos - 8, `${v} is negative as ggml's int64`);
      dims.push(v);
    }
    let elements = 1n;
    for (const d of dims) elements *= d;
    if (elements > INT64_MAX) c.fail("too_many_elements", `${name} dimensions`, dimsAt + 4, `[${dims.join(", ")}] make ${elements} elements, over 2^63 - 1`);
    const typeAt = c.pos;
    const type = c.u32();
    const t = GGML_TYPES[type];
    if (!t) c.fail("unknown_tensor_type", `${name} type`, typeAt, type < GGML_TYPES.length ? `ggml type ${type} was removed from ggml` : `ggml type ${type} does not exist (0-${GGML_TYPES.length - 1})`);
    const [typeName, block, blockBytes] = t;
    const row = dims[0] ?? 1n;
    if (row % BigInt(block) !== 0n) c.fail("bad_row_size", `${name} dimension 0`, dimsAt + 4, `${row} elements per row is not a whole number of ${typeName} blocks (${block} elements)`);
    const bytes = (elements / BigInt(block)) * BigInt(blockBytes);
    const offsetAt = c.pos;
    const offset = c.u64();
    if (offset % BigInt(alignment) !== 0n) c.fail("misaligned_tensor", `${name} offset`, offsetAt, `data offset ${offset} is not a multiple of the alignment (${alignment})`);
    if (offset + bytes > BigInt(c.size))
      c.fail("tensor_past_end", `${name} offset`, offsetAt, `${bytes} bytes of ${typeName} at data offset ${offset} end past the file's ${c.size} bytes`);
    spans[2 * i] = Number(offset);
    spans[2 * i + 1] = Number(bytes);
  }

  const dataOffset = Math.ceil(c.pos / alignment) * alignment;
  const dataBytes = Math.max(0, c.size - dataOffset);
  for (let i = 0; i < n; i++) {
    const end = spans[2 * i]! + spans[2 * i + 1]!;
    if (end > dataBytes)
      c.fail("tensor_past_end", `${labels[i]} offset`, infoAt[i]!, `its ${spans[2 * i + 1]} bytes at data offset ${spans[2 * i]} end at byte ${dataOffset + end}; the file has ${c.size}`);
  }
  const order = [...Array(n).keys()].filter((i) => spans[2 * i + 1]! > 0).sort((a, b) => spans[2 * a]! - spans[2 * b]!);
  for (let k = 1; k < order.length; k++) {
    const [a, b] = [order[k - 1]!, order[k]!];
    if (spans[2 * b]! < spans[2 * a]! + spans[2 * a + 1]!)
      c.fail("overlapping_tensors", `${labels[b]} offset`, infoAt[b]!, `its data at offset ${spans[2 * b]} overlaps ${labels[a]} (offset ${spans[2 * a]}, ${spans[2 * a + 1]} bytes)`);
  }
  return { version, tensorCount: n, kvCount: Number(kvCount), alignment, dataOffset, fileBytes: c.size };
}

/** Checks the GGUF header of `path` (synchronous: start-up checks and the CLI). Throws GgufFormatError. */
export function checkGgufSync(path: string): GgufSummary {
  const fd = openSync(path, "r");
  try {
    const c = new Cursor(path, fstatSync(fd).size);
    const it = parse(c);
    for (let r = it.next(); ; r = it.next()) {
      if (r.done) return r.value;
      // The buffer refilled from the cursor: as much as fits, or what is left of the file. A file
      // that shrank under us leaves it short, and `need` says truncated.
      c.start = c.pos;
      c.len = 0;
      const want = Math.min(CHUNK, c.size - c.pos);
      for (let got = 1; c.len < want && got > 0; c.len += got) got = readSync(fd, c.buf, c.len, want - c.len, c.pos + c.len);
    }
  } finally {
    closeSync(fd);
  }
}

/** Checks the GGUF header of `path`, reading without blocking the event loop. Throws GgufFormatError. */
export async function checkGguf(path: string, o: { signal?: AbortSignal } = {}): Promise<GgufSummary> {
  const fh = await open(path, "r");
  try {
    const c = new Cursor(path, (await fh.stat()).size);
    const it = parse(c);
    for (let r = it.next(); ; r = it.next()) {
      if (r.done) return r.value;
      o.signal?.throwIfAborted();
      c.start = c.pos;
      c.len = 0;
      const want = Math.min(CHUNK, c.size - c.pos);
      for (let got = 1; c.len < want && got > 0; c.len += got) got = (await fh.read(c.buf, c.len, want - c.len, c.pos + c.len)).bytesRead;
    }
  } finally {
    await fh.close();
  }
}

/**
 * Verdicts by file version (path, size, mtime, inode): a header is read once per version of its file
 * whoever asks (the start-up check, the planner, the registry, the engine). Only format verdicts are
 * kept; a file that cannot be opened is asked again next time.
 */
const verdicts = new Map<string, GgufSummary | GgufFormatError>();
const VERDICTS = 256;

function versionOf(path: string): string {
  const s = statSync(path);
  return `${path}\0${s.size}\0${s.mtimeMs}\0${s.ino}`;
}

function remember(key: string, v: GgufSummary | GgufFormatError): void {
  verdicts.delete(key);
  verdicts.set(key, v);
  while (verdicts.size > VERDICTS) verdicts.delete(verdicts.keys().next().value!);
}

/** checkGgufSync, once per version of the file. */
export function ggufVerdictSync(path: string): GgufSummary {
  const key = versionOf(path);
  const hit = verdicts.get(key);
  if (hit instanceof GgufFormatError) throw hit;
  if (hit) return hit;
  try {
    const v = checkGgufSync(path);
    remember(key, v);
    return v;
  } catch (e) {
    if (e instanceof GgufFormatError) remember(key, e);
    throw e;
  }
}

const SPLIT = /-(\d{5})-of-(\d{5})\.gguf$/i;

/**
 * The file and, for the first part of a split GGUF (`name-00001-of-00003.gguf`), the other parts
 * that exist beside it: node-llama-cpp's reader and llama.cpp open those by name.
 */
export function withSplitParts(path: string): string[] {
  const m = SPLIT.exec(path);
  if (!m || Number(m[1]) !== 1) return [path];
  const count = Number(m[2]);
  const stem = path.slice(0, m.index);
  const parts = [path];
  for (let i = 2; i <= Math.min(count, 99_999); i++) {
    const part = `${stem}-${String(i).padStart(5, "0")}-of-${m[2]}.gguf`;
    if (existsSync(part)) parts.push(part);
  }
  return parts;
}

/** checkGguf, once per version of the file. */
export async function ggufVerdict(path: string, o: { signal?: AbortSignal } = {}): Promise<GgufSummary> {
  const key = versionOf(path);
  const hit = verdicts.get(key);
  if (hit instanceof GgufFormatError) throw hit;
  if (hit) return hit;
  try {
    const v = await checkGguf(path, o);
    remember(key, v);
    return v;
  } catch (e) {
    if (e instanceof GgufFormatError) remember(key, e);
    throw e;
  }
}
