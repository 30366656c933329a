import type { ChatMessage, ChatRequest, ContentPart } from "./request";
import { ApiError } from "../../lib/errors";
import { parseClientJson } from "../../lib/bounded-json";
import type { ChatJob, ChatTurn, ImageInput, OutputFormat, ToolChoice, ToolSpec } from "../../3-engines/chat-job";
import { requireObjects } from "../../3-engines/object-schema";
import { checkSchema, checkTools } from "../../3-engines/schema-limits";

// OpenAI chat-completions request → ChatJob. Pure: no framework, store or engine. Every rule the
// schema cannot express is checked here and refused with a 400 that names the field.

const bad = (param: string, message: string) => new ApiError("invalid_request", `${param}: ${message}`, { param });

export function toChatJob(req: ChatRequest): ChatJob {
  if (req.n != null && req.n !== 1) throw bad("n", "only n=1 is supported");
  if (req.logprobs) throw bad("logprobs", "log probabilities are not supported");

  const tools = toTools(req);
  // Before any converter or grammar sees them (issue 41): schema-limits.ts.
  checkTools(tools, (i) => `tools[${i}].function.parameters`);
  const turns = toTurns(req.messages);
  const stream = req.stream === true;
  return {
    model: req.model,
    turns,
    tools,
    toolChoice: toToolChoice(req, tools),
    parallelToolCalls: req.parallel_tool_calls ?? true,
    format: toFormat(req),
    thinking: req.chat_template_kwargs?.enable_thinking ?? toThinking(req.reasoning_effort),
    maxTokens: req.max_completion_tokens ?? req.max_tokens ?? null,
    stop: (typeof req.stop === "string" ? [req.stop] : (req.stop ?? [])).filter((s) => s !== ""),
    sampling: {
      temperature: req.temperature ?? undefined,
      topP: req.top_p ?? undefined,
      topK: req.top_k ?? undefined,
      seed: req.seed ?? undefined,
      frequencyPenalty: req.frequency_penalty ?? undefined,
      presencePenalty: req.presence_penalty ?? undefined,
      logitBias: toLogitBias(req.logit_bias),
    },
    stream,
    // Spec §2.4/§6: a stream carries usage; `stream_options.include_usage: false` opts out.
    includeUsage: stream && req.stream_options?.include_usage !== false,
    ...(req.prompt_cache_key ? { cacheKey: req.prompt_cache_key } : {}),
  };
}

function toTurns(messages: ChatMessage[]): ChatTurn[] {
  const turns: ChatTurn[] = [];
  const pendingCalls = new Set<string>();
  messages.forEach((m, i) => {
    const at = `messages[${i}]`;
    switch (m.role) {
      case "system":
      case "developer":
        turns.push({ role: "system", text: textOnly(m, at) });
        break;
      case "user": {
        const { text, images } = userContent(m, at);
        turns.push({ role: "user", text, images });
        break;
      }
      case "assistant": {
        const calls = (m.tool_calls ?? []).map((c, j) => {
          const param = `${at}.tool_calls[${j}].function.arguments`;
          try {
            parseClientJson(c.function.arguments, "the text");
          } catch (e) {
            throw bad(param, `must be a JSON string (${(e as Error).message})`);
          }
          pendingCalls.add(c.id);
          return { id: c.id, name: c.function.name, arguments: c.function.arguments };
        });
        const text = m.content == null ? "" : textOnly(m, at);
        if (!text && calls.length === 0 && m.content == null) throw bad(`${at}.content`, "an assistant message needs content or tool_calls");
        turns.push({ role: "assistant", text, reasoning: m.reasoning_content ?? "", toolCalls: calls });
        break;
      }
      case "tool": {
        if (!m.tool_call_id) throw bad(`${at}.tool_call_id`, "is required on a tool message");
        if (!pendingCalls.has(m.tool_call_id))
          throw bad(`${at}.tool_call_id`, `"${m.tool_call_id}" does not answer a tool call of an earlier assistant message`);
        pendingCalls.delete(m.tool_call_id);
        turns.push({ role: "tool", toolCallId: m.tool_call_id, text: textOnly(m, at) });
        break;
      }
    }
  });
  return turns;
}

function parts(m: ChatMessage, at: string): ContentPart[] {
  if (m.content == null) throw bad(`${at}.content`, "is required");
  return typeof m.content === "string" ? [{ type: "text", text: m.content }] : m.content;
}

function textOf(p: ContentPart, param: string): string {
  if (typeof p.text !== "string") throw bad(`${param}.text`, "is required on a text part");
  return p.text;
}

/** System, assistant and tool content: text parts only. */
function textOnly(m: ChatMessage, at: string): string {
  return parts(m, at)
    .map((p, j) => {
      const param = `${at}.content[${j}]`;
      if (p.type !== "text") throw bad(`${param}.type`, `"${p.type}" parts are not allowed in a ${m.role} message (text only)`);
      return textOf(p, param);
    })
    .join("\n");
}

function userContent(m: ChatMessage, at: string): { text: string; images: ImageInput[] } {
  const texts: string[] = [];
  const images: ImageInput[] = [];
  parts(m, at).forEach((p, j) => {
    const param = `${at}.content[${j}]`;
    if (p.type === "text") texts.push(textOf(p, param));
    else if (p.type === "image_url") {
      if (!p.image_url?.url) throw bad(`${param}.image_url.url`, "is required on an image_url part");
      images.push({ url: p.image_url.url, param, at: texts.join("\n").length });
    } else throw bad(`${param}.type`, `unsupported content part "${p.type}" (text and image_url are supported)`);
  });
  return { text: texts.join("\n"), images };
}

function toTools(req: ChatRequest): ToolSpec[] {
  const seen = new Set<string>();
  return (req.tools ?? []).map((t, i) => {
    const name = t.function.name;
    if (seen.has(name)) throw bad(`tools[${i}].function.name`, `duplicate tool name "${name}"`);
    seen.add(name);
    return {
      name,
      description: t.function.description,
      parameters: t.function.parameters as ToolSpec["parameters"],
      ...(t.function.strict === true ? { strict: true } : {}),
    };
  });
}

function toToolChoice(req: ChatRequest, tools: ToolSpec[]): ToolChoice {
  const c = req.tool_choice;
  if (c == null) return tools.length ? "auto" : "none";
  if (typeof c === "string") {
    if (c !== "none" && c !== "auto" && c !== "required")
      throw bad("tool_choice", `must be "none", "auto", "required" or {"type":"function","function":{"name":…}}`);
    if (c === "required" && tools.length === 0) throw bad("tool_choice", '"required" needs at least one tool in `tools`');
    return tools.length ? c : "none";
  }
  if (c.type !== "function" || !c.function) throw bad("tool_choice", 'an object tool_choice must be {"type":"function","function":{"name":…}}');
  if (!tools.some((t) => t.name === c.function!.name)) throw bad("tool_choice.function.name", `"${c.function.name}" is not in tools`);
  return { name: c.function.name };
}

function toFormat(req: ChatRequest): OutputFormat {
  const f = req.response_format;
  if (!f || f.type === "text") return null;
  if (f.type === "json_object") {
    // A schema beside json_object (Instructor's JSON_SCHEMA mode; llama-server and vLLM honour it) is
    // enforced as json_schema would be: dropping it would change the answer asked for.
    // Its answer is still an object: the schema is narrowed to the objects it admits (`{}`: any object).
    if (f.schema == null) return { type: "json_object" };
    checkSchema(f.schema, "response_format.schema", true);
    const schema = requireObjects(f.schema, "response_format.schema", 'type "json_object" answers a JSON object');
    return { type: "json_schema", name: "output", schema, param: "response_format.schema" };
  }
  if (f.schema != null) throw bad("response_format.schema", 'is read only with type "json_object"; with "json_schema" send it in json_schema.schema');
  if (!f.json_schema) throw bad("response_format.json_schema", 'is required when type is "json_schema"');
  if (!f.json_schema.schema) throw bad("response_format.json_schema.schema", "is required");
  checkSchema(f.json_schema.schema, "response_format.json_schema.schema", true);
  return { type: "json_schema", name: f.json_schema.name, schema: f.json_schema.schema };
}

/** OpenAI's efforts (the openai SDK's ReasoningEffort; test/api/sdk-enums.test.ts reads them from its declarations). */
const EFFORTS = ["none", "minimal", "low", "medium", "high", "xhigh", "max"];

/** `reasoning_effort`: none and minimal switch thinking off, any other effort on; absent, the model's default. */
function toThinking(effort: string | null | undefined): boolean | null {
  if (effort == null) return null;
  if (!EFFORTS.includes(effort)) throw bad("reasoning_effort", `must be one of ${EFFORTS.map((e) => `"${e}"`).join(", ")}`);
  return effort !== "none" && effort !== "minimal";
}

function toLogitBias(bias: Record<string, number> | null | undefined): Map<number, number> | undefined {
  if (!bias) return undefined;
  const out = new Map<number, number>();
  for (const [k, v] of Object.entries(bias)) {
    if (!/^\d+$/.test(k)) throw bad(`logit_bias.${k}`, "keys are token ids (whole numbers)");
    out.set(Number(k), v);
  }
  return out;
}
