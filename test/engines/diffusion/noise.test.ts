import { expect, test } from "bun:test";
import { gaussianNoise, SeededRandom } from "../../../src/3-engines/diffusion/noise";
import { toRgb } from "../../../src/3-engines/diffusion/png";
import { fromHalf, toHalf } from "../../../src/3-engines/diffusion/tensors";

test("the same seed gives the same noise, another seed other noise", () => {
  expect(gaussianNoise(7, 1001)).toEqual(gaussianNoise(7, 1001));
  expect(gaussianNoise(7, 64)).not.toEqual(gaussianNoise(8, 64));
  expect(gaussianNoise(7, 10)).toEqual(gaussianNoise(7, 11).subarray(0, 10));
});

test("the noise is fixed across versions: the first values of seed 0 are pinned", () => {
  // xoshiro128** seeded by splitmix32 + Box–Muller; a change here changes every generated image.
  expect(new SeededRandom(0).nextU32()).toBe(50113177);
  expect(Array.from(gaussianNoise(0, 4), (v) => Math.round(v * 1e4) / 1e4)).toEqual([-1.0423, 2.7956, -0.3525, 1.3356]);
});

test("the noise is standard normal", () => {
  const x = gaussianNoise(12345, 200_000);
  const mean = x.reduce((a, b) => a + b, 0) / x.length;
  const std = Math.sqrt(x.reduce((a, b) => a + (b - mean) ** 2, 0) / x.length);
  expect(Math.abs(mean)).toBeLessThan(0.01);
  expect(Math.abs(std - 1)).toBeLessThan(0.01);
  expect(x.every(Number.isFinite)).toBe(true);
});

test("seeds outside 32 bits are refused", () => {
  expect(() => new SeededRandom(2 ** 32)).toThrow(/32-bit/);
  expect(() => new SeededRandom(-1)).toThrow(/32-bit/);
});

test("half-precision conversion matches the runtime's own Float16Array, subnormals and overflow included", () => {
  const F16 = (globalThis as { Float16Array?: { from(v: ArrayLike<number>): { buffer: ArrayBuffer } } }).Float16Array!;
  const values = new Float32Array([0, -0, 1, -2.5, 65504, 65520, 1e6, 1e-7, 2.98e-8, 6.1035156e-5, 0.1, Infinity, -Infinity, NaN]);
  const random = gaussianNoise(3, 4000).map((v, i) => v * 10 ** ((i % 12) - 8));
  for (const set of [values, random]) {
    const ours = toHalf(set);
    expect(Array.from(ours)).toEqual(Array.from(new Uint16Array(F16.from(set).buffer)));
    const back = fromHalf(ours);
    back.forEach((v, i) => expect(Object.is(v, Number(new Float32Array(F16.from([set[i]!]) as unknown as ArrayLike<number>)[0]))).toBe(true));
  }
});

test("decoder output in [-1, 1] becomes RGB bytes, clamped outside it", () => {
  // 2×1 image, planes R, G, B.
  const rgb = toRgb(new Float32Array([-1, 1, 0, 2, -3, 0.5]), 2, 1);
  expect(Array.from(rgb)).toEqual([0, 128, 0, 255, 255, 191]);
  // the same bytes as diffusers' formula, (x/2 + 0.5) clamped to [0, 1], ×255, rounded
  let seed = 7;
  const x = Float32Array.from({ length: 3 * 64 }, () => ((seed = (seed * 16807) % 2147483647) / 2147483647) * 2.4 - 1.2);
  const want = Array.from({ length: 64 }, (_, p) => [0, 1, 2].map((c) => Math.round(255 * Math.min(1, Math.max(0, x[c * 64 + p]! / 2 + 0.5))))).flat();
  expect(Array.from(toRgb(x, 8, 8))).toEqual(want);
});
