import { Type as T, type Static, type TSchema } from "@sinclair/typebox";

// POST /v1/messages and /v1/messages/count_tokens request bodies (spec §2.6), declared once.
// Lenient like the Messages format itself: unknown fields are accepted. Objects are kept flat
// (one object per content block, per tool) so a validation error names the field; the rules
// that depend on a block's `type` are checked by to-chat.ts with 400s that name the block.

const Nullable = <S extends TSchema>(s: S) => T.Optional(T.Union([s, T.Null()]));

/** Spec §2.6: `cache_control` is accepted anywhere and ignored. */
const CacheControl = T.Optional(T.Unknown());

export const ImageSource = T.Object({
  type: T.String({ minLength: 1 }),
  media_type: T.Optional(T.String()),
  data: T.Optional(T.String()),
  url: T.Optional(T.String()),
});

/** A block inside a tool_result's content: text, or tool_reference (a client's tool search naming a tool; images are refused by the translator). */
export const ToolResultBlock = T.Object({
  type: T.String({ minLength: 1 }),
  text: T.Optional(T.String()),
  tool_name: T.Optional(T.String()),
  source: T.Optional(ImageSource),
  cache_control: CacheControl,
});
export type ToolResultBlock = Static<typeof ToolResultBlock>;

/** Every block kind in one flat object: text, image, thinking, redacted_thinking, tool_use, tool_result. */
export const ContentBlock = T.Object({
  type: T.String({ minLength: 1 }),
  text: T.Optional(T.String()),
  source: T.Optional(ImageSource),
  thinking: T.Optional(T.String()),
  signature: T.Optional(T.String()),
  data: T.Optional(T.String()),
  id: T.Optional(T.String()),
  name: T.Optional(T.String()),
  input: T.Optional(T.Unknown()),
  tool_use_id: T.Optional(T.String()),
  content: T.Optional(T.Union([T.String(), T.Array(ToolResultBlock)])),
  is_error: T.Optional(T.Boolean()),
  cache_control: CacheControl,
});
export type ContentBlock = Static<typeof ContentBlock>;

export const InputMessage = T.Object({
  role: T.Union([T.Literal("user"), T.Literal("assistant"), T.Literal("system")]),
  content: T.Union([T.String(), T.Array(ContentBlock)]),
});
export type InputMessage = Static<typeof InputMessage>;

export const SystemBlock = T.Object({
  type: T.String({ minLength: 1 }),
  text: T.Optional(T.String()),
  cache_control: CacheControl,
});

/** A custom tool (no `type`, or `custom`); any other `type` is a server tool, refused by name. */
export const Tool = T.Object({
  type: Nullable(T.String()),
  name: T.Optional(T.String()),
  description: T.Optional(T.String()),
  input_schema: T.Optional(T.Record(T.String(), T.Unknown())),
  /** true: input_schema enforced token by token (keywords no grammar can express → 400); else a hint. */
  strict: Nullable(T.Boolean()),
  /** Tool search (a client's, e.g. Claude Code's): the tool may be held back until a tool_reference names it. Here every tool is always offered. */
  defer_loading: Nullable(T.Boolean()),
  cache_control: CacheControl,
});
export type Tool = Static<typeof Tool>;

/** auto | any | tool {name} | none — checked by the translator. */
export const ToolChoice = T.Object({
  type: T.String({ minLength: 1 }),
  name: T.Optional(T.String()),
  disable_parallel_tool_use: T.Optional(T.Boolean()),
});
export type ToolChoice = Static<typeof ToolChoice>;

/** enabled {budget_tokens} | adaptive | disabled | between_tools, display — checked by the translator. */
export const ThinkingConfig = T.Object({
  type: T.String({ minLength: 1 }),
  budget_tokens: T.Optional(T.Integer({ minimum: 1 })),
  display: Nullable(T.String()),
});
export type ThinkingConfig = Static<typeof ThinkingConfig>;

/** {type:"json_schema", schema} — checked by the translator. */
export const OutputFormat = T.Object({ type: T.String({ minLength: 1 }), schema: T.Optional(T.Record(T.String(), T.Unknown())) }, { additionalProperties: true });
export type OutputFormat = Static<typeof OutputFormat>;

/**
 * Message threads (beta message-threads-2026-08-12): create | continue {previous_message_id} — checked
 * by threads.ts; kept per key in the store (thread-turn.ts).
 */
export const ThreadParam = T.Object({ type: T.String({ minLength: 1 }), previous_message_id: Nullable(T.String({ minLength: 1 })) });
export type ThreadParam = Static<typeof ThreadParam>;

const common = {
  model: T.String({ minLength: 1 }),
  messages: T.Array(InputMessage, { minItems: 1 }),
  system: T.Optional(T.Union([T.String(), T.Array(SystemBlock)])),
  tools: T.Optional(T.Array(Tool, { maxItems: 128 })),
  tool_choice: T.Optional(ToolChoice),
  thinking: T.Optional(ThinkingConfig),
  /** format (json_schema: enforced) and effort (with adaptive thinking: low thinks not) — to-chat.ts; other keys ignored. */
  output_config: T.Optional(T.Object({ format: Nullable(OutputFormat), effort: Nullable(T.String()) }, { additionalProperties: true })),
  /** The structured-outputs beta's name for output_config.format. */
  output_format: Nullable(OutputFormat),
  thread: Nullable(ThreadParam),
  // Accepted and ignored (spec §2.6).
  context_management: T.Optional(T.Unknown()),
  safeguards: T.Optional(T.Unknown()),
  cache_control: CacheControl,
  // Features this server does not have: refused by name when they ask for something.
  mcp_servers: T.Optional(T.Unknown()),
  container: T.Optional(T.Unknown()),
};

/**
 * Open at the top level (`additionalProperties: true`): Elysia strips undeclared fields from closed
 * objects, and a field dropped before the translator sees it is a field dropped silently (spec §4
 * rule 2). to-chat.ts refuses a top-level field it does not know, by name.
 */
const open = { additionalProperties: true } as const;

export const MessagesRequest = T.Object({
  ...common,
  max_tokens: T.Integer({ minimum: 1 }),
  stop_sequences: Nullable(T.Array(T.String(), { maxItems: 16 })),
  temperature: Nullable(T.Number({ minimum: 0, maximum: 1 })),
  top_p: Nullable(T.Number({ minimum: 0, maximum: 1 })),
  top_k: Nullable(T.Integer({ minimum: 0 })),
  metadata: T.Optional(T.Object({ user_id: Nullable(T.String()) })),
  stream: Nullable(T.Boolean()),
}, open);
export type MessagesRequest = Static<typeof MessagesRequest>;

/** count_tokens takes the same body without the output settings (max_tokens, stream). */
export const CountTokensRequest = T.Object(common, open);
export type CountTokensRequest = Static<typeof CountTokensRequest>;

/** /v1/messages bodies and count_tokens bodies (which lack the output settings). */
export type MessagesInput = CountTokensRequest & Partial<Omit<MessagesRequest, keyof CountTokensRequest>>;

/** Whether the answer carries `thinking` blocks, and whether their text is shown. */
export type ThinkingDisplay = "off" | "shown" | "omitted";
