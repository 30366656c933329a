// The six places a client's JSON Schema enters the appliance (issue 41: each of them reached
// llama.cpp's converter), as request bodies around one schema.

export interface EntryPoint {
  name: string;
  path: string;
  /** The schema is enforced whole (a response format, a strict tool) rather than a hint (a non-strict tool). */
  strict: boolean;
  body(schema: unknown, model?: string): Record<string, unknown>;
}

const user = "Answer.";
const noThinking = { chat_template_kwargs: { enable_thinking: false } };

export const ENTRY_POINTS: EntryPoint[] = [
  {
    name: "chat response_format",
    path: "/v1/chat/completions",
    strict: true,
    body: (schema, model = "chat") => ({ model, max_tokens: 16, seed: 1, ...noThinking, messages: [{ role: "user", content: user }], response_format: { type: "json_schema", json_schema: { name: "x", schema } } }),
  },
  {
    name: "chat tools[].function.parameters (strict)",
    path: "/v1/chat/completions",
    strict: true,
    body: (schema, model = "chat") => ({ model, max_tokens: 16, seed: 1, messages: [{ role: "user", content: user }], tools: [{ type: "function", function: { name: "f", parameters: schema, strict: true } }], tool_choice: "required" }),
  },
  {
    name: "chat tools[].function.parameters (non-strict)",
    path: "/v1/chat/completions",
    strict: false,
    body: (schema, model = "chat") => ({ model, max_tokens: 16, seed: 1, messages: [{ role: "user", content: user }], tools: [{ type: "function", function: { name: "f", parameters: schema } }], tool_choice: "required" }),
  },
  {
    name: "responses text.format",
    path: "/v1/responses",
    strict: true,
    body: (schema, model = "chat") => ({ model, max_output_tokens: 16, reasoning: { effort: "none" }, input: user, text: { format: { type: "json_schema", name: "x", schema } } }),
  },
  {
    name: "responses tools[].parameters",
    path: "/v1/responses",
    strict: false,
    body: (schema, model = "chat") => ({ model, max_output_tokens: 16, input: user, tools: [{ type: "function", name: "f", parameters: schema, strict: false }], tool_choice: "required" }),
  },
  {
    name: "messages output_config.format",
    path: "/v1/messages",
    strict: true,
    body: (schema, model = "chat") => ({ model, max_tokens: 16, messages: [{ role: "user", content: user }], output_config: { format: { type: "json_schema", schema } } }),
  },
  {
    name: "messages tools[].input_schema",
    path: "/v1/messages",
    strict: false,
    body: (schema, model = "chat") => ({ model, max_tokens: 16, messages: [{ role: "user", content: user }], tools: [{ name: "f", input_schema: schema }], tool_choice: { type: "any" } }),
  },
];
