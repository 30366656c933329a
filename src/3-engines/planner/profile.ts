import { resolve } from "node:path";
import type { Llama } from "node-llama-cpp";
import type { ModelManifest } from "../../lib/manifest";
import { fileVersion, VersionCache } from "./footprint";
import { profileGguf } from "./gguf-profile";
import { profileEncoder, profileImage } from "./onnx-profile";
import type { ModelProfile } from "./types";

// A model's profile from its manifest and files, by kind: chat models from their GGUF (and mmproj)
// through node-llama-cpp's GGUF reader (gguf-profile.ts), the others from their ONNX graphs and
// configs (onnx-profile.ts). What is parsed is cached by file version (path, size, mtime); a chat
// profile is too, so asking again answers from the same per-settings memo.

export interface ProfileOptions {
  /**
   * The chat engine's llama.cpp runtime (src/3-engines/llama/runtime.ts). With a GPU backend, a chat
   * model's context and compute buffers are llama.cpp's own dry run on that backend; without one
   * (or with a CPU runtime) they are estimated from the model's dimensions.
   */
  llama?: Llama;
}

const profiles = new VersionCache<ModelProfile>(128);
const llamaIds = new WeakMap<Llama, number>();
let nextLlamaId = 1;
const llamaId = (llama?: Llama) => {
  if (!llama) return 0;
  let id = llamaIds.get(llama);
  if (id === undefined) llamaIds.set(llama, (id = nextLlamaId++));
  return id;
};

export function profileModel(manifest: ModelManifest, file: (role: string) => string, o: ProfileOptions = {}): Promise<ModelProfile> {
  const model = resolve(file("model"));
  switch (manifest.kind) {
    case "chat": {
      const projectorPath = manifest.vision ? resolve(file("mmproj")) : undefined;
      const key = ["chat", fileVersion(model), projectorPath ? fileVersion(projectorPath) : "", manifest.batch_size ?? "", llamaId(o.llama)].join("\n");
      return profiles.get(key, () => profileGguf(model, { projectorPath, llama: o.llama, batchSize: manifest.batch_size }));
    }
    case "embedding":
    case "classifier":
    case "reranker":
      // cheap to build: their graphs' summaries are what is cached (per graph file version)
      return profileEncoder(manifest.kind, model, { maxTokens: manifest.max_context });
    case "image":
      return profileImage(model);
  }
}
