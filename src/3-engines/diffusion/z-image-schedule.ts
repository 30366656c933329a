import type { Schedule } from "./scheduler-config";
import { linspace } from "./scheduler-config";

// Z-Image-Turbo's sampling, as diffusers' ZImagePipeline drives FlowMatchEulerDiscreteScheduler
// (and the webnn/Z-Image-Turbo ONNX bundle's demo matches): the pipeline sets the scheduler's
// sigma_min to 0, so the noise levels are the static shift applied to linspace(1, 0, N),
//   σ(s) = shift·s / (1 + (shift − 1)·s),  shift 3,
// with 0 appended; the transformer takes timestep 1 − σ (not σ·1000), and the pipeline negates its
// output before the Euler step: x ← x + (σ_next − σ)·(−out). The last of the N sigmas is 0, so the
// N-th step moves nothing (σ_next = σ = 0): it is skipped, which changes no output. No guidance;
// 9 steps by default.

export const Z_IMAGE_SHIFT = 3;
export const Z_IMAGE_DEFAULT_STEPS = 9;

/** The schedule for `steps` steps; `timesteps` are what the transformer is given (1 − σ). */
export function zImageSchedule(steps: number, shift = Z_IMAGE_SHIFT): Schedule {
  if (!Number.isInteger(steps) || steps < 1) throw new Error("steps must be a positive integer");
  const sigmas = linspace(1, 0, steps).map((s) => (shift * s) / (1 + (shift - 1) * s));
  sigmas.push(0);
  const timesteps = sigmas.slice(0, steps).map((s) => 1 - s);
  return {
    timesteps,
    sigmas,
    initNoiseSigma: 1,
    inputScale: () => 1,
    step(i, out, x) {
      const dt = Math.fround(sigmas[i + 1]! - sigmas[i]!);
      if (dt === 0) return;
      for (let j = 0; j < x.length; j++) x[j] = x[j]! - dt * out[j]!;
    },
  };
}

/** Steps whose Euler step moves the latents (σ_next ≠ σ): the transformer runs only for these. */
export function movingSteps(s: Schedule): number[] {
  return s.timesteps.map((_, i) => i).filter((i) => s.sigmas[i + 1] !== s.sigmas[i]);
}
