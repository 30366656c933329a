import { describe, expect, test } from "bun:test";
import { createScheduler } from "../../../src/3-engines/diffusion/scheduler";

// Reference values are diffusers' (FlowMatchEulerDiscreteScheduler, EulerDiscreteScheduler) for the
// configs real models ship: Z-Image-Turbo's (shift 3, 9 steps) and Stable Diffusion's betas.

const flow = (config: Record<string, unknown>) => createScheduler("FlowMatchEulerDiscreteScheduler", { num_train_timesteps: 1000, ...config });
const SD_BETAS = { beta_start: 0.00085, beta_end: 0.012, beta_schedule: "scaled_linear", num_train_timesteps: 1000 };
const euler = (config: Record<string, unknown>) => createScheduler("EulerDiscreteScheduler", { ...SD_BETAS, ...config });

describe("flow-matching Euler", () => {
  test("shift 3 with 9 steps gives diffusers' sigmas, from 1 down to 0", () => {
    const s = flow({ shift: 3 })({ steps: 9, imageSeqLen: 1024 });
    const expected = [1, 0.954694, 0.900359, 0.833998, 0.751121, 0.644686, 0.502985, 0.305009, 0.008929, 0];
    expect(s.sigmas).toHaveLength(10);
    s.sigmas.forEach((v, i) => expect(v).toBeCloseTo(expected[i]!, 5));
    expect(s.timesteps[0]).toBeCloseTo(1000, 6);
    expect(s.timesteps[4]).toBeCloseTo(751.121, 2);
    expect(s.initNoiseSigma).toBe(1);
    expect(s.inputScale(3)).toBe(1);
  });

  test("a step moves the latents along the predicted velocity by the sigma difference", () => {
    const s = flow({ shift: 1 })({ steps: 2, imageSeqLen: 1 });
    const x = new Float32Array([1, -2]);
    s.step(0, new Float32Array([2, 4]), x);
    const dt = s.sigmas[1]! - s.sigmas[0]!;
    expect(x[0]).toBeCloseTo(1 + 2 * dt, 6);
    expect(x[1]).toBeCloseTo(-2 + 4 * dt, 6);
  });

  test("dynamic shifting takes mu from the image's sequence length", () => {
    const s = flow({ use_dynamic_shifting: true, base_shift: 0.5, max_shift: 1.15 })({ steps: 3, imageSeqLen: 4096 });
    // Timesteps 1000, 500.5, 1 → σ' = e^1.15 / (e^1.15 + 1/σ − 1).
    expect(s.sigmas[0]).toBeCloseTo(1, 6);
    expect(s.sigmas[1]).toBeCloseTo(Math.exp(1.15) / (Math.exp(1.15) + 1 / 0.5005 - 1), 6);
  });

  test("options whose sampling is not reproduced are refused at load", () => {
    expect(() => flow({ use_karras_sigmas: true })).toThrow(/use_karras_sigmas/);
    expect(() => flow({ stochastic_sampling: true })).toThrow(/stochastic_sampling/);
  });
});

describe("Euler discrete (SD-style)", () => {
  test("trailing spacing (SD-Turbo) starts at timestep 999 with Stable Diffusion's largest sigma", () => {
    const s = euler({ timestep_spacing: "trailing" })({ steps: 4, imageSeqLen: 0 });
    expect(s.timesteps).toEqual([999, 749, 499, 249]);
    [14.614641, 4.081729, 1.612886, 0.693205, 0].forEach((v, i) => expect(s.sigmas[i]).toBeCloseTo(v, 5));
    expect(s.initNoiseSigma).toBeCloseTo(14.614641, 5);
    expect(s.inputScale(0)).toBeCloseTo(1 / Math.sqrt(14.614641 ** 2 + 1), 6);
  });

  test("leading spacing with steps_offset 1 (SD 1.5) gives 981 … 1 and a noise sigma of sqrt(σ² + 1)", () => {
    const s = euler({ timestep_spacing: "leading", steps_offset: 1 })({ steps: 50, imageSeqLen: 0 });
    expect(s.timesteps[0]).toBe(981);
    expect(s.timesteps[49]).toBe(1);
    expect(s.initNoiseSigma).toBeCloseTo(13.158464, 4);
  });

  test("an epsilon step removes the predicted noise in proportion to the sigma step", () => {
    const s = euler({ timestep_spacing: "trailing", prediction_type: "epsilon" })({ steps: 1, imageSeqLen: 0 });
    const x = new Float32Array([3]);
    s.step(0, new Float32Array([0.5]), x);
    expect(x[0]).toBeCloseTo(3 - 0.5 * s.sigmas[0]!, 4); // to σ = 0: x0 = x − σ·ε
  });

  test("v-prediction is converted to the clean latents", () => {
    const s = euler({ timestep_spacing: "trailing", prediction_type: "v_prediction" })({ steps: 1, imageSeqLen: 0 });
    const sigma = s.sigmas[0]!;
    const x = new Float32Array([2]);
    s.step(0, new Float32Array([1]), x);
    expect(x[0]).toBeCloseTo((1 * -sigma) / Math.sqrt(sigma * sigma + 1) + 2 / (sigma * sigma + 1), 5);
  });

  test("unsupported prediction types, spacings and sigma schedules are refused at load", () => {
    expect(() => euler({ prediction_type: "flow" })).toThrow(/prediction_type/);
    expect(() => euler({ timestep_spacing: "karras" })).toThrow(/timestep_spacing/);
    expect(() => euler({ use_karras_sigmas: true })).toThrow(/use_karras_sigmas/);
    expect(() => euler({ beta_schedule: "sigmoid" })).toThrow(/beta_schedule/);
  });
});

test("a scheduler class other than the two supported ones is refused by name", () => {
  expect(() => createScheduler("DPMSolverMultistepScheduler", {})).toThrow(/DPMSolverMultistepScheduler.*FlowMatchEulerDiscreteScheduler, EulerDiscreteScheduler/);
});
