import { linspace, num, refuseOptions, str, type Schedule, type ScheduleOptions, type SchedulerConfig } from "./scheduler-config";

// diffusers' EulerDiscreteScheduler (Stable Diffusion family; SD-Turbo uses it with "trailing"
// spacing), deterministic (s_churn = 0). From the training betas: ᾱ = Π(1 − β),
// σ(t) = sqrt((1 − ᾱ_t)/ᾱ_t); inference timesteps are spaced per `timestep_spacing`, their sigmas
// interpolated linearly, 0 appended. The denoiser sees x/sqrt(σ² + 1) and the integer-valued
// timestep; from its prediction (epsilon, v_prediction or sample) the step goes
//   x0 = prediction of the clean latents;  x ← x + (x − x0)/σ · (σ_next − σ).

export function eulerDiscreteScheduler(config: SchedulerConfig): (opts: ScheduleOptions) => Schedule {
  const name = "EulerDiscreteScheduler";
  refuseOptions(name, config, {
    use_karras_sigmas: false,
    use_exponential_sigmas: false,
    use_beta_sigmas: false,
    rescale_betas_zero_snr: false,
    timestep_type: "discrete",
    final_sigmas_type: "zero",
    trained_betas: null,
  });
  const trainSteps = num(config, "num_train_timesteps", 1000);
  const betaStart = num(config, "beta_start", 0.0001);
  const betaEnd = num(config, "beta_end", 0.02);
  const schedule = str(config, "beta_schedule", "linear");
  const prediction = str(config, "prediction_type", "epsilon");
  const spacing = str(config, "timestep_spacing", "linspace");
  const interpolation = str(config, "interpolation_type", "linear");
  const offset = num(config, "steps_offset", 0);
  if (!["epsilon", "v_prediction", "sample"].includes(prediction)) throw new Error(`${name}: prediction_type "${prediction}" is not supported`);
  if (!["linspace", "leading", "trailing"].includes(spacing)) throw new Error(`${name}: timestep_spacing "${spacing}" is not supported`);
  if (interpolation !== "linear") throw new Error(`${name}: interpolation_type "${interpolation}" is not supported`);

  let betas: number[];
  if (schedule === "linear") betas = linspace(betaStart, betaEnd, trainSteps);
  else if (schedule === "scaled_linear") betas = linspace(Math.sqrt(betaStart), Math.sqrt(betaEnd), trainSteps).map((b) => b * b);
  else if (schedule === "squaredcos_cap_v2") betas = cosineBetas(trainSteps);
  else throw new Error(`${name}: beta_schedule "${schedule}" is not supported`);
  const trainSigmas: number[] = [];
  let alphaBar = 1;
  for (const b of betas) {
    alphaBar *= 1 - b;
    trainSigmas.push(Math.sqrt((1 - alphaBar) / alphaBar));
  }

  return ({ steps }) => {
    let timesteps: number[];
    if (spacing === "linspace") timesteps = linspace(0, trainSteps - 1, steps).reverse();
    else if (spacing === "leading") {
      const ratio = Math.floor(trainSteps / steps);
      timesteps = Array.from({ length: steps }, (_, i) => Math.round((steps - 1 - i) * ratio) + offset);
    } else {
      const ratio = trainSteps / steps;
      timesteps = Array.from({ length: steps }, (_, i) => Math.round(trainSteps - i * ratio) - 1);
    }
    const sigmas = timesteps.map((t) => interpolate(trainSigmas, t));
    sigmas.push(0);
    const maxSigma = Math.max(...sigmas);
    return {
      timesteps,
      sigmas,
      initNoiseSigma: spacing === "linspace" || spacing === "trailing" ? maxSigma : Math.sqrt(maxSigma * maxSigma + 1),
      inputScale: (i) => 1 / Math.sqrt(sigmas[i]! * sigmas[i]! + 1),
      step(i, out, x) {
        const sigma = sigmas[i]!;
        const dt = sigmas[i + 1]! - sigma;
        const c = 1 / Math.sqrt(sigma * sigma + 1);
        for (let j = 0; j < x.length; j++) {
          const s = x[j]!;
          const x0 =
            prediction === "epsilon" ? s - sigma * out[j]! : prediction === "v_prediction" ? out[j]! * -sigma * c + s * c * c : out[j]!;
          x[j] = s + ((s - x0) / sigma) * dt;
        }
      },
    };
  };
}

/** numpy.interp over integer abscissae 0..n−1. */
function interpolate(ys: number[], x: number): number {
  if (x <= 0) return ys[0]!;
  if (x >= ys.length - 1) return ys[ys.length - 1]!;
  const i = Math.floor(x);
  return ys[i]! + (ys[i + 1]! - ys[i]!) * (x - i);
}

/** Betas of the cosine ᾱ schedule (Nichol & Dhariwal), capped at 0.999 as diffusers does. */
function cosineBetas(n: number): number[] {
  const alphaBar = (t: number) => Math.cos(((t + 0.008) / 1.008) * (Math.PI / 2)) ** 2;
  return Array.from({ length: n }, (_, i) => Math.min(1 - alphaBar((i + 1) / n) / alphaBar(i / n), 0.999));
}
