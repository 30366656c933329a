import { afterAll, describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { readGgufFileInfo } from "node-llama-cpp";
import { decode, encodeInto, floatToHalf, halfToFloat } from "../../models/gguf/encode";
import {
  GgmlType,
  GgufValueType,
  arr,
  bool,
  f32,
  f64,
  i16,
  i32,
  i64,
  i8,
  str,
  tensorByteSize,
  u16,
  u32,
  u64,
  u8,
} from "../../models/gguf/types";
import { writeGguf, type GgufFile } from "../../models/gguf/writer";
import { Rng, normalishSource } from "../../models/random";
import { tempFolder } from "./llama";

const tmp = tempFolder("gguf-writer-");
afterAll(tmp.remove);

describe("float16 conversion", () => {
  test("exactly representable values convert to the IEEE half bit patterns", () => {
    expect(floatToHalf(0)).toBe(0x0000);
    expect(floatToHalf(-0)).toBe(0x8000);
    expect(floatToHalf(1)).toBe(0x3c00);
    expect(floatToHalf(-2)).toBe(0xc000);
    expect(floatToHalf(0.5)).toBe(0x3800);
    expect(floatToHalf(65504)).toBe(0x7bff);
    expect(floatToHalf(2 ** -24)).toBe(0x0001); // smallest subnormal
    expect(floatToHalf(2 ** -14)).toBe(0x0400); // smallest normal
  });

  test("out-of-range values become infinity or zero and NaN stays NaN", () => {
    expect(floatToHalf(70000)).toBe(0x7c00);
    expect(floatToHalf(-Infinity)).toBe(0xfc00);
    expect(floatToHalf(1e-9)).toBe(0);
    expect(Number.isNaN(halfToFloat(floatToHalf(NaN)))).toBe(true);
  });

  test("rounding is to nearest with ties to even", () => {
    expect(floatToHalf(1 + 2 ** -11)).toBe(0x3c00); // tie, even mantissa kept
    expect(floatToHalf(1 + 3 * 2 ** -11)).toBe(0x3c02); // tie, rounds up to even
    expect(floatToHalf(1 + 2 ** -11 + 2 ** -20)).toBe(0x3c01); // above the tie
  });

  test("random values round-trip within half precision", () => {
    const rng = new Rng("f16");
    for (let i = 0; i < 2000; i++) {
      const x = (rng.next() - 0.5) * 200;
      expect(Math.abs(halfToFloat(floatToHalf(x)) - x)).toBeLessThanOrEqual(Math.abs(x) * 2 ** -11 + 2 ** -25);
    }
  });
});

describe("Q8_0 encoding", () => {
  test("each block stores d = max|x|/127 as f16 and q = round(x/d) as int8", () => {
    const values = new Float32Array(64);
    for (let i = 0; i < 32; i++) values[i] = (i - 16) / 4; // max |x| = 4
    values[40] = -1; // second block: one non-zero value
    const out = new Uint8Array(tensorByteSize(GgmlType.Q8_0, 64));
    expect(encodeInto(GgmlType.Q8_0, values, out)).toBe(68);
    const view = new DataView(out.buffer);
    expect(view.getUint16(0, true)).toBe(floatToHalf(4 / 127));
    expect(view.getInt8(2)).toBe(-127); // -4 / (4/127)
    expect(view.getInt8(2 + 16)).toBe(0);
    expect(view.getInt8(2 + 18)).toBe(Math.round(0.5 / (4 / 127)));
    expect(view.getUint16(34, true)).toBe(floatToHalf(1 / 127));
    expect(view.getInt8(36 + 8)).toBe(-127);
    const back = decode(GgmlType.Q8_0, out, 64);
    for (let i = 0; i < 64; i++) expect(Math.abs(back[i]! - values[i]!)).toBeLessThan(4 / 127);
  });

  test("an all-zero block encodes to a zero scale and zero quants", () => {
    const out = new Uint8Array(34).fill(0xff);
    encodeInto(GgmlType.Q8_0, new Float32Array(32), out);
    expect([...out].every((b) => b === 0)).toBe(true);
  });
});

function sampleFile(): { file: GgufFile; data: Record<string, Float32Array> } {
  const data = {
    a: Float32Array.from({ length: 6 }, (_, i) => i * 0.5 - 1),
    b: Float32Array.from({ length: 3 * 32 }, (_, i) => Math.sin(i)),
    c: Float32Array.from({ length: 2 * 64 }, (_, i) => Math.cos(i) * 3),
  };
  const chunks = (v: Float32Array, size: number) =>
    function* () {
      for (let i = 0; i < v.length; i += size) yield v.subarray(i, i + size);
    };
  return {
    data,
    file: {
      metadata: [
        ["general.architecture", str("test")],
        ["t.u8", u8(250)],
        ["t.i8", i8(-100)],
        ["t.u16", u16(65000)],
        ["t.i16", i16(-32000)],
        ["t.u32", u32(4_000_000_000)],
        ["t.i32", i32(-2_000_000_000)],
        ["t.f32", f32(0.25)],
        ["t.bool", bool(true)],
        ["t.string", str("héllo 🌍")],
        ["t.array", arr(GgufValueType.STRING, ["x", "yz", ""])],
        ["t.u64", u64(2n ** 40n)],
        ["t.i64", i64(-(2n ** 40n))],
        ["t.f64", f64(1 / 3)],
        ["t.ints", arr(GgufValueType.INT32, [1, -2, 3])],
      ],
      tensors: [
        { name: "a", dims: [3, 2], type: GgmlType.F32, data: chunks(data.a, 4) },
        { name: "b", dims: [32, 3], type: GgmlType.F16, data: chunks(data.b, 7) },
        { name: "c", dims: [64, 2], type: GgmlType.Q8_0, data: chunks(data.c, 50) },
      ],
    },
  };
}

describe("GGUF writer", () => {
  test("metadata of every value type and tensor infos read back with node-llama-cpp's GGUF parser", async () => {
    const { file } = sampleFile();
    const path = join(tmp.dir, "sample.gguf");
    const result = await writeGguf(path, file);
    expect(result.parameters).toBe(6 + 96 + 128);
    const info = await readGgufFileInfo(path, { logWarnings: false });
    expect(info.version).toBe(3);
    expect(Number(info.tensorCount)).toBe(3);
    const m = info.metadata as any;
    expect(m.general.alignment).toBe(32);
    expect(m.t).toMatchObject({ u8: 250, i8: -100, u16: 65000, i16: -32000, u32: 4_000_000_000, i32: -2_000_000_000, f32: 0.25, bool: true });
    expect(m.t.string).toBe("héllo 🌍");
    expect(m.t.array).toEqual(["x", "yz", ""]);
    expect(m.t.ints).toEqual([1, -2, 3]);
    expect(BigInt(m.t.u64)).toBe(2n ** 40n);
    expect(BigInt(m.t.i64)).toBe(-(2n ** 40n));
    expect(m.t.f64).toBeCloseTo(1 / 3, 15);
    const tensors = info.tensorInfo!;
    expect(tensors.map((t) => [t.name, t.dimensions.map(Number), t.ggmlType])).toEqual([
      ["a", [3, 2], GgmlType.F32],
      ["b", [32, 3], GgmlType.F16],
      ["c", [64, 2], GgmlType.Q8_0],
    ]);
    for (const t of tensors) expect(Number(t.offset) % 32).toBe(0);
    expect(info.infoEndOffset! % 32).toBe(0);
  });

  test("tensor data lands at the announced offsets and decodes to the source values", async () => {
    const { file, data } = sampleFile();
    const path = join(tmp.dir, "data.gguf");
    const { bytes } = await writeGguf(path, file);
    const raw = readFileSync(path);
    expect(raw.length).toBe(bytes);
    const info = await readGgufFileInfo(path, { logWarnings: false });
    for (const t of info.tensorInfo!) {
      const n = t.dimensions.map(Number).reduce((x, y) => x * y, 1);
      const start = Number(t.fileOffset);
      const decoded = decode(t.ggmlType as number, raw.subarray(start, start + tensorByteSize(t.ggmlType as number, n)), n);
      const source = data[t.name as keyof typeof data]!;
      const tolerance = t.ggmlType === GgmlType.F32 ? 0 : t.ggmlType === GgmlType.F16 ? 2e-3 : 3 / 127;
      for (let i = 0; i < n; i++) expect(Math.abs(decoded[i]! - source[i]!)).toBeLessThanOrEqual(tolerance);
    }
  });

  test("a data source that yields the wrong number of values is rejected", async () => {
    const bad: GgufFile = {
      metadata: [["general.architecture", str("test")]],
      tensors: [{ name: "x", dims: [4], type: GgmlType.F32, data: () => [new Float32Array(3)] }],
    };
    await expect(writeGguf(join(tmp.dir, "bad.gguf"), bad)).rejects.toThrow(/yielded 3 values, expected 4/);
  });

  test("Q8_0 tensors whose rows are not a multiple of 32 are rejected", async () => {
    const bad: GgufFile = {
      metadata: [["general.architecture", str("test")]],
      tensors: [{ name: "x", dims: [48, 2], type: GgmlType.Q8_0, data: normalishSource("x", 96, 1) }],
    };
    await expect(writeGguf(join(tmp.dir, "bad-q8.gguf"), bad)).rejects.toThrow(/multiple of 32/);
  });
});

describe("seeded random weights", () => {
  test("values depend on the seed but not on the chunk size", () => {
    // Sources reuse their chunk buffer, so copy each chunk before asking for the next.
    const collect = (source: () => Iterable<Float32Array>) => {
      const values: number[] = [];
      for (const chunk of source()) values.push(...chunk);
      return Float32Array.from(values);
    };
    const big = collect(normalishSource("s", 1000, 0.5, 0, 1 << 16));
    const small = collect(normalishSource("s", 1000, 0.5, 0, 7));
    const other = collect(normalishSource("t", 1000, 0.5));
    expect(small).toEqual(big);
    expect(other).not.toEqual(big);
  });

  test("the normal-ish values have the requested mean and standard deviation", () => {
    const [values] = [...normalishSource("stats", 100_000, 0.02, 1)()];
    const mean = values!.reduce((a, b) => a + b, 0) / values!.length;
    const std = Math.sqrt(values!.reduce((a, b) => a + (b - mean) ** 2, 0) / values!.length);
    expect(mean).toBeCloseTo(1, 3);
    expect(std).toBeGreaterThan(0.0195);
    expect(std).toBeLessThan(0.0205);
  });
});
