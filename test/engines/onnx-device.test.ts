import { expect, test } from "bun:test";
import { resolveOnnxDevice, type OnnxHostFacts } from "../../src/3-engines/onnx-device";
import { memoryLogger } from "../../src/lib/log";

// Where an ONNX model's sessions go, from what it asks and what the host has. "auto" never picks
// WebGPU (not verified on a real GPU); "vulkan" (engines.device, a chat-engine backend) means "auto".

const bare: OnnxHostFacts = { nvidia: false, libDir: "/ort", cudaProvider: false };
const nvidia: OnnxHostFacts = { nvidia: true, libDir: "/ort", cudaProvider: true };
const nvidiaNoProvider: OnnxHostFacts = { nvidia: true, libDir: "/ort", cudaProvider: false };

const cases = [
  { name: "auto on a host without NVIDIA: cpu", wanted: "auto", facts: bare, expected: "cpu" },
  { name: "auto on an NVIDIA host with the CUDA provider: cuda", wanted: "auto", facts: nvidia, expected: "cuda" },
  { name: "auto on an NVIDIA host without the provider: cpu", wanted: "auto", facts: nvidiaNoProvider, expected: "cpu" },
  { name: "vulkan on a host without NVIDIA: cpu, as auto", wanted: "vulkan", facts: bare, expected: "cpu" },
  { name: "vulkan on an NVIDIA host with the provider: cuda, as auto", wanted: "vulkan", facts: nvidia, expected: "cuda" },
  { name: "cpu: cpu, even on an NVIDIA host", wanted: "cpu", facts: nvidia, expected: "cpu" },
  { name: "cuda without the provider: cpu, warned", wanted: "cuda", facts: bare, expected: "cpu" },
  { name: "webgpu when asked: webgpu (the adapter is probed at load)", wanted: "webgpu", facts: bare, expected: "webgpu" },
  { name: "webgpu when asked on an NVIDIA host: still webgpu", wanted: "webgpu", facts: nvidia, expected: "webgpu" },
] as const;

for (const c of cases) test(c.name, () => expect(resolveOnnxDevice(c.wanted, "m", memoryLogger(), c.facts)).toBe(c.expected));

test("auto never resolves to webgpu, whatever the host", () => {
  for (const facts of [bare, nvidia, nvidiaNoProvider]) for (const wanted of ["auto", "vulkan"] as const) expect(resolveOnnxDevice(wanted, "m", memoryLogger(), facts)).not.toBe("webgpu");
});

test("vulkan is logged as taken for auto", () => {
  const logger = memoryLogger();
  resolveOnnxDevice("vulkan", "m", logger, bare);
  expect(logger.lines.map((l) => l.msg)).toContain("onnx device: vulkan is a chat-engine backend; ONNX models take it as auto");
  expect(logger.lines.find((l) => l.msg === "onnx device")).toMatchObject({ model: "m", device: "cpu", reason: "no NVIDIA device" });
});
