import { QwenChatWrapper, resolveChatWrapper, type ChatModelFunctions, type ChatWrapper, type LlamaContext, type LlamaModel, type Token } from "node-llama-cpp";
import { randomBytes } from "node:crypto";
import { ApiError } from "../../lib/errors";
import { imagesOf } from "../image-input";
import type { ChatJob } from "../chat-job";
import type { Logger } from "../../lib/log";
import { SlotPool } from "../slots";
import type { ChatEngine, ChatLease, ComputeDevice, DevicePlacement, PreparedChat } from "../types";
import { toLlamaFunctions, toLlamaHistory, withOpenModelResponse } from "./history";
import { DecodeLoop, decodeLoopUnavailable, LoopSlot, type LoopRequest } from "./decode-loop";
import { freshSeed, generateOnLoop, loopSampling } from "./generation";
import { TokenPieces } from "./token-text";
import { outputMarkers } from "./markers";
import { attachThreadpool, type Threadpool } from "./threadpool";
import { callGrammar, schemaAfterThought } from "./tool-calls";
import { grammarCompiler } from "./grammar-compiler";
import { refuseOverlongText } from "./prompt-size";
import type { GRAMMAR_BUDGET } from "./grammar-budget";
import type { GrammarJob, GrammarOutcome } from "./grammar-worker";
import type { LlamaRuntime } from "./runtime";
import { imageMarker, imageChatWrapper } from "./vision/prompt";
import { Projector, type ImageSpan } from "./vision/projector";
import type { ImageRun } from "./vision/prompt";
import type { LoadSettings } from "../planner/types";
import { scoreAnswers, type ScoreOptions } from "./score-answers";
import { loadGgufModel } from "./load-model";

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
  /** A step beside a live stream takes at most about this many times the stream's step alone (decode-loop.ts); 0: whole plans. */
  gapLimit?: number;
  /** How much dearer a prompt token may get to keep to gapLimit (decode-loop.ts); default 1.1. */
  promptSlowdown?: number;
  maxQueue: number;
  maxWaitMs: number;
  logger: Logger;
  /**
   * Test setup only (issue "chat engine": tests force tool calls and thinking deterministically):
   * tokens each given +1000 at their step of a request's generation (a grammar still wins). No
   * configuration field reaches it.
   */
  testForcedTokens?: (model: LlamaModel, job: ChatJob) => readonly number[] | undefined;
  /** Test setup only: a lower grammar budget (grammar-budget.ts), to reach it with a tiny model. No configuration field reaches it. */
  testGrammarBudget?: Partial<typeof GRAMMAR_BUDGET>;
}

interface Loaded {
  model: LlamaModel;
  context: LlamaContext;
  pool: SlotPool<Slot>;
  /** Decodes and samples every request of the context (decode-loop.ts). */
  loop: DecodeLoop;
  /** Each token's text, for the output as it streams (token-text.ts). */
  pieces: TokenPieces;
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
  /** Slots this load has (the planner's choice, or the manifest's). */
  slots: number;
}

/** A request's compiled grammars: its answer's, and its constrained tools' arguments' by name. */
interface Grammars {
  answer?: string;
  tools: Map<string, string>;
}

/** Prompts with images: their spans and runs, so a slot's reusable prefix compares images by content. */
const imagePrompts = new WeakMap<readonly number[], { projector: Projector; images: ImageSpan[]; runs: ImageRun[] }>();

class Slot extends LoopSlot {
  constructor(
    seq: number,
    /** false for a model whose cache cannot drop a tail (recurrent, hybrid, sliding-window): every prompt is decoded whole. */
    private readonly reuse: boolean,
  ) {
    super(seq);
  }
  sharedPrefix(tokens: readonly number[]): number {
    if (!this.reuse) return 0;
    const withImages = imagePrompts.get(tokens);
    if (withImages) {
      const { projector, images, runs } = withImages;
      return projector.reusable(this, tokens, runs, images);
    }
    return this.commonPrefix(tokens);
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

  /** Loads with the planner's settings when given (src/3-engines/residency.ts), else the manifest's. */
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
    // Every request decodes through the addon's loop (decode-loop.ts): without it, no chat.
    const noLoop = decodeLoopUnavailable();
    if (noLoop) throw new Error(`chat model "${o.modelId}" cannot load: ${noLoop}`);
    // the GGUF header checked first, and the load stopped when residency gives it up (load-model.ts)
    const model = await loadGgufModel(llama, { modelPath: o.modelPath, gpuLayers: o.gpuLayers, ...planned }, this);
    let threadpool: Threadpool | null = null;
    let loop: DecodeLoop | null = null;
    try {
      const context = await model.createContext({
        contextSize: o.contextSize,
        sequences: o.slots,
        threads: o.threads,
        ...(o.batchSize ? { batchSize: o.batchSize } : {}),
        // llama.cpp's "auto" (llama-server's default): on wherever the device supports it, CPUs
        // included. On this llama.cpp release it prefills faster on a CPU too (llama-batched-bench,
        // 8 × 178-token prompts, 12 interleaved pairs: median 1.04-1.11× on/off; steps alike).
        flashAttention: "auto",
      });
      // The loop decodes on its own thread with a persistent pool for the CPU's share of each step.
      // Without one, ggml starts and joins its workers on every step (slower on few cores), and
      // llama_decode on the loop's thread aborted in 3 of 10 runs (llama.cpp "output layer input
      // buffer not allocated"; cause not found): no pool, no chat.
      const attached = attachThreadpool(model, context, o.threads);
      if ("reason" in attached) throw new Error(`chat model "${o.modelId}" cannot load: no CPU threadpool for its decode loop (${attached.reason})`);
      threadpool = attached.pool;
      // Beside live traffic, batch lines decode one at a time on a CPU, where a step costs about
      // the same per sequence in it and a live request arriving waits for the step in flight.
      loop = new DecodeLoop(model, context, { batchWidthBesideLive: model.gpuLayers > 0 ? Infinity : 1, ...(o.gapLimit !== undefined ? { gapLimit: o.gapLimit } : {}), ...(o.promptSlowdown !== undefined ? { promptSlowdown: o.promptSlowdown } : {}), ...(o.testGrammarBudget ? { grammarBudget: o.testGrammarBudget } : {}) });
      // llama-server restores checkpoints of such caches; node-llama-cpp did too. Here their prompts are decoded whole.
      const probe = context.getSequence();
      const reuse = !probe.needsCheckpoints;
      probe.dispose();
      if (!reuse) o.logger.info("chat model: its cache cannot drop a tail (recurrent, hybrid or sliding-window): prompts are decoded whole, no prefix reuse", { model: o.modelId });
      const slots = Array.from({ length: o.slots }, (_, i) => new Slot(i, reuse));
      if (reuse) loop.share(slots);
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
      const projector = o.projectorPath ? await Projector.load(model, context, loop, o.projectorPath, { useGpu: device !== "cpu", threads: o.threads }) : null;
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
        loop,
        pieces: new TokenPieces(model),
        wrappers,
        thinks,
        vocabularySize,
        device,
        gpus: device === "cpu" ? [] : gpus,
        projector,
        threadpool,
        slots: o.slots,
      };
    } catch (e) {
      loop?.close();
      threadpool?.detach();
      await model.dispose();
      throw e;
    }
  }

  async unload(): Promise<void> {
    const s = this.state;
    this.state = null;
    if (!s) return;
    s.loop.close();
    s.projector?.dispose();
    s.threadpool?.detach();
    await s.context.dispose();
    await s.model.dispose();
    this.opts.logger.info("chat model unloaded", { model: this.opts.modelId });
  }

  /** The prompt exactly as it will be evaluated: the model's template over the history and tools. */
  private async render(job: ChatJob) {
    const s = await this.ensure();
    // before the template and the tokenizer run here, on the event loop (prompt-size.ts)
    await refuseOverlongText(s.model, job, s.context.contextSize);
    const forcedTool = job.toolChoice === "required" || typeof job.toolChoice === "object";
    // A forced tool call is made at once, without a reasoning pass first (web/docs/api-chat.md).
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
      throw new ApiError("images_not_supported", `${inputs[0]!.param}: model "${this.opts.modelId}" does not accept images`, { param: inputs[0]!.param });
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

  /** Each answer text's log-probability as the start of the reply to `job` (score-answers.ts; issue 47); images primed as a generation primes them. */
  async score(job: ChatJob, answers: readonly string[], o: ScoreOptions = {}) {
    const { s, promptTokens, images, runs } = await this.render({ ...job, thinking: false });
    const prime = images.length ? (slot: Slot, batch: boolean) => s.projector!.prime(slot, s.loop, promptTokens, images, runs, batch) : undefined;
    return scoreAnswers({ ...s, contextSize: s.context.contextSize }, promptTokens, answers, { ...o, ...(job.cacheKey !== undefined ? { cacheKey: job.cacheKey } : {}) }, prime);
  }

  async countTokens(job: ChatJob): Promise<number> {
    return (await this.render(job)).promptTokens.length;
  }

  async prepare(job: ChatJob): Promise<PreparedChat> {
    const { s, thinking, wrapper, functions, images, runs, promptTokens, stopTriggers } = await this.render(job);
    const { model } = s;
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
    const markers = outputMarkers(model, wrapper, stopTriggers);
    const constraint = this.constraint(s, job, { thinking, functions, markers }, await this.grammars(job, functions && markers.calls ? functions : undefined));
    const request: Omit<LoopRequest, "maxTokens"> = {
      ...loopSampling(job, freshSeed),
      ...this.userBias(s, job),
      ...constraint.request,
      ...this.forced(s, job, constraint.opening),
    };
    const scanner = { stops: job.stop, templateStops: markers.templateStops, thought: markers.thought, ...(functions && markers.calls ? { calls: markers.calls } : {}) };

    return {
      promptTokens: promptTokens.length,
      maxTokens,
      acquire: async (signal?: AbortSignal, opts?: { batch?: boolean }): Promise<ChatLease> => {
        const lease = await s.pool.acquire(promptTokens, signal, { ...opts, key: job.cacheKey });
        const slot = lease.slot;
        const batch = opts?.batch === true;
        const cachedTokens = Math.max(0, Math.min(lease.reusable, promptTokens.length - 1));
        return {
          cachedTokens,
          release: () => lease.release(),
          run: async (onEvent, runSignal) => {
            // at least one prompt token is decoded, for the logits of the first sample
            let nPast = cachedTokens;
            if (images.length) nPast = await s.projector!.prime(slot, s.loop, promptTokens, images, runs, batch);
            return await generateOnLoop({
              loop: s.loop,
              slot,
              model,
              pieces: s.pieces,
              prompt: promptTokens,
              nPast: Math.min(nPast, promptTokens.length - 1),
              scanner,
              job,
              maxTokens,
              cachedTokens,
              request: { ...request, batch, copyable: images.length === 0 },
              ...(constraint.schema ? { schema: constraint.schema } : {}),
              answerAfterFreeText: constraint.answerAfterFreeText === true,
              oneCall: Boolean(functions) && (!job.parallelToolCalls || typeof job.toolChoice === "object"),
              onEvent,
              signal: runSignal,
            });
          },
        };
      },
    };
  }

  /**
   * The grammar of a request: a response_format's schema (after the thought, where the model
   * thinks: a lazy grammar from the thought's closing marker), tool calls (free text, then calls;
   * calls only when a call is required), or both: free text that may begin a call, and where it
   * does not, the answer generated again under the schema (`answerAfterFreeText`, generation.ts).
   */
  private constraint(s: Loaded, job: ChatJob, r: { thinking: boolean; functions?: ChatModelFunctions; markers: ReturnType<typeof outputMarkers> }, grammars: Grammars) {
    const answer = grammars.answer;
    const thought = r.thinking ? r.markers.thought : undefined;
    // What is forced first: with a response_format, the thought's opening (the schema applies after it).
    const opening = answer && thought ? thought.open : null;
    const schema = answer ? { gbnf: answer, closeThought: s.model.tokenize(thought ? thought.close + "\n\n" : "", true) } : undefined;
    if (r.functions && r.markers.calls) {
      const named = typeof job.toolChoice === "object" ? job.toolChoice.name : null;
      const required = job.toolChoice === "required" || named !== null;
      const tools = job.tools.filter((t) => named === null || t.name === named).map((t) => ({ name: t.name, gbnf: grammars.tools.get(t.name)! }));
      const g = callGrammar({
        syntax: r.markers.calls,
        tools,
        parallel: job.parallelToolCalls && named === null,
        mode: required ? "required" : "auto",
        thoughtOpenedInPrompt: false,
        // as the scanner reads the output, a thought may open at the start of free text; a required
        // call, or free text beside a schema with thinking off, comes at once (no reasoning)
        ...(r.markers.thought && (r.thinking || (!required && !answer)) ? { thought: r.markers.thought } : {}),
      });
      // A required call's opening is forced in the template's own tokens (`<tool_call>` is one token):
      // under the grammar alone a random model may spell it a character at a time.
      const calls = r.markers.calls;
      const callOpening = required ? calls.prefix + (named !== null ? named + calls.paramsPrefix : "") : null;
      return {
        request: { grammar: g.gbnf }, // never lazy (tool-calls.ts)
        schema,
        opening: callOpening ?? opening,
        answerAfterFreeText: schema !== undefined && !required,
      };
    }
    if (!answer) return { request: {}, schema, opening };
    if (!thought) return { request: { grammar: answer }, schema, opening };
    const g = schemaAfterThought({ thought, gbnf: answer });
    // the trigger is the marker's token where it is one (Qwen's `</think>`): no regex over the output
    const token = s.model.tokenize(g.trigger!, true);
    const trigger = token.length === 1 ? { lazyTokens: Uint32Array.from(token) } : { lazyPatterns: g.triggerPatterns };
    return { request: { grammar: g.gbnf, ...trigger }, schema, opening };
  }

  /**
   * The request's grammars, from the grammar worker (grammar-compiler.ts: llama.cpp's converter in a
   * process of its own, bounded): the answer's (a JSON object for json_object, the schema through the
   * converter) and each tool's arguments' when calls are constrained. A schema it refuses is the 400.
   */
  private async grammars(job: ChatJob, functions: ChatModelFunctions | undefined): Promise<Grammars> {
    const f = job.format;
    const jobs: GrammarJob[] = [];
    if (f) jobs.push(f.type === "json_schema" ? { kind: "answer", schema: f.schema, param: f.param ?? "response_format.json_schema.schema" } : { kind: "answer", schema: null, param: "response_format" });
    const named = typeof job.toolChoice === "object" ? job.toolChoice.name : null;
    const tools = functions ? job.tools.filter((t) => named === null || t.name === named) : [];
    for (const t of tools) jobs.push({ kind: "tool", parameters: t.parameters, strict: t.strict === true, param: `tools[${job.tools.indexOf(t)}].function.parameters` });
    if (jobs.length === 0) return { tools: new Map() };
    const outcomes = await grammarCompiler.compile(jobs);
    const gbnf = (o: GrammarOutcome): string => {
      if ("error" in o) throw new ApiError(o.error.code, o.error.message, { param: o.error.param });
      return o.gbnf;
    };
    const results = outcomes.map(gbnf);
    return { answer: f ? results.shift() : undefined, tools: new Map(tools.map((t, i) => [t.name, results[i]!])) };
  }

  /** The caller's logit_bias (OpenAI's -100…100 added to the logits; -100 or less: never). */
  private userBias(s: Loaded, job: ChatJob): Pick<LoopRequest, "biasTokens" | "biasLogits"> {
    const bias = job.sampling.logitBias;
    if (!bias?.size) return {};
    for (const id of bias.keys())
      if (id >= s.vocabularySize)
        throw new ApiError("invalid_request", `logit_bias: token id ${id} is outside this model's vocabulary`, { param: `logit_bias.${id}` });
    return {
      biasTokens: Uint32Array.from(bias.keys()),
      biasLogits: Float32Array.from(bias.values(), (v) => (v <= -100 ? -Infinity : v)),
    };
  }

  /** Tokens forced one per step at the start: the test hook's, or the opening of a thought or of a required call. */
  private forced(s: Loaded, job: ChatJob, opening: string | null): Pick<LoopRequest, "forced"> {
    const test = this.opts.testForcedTokens?.(s.model, job);
    if (test?.length) return { forced: Uint32Array.from(test) };
    if (opening) return { forced: Uint32Array.from(s.model.tokenize(opening, true)) };
    return {};
  }

}
