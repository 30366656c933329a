import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import {
  JinjaTemplateChatWrapper,
  LlamaChat,
  QwenChatWrapper,
  resolveChatWrapper,
  type ChatHistoryItem,
  type LlamaChatResponseChunk,
  type LlamaContext,
  type LlamaModel,
} from "node-llama-cpp";
import { ensureChatModel } from "../../models/cache";
import { QWEN3_CHAT_TEMPLATE } from "../../models/chat-template";
import { writeChatModel } from "../../models/generate-chat";
import { CHAT_PRESETS, countParameters, type ChatModelSpec } from "../../models/presets";
import { forceText } from "./force";
import { THREADS, tempFolder, testLlama } from "./llama";

const tmp = tempFolder("chat-model-");
afterAll(tmp.remove);

const sha256 = (path: string) => createHash("sha256").update(readFileSync(path)).digest("hex");

const history = (text: string): ChatHistoryItem[] => [
  { type: "system", text: "You are a helpful assistant." },
  { type: "user", text },
];

const functions = {
  get_time: { description: "Get the current time" },
  get_weather: {
    description: "Get the weather in a city",
    params: { type: "object", properties: { city: { type: "string", enum: ["Paris", "Rome"] } } },
  },
} as const;

describe("generated chat model files", () => {
  test("the same spec and seed give byte-identical files, another seed different bytes", async () => {
    const a = join(tmp.dir, "a.gguf");
    const b = join(tmp.dir, "b.gguf");
    const c = join(tmp.dir, "c.gguf");
    await writeChatModel(a, CHAT_PRESETS.chat);
    await writeChatModel(b, CHAT_PRESETS.chat);
    await writeChatModel(c, { ...CHAT_PRESETS.chat, seed: 99 });
    expect(sha256(a)).toBe(sha256(b));
    expect(sha256(c)).not.toBe(sha256(a));
  });

  for (const name of ["chat", "small-chat"] as const) {
    test(`the ${name} preset has the trained context length and parameter count its spec says`, async () => {
      const llama = await testLlama();
      const model = await llama.loadModel({ modelPath: await ensureChatModel(name) });
      try {
        const spec = CHAT_PRESETS[name];
        const nVocab = model.fileInfo.metadata.tokenizer.ggml.tokens.length;
        expect(model.trainContextSize).toBe(spec.contextLength);
        expect(model.fileInsights.totalParameters).toBe(countParameters(spec, nVocab));
        expect(model.fileInfo.metadata.general.architecture).toBe("qwen3" as never);
        expect(model.fileInfo.tensorInfo!.map((t) => t.name)).toContain("output.weight");
      } finally {
        await model.dispose();
      }
    });
  }

  test("a model with F32 matrices loads and generates", async () => {
    const spec: ChatModelSpec = { ...CHAT_PRESETS.chat, name: "f32-test", matrixType: "f32", seed: 7 };
    const path = join(tmp.dir, "f32.gguf");
    await writeChatModel(path, spec);
    const llama = await testLlama();
    const model = await llama.loadModel({ modelPath: path });
    const context = await model.createContext({ contextSize: 256, threads: THREADS });
    try {
      const res = await new LlamaChat({ contextSequence: context.getSequence() }).generateResponse(history("Hi"), { maxTokens: 8 });
      expect(res.metadata.stopReason).toBeDefined();
    } finally {
      await context.dispose();
      await model.dispose();
    }
  });
});

describe("chatting with the tiny chat model", () => {
  let model: LlamaModel;
  let context: LlamaContext;
  beforeAll(async () => {
    const llama = await testLlama();
    model = await llama.loadModel({ modelPath: await ensureChatModel("chat") });
    context = await model.createContext({ contextSize: 512, threads: THREADS });
  });
  afterAll(async () => {
    await context?.dispose();
    await model?.dispose();
  });

  /** A LlamaChat on the context's single sequence (its history is cleared by each generation). */
  async function withChat<T>(fn: (chat: LlamaChat) => Promise<T>, chatWrapper?: QwenChatWrapper): Promise<T> {
    const sequence = context.getSequence();
    const chat = new LlamaChat({ contextSequence: sequence, chatWrapper: chatWrapper ?? "auto" });
    try {
      return await fn(chat);
    } finally {
      chat.dispose();
      sequence.dispose();
    }
  }

  test("node-llama-cpp resolves the embedded template to QwenChatWrapper, not the generic Jinja wrapper", async () => {
    const wrapper = resolveChatWrapper(model);
    expect(wrapper).toBeInstanceOf(QwenChatWrapper);
    await withChat(async (chat) => expect(chat.chatWrapper.wrapperName).toBe("Qwen"));
  });

  test("the template lists tools in the system turn and prefills an empty think block when thinking is off", () => {
    const jinja = new JinjaTemplateChatWrapper({ template: QWEN3_CHAT_TEMPLATE, additionalRenderParameters: { enable_thinking: false } });
    const { contextText } = jinja.generateContextState({
      chatHistory: [...history("Weather?"), { type: "model", response: [] }],
      availableFunctions: functions,
    });
    const text = contextText.toString();
    expect(text).toStartWith("<|im_start|>system\nYou are a helpful assistant.\n\n# Tools\n");
    expect(text).toContain('<tools>\n{"type": "function", "function": {"name": "get_time"');
    expect(text).toContain("<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n");
    expect(text).toEndWith("<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  });

  test("a LlamaChat generateResponse with maxTokens 16 completes", async () => {
    const res = await withChat((chat) => chat.generateResponse(history("Hello, who are you?"), { maxTokens: 16 }));
    expect(["maxTokens", "eogToken", "stopGenerationTrigger"]).toContain(res.metadata.stopReason);
    expect(typeof res.response).toBe("string");
  });

  test("greedy decoding produces varied tokens rather than one repeated token", async () => {
    const tokens: number[] = [];
    await withChat((chat) =>
      chat.generateResponse(history("Tell me a story."), { maxTokens: 20, temperature: 0, onToken: (t) => tokens.push(...t) }),
    );
    expect(tokens.length).toBeGreaterThan(10);
    expect(new Set(tokens).size).toBeGreaterThan(5);
  });

  test("forcing the tokens of `<tool_call>\\n{\"name\": \"` makes QwenChatWrapper parse a function call", async () => {
    const force = forceText(model, '<tool_call>\n{"name": "');
    expect(force.tokens[0]).toBe(model.tokenize("<tool_call>", true)[0]!);
    const res = await withChat((chat) =>
      chat.generateResponse(history("What is the weather in Rome?"), { maxTokens: 48, temperature: 0, tokenBias: force, functions }),
    );
    expect(force.forced).toBe(force.tokens.length);
    expect(res.functionCalls?.length).toBeGreaterThanOrEqual(1);
    const call = res.functionCalls![0]!;
    expect(Object.keys(functions)).toContain(call.functionName);
  });

  test("forcing <think> with QwenChatWrapper({thoughts: \"auto\"}) yields a thought segment", async () => {
    const chunks: LlamaChatResponseChunk[] = [];
    const res = await withChat(
      (chat) =>
        chat.generateResponse(history("Think first."), {
          maxTokens: 16,
          temperature: 0,
          tokenBias: forceText(model, "<think>\n"),
          onResponseChunk: (chunk) => chunks.push(chunk),
        }),
      new QwenChatWrapper({ thoughts: "auto" }),
    );
    expect(chunks.some((c) => c.type === "segment" && c.segmentType === "thought")).toBe(true);
    expect(res.fullResponse.some((r) => typeof r !== "string" && r.type === "segment" && r.segmentType === "thought")).toBe(true);
  });
});
