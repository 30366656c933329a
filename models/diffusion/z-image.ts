import { createHash } from "node:crypto";
import { mkdirSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { defaultModelCacheDir } from "../cache";
import { ensureGeneratedFolder } from "./cache";
import { qwenTokenizerFiles } from "./qwen-tokenizer";
import { vaeDecoderGraph } from "./vae";
import { zImageTextEncoderGraph, zImageTransformerGraph, type ZImageTransformerSpec } from "./z-image-graphs";

// A tiny Z-Image-Turbo in the file layout of the webnn/Z-Image-Turbo ONNX bundle (the revision the
// catalogue pins), so the loading code is the one a user of the real 6 GB bundle runs:
//   onnx/text_encoder_model_q4f16.onnx (+ .onnx_data, .onnx_data_1)   Qwen3-shaped, MatMulNBits
//   onnx/transformer_model_q4f16.onnx  (+ .onnx_data, .onnx_data_1)   MatMulNBits, float16 I/O
//   onnx/vae_decoder_model_f16.onnx                                    float16 I/O
//   tokenizer/tokenizer.json, tokenizer/tokenizer_config.json          Qwen3's tokenizer files
// No model_index.json or scheduler config: the bundle has none (the engine knows Z-Image's loop).
// Random weights: the images are noise.

export const Z_IMAGE_GENERATOR_VERSION = 1;

export interface ZImageModelSpec {
  seed: string;
  vocabSize: number;
  textHidden: number;
  transformerWidth: number;
  vaeWidths: [number, number, number, number];
  io: ZImageTransformerSpec["io"];
}

export const Z_IMAGE_PRESETS = {
  /** The pinned revision's contract (4-D hidden_states → sample). */
  "z-image-tiny": { seed: "z-image-tiny", vocabSize: 600, textHidden: 32, transformerWidth: 32, vaeWidths: [16, 16, 8, 8], io: "pinned" },
  /** The later contract the demo's HEAD uses ([b, 16, 1, h, w] → unified_results). */
  "z-image-tiny-5d": { seed: "z-image-tiny", vocabSize: 600, textHidden: 32, transformerWidth: 32, vaeWidths: [16, 16, 8, 8], io: "5d" },
} as const satisfies Record<string, ZImageModelSpec>;
export type ZImagePresetName = keyof typeof Z_IMAGE_PRESETS;

export const Z_IMAGE_FILES = {
  textEncoder: "onnx/text_encoder_model_q4f16.onnx",
  transformer: "onnx/transformer_model_q4f16.onnx",
  vaeDecoder: "onnx/vae_decoder_model_f16.onnx",
  tokenizer: "tokenizer/tokenizer.json",
  tokenizerConfig: "tokenizer/tokenizer_config.json",
} as const;

export function writeZImageModel(dir: string, spec: ZImageModelSpec): void {
  const tok = qwenTokenizerFiles(spec.vocabSize);
  const files: Record<string, Uint8Array | string> = {
    [Z_IMAGE_FILES.tokenizer]: tok["tokenizer.json"],
    [Z_IMAGE_FILES.tokenizerConfig]: tok["tokenizer_config.json"],
    [Z_IMAGE_FILES.vaeDecoder]: vaeDecoderGraph({ channels: 16, widths: spec.vaeWidths, seed: `${spec.seed}/vae`, io: "float16" }),
  };
  const external = (path: string, g: { toFiles: (o: { modelName: string; files: number; minBytes: number }) => Record<string, Uint8Array> }) => {
    const [folder, name] = [path.slice(0, path.lastIndexOf("/")), path.slice(path.lastIndexOf("/") + 1)];
    for (const [file, bytes] of Object.entries(g.toFiles({ modelName: name, files: 2, minBytes: 256 }))) files[`${folder}/${file}`] = bytes;
  };
  external(Z_IMAGE_FILES.textEncoder, zImageTextEncoderGraph({ vocabSize: tok.vocabSize, hidden: spec.textHidden, seed: spec.seed }));
  external(Z_IMAGE_FILES.transformer, zImageTransformerGraph({ channels: 16, textHidden: spec.textHidden, width: spec.transformerWidth, seed: spec.seed, io: spec.io }));
  for (const [rel, data] of Object.entries(files)) {
    const path = join(dir, rel);
    mkdirSync(join(path, ".."), { recursive: true });
    writeFileSync(path, data);
  }
}

/** The bundle of `preset` in the shared model cache (or `dir`), generated first if missing. */
export function ensureZImageModel(preset: ZImagePresetName, dir = defaultModelCacheDir()): string {
  const spec = Z_IMAGE_PRESETS[preset];
  const hash = createHash("sha256").update(JSON.stringify({ version: Z_IMAGE_GENERATOR_VERSION, spec })).digest("hex").slice(0, 12);
  const target = join(resolve(dir), `${preset}.${Z_IMAGE_GENERATOR_VERSION}.${hash}`);
  return ensureGeneratedFolder(target, Z_IMAGE_FILES.transformer, (temp) => writeZImageModel(temp, spec));
}
