import type { ImageRequest } from "../types";
import type { PipelineInfo } from "./pipeline";
import type { OnnxBackend } from "../onnx-device";

// Messages between an image worker's thread (worker.ts) and its handle (image-worker.ts).
// Stopping a generation does not go through messages: the handle writes the job's id into a
// shared Int32Array that the thread polls before every denoiser step.

export type ToWorker =
  | { type: "load"; dir: string; device: OnnxBackend; threads: number; stop: SharedArrayBuffer }
  | { type: "generate"; id: number; req: ImageRequest }
  | { type: "close" };

export type FromWorker =
  | { type: "loaded"; info: PipelineInfo }
  | { type: "load_failed"; message: string }
  | { type: "fallback"; error: string }
  | { type: "done"; id: number; png: Uint8Array }
  | { type: "failed"; id: number; stopped: boolean; message: string }
  | { type: "closed" };
