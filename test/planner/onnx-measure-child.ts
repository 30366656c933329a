import { readFileSync, writeFileSync } from "node:fs";
import { createLogger } from "../../src/lib/log";
import type { ModelManifest } from "../../src/lib/manifest";
import { diffusionFactory } from "../../src/3-engines/diffusion/factory";
import { transformersFactories } from "../../src/3-engines/transformers/factory";
import type { ClassifierEngine, EmbeddingEngine, ImageEngine } from "../../src/3-engines/types";

// One model's memory as the appliance's own engine takes it, in a process of its own (run by
// onnx-measure.test.ts: `bun test/planner/onnx-measure-child.ts '<json>'`; prints one JSON line).
//   before   RSS with the engine's modules imported, nothing loaded
//   loaded   RSS once the engine is loaded (its worker thread, sessions, tokenizer)
//   first    RSS after the first of its largest calls
//   after    RSS after `calls` of them (ONNX Runtime's CPU arena keeps what they took)
//   peak     the process's high-water mark during the calls (VmHWM, reset by clear_refs after load)
//   loadPeak VmHWM during the load
// The largest call: an encoder's one session call of `tokens`-token sequences, as many as the CPU
// call size lets the engine put in one call (factory.ts: 256 padded tokens, at least one
// sequence); an image model's generation at side × side (every step the same size; one step).

export interface MeasureSpec {
  kind: "embedding" | "classifier" | "image";
  folder: string;
  /** Encoders: the manifest's max_context, the length of every sequence. Image: the manifest's. */
  maxContext: number;
  /** Image: the side in pixels. */
  side?: number;
  /** How many times the largest call is made (2 by default). */
  calls?: number;
}

export interface Measured {
  beforeMb: number;
  loadedMb: number;
  firstMb: number;
  afterMb: number;
  peakMb: number;
  loadPeakMb: number;
  /** Sequences in the call (encoders). */
  batch: number;
}

const MiB = 2 ** 20;
const rssMb = () => {
  Bun.gc(true);
  return process.memoryUsage().rss / MiB;
};
const hwmMb = () => Number(/VmHWM:\s+(\d+) kB/.exec(readFileSync("/proc/self/status", "utf8"))![1]) / 1024;
/** Resets VmHWM to the current RSS (Linux ≥ 4.0, proc(5) clear_refs "5"). */
const resetPeak = () => writeFileSync("/proc/self/clear_refs", "5");
const settle = () => new Promise((r) => setTimeout(r, 200));

const spec = JSON.parse(process.argv[2]!) as MeasureSpec;
const config = { engines: { device: "cpu" as const, threads: 2 } } as any;
const logger = createLogger({ level: "error", write: () => {} });
const manifest: ModelManifest = { id: "m", name: "m", kind: spec.kind, files: { model: spec.folder }, max_context: spec.maxContext, vision: false, slots: 1, load: "first_use" };
const file = () => spec.folder;

const engine =
  spec.kind === "image"
    ? diffusionFactory(config, logger).image!(manifest, file)
    : spec.kind === "embedding"
      ? transformersFactories(config, logger).embedding!(manifest, file)
      : transformersFactories(config, logger).classifier!(manifest, file);

// The runtime's modules imported on this thread first (the engine imports them on first load), so
// `before` is the process an appliance already is.
await import("@huggingface/transformers");
await import("onnxruntime-node");
await settle();
const before = rssMb();
resetPeak();
await engine.load();
await settle();
const loadPeak = hwmMb();
const loaded = rssMb();
resetPeak();

const length = spec.maxContext;
const batch = spec.kind === "image" ? 1 : Math.max(1, Math.floor(256 / length));
// ordinary word-piece ids (the generated vocabularies have 446; real ones more)
const seq = (k: number) => Array.from({ length }, (_, i) => 10 + ((i * 7 + k) % 400));
const lease = spec.kind === "image" ? await (engine as ImageEngine).acquire() : null;
const call = async (i: number) => {
  const seqs = Array.from({ length: batch }, (_, k) => seq(k + i));
  if (lease) await lease.generate({ prompt: "a lighthouse at dusk", width: spec.side!, height: spec.side!, seed: i + 1, steps: 1 });
  else if (spec.kind === "embedding") await (engine as EmbeddingEngine).embed(seqs);
  else await (engine as ClassifierEngine).classify(seqs.map((ids) => ({ ids })));
};
await call(0);
await settle();
const first = rssMb();
for (let i = 1; i < (spec.calls ?? 2); i++) await call(i);
lease?.release();
await settle();
const peak = hwmMb();
const after = rssMb();
await engine.unload();

const out: Measured = { beforeMb: before, loadedMb: loaded, firstMb: first, afterMb: after, peakMb: peak, loadPeakMb: loadPeak, batch };
console.log(JSON.stringify(out));
process.exit(0);
