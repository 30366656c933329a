import { availableParallelism } from "node:os";
import { resolve } from "node:path";
import type { Config } from "../../lib/config";
import type { Logger } from "../../lib/log";
import type { ModelManifest } from "../../lib/manifest";
import { resolveOnnxDevice } from "../onnx-device";
import type { EngineFactories } from "../registry";
import { TransformersClassifierEngine } from "./classifier-engine";
import { TransformersEmbeddingEngine } from "./embedding-engine";
import type { EncoderOptions } from "./encoder";
import { DEFAULT_BATCH_LIMITS, type BatchLimits } from "./micro-batcher";
import { TransformersRerankerEngine } from "./reranker-engine";

// Embedding, classifier and reranker engines on transformers.js + onnxruntime-node. Per model: the device
// chosen explicitly (manifest `device`, else `[engines] device`; resolveOnnxDevice), threads from
// the manifest, else `[engines] threads`, else one per core; the model folder is files.model.

export interface TransformersFactoryOptions {
  /** Micro-batching limits (tests and benchmarks). */
  batch?: Partial<BatchLimits>;
  /** Padded tokens per model call; default 256 on CPU, one call per batch on CUDA and WebGPU. */
  callTokens?: number;
}

/**
 * Measured on 2 CPU cores (MiniLM-L6 shape, 32 short sentences): one call padded to the longest took
 * as long as 32 single runs; length-sorted calls of 128–256 padded tokens took 0.6–0.7 of it.
 */
const CPU_CALL_TOKENS = 256;

export function transformersFactories(
  config: Pick<Config, "engines">,
  logger: Logger,
  extra: TransformersFactoryOptions = {},
): Pick<EngineFactories, "embedding" | "classifier" | "reranker"> {
  const threads = config.engines.threads || availableParallelism();
  const batch = { ...DEFAULT_BATCH_LIMITS, ...extra.batch };
  const options = (m: ModelManifest, file: (role: string) => string): EncoderOptions => {
    const device = resolveOnnxDevice(m.device ?? config.engines.device, m.id, logger);
    const limits = { ...batch, ...(m.batch_size ? { maxBatch: m.batch_size } : {}) };
    return {
      modelId: m.id,
      // Absolute: transformers.js reads a relative path as a Hub repo id.
      folder: resolve(file("model")),
      device,
      threads: m.threads ?? threads,
      maxContext: m.max_context,
      batch: limits,
      callTokens: extra.callTokens ?? (device === "cpu" ? CPU_CALL_TOKENS : limits.maxTokens),
      logger,
    };
  };
  return {
    embedding: (m, file) => new TransformersEmbeddingEngine(options(m, file)),
    classifier: (m, file) => new TransformersClassifierEngine(options(m, file)),
    reranker: (m, file) => new TransformersRerankerEngine(options(m, file)),
  };
}
