import type { ImagesRequest } from "./request";
import { ApiError } from "../../lib/errors";
import { MAX_SIDE, MIN_SIDE } from "../../lib/bounds";

// An images request → the job the service runs, with a named 400 for anything this server cannot
// do (spec §2.8, §4 rule 2: refuse, never drop a field silently). Defaults: size 512x512 (a
// quarter of the pixels of 1024x1024, so an unsized request stays quick on a CPU-only appliance;
// clients that want more ask for it), n 1 (as OpenAI), steps 9 (spec), a random seed when none is
// given (every image's seed is returned in data[i].seed, so any image can be made again).

export const DEFAULT_SIZE = { width: 512, height: 512 };
export const DEFAULT_STEPS = 9;

export interface ImageJob {
  model: string;
  prompt: string;
  width: number;
  height: number;
  n: number;
  /** Image i uses (seed + i) mod 2^32. */
  seed: number;
  steps: number;
}

const refuse = (param: string, message: string) => new ApiError("invalid_request", `${param}: ${message}`, { param });

/** A uniformly random 32-bit seed (from the CSPRNG; Math.random is never used). */
export function randomSeed(): number {
  return crypto.getRandomValues(new Uint32Array(1))[0]!;
}

export function parseSize(size: string | null | undefined): { width: number; height: number } {
  if (size == null || size === "auto") return DEFAULT_SIZE;
  const m = /^(\d{1,5})x(\d{1,5})$/.exec(size);
  const [width, height] = m ? [Number(m[1]), Number(m[2])] : [NaN, NaN];
  const ok = (v: number) => v >= MIN_SIDE && v <= MAX_SIDE && v % 16 === 0;
  if (!ok(width) || !ok(height))
    throw refuse("size", `must be "<W>x<H>" with W and H from ${MIN_SIDE} to ${MAX_SIDE}, multiples of 16 (got ${JSON.stringify(size)})`);
  return { width, height };
}

export function toImageJob(req: ImagesRequest, seed: () => number = randomSeed): ImageJob {
  checkUnsupported(req);
  return {
    model: req.model,
    prompt: req.prompt,
    ...parseSize(req.size),
    n: req.n ?? 1,
    seed: req.seed ?? seed(),
    steps: req.steps ?? DEFAULT_STEPS,
  };
}

function checkUnsupported(req: ImagesRequest): void {
  const rf = req.response_format;
  if (rf === "url") throw refuse("response_format", `"url" is not available: this server hosts no image files; use "b64_json"`);
  if (rf != null && rf !== "b64_json") throw refuse("response_format", `must be "b64_json"`);
  if (req.output_format != null && req.output_format !== "png") throw refuse("output_format", `only "png" is available`);
  if (req.output_compression != null) throw refuse("output_compression", `applies to jpeg and webp only; this server writes png`);
  if (req.quality != null && req.quality !== "auto" && req.quality !== "standard")
    throw refuse("quality", `only "auto" or "standard"; use "steps" (1-50) to trade quality for time`);
  if (req.style != null) throw refuse("style", `style presets are not supported; describe the style in the prompt`);
  if (req.background != null && req.background !== "auto" && req.background !== "opaque")
    throw refuse("background", `only "auto" or "opaque": images have no transparency`);
  if (req.moderation != null && req.moderation !== "auto" && req.moderation !== "low") throw refuse("moderation", `must be "auto" or "low"`);
  if (req.stream) throw refuse("stream", `streaming partial images is not supported`);
  if (req.partial_images) throw refuse("partial_images", `streaming partial images is not supported`);
}
