import type { DemoGenerator } from "../../src/demo";

// Placeholder: the demo image model (issue 5); replaced in full.
export const DIFFUSION_DEMO_GENERATORS: DemoGenerator[] = [];
