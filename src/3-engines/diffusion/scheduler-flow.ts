import { linspace, num, refuseOptions, type Schedule, type ScheduleOptions, type SchedulerConfig } from "./scheduler-config";

// diffusers' FlowMatchEulerDiscreteScheduler (rectified flow, as used by SD3, FLUX and Z-Image):
// the denoiser predicts a velocity v and x(σ_next) = x(σ) + (σ_next − σ)·v. Sigmas are spaced
// evenly in timestep between the shifted training extremes, then shifted again:
//   σ' = shift·σ / (1 + (shift − 1)·σ)              (static shift; Z-Image-Turbo uses shift 3)
//   σ' = e^μ / (e^μ + 1/σ − 1)                      (use_dynamic_shifting, μ from the image size)
// optionally stretched so the last sigma is shift_terminal; then 0 is appended. The denoiser's
// timestep is σ·num_train_timesteps; its input is not scaled; the first latents are unit noise.

export function flowMatchEulerScheduler(config: SchedulerConfig): (opts: ScheduleOptions) => Schedule {
  const name = "FlowMatchEulerDiscreteScheduler";
  refuseOptions(name, config, {
    invert_sigmas: false,
    use_karras_sigmas: false,
    use_exponential_sigmas: false,
    use_beta_sigmas: false,
    stochastic_sampling: false,
    time_shift_type: "exponential",
  });
  const trainSteps = num(config, "num_train_timesteps", 1000);
  const shift = num(config, "shift", 1);
  const dynamic = config.use_dynamic_shifting === true;
  const shiftTerminal = config.shift_terminal == null ? null : num(config, "shift_terminal", 0);
  const baseShift = num(config, "base_shift", 0.5);
  const maxShift = num(config, "max_shift", 1.15);
  const baseSeqLen = num(config, "base_image_seq_len", 256);
  const maxSeqLen = num(config, "max_image_seq_len", 4096);

  const staticShift = (s: number) => (shift * s) / (1 + (shift - 1) * s);
  // The training schedule's extremes, as the scheduler's constructor leaves them.
  const sigmaMax = dynamic ? 1 : staticShift(1);
  const sigmaMin = dynamic ? 1 / trainSteps : staticShift(1 / trainSteps);

  return ({ steps, imageSeqLen }) => {
    let sigmas = linspace(sigmaMax * trainSteps, sigmaMin * trainSteps, steps).map((t) => t / trainSteps);
    if (dynamic) {
      const m = (maxShift - baseShift) / (maxSeqLen - baseSeqLen);
      const mu = imageSeqLen * m + (baseShift - m * baseSeqLen);
      sigmas = sigmas.map((s) => Math.exp(mu) / (Math.exp(mu) + (1 / s - 1)));
    } else {
      sigmas = sigmas.map(staticShift);
    }
    if (shiftTerminal !== null) {
      const scale = (1 - sigmas[sigmas.length - 1]!) / (1 - shiftTerminal);
      sigmas = sigmas.map((s) => 1 - (1 - s) / scale);
    }
    const timesteps = sigmas.map((s) => s * trainSteps);
    sigmas.push(0);
    return {
      timesteps,
      sigmas,
      initNoiseSigma: 1,
      inputScale: () => 1,
      step(i, v, x) {
        const dt = Math.fround(sigmas[i + 1]! - sigmas[i]!);
        for (let j = 0; j < x.length; j++) x[j] = x[j]! + dt * v[j]!;
      },
    };
  };
}
