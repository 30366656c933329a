import { tempDir } from "../../helpers/app";
import { casesInOwnProcess } from "../../helpers/own-process";
import { lavapipeDescriptorsEnv } from "./lavapipe";

// The chat engine's Vulkan cases (vulkan.cases.ts) run in a `bun test` process of their own, as
// the product runs one llama.cpp runtime per process: the llama addon takes its libllama/libggml
// from the runtime loaded when it first loads (native/addon-path.ts), so a suite process that has
// loaded both node-llama-cpp's Vulkan and CPU builds would mix them (measured: the CPU tests after
// the Vulkan ones ran 50 times slower).

await casesInOwnProcess({
  file: import.meta.path,
  envVar: "APPLIANCE_VULKAN_CASES",
  cases: () => import("./vulkan.cases"),
  title: "the Vulkan cases pass in a process of their own",
  passes: 8,
  // lavapipe's descriptor bug (lavapipe-descriptors.c): the long prompt of the copy case makes ggml
  // outgrow a compute buffer, and lavapipe's queue thread crashed on the freed one (segfault)
  env: () => lavapipeDescriptorsEnv(tempDir("appliance-vulkan-cases-")),
  timeoutMs: 400_000,
});
