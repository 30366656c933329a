import OpenAI from "openai";
import { ensureOnnxModel } from "../../models/onnx/cache";
import type { TransformersClassifierEngine } from "../../src/3-engines/transformers/classifier-engine";
import type { TransformersEmbeddingEngine } from "../../src/3-engines/transformers/embedding-engine";
import { transformersFactories, type TransformersFactoryOptions } from "../../src/3-engines/transformers/factory";
import { BASE, testApp, type TestApp } from "./app";

// A real app serving the generated ONNX models through the real transformers.js engines:
//   embed        384-d embedder, 512 tokens            embed-tight  the same folder, max_context 16
//   nli          NLI classifier, 8192 positions        nli-tight    the same folder, max_context 24
//   chat         a chat model (no engine): the wrong kind for both endpoints

export type OnnxTestApp = TestApp & {
  openai: (key: string) => OpenAI;
  embedder: (id?: string) => TransformersEmbeddingEngine;
  classifier: (id?: string) => TransformersClassifierEngine;
  usageRow: (requestId: string) => Record<string, any> | null;
};

export async function onnxTestApp(o: TransformersFactoryOptions & { config?: Record<string, unknown> } = {}): Promise<OnnxTestApp> {
  const [embed, nli] = await Promise.all([ensureOnnxModel("embed"), ensureOnnxModel("nli")]);
  const common = { vision: false, slots: 1, load: "first_use" };
  const t = testApp({
    config: {
      ...o.config,
      engines: { device: "cpu", threads: 1 },
      models: [
        { ...common, id: "embed", name: "Tiny embed", kind: "embedding", files: { model: embed }, max_context: 512 },
        { ...common, id: "embed-tight", name: "Tiny embed, short", kind: "embedding", files: { model: embed }, max_context: 16 },
        { ...common, id: "nli", name: "Tiny NLI", kind: "classifier", files: { model: nli }, max_context: 8192 },
        { ...common, id: "nli-tight", name: "Tiny NLI, short", kind: "classifier", files: { model: nli }, max_context: 24 },
        { ...common, id: "chat", name: "Chat", kind: "chat", files: { model: "chat.gguf" }, max_context: 4096 },
      ],
    },
    engines: (config, logger) => transformersFactories(config, logger, { batch: o.batch }),
  });
  return Object.assign(t, {
    openai: (key: string) =>
      new OpenAI({ apiKey: key, baseURL: `${BASE}/v1`, maxRetries: 0, fetch: (url, init) => t.app.handle(new Request(url, init)) }),
    embedder: (id = "embed") => t.deps.registry.engine(id, "embedding") as TransformersEmbeddingEngine,
    classifier: (id = "nli") => t.deps.registry.engine(id, "classifier") as TransformersClassifierEngine,
    usageRow: (requestId: string) => t.deps.db!.query<Record<string, any>, [string]>("SELECT * FROM usage WHERE request_id = ?").get(requestId),
  });
}

/** The sum of squares' root. */
export function norm(v: ArrayLike<number>): number {
  let s = 0;
  for (let i = 0; i < v.length; i++) s += v[i]! * v[i]!;
  return Math.sqrt(s);
}

/** Little-endian float32 from base64 (as OpenAI's encoding_format "base64"). */
export function decodeBase64Floats(b64: string): number[] {
  const buf = Buffer.from(b64, "base64");
  return Array.from(new Float32Array(buf.buffer, buf.byteOffset, buf.length / 4));
}
