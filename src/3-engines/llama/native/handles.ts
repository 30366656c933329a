import type { LlamaContext, LlamaModel } from "node-llama-cpp";

// node-llama-cpp's own native objects behind its public model and context (its private `_model` and
// `_ctx`), which the appliance's addon unwraps to reach the llama_model / llama_context (nlc.h
// checks each against llama.cpp before use).

export function nativeModel(model: LlamaModel): unknown {
  return (model as unknown as { _model?: unknown })._model;
}

export function nativeContext(context: LlamaContext): unknown {
  return (context as unknown as { _ctx?: unknown })._ctx;
}
