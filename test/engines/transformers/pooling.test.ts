import { expect, test } from "bun:test";
import { poolAndNormalise, softmax } from "../../../src/3-engines/transformers/pooling";

// Two sequences padded to 3 tokens, width 2: the second has one real token, then padding whose
// states (99) must never count.
const states = new Float32Array([1, 0, 3, 4, 0, 2, /* second */ 0, 5, 99, 99, 99, 99]);
const dims = [2, 3, 2];
const lengths = [3, 1];

const round = (vs: Float32Array[]) => vs.map((v) => Array.from(v, (x) => Math.round(x * 1e6) / 1e6));
const unit = (x: number, y: number) => [x / Math.hypot(x, y), y / Math.hypot(x, y)].map((v) => Math.round(v * 1e6) / 1e6);

test.each([
  ["mean", [unit(4 / 3, 2), [0, 1]]],
  ["cls", [unit(1, 0), [0, 1]]],
  ["max", [unit(3, 4), [0, 1]]],
  ["lasttoken", [unit(0, 2), [0, 1]]],
] as const)("%s pooling covers the real tokens only and gives unit vectors", (mode, expected) => {
  expect(round(poolAndNormalise(states, dims, lengths, mode))).toEqual(expected.map((v) => [...v]));
});

test("softmax sums to one and keeps the order of the logits", () => {
  const p = softmax([2, 0, 1]);
  expect(p.reduce((a, b) => a + b, 0)).toBeCloseTo(1, 12);
  expect(p[0]!).toBeGreaterThan(p[2]!);
  expect(p[2]!).toBeGreaterThan(p[1]!);
  expect(softmax([1000, 1000, 1000])).toEqual([1 / 3, 1 / 3, 1 / 3]);
});
