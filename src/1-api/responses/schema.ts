import { Type as T, type Static, type TSchema } from "@sinclair/typebox";
import { Value, type ValueError } from "@sinclair/typebox/value";

// POST /v1/responses request (spec §2.5), declared once. Every object is open
// (`additionalProperties: true`): Elysia strips undeclared fields from closed objects, and spec §4
// rule 2 says an unsupported field is refused by name, never dropped — so the fields are kept and
// to-chat.ts checks each object against its allow-list. Objects stay flat (one shape per item,
// per part, per tool) so a type error names the field; rules that depend on `type` or `role` are
// the translator's.

const open = { additionalProperties: true } as const;
const Nullable = <S extends TSchema>(s: S) => T.Optional(T.Union([s, T.Null()]));

/** input_text, output_text (assistant history) and input_image parts. */
export const InputPart = T.Object(
  {
    type: T.String({ minLength: 1 }),
    text: T.Optional(T.String()),
    /** input_image: a data URL or an https URL (a plain string in this format). */
    image_url: Nullable(T.String({ minLength: 1 })),
    file_id: Nullable(T.String()),
    detail: T.Optional(T.String()),
    annotations: T.Optional(T.Array(T.Unknown())),
    logprobs: T.Optional(T.Array(T.Unknown())),
  },
  open,
);
export type InputPart = Static<typeof InputPart>;

/** A message (`type` "message" or absent), function_call, function_call_output or reasoning item. */
export const InputItem = T.Object(
  {
    type: T.Optional(T.String({ minLength: 1 })),
    role: T.Optional(T.Union([T.Literal("user"), T.Literal("assistant"), T.Literal("system"), T.Literal("developer")])),
    /** null: a reasoning item sent back with no reasoning text (a message needs content). */
    content: T.Optional(T.Union([T.String(), T.Array(InputPart), T.Null()])),
    id: T.Optional(T.String()),
    status: T.Optional(T.Union([T.Literal("in_progress"), T.Literal("completed"), T.Literal("incomplete")])),
    call_id: T.Optional(T.String({ minLength: 1 })),
    name: T.Optional(T.String({ minLength: 1 })),
    /** function_call: the arguments as a JSON string. */
    arguments: T.Optional(T.String()),
    /** function_call_output: a string, or text parts. */
    output: T.Optional(T.Union([T.String(), T.Array(InputPart)])),
    /** function_call: the namespace tool group the called function belongs to. */
    namespace: Nullable(T.String()),
    /** reasoning: this server's own opaque thought (to-chat.ts), and its summary parts. */
    encrypted_content: Nullable(T.String()),
    summary: T.Optional(T.Array(T.Object({ type: T.String(), text: T.String() }, open))),
  },
  open,
);
export type InputItem = Static<typeof InputItem>;

const FunctionFields = {
  type: T.String({ minLength: 1 }),
  name: T.Optional(T.String({ minLength: 1, maxLength: 64, pattern: "^[A-Za-z0-9_.-]+$" })),
  description: Nullable(T.String()),
  parameters: Nullable(T.Record(T.String(), T.Unknown())),
  strict: Nullable(T.Boolean()),
};

/**
 * Responses tools are flat: {type:"function", name, description, parameters, strict}; a
 * {type:"namespace", name, description, tools:[function…]} groups function tools (Codex's MCP tools).
 */
export const Tool = T.Object({ ...FunctionFields, tools: T.Optional(T.Array(T.Object(FunctionFields, open), { maxItems: 128 })) }, open);
export type Tool = Static<typeof Tool>;

const ToolChoiceObject = T.Object({ type: T.String({ minLength: 1 }), name: T.Optional(T.String()) }, open);
/** "none" | "auto" | "required" | {type:"function", name} — checked by the translator. */
export const ToolChoice = T.Union([T.String(), ToolChoiceObject]);
export type ToolChoice = Static<typeof ToolChoice>;

/** {type:"text"} | {type:"json_object"} | {type:"json_schema", name, schema, description, strict}. */
export const TextFormat = T.Object(
  {
    type: T.String({ minLength: 1 }),
    name: T.Optional(T.String({ minLength: 1 })),
    description: T.Optional(T.String()),
    schema: T.Optional(T.Record(T.String(), T.Unknown())),
    strict: Nullable(T.Boolean()),
  },
  open,
);
export type TextFormat = Static<typeof TextFormat>;

export const ResponsesRequest = T.Object(
  {
    model: T.String({ minLength: 1 }),
    input: T.Union([T.String(), T.Array(InputItem)]),
    instructions: Nullable(T.String()),
    tools: Nullable(T.Array(Tool, { maxItems: 128 })),
    // Null joins the union itself (not Nullable's outer union): "expected string or object or null".
    tool_choice: T.Optional(T.Union([T.String(), ToolChoiceObject, T.Null()])),
    parallel_tool_calls: Nullable(T.Boolean()),
    text: Nullable(T.Object({ format: T.Optional(TextFormat), verbosity: Nullable(T.String()) }, open)),
    max_output_tokens: Nullable(T.Integer({ minimum: 1 })),
    reasoning: Nullable(T.Object({ effort: Nullable(T.String()), summary: Nullable(T.String()), generate_summary: Nullable(T.String()), context: Nullable(T.String()), mode: Nullable(T.String()) }, open)),
    temperature: Nullable(T.Number({ minimum: 0, maximum: 2 })),
    top_p: Nullable(T.Number({ minimum: 0, maximum: 1 })),
    stream: Nullable(T.Boolean()),
    stream_options: Nullable(T.Object({ include_obfuscation: T.Optional(T.Boolean()) }, open)),
    store: Nullable(T.Boolean()),
    metadata: Nullable(T.Record(T.String({ maxLength: 64 }), T.String({ maxLength: 512 }), { maxProperties: 16 })),
    user: T.Optional(T.String()),
    // OpenAI fields this server does not implement: typed here so a wrong type is still a named
    // 400; the translator accepts them only at their "off" value (null, false, [], "disabled", 0).
    background: Nullable(T.Boolean()),
    truncation: Nullable(T.String()),
    /** "reasoning.encrypted_content" is honoured (to-chat.ts); the hosted-tool ones are no-ops. */
    include: Nullable(T.Array(T.String())),
    // Sent by default by OpenAI's clients (Codex, the AI SDK); accepted, none changes the answer.
    prompt_cache_key: Nullable(T.String()),
    client_metadata: Nullable(T.Record(T.String(), T.Unknown())),
    safety_identifier: Nullable(T.String()),
    service_tier: Nullable(T.String()),
    top_logprobs: Nullable(T.Integer({ minimum: 0 })),
    max_tool_calls: Nullable(T.Integer({ minimum: 1 })),
  },
  open,
);
export type ResponsesRequest = Static<typeof ResponsesRequest>;

/**
 * The body's validation errors, followed into unions. `input` and `content` are unions (a string
 * or a list), and a union's own error names only the union ("input: expected union value"); this
 * descends into the variant the value took (the one whose errors all lie deeper), so a bad role
 * is reported as `input[0].role`. Empty when the body is valid.
 */
export function requestErrors(body: unknown): ValueError[] {
  return [...Value.Errors(ResponsesRequest, body)].flatMap(leaves);
}

function leaves(e: ValueError): ValueError[] {
  const variants = e.errors.map((v) => [...v]);
  const taken = variants.find((inner) => inner.length > 0 && inner.every((x) => x.path.length > e.path.length));
  if (taken) return taken.flatMap(leaves);
  // The value matched no variant at all: say what each would have needed ("string or array").
  const wanted = variants.map((inner) => inner[0]?.message.replace(/^Expected /, "")).filter(Boolean);
  return [wanted.length === variants.length && wanted.length > 0 ? { ...e, message: `Expected ${wanted.join(" or ")}` } : e];
}
