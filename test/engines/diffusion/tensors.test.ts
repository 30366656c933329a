import { expect, test } from "bun:test";
import { fromHalf, fromHalfJs, toHalf, toHalfJs } from "../../../src/3-engines/diffusion/tensors";

// fp16 conversion: the runtime's Float16Array (fast, native) and the portable functions agree bit
// for bit, so an image does not change with the runtime that made it.

test("every half value converts to the same float either way", () => {
  const all = Uint16Array.from({ length: 65536 }, (_, i) => i);
  const [a, b] = [fromHalf(all), fromHalfJs(all)];
  for (let i = 0; i < all.length; i++) if (!Object.is(a[i], b[i]) && !(Number.isNaN(a[i]) && Number.isNaN(b[i]))) throw new Error(`0x${i.toString(16)}: ${a[i]} vs ${b[i]}`);
  expect(typeof Float16Array).toBe("function"); // the fast path is the one tested against the portable one
});

test("floats round to the same half bits either way: ties to even, overflow, subnormals, signed zero", () => {
  const edge = [0, -0, 1, 65504, 65519.99, 65520, -65520, 1e9, 6.103515625e-5, 6.1e-5, 5.960464477539063e-8, 2.98e-8, 2.980232238769531e-8, 1e-10, Infinity, -Infinity, 1 + 2 ** -11, 1 + 3 * 2 ** -11];
  let x = 0x9e3779b9;
  const rand = () => ((x = (Math.imul(x ^ (x >>> 15), 0x2c1b3c6d) + 0x6d2b79f5) >>> 0) / 2 ** 32);
  const values = Float32Array.from([...edge, ...Array.from({ length: 200_000 }, () => (rand() - 0.5) * 10 ** (rand() * 14 - 9))]);
  const [a, b] = [toHalf(values), toHalfJs(values)];
  for (let i = 0; i < values.length; i++) if (a[i] !== b[i]) throw new Error(`${values[i]}: 0x${a[i]!.toString(16)} vs 0x${b[i]!.toString(16)}`);
  expect([...toHalf(Float32Array.from([1, -0, 65520, 1 + 2 ** -11]))]).toEqual([0x3c00, 0x8000, 0x7c00, 0x3c00]);
});
