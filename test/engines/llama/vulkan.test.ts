import { test } from "bun:test";
import { expectPassed, runTestFile } from "../../helpers/own-process";

// The chat engine's Vulkan cases (vulkan.cases.ts) run in a `bun test` process of their own, as
// the product runs one llama.cpp runtime per process: the llama addon takes its libllama/libggml
// from the runtime loaded when it first loads (native/addon-path.ts), so a suite process that has
// loaded both node-llama-cpp's Vulkan and CPU builds would mix them (measured: the CPU tests after
// the Vulkan ones ran 50 times slower).

if (process.env.APPLIANCE_VULKAN_CASES === "1") {
  await import("./vulkan.cases");
} else {
  test("the Vulkan cases pass in a process of their own", async () => {
    const run = await runTestFile(import.meta.path, { APPLIANCE_VULKAN_CASES: "1" });
    expectPassed(run, 7);
  }, 400_000);
}
