import { afterAll, describe, expect, test } from "bun:test";
import { rmSync } from "node:fs";
import type { Probes } from "../../src/ops/doctor/check";
import { runDoctor } from "../../src/ops/doctor/doctor";
import { checkVulkan, gatherVulkan, vulkanUsable, type VulkanFacts } from "../../src/ops/doctor/vulkan";
import { tempDir } from "../helpers/app";
import { chatModel, configIn, gpuHost, H100, LDCONFIG_CUDA, LDCONFIG_PLAIN, ONNX_DIR, runner } from "./fakes";

// Which GPU backend doctor predicts for the chat engine: the CUDA decode test's verdict (run only
// where the files say CUDA) and what node-llama-cpp's Vulkan build would find.

const dir = tempDir();
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const config = configIn(dir);

describe("the CUDA decode test and Vulkan in the chat engine's prediction", () => {
  const PTX = "a CUDA decode test failed (killed by SIGABRT): CUDA error: the provided PTX was compiled with an unsupported toolchain.";
  const LDCONFIG_VK = `${LDCONFIG_CUDA}\n\tlibvulkan.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libvulkan.so.1`;
  /** The H100 host of the measurements: CUDA's files in order, NVIDIA's Vulkan driver installed. */
  const h100 = (decode: Probes["cudaDecode"]) =>
    gpuHost({
      run: runner({ "nvidia-smi": { code: 0, stdout: H100 }, ldconfig: { code: 0, stdout: LDCONFIG_VK } }),
      cudaDecode: decode,
      llamaVulkan: () => "/nm/@node-llama-cpp/linux-x64-vulkan/bins/linux-x64-vulkan",
      readdir: (d) => (d === "/usr/share/vulkan/icd.d" ? ["nvidia_icd.json"] : d === ONNX_DIR ? ["libonnxruntime.so.1"] : []),
    });
  const chatLine = async (p: Probes, raw: Record<string, unknown> = { models: [chatModel] }) =>
    (await runDoctor(() => ({ config: config(raw), file: null }), p)).checks.find((c) => c.name === "chat engine")!;

  test("where the CUDA build aborts at its first kernel, doctor predicts Vulkan and says why (the H100 on driver 580.159)", async () => {
    let ran = 0;
    const line = await chatLine(h100(async () => (ran++, { build: null, failed: [`CUDA 13 build: ${PTX}`] })));
    expect(ran).toBe(1);
    expect(line.status).toBe("ok");
    expect(line.detail).toStartWith("llama.cpp → vulkan (CUDA not usable (no CUDA build decoded in a test (CUDA 13 build: a CUDA decode test failed (killed by SIGABRT): CUDA error: the provided PTX");
    expect(line.detail).toContain("Vulkan driver nvidia_icd.json and a GPU device node");
  });

  test("engines.device = cuda with no CUDA build decoding fails, naming the driver update and the Vulkan choice", async () => {
    const line = await chatLine(h100(async () => ({ build: null, failed: [`CUDA 13 build: ${PTX}`, "CUDA 12 build: a CUDA decode test failed (exit 1): cuda-probe: no libcudart.so.12"] })), { models: [chatModel], engines: { device: "cuda" } });
    expect(line.status).toBe("fail");
    expect(line.detail).toContain("CUDA 12 build: a CUDA decode test failed (exit 1): cuda-probe: no libcudart.so.12");
    expect(line.hint).toContain("update the NVIDIA driver");
    expect(line.hint).toContain('engines.device = "vulkan"');
  });

  test("where the CUDA 12 build decodes after the CUDA 13 one failed, doctor says CUDA 12 and why", async () => {
    const line = await chatLine(h100(async () => ({ build: "12", failed: [`CUDA 13 build: ${PTX}`] })));
    expect(line.status).toBe("ok");
    expect(line.detail).toStartWith(`llama.cpp → cuda (NVIDIA device present; node-llama-cpp's CUDA 12 build decoded in a test (CUDA 13 build: ${PTX}))`);
  });

  test("where CUDA decodes, doctor says so", async () => {
    expect((await chatLine(h100(async () => ({ build: "13", failed: [] })))).detail).toStartWith("llama.cpp → cuda (NVIDIA device present; node-llama-cpp's CUDA 13 build decoded in a test)");
  });

  test("the decode test is not run where the files already rule CUDA out, nor for engines.device = cpu or vulkan", async () => {
    const never: Probes["cudaDecode"] = async () => {
      throw new Error("ran");
    };
    const noRuntime = gpuHost({ run: runner({ "nvidia-smi": { code: 0, stdout: H100 }, ldconfig: { code: 0, stdout: LDCONFIG_PLAIN } }), cudaDecode: never });
    expect((await chatLine(noRuntime)).detail).toContain("libcudart.so.13 / libcublas.so.13 not found");
    expect((await chatLine(h100(never), { models: [chatModel], engines: { device: "cpu" } })).detail).toStartWith('llama.cpp → cpu (engines.device = "cpu")');
    expect((await chatLine(h100(never), { models: [chatModel], engines: { device: "vulkan" } })).detail).toStartWith('llama.cpp → vulkan (engines.device = "vulkan"');
  });
});

describe("vulkan: what the chat engine's Vulkan build would find", () => {
  const base: VulkanFacts = { loader: "/lib/x86_64-linux-gnu/libvulkan.so.1", drivers: [], gpuNode: true, llamaVulkan: "/nm/vk", cpuAdmitted: false };
  const nvidia = { file: "/usr/share/vulkan/icd.d/nvidia_icd.json", cpu: false };
  const lvp = { file: "/usr/share/vulkan/icd.d/lvp_icd.x86_64.json", cpu: true };
  const cases: { name: string; facts: Partial<VulkanFacts>; usable: boolean; status: "ok" | "warn"; text: RegExp }[] = [
    { name: "a GPU's driver and device node: usable", facts: { drivers: [nvidia, lvp] }, usable: true, status: "ok", text: /usable by the chat engine through Vulkan driver nvidia_icd\.json and a GPU device node/ },
    { name: "two GPU drivers are both named", facts: { drivers: [nvidia, { file: "/usr/share/vulkan/icd.d/radeon_icd.x86_64.json", cpu: false }] }, usable: true, status: "ok", text: /Vulkan drivers nvidia_icd\.json, radeon_icd\.x86_64\.json/ },
    { name: "only llvmpipe, not admitted, with a GPU node: not usable, says which driver to install", facts: { drivers: [lvp] }, usable: false, status: "warn", text: /no Vulkan driver for a GPU is installed/ },
    { name: "only llvmpipe, admitted by GGML_VK_VISIBLE_DEVICES: usable (the tests' setting)", facts: { drivers: [lvp], gpuNode: false, cpuAdmitted: true }, usable: true, status: "ok", text: /Mesa's llvmpipe \(a CPU-type device, admitted by GGML_VK_VISIBLE_DEVICES\)/ },
    { name: "no GPU device node: not needed, not a warning", facts: { drivers: [lvp], gpuNode: false }, usable: false, status: "ok", text: /^not needed \(no GPU\)/ },
    { name: "no loader, with a GPU: a warning naming libvulkan1", facts: { loader: null, drivers: [nvidia] }, usable: false, status: "warn", text: /the Vulkan loader \(libvulkan\.so\.1\) is not installed/ },
    { name: "node-llama-cpp's Vulkan build not shipped (--no-vulkan): a warning", facts: { llamaVulkan: null, drivers: [nvidia] }, usable: false, status: "warn", text: /node-llama-cpp's Vulkan prebuilt is not installed/ },
  ];
  for (const c of cases) {
    test(c.name, () => {
      const v = { ...base, ...c.facts };
      expect(vulkanUsable(v).ok).toBe(c.usable);
      const line = checkVulkan(v);
      expect(line.status).toBe(c.status);
      expect(line.detail).toMatch(c.text);
    });
  }

  test("gathering: the loader from ldconfig, drivers from the ICD folders, llvmpipe marked as the CPU's, a render node as a GPU", async () => {
    const v = await gatherVulkan({
      run: runner({ ldconfig: { code: 0, stdout: "\tlibvulkan.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libvulkan.so.1" } }),
      env: {},
      readdir: (d) => (d === "/usr/share/vulkan/icd.d" ? ["lvp_icd.x86_64.json", "radeon_icd.x86_64.json", "README"] : d === "/dev/dri" ? ["card0", "renderD128"] : []),
      nvidiaDevice: () => false,
      llamaVulkan: () => "/nm/vk",
    });
    expect(v).toEqual({
      loader: "/lib/x86_64-linux-gnu/libvulkan.so.1",
      drivers: [
        { file: "/usr/share/vulkan/icd.d/lvp_icd.x86_64.json", cpu: true },
        { file: "/usr/share/vulkan/icd.d/radeon_icd.x86_64.json", cpu: false },
      ],
      gpuNode: true,
      llamaVulkan: "/nm/vk",
      cpuAdmitted: false,
    });
  });
});
