import { describe, expect, test } from "bun:test";
import { buildInventory, type DiscoveredGpu } from "../../src/2-services/rentals/inventory";
import { gpusInUse, inferenceGpus, reservedNodes, type EngineUse } from "../../src/2-services/rentals/reserved";

// Which nodes inference keeps for itself: the GPUs this process's CUDA engines may use
// (CUDA_VISIBLE_DEVICES, by UUID, UUID prefix or index; unset = all), while a model runs on CUDA.

const A = "GPU-5f1c2b1e-9d4a-4c3e-8f2a-0a1b2c3d4e5f";
const B = "GPU-6a2d3c2f-0e5b-4d4f-9a3b-1b2c3d4e5f60";
const gpus: DiscoveredGpu[] = [
  { uuid: A, name: "NVIDIA L4", vram_mb: 23034, compute_cap: 8.9, index: 0 },
  { uuid: B, name: "NVIDIA L4", vram_mb: 23034, compute_cap: 8.9, index: 1 },
];
const nodes = buildInventory({ declared: [], discovered: gpus, defaults: { price_per_hour: 0.5, country: "Germany", country_code: "DE", launcher: "process" } });
const nodeOf = (uuid: string) => nodes.find((n) => n.gpu_uuids[0] === uuid.toLowerCase() || n.gpu_uuids[0] === uuid)!.node_id;

test("unset CUDA_VISIBLE_DEVICES: every GPU may serve inference", () => {
  expect(inferenceGpus(gpus, undefined)).toEqual(new Set([A.toLowerCase(), B.toLowerCase()]));
});

test("CUDA_VISIBLE_DEVICES by index, by UUID, by unique UUID prefix; empty or unknown entries name no GPU", () => {
  expect(inferenceGpus(gpus, "1")).toEqual(new Set([B.toLowerCase()]));
  expect(inferenceGpus(gpus, A)).toEqual(new Set([A.toLowerCase()]));
  expect(inferenceGpus(gpus, "GPU-6a2d")).toEqual(new Set([B.toLowerCase()]));
  expect(inferenceGpus(gpus, "5f1c2b1e")).toEqual(new Set([A.toLowerCase()]));
  expect(inferenceGpus(gpus, "")).toEqual(new Set()); // CUDA sees no GPU: nothing is reserved
  expect(inferenceGpus(gpus, "7, GPU-ffff")).toEqual(new Set());
});

test("nodes holding an inference GPU are reserved only while a model computes on CUDA", () => {
  const visible = inferenceGpus(gpus, "0");
  expect(reservedNodes(nodes, visible, false)).toEqual(new Set());
  expect(reservedNodes(nodes, visible, true)).toEqual(new Set([nodeOf(A)]));
  expect(reservedNodes(nodes, inferenceGpus(gpus, undefined), true)).toEqual(new Set([nodeOf(A), nodeOf(B)]));
});

describe("gpusInUse: the GPUs loaded models compute on, per backend", () => {
  const H = "GPU-11111111-2222-3333-4444-555555555555";
  const mixed: DiscoveredGpu[] = [...gpus, { uuid: H, name: "NVIDIA H100 80GB HBM3", vram_mb: 81559, compute_cap: 9, index: 2 }];
  const cudaVisible = new Set([A.toLowerCase()]);
  const all = mixed.map((g) => g.uuid.toLowerCase());
  const cases: { name: string; engines: EngineUse[]; want: string[] }[] = [
    { name: "nothing loaded: nothing in use", engines: [], want: [] },
    { name: "a model on CUDA that is not loaded: nothing", engines: [{ loaded: false, device: "cuda" }], want: [] },
    { name: "a model on the CPU: nothing", engines: [{ loaded: true, device: "cpu" }], want: [] },
    { name: "a model on CUDA: the CUDA-visible GPUs", engines: [{ loaded: true, device: "cuda" }], want: [A.toLowerCase()] },
    { name: "Vulkan: the discovered GPUs of its device's name (every one of that name)", engines: [{ loaded: true, device: "vulkan", gpus: ["NVIDIA L4"] }], want: [A.toLowerCase(), B.toLowerCase()] },
    { name: "Vulkan names are compared without case or spaces around", engines: [{ loaded: true, device: "vulkan", gpus: [" nvidia h100 80gb hbm3 "] }], want: [H.toLowerCase()] },
    { name: "Vulkan naming an NVIDIA device the inventory does not list: every GPU (which one cannot be told)", engines: [{ loaded: true, device: "vulkan", gpus: ["NVIDIA GeForce RTX 4090"] }], want: all },
    { name: "Vulkan on llvmpipe (not a GPU the inventory lists): nothing", engines: [{ loaded: true, device: "vulkan", gpus: ["llvmpipe (LLVM 19.1.7, 256 bits)"] }], want: [] },
    { name: "ONNX on WebGPU: every GPU (Dawn picks its adapter and does not say which)", engines: [{ loaded: true, device: "webgpu" }], want: all },
    { name: "ONNX on WebGPU, not loaded: nothing", engines: [{ loaded: false, device: "webgpu" }], want: [] },
    { name: "CUDA and Vulkan together: both sets", engines: [{ loaded: true, device: "cuda" }, { loaded: true, device: "vulkan", gpus: ["NVIDIA H100 80GB HBM3"] }], want: [A.toLowerCase(), H.toLowerCase()] },
  ];
  for (const c of cases) test(c.name, () => expect([...gpusInUse(c.engines, cudaVisible, mixed)].sort()).toEqual([...c.want].sort()));
});
