import { expect, test } from "bun:test";
import { readdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { ensureOnnxModel } from "../../models/onnx/cache";
import { tempDir } from "../helpers/app";

// ONNX Runtime 1.30 starts its telemetry with the first session and leaves mat-debug-<pid>.log
// (and .ses) in the temp folder; the engines switch it off before any session.

test("a process that runs an ONNX session through the engines leaves nothing in its temp folder", async () => {
  const model = await ensureOnnxModel("embed");
  const tmp = tempDir("appliance-ort-tmp-");
  try {
    const script = `
      import { transformersRuntime } from ${JSON.stringify(join(import.meta.dir, "../../src/3-engines/transformers/runtime.ts"))};
      await transformersRuntime();
      const ort = await import("onnxruntime-node");
      const s = await ort.InferenceSession.create(${JSON.stringify(join(model, "onnx/model.onnx"))});
      console.log(s.inputNames.length > 0 ? "ok" : "no inputs");
    `;
    const env: Record<string, string | undefined> = { ...process.env, TMPDIR: tmp };
    delete env.ORT_DISABLE_TELEMETRY;
    const child = Bun.spawnSync([process.execPath, "-e", script], { env, stderr: "pipe" });
    expect(child.stdout.toString().trim()).toBe("ok");
    expect(readdirSync(tmp)).toEqual([]);
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
});
