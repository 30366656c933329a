import { ensureChatModel } from "../../models/cache";
import { DIFFUSION_DEMO_GENERATORS } from "../../models/diffusion/demo";
import { ONNX_DEMO_GENERATORS } from "../../models/onnx/demo";
import { ensureProjector } from "../../models/projector-cache";
import type { Config } from "../lib/config";
import { builtAddon } from "../3-engines/llama/native/addon-path";
import type { ModelManifest } from "../lib/manifest";

// `--demo`: tiny generated models, written into <data_dir>/demo-models when missing, so the
// server is useful with no downloaded weights. Each engine contributes the generator of its
// kind here. The weights are random: answers are noise, but every API path is real.

export interface DemoGenerator {
  kind: ModelManifest["kind"];
  /** Writes the model's files under `dir` if they are missing and returns its manifest. */
  ensure(dir: string): Promise<ModelManifest>;
  /** False when this install cannot serve it (then it is left out). */
  available?: () => boolean;
}

const chatDefaults = { kind: "chat" as const, vision: false, load: "start" as const, queue_wait_s: 30 };

export const DEMO_GENERATORS: DemoGenerator[] = [
  {
    kind: "chat",
    ensure: async (dir) => ({
      ...chatDefaults,
      id: "demo-chat",
      name: "Demo chat (tiny random qwen3: thinking, tools, 64k context for coding agents)",
      // a window that holds a coding agent's prompt and its max_tokens (Claude Code: ~23k + 32,000)
      files: { model: await ensureChatModel("long-chat", dir) },
      max_context: 65536,
      slots: 2,
    }),
  },
  {
    kind: "chat",
    ensure: async (dir) => ({
      ...chatDefaults,
      id: "demo-small-chat",
      name: "Demo small chat (tiny random qwen3, 16k context)",
      files: { model: await ensureChatModel("small-chat", dir) },
      max_context: 16384,
      slots: 1,
    }),
  },
  {
    kind: "chat",
    // Image input needs the multimodal addon (install.sh builds it).
    available: () => builtAddon() !== null,
    ensure: async (dir) => ({
      ...chatDefaults,
      id: "demo-vision",
      name: "Demo vision chat (tiny random qwen3 + Gemma-3-family projector)",
      vision: true,
      files: { model: await ensureChatModel("chat", dir), mmproj: await ensureProjector("chat-vision", dir) },
      max_context: 8192,
      slots: 1,
    }),
  },
  ...ONNX_DEMO_GENERATORS,
  ...DIFFUSION_DEMO_GENERATORS,
];

export async function ensureDemoModels(dataDir: string, generators = DEMO_GENERATORS): Promise<ModelManifest[]> {
  const dir = `${dataDir}/demo-models`;
  const out: ModelManifest[] = [];
  for (const g of generators) if (g.available?.() ?? true) out.push(await g.ensure(dir));
  return out;
}

/** The demo models a running config serves alongside its own (set once at start, read by every reload). */
const demoModels = new WeakMap<Config, ModelManifest[]>();

/**
 * The models served: the config's, then each demo model whose id the config does not use (a block
 * with a demo model's id overrides it). The start and every reload (reload.ts) compute it here, so a
 * removed override gives the demo model back.
 */
export function withDemoModels(models: ModelManifest[], demo: readonly ModelManifest[]): ModelManifest[] {
  const own = new Set(models.map((m) => m.id));
  return [...models, ...demo.filter((m) => !own.has(m.id))];
}

/** At start (main.ts): `config` serves `demo` from now on, its own models first. */
export function serveDemoModels(config: Config, demo: ModelManifest[]): void {
  demoModels.set(config, demo);
  config.models.splice(0, config.models.length, ...withDemoModels(config.models, demo));
}

/** The demo models `config` was started with (none without --demo). */
export const demoModelsOf = (config: Config): readonly ModelManifest[] => demoModels.get(config) ?? [];
