import { availableParallelism } from "node:os";
import type { Config } from "../../lib/config";
import type { Logger } from "../../lib/log";
import type { EngineFactories } from "../registry";
import { LlamaChatEngine, type LlamaChatEngineOptions } from "./chat-engine";
import { MIN_AUTO_CONTEXT, slotQueue } from "../../lib/manifest";
import { llamaRuntime, type LlamaRuntime } from "./runtime";

/** Chat engines on llama.cpp, configured from the manifest and `[engines]`. */
export function llamaChatFactory(
  config: Pick<Config, "engines">,
  logger: Logger,
  extra: Pick<LlamaChatEngineOptions, "testForcedTokens" | "testGrammarBudget"> = {},
): NonNullable<EngineFactories["chat"]> {
  const threads = config.engines.threads || availableParallelism();
  const runtime = chatRuntime(config, logger);
  return (m, file) =>
    new LlamaChatEngine({
      modelId: m.id,
      modelPath: file("model"),
      ...(m.vision ? { projectorPath: file("mmproj") } : {}),
      runtime,
      // The planner's settings replace these at load; they are what loads without it (files it
      // cannot read): "auto" then lets node-llama-cpp fit the context to the device, one slot.
      contextSize: m.context === "auto" ? { min: Math.min(MIN_AUTO_CONTEXT, m.max_context), max: m.max_context } : (m.context ?? m.max_context),
      slots: m.slots === "auto" ? 1 : m.slots,
      threads: m.threads ?? threads,
      gpuLayers: m.gpu_layers ?? "auto",
      batchSize: m.batch_size,
      ...(m.gap_limit !== undefined ? { gapLimit: m.gap_limit } : {}),
      ...(m.prompt_slowdown !== undefined ? { promptSlowdown: m.prompt_slowdown } : {}),
      ...slotQueue(m),
      logger,
      ...extra,
    });
}

/** The chat engines' llama.cpp runtime (one per process): the memory planner asks it about devices too. */
export function chatRuntime(config: Pick<Config, "engines">, logger: Logger): () => Promise<LlamaRuntime> {
  const threads = config.engines.threads || availableParallelism();
  return () => llamaRuntime({ device: config.engines.device, threads, logger });
}
