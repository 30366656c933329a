import { expect, test } from "bun:test";

// The chat engine's Vulkan cases (vulkan.cases.ts) run in a `bun test` process of their own, as
// the product runs one llama.cpp runtime per process: the llama addon takes its libllama/libggml
// from the runtime loaded when it first loads (native/addon-path.ts), so a suite process that has
// loaded both node-llama-cpp's Vulkan and CPU builds would mix them (measured: the CPU tests after
// the Vulkan ones ran 50 times slower).

if (process.env.APPLIANCE_VULKAN_CASES === "1") {
  await import("./vulkan.cases");
} else {
  test("the Vulkan cases pass in a process of their own", async () => {
    const child = Bun.spawn([process.execPath, "test", import.meta.path], {
      env: { ...process.env, APPLIANCE_VULKAN_CASES: "1" },
      stdout: "pipe",
      stderr: "pipe",
    });
    const [out, err, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
    const report = `${out}\n${err}`;
    expect({ code, report: code === 0 ? "" : report.slice(-6000) }).toEqual({ code: 0, report: "" });
    expect(report).toMatch(/\b7 pass\b/);
    expect(report).toMatch(/\b0 fail\b/);
  }, 400_000);
}
