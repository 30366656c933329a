import { expect, test } from "bun:test";

// Issue 28's budget cases on the llvmpipe Vulkan device (vulkan-budget.cases.ts) run in a `bun test`
// process of their own, as the product runs one llama.cpp runtime per process: a suite process
// that has loaded both node-llama-cpp's Vulkan and CPU builds would mix them (llama/vulkan.test.ts).

if (process.env.APPLIANCE_VULKAN_BUDGET_CASES === "1") {
  await import("./vulkan-budget.cases");
} else {
  test("the Vulkan budget cases pass in a process of their own", async () => {
    const child = Bun.spawn([process.execPath, "test", import.meta.path], {
      env: { ...process.env, APPLIANCE_VULKAN_BUDGET_CASES: "1" },
      stdout: "pipe",
      stderr: "pipe",
    });
    const [out, err, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
    const report = `${out}\n${err}`;
    expect({ code, report: code === 0 ? "" : report.slice(-6000) }).toEqual({ code: 0, report: "" });
    expect(report).toMatch(/\b5 pass\b/);
    expect(report).toMatch(/\b0 fail\b/);
  }, 300_000);
}
