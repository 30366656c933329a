import { afterAll } from "bun:test";
import OpenAI from "openai";
import type { LlamaModel } from "node-llama-cpp";
import { ensureChatModel } from "../../models/cache";
import type { ChatJob } from "../../src/3-engines/chat-job";
import { diffusionFactory } from "../../src/3-engines/diffusion/factory";
import { llamaChatFactory } from "../../src/3-engines/llama/factory";
import { transformersFactories } from "../../src/3-engines/transformers/factory";
import { forceText } from "../models/force";
import { BASE, testApp, type TestApp } from "./app";
import { testDeviceOverride } from "./vulkan";

// A real app serving the generated tiny chat models through the real llama.cpp engine.
// Test setup only: a user message containing «force:TEXT» makes the model emit TEXT first
// (a per-token bias), so tests can produce tool calls and thinking deterministically.

const MARK = /«force:([\s\S]*?)»/;

/** The engines the server uses for the other kinds (embeddings, classifier, images). */
function defaultEngines(config: import("../../src/lib/config").Config, logger: import("../../src/lib/log").Logger) {
  return { ...transformersFactories(config, logger), ...diffusionFactory(config, logger) };
}

export function forced(text: string): string {
  return `«force:${text}»`;
}

function testForced(model: LlamaModel, job: ChatJob) {
  for (const t of [...job.turns].reverse()) {
    if (t.role !== "user") continue;
    const m = MARK.exec(t.text);
    return m ? forceText(model, m[1]!).tokens : undefined;
  }
  return undefined;
}

export interface ChatTestOptions {
  slots?: number;
  queue?: number;
  queueWaitS?: number;
  config?: Record<string, unknown>;
  /** More model manifests served beside the chat ones. */
  extraModels?: Record<string, unknown>[];
  clock?: import("../../src/lib/clock").Clock;
  /** engines.device (default "cpu"); the Vulkan tests set "vulkan". APPLIANCE_TEST_DEVICE overrides it (helpers/vulkan.ts). */
  device?: "cpu" | "vulkan";
  /** GPUs as nvidia-smi would list them, for the rental inventory. */
  discoveredGpus?: import("../../src/2-services/rentals/inventory").DiscoveredGpu[];
  /** More [engines] settings (keep_alive_s, gpu_memory_mb, cpu_memory_mb). */
  engines?: Record<string, unknown>;
  /** The built-in chat models (chat, small-chat, tight); false: only extraModels. */
  builtIn?: boolean;
  /** A lower grammar budget for the chat engines (src/3-engines/llama/grammar-budget.ts). */
  grammarBudget?: Partial<typeof import("../../src/3-engines/llama/grammar-budget").GRAMMAR_BUDGET>;
}

/**
 * Under APPLIANCE_TEST_DEVICE, where the chat models really ran: the runtime falls back to the CPU
 * when the device's build does not load, and the tests would pass there all the same. Each app's
 * "chat engine device" log lines are printed to stderr after the file's tests, for
 * test/gpu/device-check.sh to read ("APPLIANCE_TEST_DEVICE: chat engine device cuda (reason)").
 */
const deviceLogs: Record<string, any>[][] = [];
if (testDeviceOverride())
  afterAll(() => {
    const seen = new Set(deviceLogs.flat().filter((l) => l.msg === "chat engine device").map((l) => `${l.device} (${l.reason})`));
    for (const line of seen) console.error(`APPLIANCE_TEST_DEVICE: chat engine device ${line}`);
  });

export async function chatTestApp(o: ChatTestOptions = {}): Promise<TestApp & { openai: (key: string) => OpenAI }> {
  const chat = await ensureChatModel("chat");
  const small = await ensureChatModel("small-chat");
  const t = testApp({
    config: {
      ...o.config,
      engines: { device: testDeviceOverride() ?? o.device ?? "cpu", threads: 1, ...o.engines },
      models: [
        ...(o.builtIn === false ? [] : [
        { id: "chat", name: "Tiny chat", kind: "chat", files: { model: chat }, max_context: 4096, slots: o.slots ?? 2, queue: o.queue, queue_wait_s: o.queueWaitS, load: "first_use" },
        { id: "small-chat", name: "Tiny small chat", kind: "chat", files: { model: small }, max_context: 16384, slots: 1, load: "first_use" },
        { id: "tight", name: "Tiny context", kind: "chat", files: { model: chat }, max_context: 256, slots: 1, load: "first_use" },
        ]),
        ...(o.extraModels ?? []),
      ],
    },
    clock: o.clock,
    discoveredGpus: o.discoveredGpus,
    engines: (config, logger) => ({ ...defaultEngines(config, logger), chat: llamaChatFactory(config, logger, { testForcedTokens: testForced, ...(o.grammarBudget ? { testGrammarBudget: o.grammarBudget } : {}) }) }),
  });
  if (testDeviceOverride()) deviceLogs.push(t.logs);
  return Object.assign(t, {
    openai: (key: string) =>
      new OpenAI({ apiKey: key, baseURL: `${BASE}/v1`, maxRetries: 0, fetch: (url, init) => t.app.handle(new Request(url, init)) }),
  });
}
