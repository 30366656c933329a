import { Type as T, type Static } from "@sinclair/typebox";

// A model manifest: what the registry needs to list a model, price it and hand it to an engine.
// Engines read `files` (paths relative to the manifest's base dir) and their own options.

export const ModelKind = T.Union([T.Literal("chat"), T.Literal("embedding"), T.Literal("classifier"), T.Literal("image")]);
export type ModelKind = Static<typeof ModelKind>;

export const ModelPrice = T.Object(
  {
    input_per_m: T.Optional(T.Number({ minimum: 0, description: "USD per million input tokens" })),
    output_per_m: T.Optional(T.Number({ minimum: 0, description: "USD per million output tokens" })),
    per_image: T.Optional(T.Number({ minimum: 0, description: "USD per generated image" })),
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
    slots: T.Integer({ minimum: 1, maximum: 256, default: 1, description: "worker slots (parallel sequences)" }),
    price: T.Optional(ModelPrice),
    load: T.Union([T.Literal("start"), T.Literal("first_use")], { default: "start", description: "when the engine loads the model" }),
    device: T.Optional(T.Union([T.Literal("auto"), T.Literal("cpu"), T.Literal("cuda")], { description: "default engines.device" })),
    // Chat engine (llama.cpp) settings.
    gpu_layers: T.Optional(T.Union([T.Literal("auto"), T.Integer({ minimum: 0 })], { description: "layers offloaded to CUDA; auto by default" })),
    threads: T.Optional(T.Integer({ minimum: 1, description: "compute threads; default engines.threads" })),
    batch_size: T.Optional(T.Integer({ minimum: 1 })),
    queue: T.Optional(T.Integer({ minimum: 0, description: "requests that may wait for a busy slot; default = slots" })),
    queue_wait_s: T.Number({ default: 30, exclusiveMinimum: 0, description: "longest wait for a slot before 429" }),
  },
  { additionalProperties: false },
);
export type ModelManifest = Static<typeof ModelManifest>;

export const RetiredModel = T.Object(
  { id: T.String({ minLength: 1 }), replaced_by: T.Optional(T.String({ minLength: 1 })) },
  { additionalProperties: false },
);
export type RetiredModel = Static<typeof RetiredModel>;
