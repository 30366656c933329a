import { expect, test } from "bun:test";
import { probeCudaDecode } from "../../../src/engines/llama/cuda-probe";

// The CUDA decode test runs in a child process, because a CUDA build whose kernels the driver
// cannot run aborts the process that tries (seen on an H100 with driver 580.159).

test("a child that aborts on its first kernel is a reason, naming the CUDA error, and this process lives on", async () => {
  const abort = ["sh", "-c", "echo 'ggml_cuda: CUDA error: the provided PTX was compiled with an unsupported toolchain.' >&2; kill -ABRT $$"];
  const reason = await probeCudaDecode(10_000, abort);
  expect(reason).toBe("a CUDA decode test failed (killed by SIGABRT): CUDA error: the provided PTX was compiled with an unsupported toolchain.");
});

test("a child that hangs is killed and reported", async () => {
  expect(await probeCudaDecode(300, ["sleep", "30"])).toBe("a CUDA decode test timed out after 300 ms");
});

test("on this machine (no CUDA) the real probe, `appliance internal cuda-probe`, says why CUDA cannot decode", async () => {
  const reason = await probeCudaDecode();
  expect(reason).toStartWith("a CUDA decode test failed (exit 1): cuda-probe: ");
}, 60_000);
