import type { ModelManifest } from "./engines/manifest";

// `--demo`: tiny generated models, written into <data_dir>/demo-models when missing, so the
// server is useful with no downloaded weights. Each engine contributes the generator of its
// kind here; a kind without a generator is simply not served in demo mode.

export interface DemoGenerator {
  kind: ModelManifest["kind"];
  /** Writes the model's files under `dir` if they are missing and returns its manifest. */
  ensure(dir: string): Promise<ModelManifest>;
}

export const DEMO_GENERATORS: DemoGenerator[] = [];

export async function ensureDemoModels(dataDir: string, generators = DEMO_GENERATORS): Promise<ModelManifest[]> {
  const dir = `${dataDir}/demo-models`;
  const out: ModelManifest[] = [];
  for (const g of generators) out.push(await g.ensure(dir));
  return out;
}
