import { expect, test } from "bun:test";
import { movingSteps, zImageSchedule } from "../../../src/3-engines/diffusion/z-image-schedule";

// Z-Image-Turbo's σ table for the default 9 steps, held against values worked out by hand:
// s = 1 − k/8 for k = 0…8, σ = 3s/(1 + 2s) — exact fractions — then 0 appended; the transformer
// is given 1 − σ.

const exact = [1, 21 / 22, 9 / 10, 5 / 6, 3 / 4, 9 / 14, 1 / 2, 3 / 10, 0, 0];

test("N = 9: sigmas and timesteps", () => {
  const s = zImageSchedule(9);
  expect(s.sigmas.length).toBe(10);
  s.sigmas.forEach((v, i) => expect(v).toBeCloseTo(exact[i]!, 12));
  expect(s.timesteps.length).toBe(9);
  s.timesteps.forEach((t, i) => expect(t).toBeCloseTo(1 - exact[i]!, 12));
  expect(s.timesteps[0]).toBe(0);
  expect(s.timesteps[8]).toBe(1);
});

test("the Euler step adds (σ − σ_next)·out (the pipeline negates the transformer's output); the last step moves nothing and is skipped", () => {
  const s = zImageSchedule(9);
  const x = new Float32Array([0.5, -1]);
  s.step(0, new Float32Array([2, 4]), x);
  // σ0 − σ1 = 1 − 21/22 = 1/22
  expect(x[0]).toBeCloseTo(0.5 + 2 / 22, 6);
  expect(x[1]).toBeCloseTo(-1 + 4 / 22, 6);
  const before = Float32Array.from(x);
  s.step(8, new Float32Array([100, 100]), x);
  expect(x).toEqual(before);
  expect(movingSteps(s)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
});

test("one step goes from noise (σ = 1) to 0 in a single move; bad step counts are refused", () => {
  const s = zImageSchedule(1);
  expect(s.sigmas).toEqual([1, 0]);
  expect(s.timesteps).toEqual([0]);
  expect(movingSteps(s)).toEqual([0]);
  expect(() => zImageSchedule(0)).toThrow("positive integer");
});
