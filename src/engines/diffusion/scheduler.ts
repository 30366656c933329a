import { eulerDiscreteScheduler } from "./scheduler-euler";
import type { SchedulerConfig } from "./scheduler-config";
import { flowMatchEulerScheduler } from "./scheduler-flow";

// The sampler's schedule, chosen by the class named in the model's model_index.json and configured
// from scheduler/scheduler_config.json, as diffusers does. Both are first-order Euler steps over a
// decreasing list of sigmas ending at 0; they differ in what the denoiser predicts and how its
// input is scaled.

export interface Schedule {
  /** What the denoiser receives as `timestep` at each step (diffusers' scheduler.timesteps). */
  readonly timesteps: number[];
  /** Noise levels; one longer than timesteps, ending at 0. */
  readonly sigmas: number[];
  /** Factor applied to unit Gaussian noise to make the first latents. */
  readonly initNoiseSigma: number;
  /** Scale of the denoiser's input at step i (sample is multiplied by it). */
  inputScale(i: number): number;
  /** One Euler step in place: latents ← next latents, from the denoiser's output at step i. */
  step(i: number, output: Float32Array, latents: Float32Array): void;
}

export interface ScheduleOptions {
  steps: number;
  /** Latent tokens after 2×2 patching, for FLUX-style dynamic shifting. */
  imageSeqLen: number;
}

export const SUPPORTED_SCHEDULERS = ["FlowMatchEulerDiscreteScheduler", "EulerDiscreteScheduler"] as const;

/** Checks a config once at load; the returned function makes a schedule for a request. */
export function createScheduler(className: string, config: SchedulerConfig): (opts: ScheduleOptions) => Schedule {
  switch (className) {
    case "FlowMatchEulerDiscreteScheduler":
      return flowMatchEulerScheduler(config);
    case "EulerDiscreteScheduler":
      return eulerDiscreteScheduler(config);
    default:
      throw new Error(`scheduler "${className}" is not supported (supported: ${SUPPORTED_SCHEDULERS.join(", ")})`);
  }
}
