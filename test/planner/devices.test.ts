import { describe, expect, test } from "bun:test";
import type { Llama } from "node-llama-cpp";
import { existsSync } from "node:fs";

import type { DeviceInfo } from "../../src/3-engines/planner/types";
import { discoverDevices, NVIDIA_SMI_QUERY, parseMeminfo, parseNvidiaSmi, readVulkanLimits, VULKAN_MIN_TENSOR_LIMIT, vulkanTensorLimit, type VulkanDeviceLimits } from "../../src/3-engines/planner/devices";

// nvidia-smi --query-gpu=index,uuid,name,memory.total,memory.used,memory.free --format=csv,noheader,nounits
// as a two-GPU host prints it (MiB; an RTX 4090 reports 24564 total, an H100 SXM 81559).
const TWO_GPUS = `0, GPU-8c5b3e5e-6c7c-2f0a-1d2e-3f4a5b6c7d8e, NVIDIA GeForce RTX 4090, 24564, 1325, 22893
1, GPU-0d1e2f3a-4b5c-6d7e-8f90-a1b2c3d4e5f6, NVIDIA H100 80GB HBM3, 81559, 0, 80994
`;

const MEMINFO = `MemTotal:       24683772 kB
MemFree:        18531224 kB
MemAvailable:   23408840 kB
Buffers:          102400 kB
Cached:          5012344 kB
`;

const fakeLlama = (o: { gpu: string | false; total: number; free: number; names: string[] }) =>
  ({
    gpu: o.gpu,
    getVramState: async () => ({ total: o.total, used: o.total - o.free, free: o.free, unifiedSize: 0 }),
    getGpuDeviceNames: async () => o.names,
  }) as unknown as Llama;

describe("nvidia-smi", () => {
  test("each row is a CUDA device with its index, UUID, name and memory", () => {
    expect(parseNvidiaSmi(TWO_GPUS)).toEqual({
      devices: [
        { id: "cuda:0", kind: "cuda", name: "NVIDIA GeForce RTX 4090", uuid: "GPU-8c5b3e5e-6c7c-2f0a-1d2e-3f4a5b6c7d8e", totalMb: 24564, freeMb: 22893, budgetMb: 24564 },
        { id: "cuda:1", kind: "cuda", name: "NVIDIA H100 80GB HBM3", uuid: "GPU-0d1e2f3a-4b5c-6d7e-8f90-a1b2c3d4e5f6", totalMb: 81559, freeMb: 80994, budgetMb: 81559 },
      ],
      problems: [],
    });
  });

  test("a budget caps each GPU's share; a budget above the total is the total", () => {
    expect(parseNvidiaSmi(TWO_GPUS, 40_000).devices.map((d) => d.budgetMb)).toEqual([24564, 40_000]);
    expect(parseNvidiaSmi(TWO_GPUS, 0).devices.map((d) => d.budgetMb)).toEqual([24564, 81559]);
  });

  test("a row whose memory nvidia-smi cannot tell is a problem, the others are devices", () => {
    const text = `0, GPU-aaaaaaaa-0000-4000-8000-000000000000, NVIDIA GeForce RTX 3090, [N/A], [N/A], [N/A]\n${TWO_GPUS.split("\n")[1]}\n`;
    const r = parseNvidiaSmi(text);
    expect(r.devices.map((d) => d.id)).toEqual(["cuda:1"]);
    expect(r.problems).toEqual([expect.stringContaining("[N/A]")]);
  });

  test("no output is no devices and no problem", () => {
    expect(parseNvidiaSmi("\n")).toEqual({ devices: [], problems: [] });
  });
});

describe("meminfo", () => {
  test("MemTotal and MemAvailable in MB", () => {
    expect(parseMeminfo(MEMINFO)).toEqual({ totalMb: 24105, availableMb: 22860 });
  });
  test("without MemAvailable: null", () => {
    expect(parseMeminfo("MemTotal: 1024 kB\nMemFree: 512 kB\n")).toBeNull();
  });
});

const MiB = 2 ** 20;
const GiB = 2 ** 30;
// The Vulkan loader's answers: Mesa's llvmpipe as measured here (maxMemoryAllocationSize 2 GiB),
// and a discrete GPU with made-up but typical figures (a 4 GiB storage buffer range).
const LLVMPIPE: VulkanDeviceLimits = { name: "llvmpipe (LLVM 15.0.6, 256 bits)", type: 4, maxStorageBufferRange: 128 * MiB, maxBufferBytes: 2 * GiB, indexing64: false };
const RADEON: VulkanDeviceLimits = { name: "a discrete GPU", type: 2, maxStorageBufferRange: 4 * GiB - 1, maxBufferBytes: 4 * GiB, indexing64: false };

describe("Vulkan's largest tensor", () => {
  test("ggml's devices: the GPUs, or those GGML_VK_VISIBLE_DEVICES names; the least limit among them", () => {
    expect(vulkanTensorLimit([LLVMPIPE, RADEON], undefined)).toEqual({ bytes: 4 * GiB - 1 });
    expect(vulkanTensorLimit([LLVMPIPE, RADEON], "0")).toEqual({ bytes: 128 * MiB });
    expect(vulkanTensorLimit([LLVMPIPE, RADEON], "1,0")).toEqual({ bytes: 128 * MiB });
    const small = { ...RADEON, type: 1, maxStorageBufferRange: 2 * GiB };
    expect(vulkanTensorLimit([RADEON, small], undefined)).toEqual({ bytes: 2 * GiB });
  });

  test("the storage buffer range does not bind a device with 64-bit indexing; its largest buffer does", () => {
    expect(vulkanTensorLimit([{ ...RADEON, indexing64: true, maxBufferBytes: 16 * GiB }], undefined)).toEqual({ bytes: 16 * GiB });
    expect(vulkanTensorLimit([{ ...RADEON, maxStorageBufferRange: 4 * GiB - 1, maxBufferBytes: GiB }], undefined)).toEqual({ bytes: GiB });
  });

  test("unknown: the 128 MiB the Vulkan specification guarantees, and why", () => {
    expect(VULKAN_MIN_TENSOR_LIMIT).toBe(128 * MiB);
    expect(vulkanTensorLimit(null, undefined)).toMatchObject({ bytes: 128 * MiB, problem: expect.stringContaining("cannot read") });
    expect(vulkanTensorLimit([LLVMPIPE], undefined)).toMatchObject({ bytes: 128 * MiB, problem: expect.stringContaining("none of the devices ggml uses") });
  });

  // Mesa's llvmpipe is what test/setup-vulkan.sh installs: the loader's answer for it, read through our own Vulkan instance.
  test.skipIf(!["/usr/share/vulkan/icd.d", "/etc/vulkan/icd.d"].some((d) => existsSync(d)))("the Vulkan loader's own answer for llvmpipe: 128 MiB of storage buffer range", () => {
    const devices = readVulkanLimits();
    expect(devices).not.toBeNull();
    const lvp = devices!.find((d) => d.name.startsWith("llvmpipe"));
    expect(lvp).toMatchObject({ type: 4, maxStorageBufferRange: 128 * MiB, indexing64: false });
    expect(lvp!.maxBufferBytes).toBeGreaterThanOrEqual(GiB);
    expect(readVulkanLimits()).toBe(devices); // read once a process
  });
});

describe("discoverDevices", () => {
  const meminfo = () => MEMINFO;

  test("the CPU from meminfo and the GPUs from nvidia-smi, each with its budget", async () => {
    let asked: string[] = [];
    const r = await discoverDevices({
      meminfo,
      run: async (argv) => ((asked = argv), TWO_GPUS),
      gpuBudgetMb: 20_000,
      cpuBudgetMb: 16_000,
    });
    expect(asked).toEqual(NVIDIA_SMI_QUERY);
    expect(r.problems).toEqual([]);
    expect(r.devices.map((d) => [d.id, d.totalMb, d.freeMb, d.budgetMb])).toEqual([
      ["cpu", 24105, 22860, 16_000],
      ["cuda:0", 24564, 22893, 20_000],
      ["cuda:1", 81559, 80994, 20_000],
    ]);
  });

  test("nvidia-smi failing leaves no CUDA devices and says why", async () => {
    const r = await discoverDevices({
      meminfo,
      run: async () => {
        throw new Error("nvidia-smi exited with 9: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver");
      },
    });
    expect(r.devices.map((d) => d.id)).toEqual(["cpu"]);
    expect(r.problems).toEqual([expect.stringMatching(/^nvidia-smi failed: .*couldn't communicate with the NVIDIA driver; no CUDA devices listed$/)]);
  });

  test("no nvidia-smi on the host is no CUDA devices and no problem", async () => {
    const missing = Object.assign(new Error('Executable not found in $PATH: "nvidia-smi"'), { code: "ENOENT" });
    const r = await discoverDevices({ meminfo, run: async () => Promise.reject(missing) });
    expect(r).toEqual({ devices: [expect.objectContaining({ id: "cpu" })], problems: [] });
  });

  test("without /proc/meminfo the CPU's memory comes from the OS", async () => {
    const r = await discoverDevices({ cuda: false, meminfo: () => "" });
    expect(r.devices[0]).toMatchObject({ id: "cpu", kind: "cpu" });
    expect(r.devices[0]!.totalMb).toBeGreaterThan(0);
    expect(r.devices[0]!.budgetMb).toBe(r.devices[0]!.totalMb);
  });

  test("a Vulkan runtime's memory is one vulkan device named after its GPUs, with its largest tensor", async () => {
    const llama = fakeLlama({ gpu: "vulkan", total: 2 * 2 ** 30, free: 1.5 * 2 ** 30, names: ["llvmpipe (LLVM 15.0.6, 256 bits)"] });
    const r = await discoverDevices({ cuda: false, meminfo, llama, gpuBudgetMb: 1024, vulkanLimits: () => [LLVMPIPE, RADEON] });
    const vulkan: DeviceInfo = { id: "vulkan:0", kind: "vulkan", name: "llvmpipe (LLVM 15.0.6, 256 bits)", totalMb: 2048, freeMb: 1536, budgetMb: 1024, maxTensorBytes: 4 * GiB - 1 };
    expect(r.devices[1]).toEqual(vulkan);
    expect(r.problems).toEqual([]);
  });

  test("a Vulkan loader that cannot tell the limits: the spec's minimum, and a problem", async () => {
    const llama = fakeLlama({ gpu: "vulkan", total: 2 * 2 ** 30, free: 2 ** 30, names: ["AMD Radeon RX 7900 XTX (RADV NAVI31)"] });
    const r = await discoverDevices({ cuda: false, meminfo, llama, vulkanLimits: () => null });
    expect(r.devices[1]).toMatchObject({ id: "vulkan:0", maxTensorBytes: 128 * MiB });
    expect(r.problems).toEqual([expect.stringMatching(/^Vulkan: cannot read the devices' buffer limits .*128 MiB/)]);
  });

  test("a runtime that is not Vulkan adds no device", async () => {
    const llama = fakeLlama({ gpu: "cuda", total: 2 ** 34, free: 2 ** 34, names: ["NVIDIA GeForce RTX 4090"] });
    const r = await discoverDevices({ cuda: false, meminfo, llama });
    expect(r.devices.map((d) => d.id)).toEqual(["cpu"]);
  });
});
