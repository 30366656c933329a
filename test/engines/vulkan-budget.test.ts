import { casesInOwnProcess } from "../helpers/own-process";

// Issue 28's budget cases on the llvmpipe Vulkan device (vulkan-budget.cases.ts) run in a `bun test`
// process of their own, as the product runs one llama.cpp runtime per process: a suite process
// that has loaded both node-llama-cpp's Vulkan and CPU builds would mix them (llama/vulkan.test.ts).

await casesInOwnProcess({
  file: import.meta.path,
  envVar: "APPLIANCE_VULKAN_BUDGET_CASES",
  cases: () => import("./vulkan-budget.cases"),
  title: "the Vulkan budget cases pass in a process of their own",
  passes: 5,
  timeoutMs: 300_000,
});
