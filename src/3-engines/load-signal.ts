// The abort signal of a model load in progress, lent to the engine doing it. The residency manager
// (residency.ts) stops a load when its model leaves the config or the load outlasts its bound;
// `ModelEngine.load(settings)` takes no signal, so the signal travels beside the call, keyed by the
// engine object, for as long as that call runs. An engine that can stop a load reads it (the chat
// engine passes it to node-llama-cpp's loadModel as `loadSignal`); one that cannot (ONNX Runtime
// sessions) is given up on, and unloaded by residency once its load ends.

const lent = new WeakMap<object, AbortSignal>();

/** Runs `load` with `signal` lent to `engine` until the load settles. */
export async function withLoadSignal<T>(engine: object, signal: AbortSignal, load: () => Promise<T>): Promise<T> {
  lent.set(engine, signal);
  try {
    return await load();
  } finally {
    if (lent.get(engine) === signal) lent.delete(engine);
  }
}

/** The signal of `engine`'s load in progress, if residency lent one. */
export function loadSignalOf(engine: object): AbortSignal | undefined {
  return lent.get(engine);
}
