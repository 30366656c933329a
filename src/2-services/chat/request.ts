import { Type as T, type Static } from "@sinclair/typebox";

// POST /v1/chat/completions request (spec §2.4), declared once: it validates the HTTP body and,
// later, batch lines. Unknown fields are accepted (STYLE "Schemas are declared once").
// Objects are kept flat (one object per message, per part) so a validation error names the
// field; the rules that depend on `role` or `type` are checked by the translator with named 400s.

export const ContentPart = T.Object({
  type: T.String({ minLength: 1 }),
  text: T.Optional(T.String()),
  image_url: T.Optional(T.Object({ url: T.String({ minLength: 1 }), detail: T.Optional(T.String()) })),
});
export type ContentPart = Static<typeof ContentPart>;

const Content = T.Union([T.String(), T.Array(ContentPart)]);

export const ToolCall = T.Object({
  id: T.String({ minLength: 1 }),
  type: T.Optional(T.Literal("function")),
  function: T.Object({ name: T.String({ minLength: 1 }), arguments: T.String() }),
});
export type ToolCall = Static<typeof ToolCall>;

export const ChatMessage = T.Object({
  role: T.Union([T.Literal("system"), T.Literal("developer"), T.Literal("user"), T.Literal("assistant"), T.Literal("tool")]),
  content: T.Optional(T.Union([Content, T.Null()])),
  name: T.Optional(T.String()),
  tool_calls: T.Optional(T.Union([T.Array(ToolCall), T.Null()])),
  tool_call_id: T.Optional(T.String({ minLength: 1 })),
  reasoning_content: T.Optional(T.Union([T.String(), T.Null()])),
}, {
  // Annotations only (the OpenAPI document shows them): which fields a message needs depends on its role.
  description: "system/developer/user need `content`; assistant `content` and/or `tool_calls`; tool `content` and the `tool_call_id` of an earlier assistant call.",
  examples: [{ role: "user", content: "Hello" }],
});
export type ChatMessage = Static<typeof ChatMessage>;

export const FunctionTool = T.Object({
  type: T.Literal("function"),
  function: T.Object({
    name: T.String({ minLength: 1, maxLength: 64, pattern: "^[A-Za-z0-9_.-]+$" }),
    description: T.Optional(T.String()),
    parameters: T.Optional(T.Record(T.String(), T.Unknown())),
    strict: T.Optional(T.Union([T.Boolean(), T.Null()])),
  }),
});
export type FunctionTool = Static<typeof FunctionTool>;

/** "none" | "auto" | "required" | {type:"function", function:{name}} — checked by the translator. */
export const ToolChoice = T.Union([
  T.String(),
  T.Object({ type: T.String(), function: T.Optional(T.Object({ name: T.String({ minLength: 1 }) })) }),
]);
export type ToolChoice = Static<typeof ToolChoice>;

export const ResponseFormat = T.Object({
  type: T.Union([T.Literal("text"), T.Literal("json_object"), T.Literal("json_schema")]),
  json_schema: T.Optional(
    T.Object({
      name: T.String({ minLength: 1 }),
      description: T.Optional(T.String()),
      schema: T.Optional(T.Record(T.String(), T.Unknown())),
      strict: T.Optional(T.Union([T.Boolean(), T.Null()])),
    }),
  ),
  /** With json_object: the schema the object must fit (Instructor's JSON_SCHEMA mode, llama-server's extension). */
  schema: T.Optional(T.Record(T.String(), T.Unknown())),
});
export type ResponseFormat = Static<typeof ResponseFormat>;

const Tokens = T.Union([T.Integer({ minimum: 1 }), T.Null()]);
const Nullable = <S extends Parameters<typeof T.Union>[0][number]>(s: S) => T.Optional(T.Union([s, T.Null()]));

export const ChatRequest = T.Object({
  model: T.String({ minLength: 1 }),
  messages: T.Array(ChatMessage, { minItems: 1 }),
  temperature: Nullable(T.Number({ minimum: 0, maximum: 2 })),
  top_p: Nullable(T.Number({ minimum: 0, maximum: 1 })),
  /** Extension (as llama.cpp's server): sample from the k most likely tokens; 0 = off. */
  top_k: Nullable(T.Integer({ minimum: 0 })),
  seed: Nullable(T.Integer()),
  stop: Nullable(T.Union([T.String(), T.Array(T.String(), { maxItems: 16 })])),
  max_tokens: T.Optional(Tokens),
  max_completion_tokens: T.Optional(Tokens),
  n: Nullable(T.Integer()),
  stream: Nullable(T.Boolean()),
  stream_options: Nullable(T.Object({ include_usage: T.Optional(T.Boolean()) })),
  tools: Nullable(T.Array(FunctionTool, { maxItems: 128 })),
  tool_choice: Nullable(ToolChoice),
  parallel_tool_calls: Nullable(T.Boolean()),
  response_format: Nullable(ResponseFormat),
  chat_template_kwargs: Nullable(T.Object({ enable_thinking: T.Optional(T.Boolean()) })),
  frequency_penalty: Nullable(T.Number({ minimum: -2, maximum: 2 })),
  presence_penalty: Nullable(T.Number({ minimum: -2, maximum: 2 })),
  logit_bias: Nullable(T.Record(T.String(), T.Number({ minimum: -100, maximum: 100 }))),
  logprobs: Nullable(T.Boolean()),
  user: T.Optional(T.String()),
  /** none/minimal switch the hidden reasoning pass off; low…xhigh leave it on (from-request.ts). */
  reasoning_effort: Nullable(T.String()),
  /**
   * llama-server's and vLLM's switch: "deepseek" returns the model's reasoning text as
   * `reasoning_content` (the message's, and the stream's deltas); "none" (the default, as OpenAI's
   * chat completions) keeps it hidden. The console's chat asks for it.
   */
  reasoning_format: Nullable(T.Union([T.Literal("none"), T.Literal("deepseek")])),
  // Accepted for the clients that send them by default; none changes the answer (web/docs/api-chat.md).
  verbosity: Nullable(T.String()),
  prompt_cache_key: Nullable(T.String()),
  safety_identifier: Nullable(T.String()),
  service_tier: Nullable(T.String()),
  store: Nullable(T.Boolean()),
  metadata: Nullable(T.Record(T.String(), T.String())),
});
export type ChatRequest = Static<typeof ChatRequest>;
