import { eulerDiscreteScheduler } from "./scheduler-euler";
import type { Schedule, ScheduleOptions, SchedulerConfig } from "./scheduler-config";
import { flowMatchEulerScheduler } from "./scheduler-flow";

// The sampler's schedule, chosen by the class named in the model's model_index.json and configured
// from scheduler/scheduler_config.json, as diffusers does. Both are first-order Euler steps over a
// decreasing list of sigmas ending at 0; they differ in what the denoiser predicts and how its
// input is scaled.

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
