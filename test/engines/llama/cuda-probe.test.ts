import { afterEach, expect, test } from "bun:test";
import { chooseCudaBuild, cudaBuilds, probeCudaDecode, selectCudaBuild, type CudaBuild } from "../../../src/3-engines/llama/cuda-probe";
import { CUDA_BUILD_ENV } from "../../../src/3-engines/installed";

// The CUDA decode test runs in a child process, because a CUDA build whose kernels the driver
// cannot run aborts the process that tries (seen on an H100 with driver 580.159).

afterEach(() => selectCudaBuild("13"));

test("a child that aborts on its first kernel is a reason, naming the CUDA error, and this process lives on", async () => {
  const abort = ["sh", "-c", "echo 'ggml_cuda: CUDA error: the provided PTX was compiled with an unsupported toolchain.' >&2; kill -ABRT $$"];
  const reason = await probeCudaDecode("13", 10_000, abort);
  expect(reason).toBe("a CUDA decode test failed (killed by SIGABRT): CUDA error: the provided PTX was compiled with an unsupported toolchain.");
});

test("a child that hangs is killed and reported", async () => {
  expect(await probeCudaDecode("13", 300, ["sleep", "30"])).toBe("a CUDA decode test timed out after 300 ms");
});

test("the child is told which CUDA build to load, through the variable the executable's CUDA package reads", async () => {
  const show = ["sh", "-c", `echo "cuda-probe: build=\${${CUDA_BUILD_ENV}:-13}"; exit 1`];
  expect(await probeCudaDecode("12", 10_000, show)).toBe("a CUDA decode test failed (exit 1): cuda-probe: build=12");
  expect(await probeCudaDecode("13", 10_000, show)).toBe("a CUDA decode test failed (exit 1): cuda-probe: build=13");
  // …also when this process has selected the CUDA 12 build for itself
  selectCudaBuild("12");
  expect(await probeCudaDecode("13", 10_000, show)).toBe("a CUDA decode test failed (exit 1): cuda-probe: build=13");
});

test("the first build that decodes is chosen; the ones before it say why they were not", async () => {
  const asked: CudaBuild[] = [];
  const ptx = async (b: CudaBuild) => (asked.push(b), b === "13" ? "a CUDA decode test failed (killed by SIGABRT): CUDA error: PTX" : null);
  expect(await chooseCudaBuild(["13", "12"], ptx)).toEqual({ build: "12", failed: ["node-llama-cpp's CUDA 13 build: a CUDA decode test failed (killed by SIGABRT): CUDA error: PTX"] });
  expect(asked).toEqual(["13", "12"]);
  expect(await chooseCudaBuild(["13", "12"], async () => null)).toEqual({ build: "13", failed: [] });
  expect(await chooseCudaBuild(["13", "12"], async (b) => `no ${b}`)).toEqual({ build: null, failed: ["node-llama-cpp's CUDA 13 build: no 13", "node-llama-cpp's CUDA 12 build: no 12"] });
  // The build made on this host (./install.sh --cuda-build) is tried first, and named so.
  expect(await chooseCudaBuild(["source", "13", "12"], async (b) => (b === "source" ? "no kernel for this GPU" : null))).toEqual({
    build: "13",
    failed: ["the CUDA build made on this host (./install.sh --cuda-build): no kernel for this GPU"],
  });
});

test("the child is told to load the source build through the same variable", async () => {
  const show = ["sh", "-c", `echo "cuda-probe: build=\${${CUDA_BUILD_ENV}:-13}"; exit 1`];
  expect(await probeCudaDecode("source", 10_000, show)).toBe("a CUDA decode test failed (exit 1): cuda-probe: build=source");
  selectCudaBuild("source");
  expect(process.env[CUDA_BUILD_ENV]).toBe("source");
});

test("from the checkout only the CUDA 13 build is offered (the CUDA 12 one is assembled in the executable's lib/)", () => {
  expect(cudaBuilds()).toEqual(["13"]);
});

test("on this machine (no CUDA) the real probe, `appliance internal cuda-probe`, says why CUDA cannot decode", async () => {
  const reason = await probeCudaDecode();
  expect(reason).toStartWith("a CUDA decode test failed (exit 1): cuda-probe: ");
}, 60_000);
