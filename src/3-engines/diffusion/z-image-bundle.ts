import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";

// The Z-Image-Turbo ONNX bundle as published in webnn/Z-Image-Turbo (the revision the catalogue
// pins), read once at load:
//   onnx/text_encoder_model_q4f16.onnx (+ external data)  Qwen3-4B: input_ids, attention_mask int64
//                                                          [1, L] → encoder_hidden_states fp16 [1, L, 2560]
//   onnx/transformer_model_q4f16.onnx  (+ external data)  hidden_states fp16 [1, 16, H/8, W/8]
//                                                          (a later revision: [1, 16, 1, H/8, W/8]),
//                                                          timestep fp16 [1], encoder_hidden_states
//                                                          → sample (later: unified_results)
//   onnx/vae_decoder_model_f16.onnx                        latent_sample → sample [1, 3, H, W] in [-1, 1]
//   tokenizer/tokenizer.json (+ tokenizer_config.json)     Qwen3's tokenizer
// There is no model_index.json: the loop (z-image-schedule.ts), the prompt template and the VAE's
// scaling are Z-Image-Turbo's own. Other precisions of the same graphs (…_fp16.onnx, …_q4.onnx)
// are taken when the q4f16 files are not there; where several are, the q4f16 one is used.

export interface ZImageBundle {
  root: string;
  textEncoderPath: string;
  transformerPath: string;
  vaeDecoderPath: string;
  tokenizerDir: string;
  vae: { latentChannels: number; scalingFactor: number; shiftFactor: number; scaleFactor: number };
  /** The longest prompt, in tokens, after the chat template: diffusers' max_sequence_length. */
  maxPromptTokens: number;
}

/** Z-Image-Turbo's VAE (AutoencoderKL, FLUX's): 16 latent channels, 8× down-sampling. */
export const Z_IMAGE_VAE = { latentChannels: 16, scalingFactor: 0.3611, shiftFactor: 0.1159, scaleFactor: 8 } as const;
export const Z_IMAGE_MAX_PROMPT_TOKENS = 512;

const PREFERRED = ["q4f16", "fp16", "f16", "q4", ""];

/** Whether `root` looks like such a bundle (an onnx/ folder with a transformer_model*.onnx, no model_index.json). */
export function isZImageBundle(root: string): boolean {
  return !existsSync(join(root, "model_index.json")) && pick(root, "transformer_model") !== null;
}

export function readZImageBundle(root: string): ZImageBundle {
  if (!existsSync(root) || !statSync(root).isDirectory()) throw new Error(`${root}: not a folder`);
  const file = (stem: string) => {
    const f = pick(root, stem);
    if (!f) throw new Error(`${root}: onnx/${stem}*.onnx is missing (a Z-Image bundle has onnx/text_encoder_model_q4f16.onnx, onnx/transformer_model_q4f16.onnx and onnx/vae_decoder_model_f16.onnx)`);
    return f;
  };
  if (!existsSync(join(root, "tokenizer/tokenizer.json"))) throw new Error(`${root}: tokenizer/tokenizer.json is missing`);
  for (const path of [file("text_encoder_model"), file("transformer_model")]) needData(path);
  const vaeConfig = join(root, "vae/config.json");
  const vae = existsSync(vaeConfig) ? { ...Z_IMAGE_VAE, ...vaeScaling(vaeConfig) } : { ...Z_IMAGE_VAE };
  return {
    root,
    textEncoderPath: file("text_encoder_model"),
    transformerPath: file("transformer_model"),
    vaeDecoderPath: file("vae_decoder_model"),
    tokenizerDir: join(root, "tokenizer"),
    vae,
    maxPromptTokens: Z_IMAGE_MAX_PROMPT_TOKENS,
  };
}

/** onnx/<stem>_<precision>.onnx, by preference; null when there is none. */
function pick(root: string, stem: string): string | null {
  const dir = join(root, "onnx");
  if (!existsSync(dir)) return null;
  const names = readdirSync(dir).filter((n) => n.startsWith(stem) && n.endsWith(".onnx"));
  for (const p of PREFERRED) {
    const name = p ? `${stem}_${p}.onnx` : `${stem}.onnx`;
    if (names.includes(name)) return join(dir, name);
  }
  return names.length ? join(dir, names.sort()[0]!) : null;
}

/**
 * The external data files a graph names must all be there: ONNX Runtime's own error for a missing
 * one ("… onnx_data_1: No such file") comes late and names no model. The names are found in the
 * graph's bytes (the real transformer's graph is 130 MB: searched as a buffer, never made a string).
 */
function needData(path: string): void {
  const bytes = readFileSync(path);
  const stem = Buffer.from(`${path.slice(path.lastIndexOf("/") + 1)}_data`);
  const wanted = new Set<string>();
  for (let at = bytes.indexOf(stem); at >= 0; at = bytes.indexOf(stem, at + stem.length)) {
    let end = at + stem.length;
    if (bytes[end] === 0x5f /* _ */) while (bytes[end + 1]! >= 0x30 && bytes[end + 1]! <= 0x39) end++;
    wanted.add(bytes.toString("latin1", at, end > at + stem.length ? end + 1 : end));
  }
  for (const name of wanted)
    if (!existsSync(join(path, "..", name))) throw new Error(`${path}: its external data file ${name} is missing (pull the model again)`);
}

function vaeScaling(path: string): Partial<ZImageBundle["vae"]> {
  const c = JSON.parse(readFileSync(path, "utf8")) as Record<string, unknown>;
  const out: Partial<{ -readonly [K in keyof ZImageBundle["vae"]]: number }> = {};
  if (typeof c.scaling_factor === "number") out.scalingFactor = c.scaling_factor;
  if (typeof c.shift_factor === "number") out.shiftFactor = c.shift_factor;
  if (Number.isInteger(c.latent_channels)) out.latentChannels = c.latent_channels as number;
  return out;
}
