import { afterAll, expect, test } from "bun:test";
import { existsSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ensureChatModel } from "../../models/cache";
import { writeRealModel } from "../../models/gguf/real-archs";
import { ensureProjector } from "../../models/projector-cache";
import { checkModels } from "../../src/ops/doctor/files";
import { checkGguf, checkGgufSync, GgufFormatError, ggufVerdict, type GgufProblem } from "../../src/3-engines/gguf-check";
import { tempDir } from "../helpers/app";
import { attackGguf, GgufBytes, validGguf } from "./gguf-bytes";

// The GGUF header check (src/3-engines/gguf-check.ts) on hand-made files: each corruption refused with
// its named problem, the field and the byte offset, by the synchronous and the asynchronous reader
// alike; valid files, generated models among them, pass.

const dir = tempDir("appliance-gguf-check-");
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const g = () => new GgufBytes();
const arch = (b: GgufBytes) => b.kvStr("general.architecture", "llama");

interface Case {
  name: string;
  bytes: Uint8Array;
  problem: GgufProblem;
  /** Part of the error's field. */
  field: string;
  offset: number;
}

const cases: Case[] = [
  { name: "a header cut after the version", bytes: g().raw(Buffer.from("GGUF")).u32(3).u32(0).bytes(), problem: "truncated", field: "tensor_count", offset: 8 },
  { name: "an empty file", bytes: new Uint8Array(), problem: "truncated", field: "magic", offset: 0 },
  { name: "another format's magic", bytes: g().header({ magic: "GGML", tensors: 0, kvs: 0 }).bytes(), problem: "bad_magic", field: "magic", offset: 0 },
  { name: "GGUF version 1", bytes: g().header({ version: 1, tensors: 0, kvs: 0 }).bytes(), problem: "bad_version", field: "version", offset: 4 },
  { name: "a big-endian file", bytes: g().header({ version: 0x03000000, tensors: 0, kvs: 0 }).bytes(), problem: "bad_version", field: "version", offset: 4 },
  { name: "a key-value count of 2^63 (the outside attack's 24 bytes)", bytes: attackGguf(), problem: "too_many_kvs", field: "kv_count", offset: 16 },
  { name: "more key-value pairs than the bytes left could hold", bytes: arch(g().header({ tensors: 0, kvs: 4 })).bytes(), problem: "too_many_kvs", field: "kv_count", offset: 16 },
  { name: "a tensor count of 2^63", bytes: g().header({ tensors: 1n << 63n, kvs: 0 }).bytes(), problem: "too_many_tensors", field: "tensor_count", offset: 8 },
  { name: "a tensor count of 2^40 in a 2 KiB file", bytes: g().header({ tensors: 1n << 40n, kvs: 0 }).zeros(2048).bytes(), problem: "too_many_tensors", field: "tensor_count", offset: 8 },
  { name: "a key length of 2^63", bytes: g().header({ tensors: 0, kvs: 1 }).str("general.name", 1n << 63n).zeros(20).bytes(), problem: "key_too_long", field: "kv[0] key length", offset: 24 },
  { name: "an empty key", bytes: g().header({ tensors: 0, kvs: 1 }).str("").u32(0).raw([1]).zeros(8).bytes(), problem: "empty_key", field: "kv[0] key", offset: 24 },
  { name: "a string value 2^63 bytes long", bytes: g().header({ tensors: 0, kvs: 1 }).str("general.name").u32(8).str("tiny", 1n << 63n).bytes(), problem: "string_too_long", field: 'kv[0] "general.name" length', offset: 48 },
  { name: "a string value longer than the file", bytes: g().header({ tensors: 0, kvs: 1 }).str("general.name").u32(8).str("tiny", 4096).bytes(), problem: "string_too_long", field: 'kv[0] "general.name" length', offset: 48 },
  { name: "an array of 2^62 u32", bytes: g().header({ tensors: 0, kvs: 1 }).str("tokenizer.ggml.token_type").u32(9).u32(4).u64(1n << 62n).zeros(64).bytes(), problem: "array_too_long", field: 'kv[0] "tokenizer.ggml.token_type" length', offset: 65 },
  { name: "an array of 2^62 strings", bytes: g().header({ tensors: 0, kvs: 1 }).str("tokenizer.ggml.tokens").u32(9).u32(8).u64(1n << 62n).str("a").bytes(), problem: "array_too_long", field: 'kv[0] "tokenizer.ggml.tokens" length', offset: 61 },
  { name: "a string in an array 2^63 bytes long", bytes: g().header({ tensors: 0, kvs: 1 }).str("tokenizer.ggml.tokens").u32(9).u32(8).u64(2).str("a").str("b", 1n << 63n).bytes(), problem: "string_too_long", field: 'kv[0] "tokenizer.ggml.tokens"[1] length', offset: 78 },
  { name: "an array of arrays", bytes: g().header({ tensors: 0, kvs: 1 }).str("x.nested").u32(9).u32(9).u64(0).zeros(8).bytes(), problem: "nested_array", field: 'kv[0] "x.nested" element type', offset: 44 },
  { name: "an unknown value type", bytes: g().header({ tensors: 0, kvs: 1 }).str("general.name").u32(13).zeros(16).bytes(), problem: "unknown_value_type", field: 'kv[0] "general.name" type', offset: 44 },
  { name: "an unknown array element type", bytes: g().header({ tensors: 0, kvs: 1 }).str("x.arr").u32(9).u32(99).u64(0).bytes(), problem: "unknown_value_type", field: 'kv[0] "x.arr" element type', offset: 41 },
  { name: "a key that appears twice", bytes: arch(arch(g().header({ tensors: 0, kvs: 2 }))).bytes(), problem: "duplicate_key", field: 'kv[1] "general.architecture"', offset: 69 },
  { name: "an alignment that is not a power of two", bytes: g().header({ tensors: 0, kvs: 1 }).kvU32("general.alignment", 24).bytes(), problem: "bad_alignment", field: 'kv[0] "general.alignment"', offset: 53 },
  { name: "an alignment that is not a u32", bytes: g().header({ tensors: 0, kvs: 1 }).str("general.alignment").u32(10).u64(32).bytes(), problem: "bad_alignment", field: 'kv[0] "general.alignment"', offset: 53 },
  { name: "a value cut by the end of the file", bytes: g().header({ tensors: 0, kvs: 1 }).str("general.file_type").u32(10).u32(7).bytes(), problem: "truncated", field: 'kv[0] "general.file_type"', offset: 53 },
  { name: "a tensor name of 64 bytes", bytes: g().header({ tensors: 1, kvs: 0 }).tensor("x".repeat(64), [32], 0, 0).pad().zeros(128).bytes(), problem: "tensor_name_too_long", field: "tensor[0] name length", offset: 24 },
  { name: "a tensor name that appears twice", bytes: g().header({ tensors: 2, kvs: 0 }).tensor("w", [8], 0, 0).tensor("w", [8], 0, 32).pad().zeros(64).bytes(), problem: "duplicate_tensor", field: 'tensor[1] "w"', offset: 57 },
  { name: "five dimensions", bytes: g().header({ tensors: 1, kvs: 0 }).tensor("w", [1, 1, 1, 1, 1], 0, 0).pad().zeros(32).bytes(), problem: "too_many_dims", field: 'tensor[0] "w" dimension count', offset: 33 },
  { name: "dimensions whose product overflows int64", bytes: g().header({ tensors: 1, kvs: 0 }).tensor("w", [1n << 32n, 1n << 32n], 0, 0).pad().zeros(32).bytes(), problem: "too_many_elements", field: 'tensor[0] "w" dimensions', offset: 37 },
  { name: "a negative dimension", bytes: g().header({ tensors: 1, kvs: 0 }).tensor("w", [(1n << 64n) - 4n], 0, 0).pad().zeros(32).bytes(), problem: "bad_dimension", field: 'tensor[0] "w" dimension 0', offset: 37 },
  { name: "an unknown ggml type", bytes: g().header({ tensors: 1, kvs: 0 }).tensor("w", [32], 99, 0).pad().zeros(128).bytes(), problem: "unknown_tensor_type", field: 'tensor[0] "w" type', offset: 45 },
  { name: "a ggml type removed from ggml (Q4_2)", bytes: g().header({ tensors: 1, kvs: 0 }).tensor("w", [32], 4, 0).pad().zeros(128).bytes(), problem: "unknown_tensor_type", field: 'tensor[0] "w" type', offset: 45 },
  { name: "a Q8_0 row that is not whole blocks", bytes: g().header({ tensors: 1, kvs: 0 }).tensor("w", [33], 8, 0).pad().zeros(128).bytes(), problem: "bad_row_size", field: 'tensor[0] "w" dimension 0', offset: 37 },
  { name: "a tensor offset off the alignment", bytes: g().header({ tensors: 1, kvs: 0 }).tensor("w", [4], 0, 16).pad().zeros(64).bytes(), problem: "misaligned_tensor", field: 'tensor[0] "w" offset', offset: 49 },
  { name: "a tensor offset past the end of the file", bytes: g().header({ tensors: 1, kvs: 0 }).tensor("w", [4], 0, 1n << 40n).pad().zeros(64).bytes(), problem: "tensor_past_end", field: 'tensor[0] "w" offset', offset: 49 },
  { name: "a tensor larger than the file", bytes: g().header({ tensors: 1, kvs: 0 }).tensor("w", [64], 0, 0).pad().zeros(32).bytes(), problem: "tensor_past_end", field: 'tensor[0] "w" offset', offset: 49 },
  { name: "a tensor whose data runs past the end of the data section", bytes: g().header({ tensors: 1, kvs: 0 }).tensor("w", [16], 0, 0).pad().zeros(32).bytes(), problem: "tensor_past_end", field: 'tensor[0] "w" offset', offset: 24 },
  { name: "two tensors over the same bytes", bytes: g().header({ tensors: 2, kvs: 0 }).tensor("a", [16], 0, 0).tensor("b", [16], 0, 32).pad().zeros(128).bytes(), problem: "overlapping_tensors", field: 'tensor[1] "b" offset', offset: 57 },
  { name: "tensor infos cut by the end of the file", bytes: g().header({ tensors: 1, kvs: 0 }).str("w").u32(4).u64(8).u64(8).bytes(), problem: "truncated", field: 'tensor[0] "w" dimensions', offset: 37 },
];

const write = (name: string, bytes: Uint8Array) => {
  const path = join(dir, `${name.replace(/[^a-z0-9]+/gi, "-")}.gguf`);
  writeFileSync(path, bytes);
  return path;
};

for (const c of cases) {
  test(`refused: ${c.name} (${c.problem})`, async () => {
    const path = write(c.name, c.bytes);
    const sync = (() => {
      try {
        checkGgufSync(path);
      } catch (e) {
        return e;
      }
    })() as GgufFormatError;
    const async = (await checkGguf(path).catch((e) => e)) as GgufFormatError;
    for (const e of [sync, async]) {
      expect(e).toBeInstanceOf(GgufFormatError);
      expect({ problem: e.problem, field: e.field, offset: e.offset }).toEqual({ problem: c.problem, field: c.field, offset: c.offset });
      expect(e.message).toBe(`${path}: ${e.reason}`);
      expect(e.reason).toStartWith(`not a valid GGUF file (${c.problem}): ${c.field} at byte ${c.offset}: `);
    }
    expect(async.message).toBe(sync.message);
  });
}

test("the attack file's message says what is wrong in words", () => {
  const path = write("attack-words", attackGguf());
  expect(() => checkGgufSync(path)).toThrow(
    `${path}: not a valid GGUF file (too_many_kvs): kv_count at byte 16: 9223372036854775808 key-value pairs: the 0 bytes after the header hold at most 0 (14 bytes each at least; limit 65536)`,
  );
});

test("valid files pass: a hand-made one and a generated model, with what their header says", async () => {
  const small = write("valid", validGguf());
  expect(checkGgufSync(small)).toEqual({ version: 3, tensorCount: 2, kvCount: 2, alignment: 32, dataOffset: 192, fileBytes: 240 });
  const model = await ensureChatModel("small-chat");
  const summary = await checkGguf(model);
  expect(summary).toMatchObject({ version: 3, alignment: 32 });
  expect(summary.tensorCount).toBeGreaterThan(10);
  expect(checkGgufSync(model)).toEqual(summary);
});

test("real layouts pass: a generated projector, and qwen3-1.7b's and gemma-3-27b's shapes (Q4_K_M-style types, 151k and 262k-token vocabularies, a vision projector)", async () => {
  expect(checkGgufSync(await ensureProjector("chat-vision")).tensorCount).toBeGreaterThan(5);
  for (const id of ["qwen3-1.7b", "gemma-3-27b-it"]) {
    const written = writeRealModel(id, dir, { model: { path: `${id}.gguf` }, mmproj: { path: `${id}-mmproj.gguf` } });
    for (const { path, layout } of Object.values(written)) {
      const s = await checkGguf(path);
      expect(s.tensorCount).toBeGreaterThan(100);
      expect(s.fileBytes).toBe(statSync(path).size);
      expect(layout).toBeDefined();
    }
  }
}, 60_000);

test("doctor fails a model whose GGUF does not hold together, with the reason", () => {
  const path = write("doctor-attack", attackGguf());
  const probes = { kind: (p: string) => (existsSync(p) ? ("file" as const) : ("missing" as const)), size: (p: string) => statSync(p).size };
  const [check] = checkModels({ models: [{ id: "bad", kind: "chat", files: { model: path } }] as any, models_dir: dir, demo: false, server: { data_dir: dir } as any }, probes);
  expect(check).toMatchObject({ name: "model bad", status: "fail" });
  expect(check!.detail).toBe(`files.model (${path}) is not a valid GGUF file (too_many_kvs): kv_count at byte 16: 9223372036854775808 key-value pairs: the 0 bytes after the header hold at most 0 (14 bytes each at least; limit 65536)`);
  const good = write("doctor-good", validGguf());
  expect(checkModels({ models: [{ id: "good", kind: "chat", files: { model: good } }] as any, models_dir: dir, demo: false, server: { data_dir: dir } as any }, probes)[0]!.status).toBe("ok");
});

test("a header larger than the read buffer (1 MiB) is read across refills", () => {
  // 40,000 strings of 40 bytes: 1.9 MB of vocabulary before the tensor infos
  const b = new GgufBytes().header({ tensors: 1, kvs: 2 }).kvStr("general.architecture", "llama").str("tokenizer.ggml.tokens").u32(9).u32(8).u64(40_000);
  for (let i = 0; i < 40_000; i++) b.str(`token-${String(i).padStart(34, "0")}`);
  b.tensor("w", [8], 0, 0).pad().zeros(32);
  const path = write("big-header", b.bytes());
  expect(checkGgufSync(path).tensorCount).toBe(1);
});

test("the verdict is kept per version of the file: a file replaced in place is read again", async () => {
  const path = write("replaced", validGguf());
  expect((await ggufVerdict(path)).tensorCount).toBe(2);
  writeFileSync(path, attackGguf());
  const e = await ggufVerdict(path).catch((x) => x);
  expect(e).toBeInstanceOf(GgufFormatError);
  expect(e.problem).toBe("too_many_kvs");
  expect(await ggufVerdict(path).catch((x) => x)).toBe(e); // the same verdict, not read again
});
