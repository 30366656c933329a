// Reading diffusers' scheduler_config.json: typed fields with diffusers' defaults, and a refusal
// for options whose sampling this implementation does not reproduce.

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
