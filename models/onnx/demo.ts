import type { DemoGenerator } from "../../src/demo";

// Placeholder: the demo embedding and classifier models (issue 5); replaced in full.
export const ONNX_DEMO_GENERATORS: DemoGenerator[] = [];
