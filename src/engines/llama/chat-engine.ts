import {
  QwenChatWrapper,
  resolveChatWrapper,
  TokenBias,
  type ChatHistoryItem,
  type ChatModelFunctions,
  type ChatWrapper,
  type LlamaText,
  type LlamaContext,
  type LlamaContextSequence,
  type LlamaGrammar,
  type LlamaModel,
  type Token,
} from "node-llama-cpp";
import { randomBytes } from "node:crypto";
import { ApiError } from "../../api/http/errors";
import { imagesOf } from "../../chat/images";
import type { ChatJob } from "../../chat/job";
import type { Logger } from "../../log";
import { SlotPool } from "../slots";
import type { ChatEngine, ChatLease, ComputeDevice, DevicePlacement, PreparedChat } from "../types";
import { toLlamaFunctions, toLlamaHistory, withOpenModelResponse } from "./history";
import { batchOrder, DecodeGate } from "./decode-gate";
import { generate } from "./generate";
import { generatePlain, nativeStepsUnavailable, plainMarkers, type PlainMarkers } from "./plain";
import { attachThreadpool, type Threadpool } from "./threadpool";
import { StepLoop, stepLoopUnavailable } from "./step-loop";
import { setBias } from "./token-bias";
import { hasConverter, toFallbackSchema, toGbnf } from "./json-schema";
import type { LlamaRuntime } from "./runtime";
import { imageMarker, imageChatWrapper } from "./vision/prompt";
import { Projector, type ImageSpan } from "./vision/projector";
import type { ImageRun } from "./vision/prompt";
import type { LoadSettings } from "../../planner/types";

export interface LlamaChatEngineOptions {
  modelId: string;
  modelPath: string;
  /** The multimodal projector (mmproj GGUF) of a vision model. */
  projectorPath?: string;
  runtime: () => Promise<LlamaRuntime>;
  /** Tokens per slot, or the range node-llama-cpp fits to the device (a manifest's "auto" loaded without the planner). */
  contextSize: number | { min: number; max: number };
  slots: number;
  threads: number;
  gpuLayers: "auto" | number;
  batchSize?: number;
  maxQueue: number;
  maxWaitMs: number;
  logger: Logger;
  /**
   * Test setup only (issue "chat engine": tests force tool calls and thinking deterministically):
   * a per-request token bias. No configuration field reaches it.
   */
  testTokenBias?: (model: LlamaModel, job: ChatJob) => (() => TokenBias) | undefined;
  /** Plain requests skip LlamaChat (plain.ts); false sends every request through it (tests compare both). */
  plainLoop?: boolean;
  /** The plain loop samples through the llama addon where it is built; false: through node-llama-cpp (tests compare both). */
  nativeSampling?: boolean;
  /** Natively sampled plain requests decode in the step loop; false: through node-llama-cpp's queue (tests compare both). */
  stepLoop?: boolean;
}

interface Loaded {
  model: LlamaModel;
  context: LlamaContext;
  pool: SlotPool<Slot>;
  /** null when this node-llama-cpp lacks the internals it wraps (logged at load). */
  gate: DecodeGate | null;
  /** thinking on / off; the same wrapper twice for models that do not think. */
  wrappers: { on: ChatWrapper; off: ChatWrapper };
  thinks: boolean;
  /** Rows of token_embd.weight: token ids at or above it do not exist. */
  vocabularySize: number;
  /** Where the layers are: the runtime's GPU backend when any layer is offloaded, else the CPU. */
  device: ComputeDevice;
  gpus: string[];
  projector: Projector | null;
  /** null when the llama addon is not built (logged at load). */
  threadpool: Threadpool | null;
  /** Plain requests sample through the llama addon (plain.ts); false when it cannot (logged at load). */
  nativeSteps: boolean;
  /** Decodes plain requests' steps (step-loop.ts); null where it cannot (logged at load). */
  loop: StepLoop | null;
  /** Slots this load has (the planner's choice, or the manifest's). */
  slots: number;
}

/** Prompts with images: their spans and runs, so a slot's reusable prefix compares images by content. */
const imagePrompts = new WeakMap<readonly number[], { projector: Projector; images: ImageSpan[]; runs: ImageRun[] }>();

class Slot {
  constructor(readonly sequence: LlamaContextSequence) {}
  sharedPrefix(tokens: readonly number[]): number {
    const withImages = imagePrompts.get(tokens);
    if (withImages) {
      const { projector, images, runs } = withImages;
      return projector.reusable(this.sequence, tokens, runs, images);
    }
    return this.sequence.compareContextTokens(tokens as Token[]).firstDifferentIndex;
  }
}

export class LlamaChatEngine implements ChatEngine {
  private state: Loaded | null = null;
  private loading: Promise<Loaded> | null = null;

  constructor(private readonly opts: LlamaChatEngineOptions) {}

  get modelId() {
    return this.opts.modelId;
  }
  get contextSize() {
    const o = this.opts.contextSize;
    return this.state?.context.contextSize ?? (typeof o === "number" ? o : o.max);
  }
  get thinks() {
    return this.state?.thinks ?? false;
  }
  get loaded() {
    return this.state !== null;
  }
  get device() {
    return this.state?.device;
  }
  get gpus() {
    return this.state?.gpus;
  }

  async placement(): Promise<DevicePlacement | undefined> {
    const s = this.state;
    if (!s) return undefined;
    const { llama } = await this.opts.runtime();
    const memory = s.device === "cpu" ? null : await llama.getVramState().then((v) => ({ used: v.used, total: v.total }), () => null);
    return { device: s.device, gpus: s.gpus, gpuLayers: s.model.gpuLayers, layers: s.model.fileInsights.totalLayers, memory };
  }

  stats() {
    const s = this.state?.pool.stats();
    return { slots: this.state?.slots ?? this.opts.slots, busy: s?.busy ?? 0, queued: s?.queued ?? 0, batchQueued: s?.batchQueued ?? 0 };
  }

  refuseWaiting(reason: unknown): void {
    this.state?.pool.refuseWaiting(reason);
  }

  /** Loads with the planner's settings when given (src/engines/residency.ts), else the manifest's. */
  async load(settings?: LoadSettings): Promise<void> {
    await this.ensure(settings);
  }

  private ensure(settings?: LoadSettings): Promise<Loaded> {
    if (this.state) return Promise.resolve(this.state);
    this.loading ??= this.doLoad(settings).then(
      (s) => {
        this.state = s;
        this.loading = null;
        return s;
      },
      (e) => {
        this.loading = null;
        throw e;
      },
    );
    return this.loading;
  }

  private async doLoad(settings?: LoadSettings): Promise<Loaded> {
    const o = settings ? { ...this.opts, gpuLayers: settings.gpuLayers, contextSize: settings.contextSize, slots: settings.slots } : this.opts;
    const started = performance.now();
    const { llama, device: backend, gpus } = await o.runtime();
    // Planned settings load as given: node-llama-cpp's memory checks dry-run contexts up to the
    // trained one (useMmap "auto" runs them too), and on Vulkan a K cache over the device's largest
    // tensor aborts the process there (test/planner/vulkan-limit.test.ts).
    const planned = settings ? { ignoreMemorySafetyChecks: true, useMmap: true } : {};
    const model = await llama.loadModel({ modelPath: o.modelPath, gpuLayers: o.gpuLayers, ...planned });
    let threadpool: Threadpool | null = null;
    try {
      let created: LlamaContext | undefined;
      const context = await model.createContext({
        contextSize: o.contextSize,
        sequences: o.slots,
        threads: o.threads,
        ...(o.batchSize ? { batchSize: o.batchSize } : {}),
        // llama.cpp's "auto" (llama-server's default): on wherever the device supports it, CPUs
        // included. On this llama.cpp release it prefills faster on a CPU too (llama-batched-bench,
        // 8 × 178-token prompts, 12 interleaved pairs: median 1.04-1.11× on/off; steps alike).
        flashAttention: "auto",
        // sequences of a step in id order: one llama.cpp micro-batch (decode-gate.ts, rule 4)
        batching: { itemPrioritizationStrategy: batchOrder(() => (created as unknown as { _queuedDecodes?: { sequenceId: number }[] })?._queuedDecodes) },
      });
      created = context;
      const attached = attachThreadpool(model, context, o.threads);
      if ("reason" in attached)
        o.logger.warn("chat model decodes without a persistent CPU threadpool: slower where cores are few", { model: o.modelId, reason: attached.reason });
      else threadpool = attached.pool;
      const slots = Array.from({ length: o.slots }, () => new Slot(context.getSequence()));
      // Beside live traffic, batch lines decode one at a time on a CPU, where a step costs about
      // the same per sequence in it and a live request arriving waits for the step in flight.
      const gate = DecodeGate.attach(context, slots.map((s) => s.sequence), { widthBesideLive: model.gpuLayers > 0 ? Infinity : 1 });
      if (!gate)
        o.logger.warn("this node-llama-cpp lacks the internals the decode gate wraps: live requests may wait for batch lines to finish", { model: o.modelId });
      const noSteps = o.nativeSampling === false ? "turned off" : nativeStepsUnavailable(slots[0]!.sequence);
      if (noSteps && o.nativeSampling !== false)
        o.logger.warn("plain chat requests sample through node-llama-cpp: slower between decode steps", { model: o.modelId, reason: noSteps });
      const noLoop = noSteps ?? (o.stepLoop === false ? "turned off" : stepLoopUnavailable(context, slots[0]!.sequence));
      if (!noSteps && noLoop && o.stepLoop !== false)
        o.logger.warn("plain chat requests decode through node-llama-cpp's batch queue: slower between decode steps", { model: o.modelId, reason: noLoop });
      const loop = noLoop ? null : new StepLoop(context, gate);
      const resolved = resolveChatWrapper(model);
      const thinks = resolved instanceof QwenChatWrapper;
      const wrappers = thinks
        ? { on: new QwenChatWrapper({ thoughts: "auto" }), off: new QwenChatWrapper({ thoughts: "discourage" }) }
        : { on: resolved, off: resolved };
      // A GPU runtime with no layers offloaded computes on the CPU; CUDA and Vulkan alike otherwise.
      const device: ComputeDevice = backend !== "cpu" && model.gpuLayers > 0 ? backend : "cpu";
      o.logger.info("chat model loaded", {
        model: o.modelId,
        device,
        ...(device !== "cpu" ? { gpus } : {}),
        context_per_slot: context.contextSize,
        slots: o.slots,
        gpu_layers: model.gpuLayers,
        layers: model.fileInsights.totalLayers,
        template: resolved.wrapperName,
        load_ms: Math.round(performance.now() - started),
      });
      // Slots are in sequence-id order. A step split in two costs about one more single-token
      // decode per generated token; 32 prompt tokens found in a cache save less than that.
      const pool = new SlotPool(slots, { maxQueue: o.maxQueue, maxWaitMs: o.maxWaitMs, modelId: o.modelId, adjacency: { margin: 32 } });
      const embd = model.fileInfo.tensorInfo?.find((t) => t.name === "token_embd.weight");
      const vocabularySize = embd ? Number(embd.dimensions[1]) : Number.MAX_SAFE_INTEGER;
      // The projector follows the model's layers onto the device, whichever GPU backend it is (the
      // llama addon shares node-llama-cpp's own ggml for that backend: native/addon-path.ts).
      const projector = o.projectorPath
        ? await Projector.load(model, context, o.projectorPath, { useGpu: device !== "cpu", threads: o.threads }, slots[0]!.sequence)
        : null;
      if (projector) {
        // where clip actually put the vision tower (it falls back to the CPU if the GPU backend does not start)
        const on = projector.device ?? "unknown";
        o.logger.info("chat model projector loaded", {
          model: o.modelId,
          device: on,
          backend: projector.backend,
          ...(on !== "cpu" && device !== "cpu" ? { gpus } : {}),
          placeholder: projector.placeholderText,
        });
        if (device !== "cpu" && on === "cpu")
          o.logger.warn("chat model: the projector runs on the CPU although the layers are on the GPU: images encode slowly", { model: o.modelId, device });
      }
      return {
        model,
        context,
        pool,
        gate,
        wrappers,
        thinks,
        vocabularySize,
        device,
        gpus: device === "cpu" ? [] : gpus,
        projector,
        threadpool,
        nativeSteps: noSteps === null,
        loop,
        slots: o.slots,
      };
    } catch (e) {
      threadpool?.detach();
      await model.dispose();
      throw e;
    }
  }

  async unload(): Promise<void> {
    const s = this.state;
    this.state = null;
    if (!s) return;
    s.projector?.dispose();
    s.threadpool?.detach();
    await s.context.dispose();
    await s.model.dispose();
    this.opts.logger.info("chat model unloaded", { model: this.opts.modelId });
  }

  /** The prompt exactly as it will be evaluated: the model's template over the history and tools. */
  private async render(job: ChatJob) {
    const s = await this.ensure();
    const forcedTool = job.toolChoice === "required" || typeof job.toolChoice === "object";
    // A forced tool call is made at once, without a reasoning pass first (README "API").
    const thinking = s.thinks && !forcedTool && (job.thinking ?? true);
    const functions: ChatModelFunctions | undefined =
      job.toolChoice !== "none" && job.tools.length ? toLlamaFunctions(job.tools) : undefined;
    const { wrapper, history, images } = await this.withImages(s, job, thinking ? s.wrappers.on : s.wrappers.off);
    const rendered = wrapper.generateContextState({
      chatHistory: withOpenModelResponse(history),
      availableFunctions: functions,
      documentFunctionParams: true,
    });
    const promptTokens = rendered.contextText.tokenize(s.model.tokenizer);
    const stopTriggers = rendered.stopGenerationTriggers;
    // Every image placed, each with its own run (throws otherwise).
    const runs = images.length ? s.projector!.runs(promptTokens, images) : [];
    if (images.length) imagePrompts.set(promptTokens, { projector: s.projector!, images, runs });
    return { s, forcedTool, thinking, wrapper, functions, history, images, runs, promptTokens, stopTriggers };
  }

  /**
   * The history and wrapper of a job: images become markers in their user messages, which the
   * wrapper renders as runs of placeholder tokens as long as each image's span.
   */
  private async withImages(s: Loaded, job: ChatJob, base: ChatWrapper) {
    const inputs = imagesOf(job);
    if (inputs.length === 0) return { wrapper: base, history: toLlamaHistory(job.turns), images: [] as ImageSpan[] };
    if (!s.projector)
      throw new ApiError("invalid_request", `${inputs[0]!.param}: model "${this.opts.modelId}" does not accept images`, { param: inputs[0]!.param });
    const images = await Promise.all(
      inputs.map((i) => {
        if (!i.decoded) throw new Error(`${i.param}: the image was not decoded before the engine`);
        return s.projector!.span(i.decoded).catch((e: Error) => {
          throw new ApiError("invalid_image", `${i.param}: ${e.message}`, { param: i.param });
        });
      }),
    );
    const nonce = randomBytes(6).toString("hex");
    return {
      wrapper: imageChatWrapper(base, nonce, images.map((i) => i.tokens), s.projector.placeholderText),
      history: toLlamaHistory(job.turns, (k) => imageMarker(nonce, k)),
      images,
    };
  }

  async countTokens(job: ChatJob): Promise<number> {
    return (await this.render(job)).promptTokens.length;
  }

  async prepare(job: ChatJob): Promise<PreparedChat> {
    const { s, forcedTool, thinking, wrapper, functions, history, images, runs, promptTokens, stopTriggers } = await this.render(job);
    const { model } = s;
    const grammar = job.format ? await this.grammarFor(job) : undefined;
    const contextSize = s.context.contextSize;
    const room = contextSize - promptTokens.length;
    if (room <= 0 || (job.maxTokens !== null && job.maxTokens > room))
      throw new ApiError(
        "context_length_exceeded",
        `this model's context window is ${contextSize} tokens; the messages take ${promptTokens.length}` +
          (job.maxTokens !== null ? ` and max_tokens asks for ${job.maxTokens} more` : ", leaving no room for an answer"),
        { param: "messages" },
      );
    const maxTokens = job.maxTokens ?? room;
    const bias = this.tokenBias(s, job, forcedTool, functions);
    const plain = this.plainMarkers(s, job, { functions, grammar, images, history, wrapper, stopTriggers });

    return {
      promptTokens: promptTokens.length,
      maxTokens,
      acquire: async (signal?: AbortSignal, opts?: { batch?: boolean }): Promise<ChatLease> => {
        const lease = await s.pool.acquire(promptTokens, signal, { ...opts, key: job.cacheKey });
        const sequence = lease.slot.sequence;
        const batch = opts?.batch === true;
        s.gate?.leased(sequence, batch);
        const cachedTokens = Math.min(lease.reusable, promptTokens.length - 1);
        return {
          cachedTokens: Math.max(0, cachedTokens),
          release: () => {
            s.gate?.released(sequence);
            lease.release();
          },
          run: async (onEvent, runSignal) => {
            const promptDone = !batch && s.gate ? s.gate.livePrompt(sequence) : () => {};
            try {
              if (images.length) {
                // Encoding images can take seconds and decodes outside node-llama-cpp's queue: other
                // sequences' steps do not wait for this one until its first decode there.
                s.gate?.idle(sequence);
                await s.projector!.prime(sequence, promptTokens, images, runs);
              }
              if (plain)
                return await generatePlain({
                  sequence,
                  ...(s.nativeSteps ? { context: s.context } : {}),
                  ...(s.loop ? { loop: s.loop } : {}),
                  prompt: promptTokens,
                  markers: plain,
                  job,
                  maxTokens,
                  cachedTokens: Math.max(0, cachedTokens),
                  tokenBias: bias,
                  onEvent,
                  signal: runSignal,
                });
              return await generate({
                sequence,
                wrapper,
                history,
                functions,
                grammar,
                thinking,
                job,
                maxTokens,
                promptTokens: promptTokens.length,
                cachedTokens: Math.max(0, cachedTokens),
                tokenBias: bias,
                thinkOpen: model.tokenize("<think>\n", true),
                onEvent,
                signal: runSignal,
              });
            } finally {
              promptDone();
              s.gate?.idle(sequence);
            }
          },
        };
      },
    };
  }

  /**
   * The plain loop's markers for a request it can generate (plain.ts), else null: tools, a
   * response_format, images, repeat penalties and a continued answer go through LlamaChat.
   */
  private plainMarkers(
    s: Loaded,
    job: ChatJob,
    r: { functions?: ChatModelFunctions; grammar?: LlamaGrammar; images: ImageSpan[]; history: ChatHistoryItem[]; wrapper: ChatWrapper; stopTriggers: readonly LlamaText[] },
  ): PlainMarkers | null {
    if (this.opts.plainLoop === false) return null;
    if (r.functions || r.grammar || r.images.length || job.sampling.frequencyPenalty || job.sampling.presencePenalty) return null;
    if (r.history.at(-1)?.type === "model") return null;
    return plainMarkers(s.model, r.wrapper, r.stopTriggers);
  }

  private async grammarFor(job: ChatJob): Promise<LlamaGrammar> {
    const { llama } = await this.opts.runtime();
    const f = job.format!;
    // Structured output is enforced token by token through llama.cpp's converter (json-schema.ts);
    // without the addon, through node-llama-cpp's grammar, refusing what that would not enforce.
    const param = "response_format.json_schema.schema";
    const gbnf = f.type === "json_schema" && hasConverter() ? toGbnf(f.schema, param) : null;
    const fallback = f.type === "json_schema" && !gbnf ? toFallbackSchema(f.schema, param) : null;
    try {
      if (gbnf) return await llama.createGrammar({ grammar: gbnf });
      return fallback ? await llama.createGrammarForJsonSchema(fallback as any) : await llama.getGrammarFor("json");
    } catch (e) {
      throw new ApiError("unsupported_schema", `response_format.json_schema.schema: the schema could not be compiled into a grammar (${(e as Error).message})`, {
        param: "response_format.json_schema.schema",
      });
    }
  }

  /**
   * The token bias of a request: the caller's logit_bias, plus, for a forced tool call, the
   * opening of a call (`<tool_call>` and `{"name": "` — or the full name for a named function)
   * forced token by token; node-llama-cpp's function grammar takes over from there.
   */
  private tokenBias(s: Loaded, job: ChatJob, forcedTool: boolean, functions: ChatModelFunctions | undefined) {
    const { model } = s;
    const testBias = this.opts.testTokenBias?.(model, job);
    if (testBias) return testBias;
    const userBias = job.sampling.logitBias;
    if (userBias)
      for (const id of userBias.keys())
        if (id >= s.vocabularySize)
          throw new ApiError("invalid_request", `logit_bias: token id ${id} is outside this model's vocabulary`, { param: `logit_bias.${id}` });
    const prefix = forcedTool && functions ? this.forcedCallPrefix(model, job) : [];
    if (!userBias && prefix.length === 0) return undefined;
    const withUser = () => {
      const bias = new TokenBias(model.tokenizer);
      if (userBias) for (const [id, v] of userBias) setBias(model, bias, id as Token, v <= -100 ? -Infinity : v);
      return bias;
    };
    // node-llama-cpp asks for the bias before every token: the caller's part is built once, a
    // forced prefix adds one token per step on a copy.
    const user = withUser();
    let step = 0;
    return () => {
      if (step >= prefix.length) return user;
      const bias = withUser();
      bias.set(prefix[step++]!, { logit: 1000 });
      return bias;
    };
  }

  private forcedCallPrefix(model: LlamaModel, job: ChatJob): Token[] {
    const named = typeof job.toolChoice === "object" ? job.toolChoice.name : null;
    const text = named ? `<tool_call>\n{"name": "${named}", "arguments": ` : `<tool_call>\n{"name": "`;
    return model.tokenize(text, true);
  }
}
