// Reading diffusers' scheduler_config.json: typed fields with diffusers' defaults, and a refusal
// for options whose sampling this implementation does not reproduce; and what a schedule is (the
// interface every scheduler class implements, here so the classes need not import their chooser).

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

export interface SchedulerConfig {
  _class_name?: string;
  [key: string]: unknown;
}

/** Refuses config options whose sampling this implementation does not reproduce. */
export function refuseOptions(className: string, config: SchedulerConfig, options: Record<string, unknown>): void {
  for (const [key, neutral] of Object.entries(options)) {
    const v = config[key];
    if (v !== undefined && v !== null && v !== neutral)
      throw new Error(`${className}: ${key} = ${JSON.stringify(v)} is not supported (only ${JSON.stringify(neutral)})`);
  }
}

export function num(config: SchedulerConfig, key: string, fallback: number): number {
  const v = config[key];
  if (v === undefined || v === null) return fallback;
  if (typeof v !== "number" || !Number.isFinite(v)) throw new Error(`scheduler_config.json: ${key} must be a number`);
  return v;
}

export function str(config: SchedulerConfig, key: string, fallback: string): string {
  const v = config[key];
  if (v === undefined || v === null) return fallback;
  if (typeof v !== "string") throw new Error(`scheduler_config.json: ${key} must be a string`);
  return v;
}

export function linspace(start: number, end: number, n: number): number[] {
  if (n === 1) return [start];
  return Array.from({ length: n }, (_, i) => start + ((end - start) * i) / (n - 1));
}
