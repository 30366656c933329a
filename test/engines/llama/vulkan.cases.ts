import { afterAll, beforeAll, expect, test } from "bun:test";
import { checkChatEngine } from "../../../src/ops/doctor/engines";
import { gatherCuda, gatherGpus } from "../../../src/ops/doctor/gpu";
import { systemProbes } from "../../../src/ops/doctor/probes";
import { gatherVulkan, checkVulkan } from "../../../src/ops/doctor/vulkan";
import { buildInventory, type DiscoveredGpu } from "../../../src/2-services/rentals/inventory";
import { gpusInUse, reservedNodes } from "../../../src/2-services/rentals/reserved";
import { chatTestApp } from "../../helpers/chat";
import { parseExposition } from "../../helpers/prometheus";
import { admitLlvmpipe, LLVMPIPE_ENV } from "../../helpers/vulkan";

// The chat engine's GPU paths on Mesa's llvmpipe, a Vulkan device that computes on the CPU
// (test/setup-vulkan.sh installs it). ggml skips CPU-type devices unless GGML_VK_VISIBLE_DEVICES
// names them: this file sets it for its own process only; the product never does. llvmpipe is
// slow (~0.4 s a token for the tiny model), so every request here asks for a few tokens.

let restoreEnv: () => void = () => {};

/** A GPU the rental inventory lists under llvmpipe's name (as nvidia-smi would list a card), and another. */
const gpu = (uuid: string, name: string, index: number): DiscoveredGpu => ({ uuid, name, vram_mb: 2048, compute_cap: 8.9, index });
const OTHER = gpu("GPU-00000000-0000-4000-8000-000000000002", "NVIDIA L4", 1);

let t: Awaited<ReturnType<typeof chatTestApp>>;
let admin: string;
let user: string;
let deviceName: string;

beforeAll(async () => {
  restoreEnv = admitLlvmpipe();
  // The name the Vulkan backend gives the device, to list a discovered GPU under it.
  const { getLlama } = await import("node-llama-cpp");
  const probe = await getLlama({ gpu: "vulkan", build: "never", skipDownload: true, progressLogs: false });
  deviceName = (await probe.getGpuDeviceNames())[0]!;
  t = await chatTestApp({
    device: "vulkan",
  });
  await t.deps.accounts.createAccount("ops-admin", { role: "admin" });
  admin = await t.key({ account: "ops-admin", kind: "free" });
  user = await t.key({ kind: "premium", creditUsd: 5 });
}, 120_000);

afterAll(async () => {
  await t?.close();
  restoreEnv();
});

const engine = (id: string) => t.deps.registry.chatEngine(id) as any;

test("the device is llvmpipe through node-llama-cpp's Vulkan build, and every layer of the chat model is on it", async () => {
  expect(deviceName).toMatch(/llvmpipe/);
  await engine("chat").load();
  const p = await engine("chat").placement();
  expect(p).toMatchObject({ device: "vulkan", gpus: [deviceName], layers: 3, gpuLayers: 3 });
  expect(p.memory.total).toBeGreaterThan(0);
  expect(p.memory.used).toBeGreaterThanOrEqual(0);
  expect(p.memory.used).toBeLessThanOrEqual(p.memory.total);
  const decided = t.logs.filter((l) => l.msg === "chat engine device");
  expect(decided).toHaveLength(1);
  expect(decided[0]).toMatchObject({ device: "vulkan", gpus: [deviceName], reason: expect.stringContaining('engines.device = "vulkan"') });
  expect(t.logs.find((l) => l.msg === "chat model loaded" && l.model === "chat")).toMatchObject({ device: "vulkan", gpus: [deviceName], gpu_layers: 3, layers: 3 });
  // Offloaded layers decode beside live requests in one step, as on CUDA (the decode gate's rule).
  expect(engine("chat").state.loop).not.toBeNull();
}, 60_000);

test("a streamed chat through the server on the offloaded model (the step loop)", async () => {
  const stream = await t.openai(user).chat.completions.create({ model: "chat", messages: [{ role: "user", content: "Hi" }], max_tokens: 4, temperature: 0, stream: true, stream_options: { include_usage: true } });
  let text = "";
  let usage: any = null;
  for await (const c of stream) {
    text += c.choices[0]?.delta?.content ?? "";
    if (c.usage) usage = c.usage;
  }
  expect(usage.completion_tokens).toBeGreaterThan(0);
  expect(usage.completion_tokens).toBeLessThanOrEqual(4);
  expect(typeof text).toBe("string");
}, 60_000);

test("a forced tool call on the offloaded model", async () => {
  const tools = [{ type: "function" as const, function: { name: "ping", description: "Ping", parameters: { type: "object", properties: {}, additionalProperties: false } } }];
  const r = await t.openai(user).chat.completions.create({
    model: "chat",
    tools,
    tool_choice: { type: "function", function: { name: "ping" } },
    parallel_tool_calls: false,
    max_tokens: 24,
    temperature: 0,
    messages: [{ role: "user", content: "Ping." }],
  });
  const call = r.choices[0]!.message.tool_calls![0] as any;
  expect(call.function.name).toBe("ping");
  expect(JSON.parse(call.function.arguments)).toEqual({});
  expect(r.choices[0]!.finish_reason).toBe("tool_calls");
}, 60_000);

test("a prompt whose start a busy slot's cache holds starts from a copy of it on the device (a stream copy between device buffers), and says what it says alone", async () => {
  // the system prompt: more tokens than a copy must save on this context (copyWorth)
  await engine("chat").load();
  const loop = engine("chat").state.loop;
  const worth: number = loop.copyWorth;
  const system = "You are the assistant of the harbour office. " + "Answer questions about ships, tides, berths and cranes in plain words, briefly. ".repeat(Math.ceil(worth / 14) + 2);
  const ask = async (question: string, max_tokens: number, onFirst?: () => void) => {
    const stream = await t.openai(user).chat.completions.create({
      model: "chat", max_tokens, temperature: 0, stream: true, stream_options: { include_usage: true },
      messages: [{ role: "system", content: system }, { role: "user", content: question }],
    });
    let text = "";
    let usage: any = null;
    for await (const c of stream) {
      if (c.choices[0]?.delta?.content !== undefined) onFirst?.();
      text += c.choices[0]?.delta?.content ?? "";
      if (c.usage) usage = c.usage;
    }
    return { text, usage };
  };
  // alone first: its slot keeps the system prompt, which the next request (another question) reuses there
  const alone = await ask("When is high tide?", 3);
  let first!: () => void;
  const started = new Promise<void>((r) => (first = r));
  const running = ask("Which ships come in today?", 6, () => first());
  await started;
  // the slot with the system prompt is busy: the other one starts from a copy of its cache
  const copied = await ask("When is high tide?", 3);
  await running;
  expect(alone.usage.prompt_tokens).toBeGreaterThan(worth);
  expect(copied.usage.prompt_tokens_details.cached_tokens).toBeGreaterThan(worth);
  expect(copied.text).toBe(alone.text);
}, 240_000);

test("two models share the device: both wholly offloaded, on the same device memory", async () => {
  await engine("small-chat").load();
  const [a, b] = [await engine("chat").placement(), await engine("small-chat").placement()];
  expect(b).toMatchObject({ device: "vulkan", gpus: [deviceName], gpuLayers: b.layers });
  expect(b.memory.total).toBe(a.memory.total);
  const r = await t.openai(user).chat.completions.create({ model: "small-chat", messages: [{ role: "user", content: "Hi" }], max_tokens: 2 });
  expect(r.usage!.completion_tokens).toBeGreaterThan(0);
  // Still one runtime: one device decision for every model.
  expect(t.logs.filter((l) => l.msg === "chat engine device")).toHaveLength(1);
}, 60_000);

test("/metrics has each loaded model's device, layers and device memory", async () => {
  const res = await t.request("GET", "/metrics", { key: admin });
  expect(res.status).toBe(200);
  const m = parseExposition(await res.text());
  const p = await engine("chat").placement();
  expect(m.value("appliance_model_device_info", { model: "chat", device: "vulkan", gpus: deviceName })).toBe(1);
  expect(m.value("appliance_model_gpu_layers", { model: "chat" })).toBe(3);
  expect(m.value("appliance_model_layers", { model: "chat" })).toBe(3);
  expect(m.value("appliance_model_device_memory_total_bytes", { model: "chat", device: "vulkan" })).toBe(p.memory.total);
  expect(m.value("appliance_model_device_memory_used_bytes", { model: "chat", device: "vulkan" })).toBeGreaterThanOrEqual(0);
  expect(m.value("appliance_model_device_info", { model: "small-chat", device: "vulkan", gpus: deviceName })).toBe(1);
  // A model not loaded reports no device.
  expect(m.samples.some((s) => s.name === "appliance_model_device_info" && s.labels.model === "tight")).toBe(false);
});

test("the rental inventory's reserved rule: the GPU listed under the device's name is reserved while a model computes on it", async () => {
  const discovered = [gpu("GPU-00000000-0000-4000-8000-000000000001", deviceName, 0), OTHER];
  const nodes = buildInventory({ declared: [], discovered, defaults: { price_per_hour: 0.5, launcher: "process" } });
  const reserved = () => reservedNodes(nodes, gpusInUse(t.deps.registry.engines(), new Set(), discovered), true);
  expect(engine("chat").loaded).toBe(true);
  expect([...reserved()].map((id) => nodes.find((n) => n.node_id === id)!.gpu)).toEqual([deviceName]);
  await t.deps.registry.unloadAll();
  expect(reserved()).toEqual(new Set());
}, 60_000);

test("doctor predicts Vulkan for the chat engine here, naming llvmpipe as admitted by the tests' variable", async () => {
  const probes = systemProbes({ ...process.env, ...LLVMPIPE_ENV });
  const [g, c, v] = await Promise.all([gatherGpus(probes), gatherCuda(probes), gatherVulkan(probes)]);
  expect(checkVulkan(v)).toMatchObject({ name: "vulkan", status: "ok", detail: expect.stringMatching(/usable by the chat engine through Mesa's llvmpipe.*lvp_icd/) });
  const auto = checkChatEngine({ engines: { device: "auto", threads: 0 } }, [{ id: "chat", kind: "chat" }], g, c, v);
  expect(auto).toMatchObject({ status: "ok", detail: expect.stringMatching(/^llama\.cpp → vulkan \(no NVIDIA device; Mesa's llvmpipe/) });
  // Without the variable ggml would skip llvmpipe: no GPU for Vulkan, the CPU.
  const plain = await gatherVulkan(systemProbes({ ...process.env, GGML_VK_VISIBLE_DEVICES: undefined }));
  expect(checkChatEngine({ engines: { device: "auto", threads: 0 } }, [{ id: "chat", kind: "chat" }], g, c, plain).detail).toMatch(/→ cpu \(no NVIDIA device; Vulkan not usable: no GPU device node/);
});
