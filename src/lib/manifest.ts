import { Type as T, type Static } from "@sinclair/typebox";

// A model manifest: what the registry needs to list a model, price it and hand it to an engine.
// Engines read `files` (paths relative to the manifest's base dir) and their own options.

export const ModelKind = T.Union([T.Literal("chat"), T.Literal("embedding"), T.Literal("classifier"), T.Literal("reranker"), T.Literal("image")]);
export type ModelKind = Static<typeof ModelKind>;

export const ModelPrice = T.Object(
  {
    input_per_m: T.Optional(T.Number({ minimum: 0, description: "USD per million input tokens" })),
    output_per_m: T.Optional(T.Number({ minimum: 0, description: "USD per million output tokens" })),
    per_image: T.Optional(T.Number({ minimum: 0, description: "USD per generated image" })),
    decision_input_per_m: T.Optional(T.Number({ minimum: 0, description: "chat: USD per million input tokens of /v1/decisions" })),
  },
  { additionalProperties: false },
);

export const ModelManifest = T.Object(
  {
    id: T.String({ minLength: 1, maxLength: 128, pattern: "^[A-Za-z0-9][A-Za-z0-9._:/-]*$" }),
    name: T.String({ minLength: 1 }),
    kind: ModelKind,
    files: T.Record(T.String(), T.String({ minLength: 1 }), { description: "role → path, e.g. model, mmproj" }),
    max_context: T.Integer({ minimum: 1 }),
    vision: T.Boolean({ default: false }),
    slots: T.Union([T.Integer({ minimum: 1, maximum: 256 }), T.Literal("auto")], {
      default: 1,
      description: 'worker slots (parallel sequences); "auto" (chat): the most that fit at the chosen context, up to max_slots',
    }),
    max_slots: T.Optional(T.Integer({ minimum: 1, maximum: 256, description: 'ceiling for slots = "auto"; default 4' })),
    price: T.Optional(ModelPrice),
    load: T.Union([T.Literal("start"), T.Literal("first_use")], {
      default: "first_use",
      description: 'start: loaded at start and pinned (never unloaded to make room or when idle); first_use: loaded on demand, unloaded after keep_alive_s idle or when another model needs its memory',
    }),
    keep_alive_s: T.Optional(T.Integer({ minimum: -1, description: "seconds an idle on-demand model stays loaded; 0: unloaded as soon as idle; -1: until its memory is needed; default engines.keep_alive_s" })),
    device: T.Optional(
      T.Union([T.Literal("auto"), T.Literal("cpu"), T.Literal("cuda"), T.Literal("vulkan"), T.Literal("webgpu")], {
        description: 'default engines.device; "vulkan" for chat models only, "webgpu" for embedding, classifier and image models only (see manifestProblems)',
      }),
    ),
    // Chat engine (llama.cpp) settings.
    context: T.Optional(
      T.Union([T.Literal("auto"), T.Integer({ minimum: 1 })], {
        description: 'tokens per slot (chat); "auto": the most that fit, up to the trained context and max_context; default max_context',
      }),
    ),
    gpu_layers: T.Optional(T.Union([T.Literal("auto"), T.Integer({ minimum: 0 })], { description: "layers offloaded to CUDA; auto by default" })),
    threads: T.Optional(T.Integer({ minimum: 1, description: "compute threads; default engines.threads" })),
    batch_size: T.Optional(T.Integer({ minimum: 1 })),
    gap_limit: T.Optional(
      T.Number({
        minimum: 0,
        description:
          "chat: while a live request generates, each decode step carries as many prompt tokens as keep it within about this many times a step of the generating requests alone (measured as the model runs), unless that reads prompts at more than prompt_slowdown times their least cost a token; 0: prompts take whole plans of 2,048 tokens as llama-server does; default 3",
      }),
    ),
    prompt_slowdown: T.Optional(
      T.Number({
        minimum: 1,
        description:
          "chat: how much dearer a prompt token may get (smaller steps) to keep the streams beside it within gap_limit; default 1.1 (a long prompt reads about as fast as alone, and on a CPU the gap gives way); higher: smoother streams, slower long prompts",
      }),
    ),
    queue: T.Optional(T.Integer({ minimum: 0, description: "requests that may wait for a busy slot; default = slots (chat), 4 (image)" })),
    queue_wait_s: T.Optional(T.Number({ exclusiveMinimum: 0, description: "longest wait for a slot before 429 (chat) or 503 (image); default 30 (chat), 60 (image)" })),
    load_timeout_s: T.Optional(
      T.Integer({ minimum: 1, description: "longest one load may take before it is stopped (503 model_load_failed); default 120 s plus 20 s per GiB of the model's files" }),
    ),
  },
  { additionalProperties: false },
);
export type ModelManifest = Static<typeof ModelManifest>;

const article = (kind: ModelKind) => (kind === "embedding" || kind === "image" ? "an" : "a");
const ONNX_KINDS: readonly ModelKind[] = ["embedding", "classifier", "reranker", "image"];

/**
 * What the schema alone cannot see because it depends on `kind`: each problem names its field, so
 * the config reports it as `models[i].<field>: <message>`. A device is one engine's backend:
 * "vulkan" is llama.cpp's (chat), "webgpu" ONNX Runtime's (embedding, classifier, image).
 */
export function manifestProblems(
  m: Pick<ModelManifest, "kind" | "device"> & Partial<Pick<ModelManifest, "slots" | "max_slots" | "context" | "max_context" | "gap_limit" | "prompt_slowdown">>,
): { field: keyof ModelManifest; message: string }[] {
  const onnx = ONNX_KINDS.includes(m.kind);
  if (m.kind !== "chat" && m.slots === "auto")
    return [{ field: "slots", message: `"auto" slots are chosen for chat models; ${article(m.kind)} ${m.kind} model takes a number` }];
  if (m.kind !== "chat" && m.context !== undefined)
    return [{ field: "context", message: `context per slot is a chat model's setting; ${article(m.kind)} ${m.kind} model's input size is max_context` }];
  for (const field of ["gap_limit", "prompt_slowdown"] as const)
    if (m.kind !== "chat" && m[field] !== undefined) return [{ field, message: `${field} paces a chat model's decode steps; ${article(m.kind)} ${m.kind} model has none` }];
  if (typeof m.context === "number" && m.max_context !== undefined && m.context > m.max_context)
    return [{ field: "context", message: `${m.context} tokens per slot is more than max_context (${m.max_context}); raise max_context or lower context` }];
  if (m.max_slots !== undefined && m.slots !== undefined && m.slots !== "auto")
    return [{ field: "max_slots", message: `max_slots is the ceiling for slots = "auto"; with slots = ${m.slots} it has no effect: remove it or set slots = "auto"` }];
  if (m.device === "webgpu" && !onnx)
    return [{ field: "device", message: `"webgpu" is ONNX Runtime's provider, for embedding, classifier, reranker and image models; ${article(m.kind)} ${m.kind} model takes "auto", "cpu", "cuda" or "vulkan"` }];
  if (m.device === "vulkan" && onnx)
    return [{ field: "device", message: `"vulkan" is the chat engine's backend; ${article(m.kind)} ${m.kind} model takes "auto", "cpu", "cuda" or "webgpu" (ONNX Runtime's WebGPU provider, over Vulkan)` }];
  return [];
}

/**
 * How many requests may wait for a busy worker of `m`, and for how long. Image models wait longer
 * and by default hold a few: clients fan `n: 3` out as three concurrent n=1 requests (the Vercel
 * AI SDK does), which one worker serves one after another in seconds.
 */
export function slotQueue(m: Pick<ModelManifest, "kind" | "slots" | "max_slots" | "queue" | "queue_wait_s">): { maxQueue: number; maxWaitMs: number } {
  const image = m.kind === "image";
  return { maxQueue: m.queue ?? (image ? 4 : slotCount(m)), maxWaitMs: (m.queue_wait_s ?? (image ? 60 : 30)) * 1000 };
}

/**
 * The shortest context an auto context may be: below it a chat model is refused rather than loaded
 * uselessly small (a coding agent's first prompt alone is 13-23k tokens; 4k holds a chat).
 */
export const MIN_AUTO_CONTEXT = 4096;

/** Ceiling for `slots = "auto"` when the manifest sets no max_slots. */
export const DEFAULT_MAX_SLOTS = 4;

/**
 * The slots a model has at most: its number, or for "auto" its ceiling (the planner chooses at
 * load, at most this). Queue sizes and batch widths are set from it before the model loads.
 */
export function slotCount(m: Pick<ModelManifest, "slots" | "max_slots">): number {
  return m.slots === "auto" ? (m.max_slots ?? DEFAULT_MAX_SLOTS) : m.slots;
}

export const RetiredModel = T.Object(
  { id: T.String({ minLength: 1 }), replaced_by: T.Optional(T.String({ minLength: 1 })) },
  { additionalProperties: false },
);
export type RetiredModel = Static<typeof RetiredModel>;
