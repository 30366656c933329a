import type { Principal } from "../accounts/types";
import type { ImagesRequest, ImagesResponse } from "./request";
import type { ModelManifest } from "../../lib/manifest";
import type { ImageEngine } from "../../3-engines/types";
import type { CapabilityDeps } from "../capability";
import { toImageJob, type ImageJob } from "./from-request";

// THE image-generation service (spec §2.8). Order of work for one request:
//   1. check the request (named 400s) and resolve the model (404 unknown, 400 another kind);
//   2. take an image worker, waiting in a bounded queue when every one is busy (manifest `queue`,
//      `queue_wait_s`), past which 503 image_workers_busy with Retry-After;
//   3. reserve through the meter: every image counts toward the key's image limits (free 5/day and
//      2/minute, premium 300/day) and is priced per image — before any image work;
//   4. generate the n images one after another on that worker, image i with seed + i;
//   5. settle n images, or release the reservation if anything failed or the client left.
// The worker is taken before the reservation so that a busy refusal spends none of the key's
// per-minute image allowance (a released reservation keeps it); a refused reservation gives the
// worker straight back. The worker is released only once its thread has stopped.

export interface ImageCallOptions {
  requestId: string;
  endpoint?: string;
  batch?: boolean;
  /** Client gone: stop at the next denoiser step and free the worker. */
  signal?: AbortSignal;
}

export type ImagesService = ReturnType<typeof createImagesService>;

export function createImagesService(deps: CapabilityDeps) {
  const { registry, meter, clock } = deps;

  async function generate(principal: Principal, req: ImagesRequest, opts: ImageCallOptions): Promise<ImagesResponse> {
    const job = toImageJob(req);
    // Held until the images are made: a reload that removes the model unloads it only then.
    return registry.using(job.model, "image", (manifest, engine) => generateWith(manifest, engine, principal, job, opts), opts.signal);
  }

  async function generateWith(manifest: ModelManifest, engine: ImageEngine, principal: Principal, job: ImageJob, opts: ImageCallOptions): Promise<ImagesResponse> {
    const worker = await engine.acquire(opts.signal);
    const request = { requestId: opts.requestId, model: manifest, endpoint: opts.endpoint ?? "/v1/images/generations", inputTokens: 0, maxOutputTokens: 0, images: job.n, batch: opts.batch };
    try {
      return await meter.metered(principal, request, async () => {
        const data: ImagesResponse["data"] = [];
        for (let i = 0; i < job.n; i++) {
          const seed = (job.seed + i) % 2 ** 32;
          const png = await worker.generate({ prompt: job.prompt, width: job.width, height: job.height, seed, steps: job.steps }, opts.signal);
          data.push({ b64_json: Buffer.from(png).toString("base64"), seed });
        }
        const result = { created: Math.floor(clock.now() / 1000), data, size: `${job.width}x${job.height}`, output_format: "png" as const };
        return { result, usage: { inputTokens: 0, outputTokens: 0, images: job.n } };
      });
    } finally {
      worker.release();
    }
  }

  return { generate };
}
