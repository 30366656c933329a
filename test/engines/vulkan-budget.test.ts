import { test } from "bun:test";
import { expectPassed, runTestFile } from "../helpers/own-process";

// Issue 28's budget cases on the llvmpipe Vulkan device (vulkan-budget.cases.ts) run in a `bun test`
// process of their own, as the product runs one llama.cpp runtime per process: a suite process
// that has loaded both node-llama-cpp's Vulkan and CPU builds would mix them (llama/vulkan.test.ts).

if (process.env.APPLIANCE_VULKAN_BUDGET_CASES === "1") {
  await import("./vulkan-budget.cases");
} else {
  test("the Vulkan budget cases pass in a process of their own", async () => {
    const run = await runTestFile(import.meta.path, { APPLIANCE_VULKAN_BUDGET_CASES: "1" });
    expectPassed(run, 5);
  }, 300_000);
}
