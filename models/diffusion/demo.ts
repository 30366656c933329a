import type { DemoGenerator } from "../../src/ops/demo";
import { ensureDiffusionModel } from "./cache";

// `--demo`: the tiny flow-matching set as "demo-image" (random weights: the images are noise, but
// every path of /v1/images/generations is real). One image worker, loaded at start.

export const DIFFUSION_DEMO_GENERATORS: DemoGenerator[] = [
  {
    kind: "image",
    ensure: async (dir) => ({
      id: "demo-image",
      name: "Demo image (tiny random flow-matching diffusion set)",
      kind: "image",
      files: { model: ensureDiffusionModel("diffusion-turbo", dir) },
      max_context: 77,
      vision: false,
      slots: 1,
      load: "start",
    }),
  },
];
