import { test } from "bun:test";
import { expectPassed, runTestFile } from "../helpers/own-process";

// Issue 28's GPU-sharing cases on the llvmpipe Vulkan device (vulkan-rental.cases.ts) run in a `bun test`
// process of their own, as the product runs one llama.cpp runtime per process: a suite process
// that has loaded both node-llama-cpp's Vulkan and CPU builds would mix them (llama/vulkan.test.ts).

if (process.env.APPLIANCE_VULKAN_RENTAL_CASES === "1") {
  await import("./vulkan-rental.cases");
} else {
  test("the Vulkan rental cases pass in a process of their own", async () => {
    const run = await runTestFile(import.meta.path, { APPLIANCE_VULKAN_RENTAL_CASES: "1" });
    expectPassed(run, 3);
  }, 300_000);
}
