import type { Llama, LlamaModel, LlamaModelOptions } from "node-llama-cpp";
import { ggufVerdict, withSplitParts } from "../gguf-check";
import { loadSignalOf } from "../load-signal";

/**
 * node-llama-cpp's loadModel behind the GGUF header check (src/3-engines/gguf-check.ts: its own reader
 * loops on a corrupt file's counts) and with the load's abort signal when residency lent one
 * (load-signal.ts): node-llama-cpp stops reading the header and llama.cpp's load on it. A model
 * finished as the signal fired is disposed of, not returned.
 */
export async function loadGgufModel(llama: Llama, options: LlamaModelOptions, engine: object): Promise<LlamaModel> {
  const signal = loadSignalOf(engine);
  for (const part of withSplitParts(options.modelPath)) await ggufVerdict(part, { signal });
  signal?.throwIfAborted();
  const model = await llama.loadModel({ ...options, ...(signal ? { loadSignal: signal } : {}) });
  if (signal?.aborted) {
    await model.dispose();
    throw signal.reason;
  }
  return model;
}
