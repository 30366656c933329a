import { availableParallelism } from "node:os";
import type { Config } from "../../lib/config";
import type { Logger } from "../../lib/log";
import { slotCount, slotQueue } from "../../lib/manifest";
import { resolveOnnxDevice } from "../onnx-device";
import type { EngineFactories } from "../registry";
import { DiffusionImageEngine } from "./engine";

// Image models (kind "image"): files.model is a diffusers-style ONNX export folder. The device is
// chosen explicitly per model (manifest `device`, else engines.device); the model's threads
// (manifest `threads`, else engines.threads, else one per core) are shared out among its workers,
// so `slots` workers together use about as many threads as one chat model.

export function diffusionFactory(config: Pick<Config, "engines">, logger: Logger): Pick<EngineFactories, "image"> {
  return {
    image: (m, file) => {
      const total = m.threads ?? (config.engines.threads || availableParallelism());
      return new DiffusionImageEngine({
        modelId: m.id,
        dir: file("model"),
        slots: slotCount(m),
        threads: Math.max(1, Math.floor(total / slotCount(m))),
        device: resolveOnnxDevice(m.device ?? config.engines.device, m.id, logger),
        ...slotQueue(m),
        logger,
      });
    },
  };
}
