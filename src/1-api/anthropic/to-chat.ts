import { ApiError } from "../http/errors";
import type { ChatMessage, ChatRequest, ContentPart, FunctionTool, ToolCall } from "../../2-services/chat/request";
import type { ContentBlock, InputMessage, MessagesInput, OutputFormat, ThinkingConfig, ThinkingDisplay, Tool, ToolResultBlock } from "./schema";
import { threadErrors } from "./threads";

// Messages request → chat-completions request (spec §2.6). Pure: no framework, store or engine.
// Every rule the schema cannot express is checked here and refused with a 400 naming the field
// (spec §4 rule 2: never drop a field silently, except the ignored fields of §2.6).

/** Where a chat message, and each of its content parts, sits in the Messages request. */
export interface Origin {
  at: string;
  parts: string[];
}

export interface ChatTranslation {
  request: ChatRequest;
  thinking: ThinkingDisplay;
  /** One per chat message, for errors the chat layer raises later (see relabel). */
  origins: Origin[];
}

const bad = (param: string, message: string) => new ApiError("invalid_request", `${param}: ${message}`, { param });

/** The chat layer's tool-name rule (chat/request.ts FunctionTool). */
const TOOL_NAME = /^[A-Za-z0-9_.-]{1,64}$/;

export function toChatRequest(req: MessagesInput, opts: { ignoreHostedTools?: boolean } = {}): ChatTranslation {
  refuseUnsupported(req);
  const thinking = toThinking(req.thinking, req.output_config?.effort);
  // output_format: the structured-outputs beta's name for output_config.format, still sent by some clients.
  if (req.output_format != null && req.output_config?.format != null) throw bad("output_format", "send output_config.format or output_format, not both");
  const format = req.output_format != null ? relabelFormat(() => toFormat(req.output_format)) : toFormat(req.output_config?.format);
  const tools = toTools(req.tools ?? [], opts.ignoreHostedTools === true);
  const messages: ChatMessage[] = [];
  const origins: Origin[] = [];
  const system = toSystem(req);
  if (system.parts.length) {
    messages.push({ role: "system", content: system.parts });
    origins.push({ at: "system", parts: system.origins });
  }
  const answered = new Set<string>();
  const pending = new Set<string>();
  req.messages.forEach((m, i) => {
    if (m.role === "system") return;
    for (const out of m.role === "user" ? fromUser(m, i, pending, answered) : [fromAssistant(m, i, pending)]) {
      messages.push(out.message);
      origins.push(out.origin);
    }
  });
  if (!messages.some((m) => m.role !== "system")) throw bad("messages", "needs at least one user or assistant message");

  const choice = toToolChoice(req.tool_choice, tools, serverRunNames(req.tools ?? undefined));
  const request: ChatRequest = {
    model: req.model,
    messages,
    ...(req.max_tokens != null ? { max_tokens: req.max_tokens } : {}),
    ...(req.temperature != null ? { temperature: req.temperature } : {}),
    ...(req.top_p != null ? { top_p: req.top_p } : {}),
    ...(req.top_k != null ? { top_k: req.top_k } : {}),
    ...(req.stop_sequences?.length ? { stop: req.stop_sequences } : {}),
    ...(tools.length ? { tools } : {}),
    ...choice,
    ...(format ? { response_format: format } : {}),
    // Thinking is on only when asked (spec §2.6: "when not asked, the answer is direct").
    chat_template_kwargs: { enable_thinking: thinking !== "off" },
    ...(req.stream ? { stream: true, stream_options: { include_usage: true } } : {}),
  };
  return { request, thinking, origins };
}

/** Top-level fields this server implements or, per spec §2.6, accepts and ignores. */
const FIELDS = new Set([
  "model", "messages", "max_tokens", "system", "tools", "tool_choice", "thinking", "output_config", "stop_sequences",
  "temperature", "top_p", "top_k", "metadata", "stream", "output_format", "thread",
  "context_management", "safeguards", "cache_control",
  // Sent by Anthropic's clients; none changes the answer: where a request runs and who it is for.
  "service_tier", "speed", "inference_geo", "diagnostics", "user_profile_id", "workspace_id", "billing_policy",
]);
/** Anthropic features this server does not have: accepted only at their "off" value, else refused by name. */
const OFF_ONLY = new Map<string, [off: (v: unknown) => boolean, why: string]>(Object.entries({
  mcp_servers: [(v) => v == null || (Array.isArray(v) && v.length === 0), "MCP servers are not supported on this server; send the tools as custom tools"],
  container: [(v) => v == null, "containers are not supported on this server"],
  compaction: [(v) => v == null, "server-side compaction is not supported on this server; send the conversation as it should be read"],
  fallbacks: [(v) => v == null || (Array.isArray(v) && v.length === 0), "fallback models are not supported on this server; retry with another model yourself"],
  fallback_credit_token: [(v) => v == null, "fallback models are not supported on this server"],
}));

/**
 * `thread` (Anthropic's message threads) is resolved against the store before translation
 * (thread-turn.ts), which hands over the request without it. A caller that does not resolve threads
 * gets it refused with the code the Anthropic SDK recovers from, never dropped: a continue without
 * its history would answer a conversation the client did not mean.
 */
function refuseThread(thread: unknown) {
  if (thread == null) return;
  throw threadErrors.unsupported("message threads are not kept for this request");
}

function refuseUnsupported(req: MessagesInput) {
  refuseThread((req as { thread?: unknown }).thread);
  for (const [field, value] of Object.entries(req)) {
    // A Map, not an object's keys: a body field named like Object.prototype's ("isPrototypeOf") is just unknown.
    const offOnly = OFF_ONLY.get(field);
    if (offOnly) {
      if (!offOnly[0](value)) throw bad(field, offOnly[1]);
    } else if (!FIELDS.has(field)) {
      throw bad(field, "is not a Messages API field this server supports (it is refused rather than ignored, since it could change the answer)");
    }
  }
}

const EFFORTS = ["low", "medium", "high", "xhigh", "max"];

/** The thinking types and displays of the current SDK's types (test: to-chat.test.ts reads them from the SDK). */
const THINKING_TYPES = ["enabled", "adaptive", "disabled", "between_tools"];
const THINKING_DISPLAYS = ["summarized", "omitted", "updates"];
const quoted = (xs: string[]) => xs.map((x) => `"${x}"`).join(", ");

/**
 * thinking: enabled thinks; adaptive lets the model decide, which here is output_config.effort's
 * call *(choice)*: low answers directly, any other effort (or none given) thinks; disabled or
 * absent never thinks (spec §2.6: "when not asked, the answer is direct"). between_tools is
 * thinking off with the model's notes between tool calls as thinking blocks on Anthropic's API;
 * here it is thinking off and those notes stay text *(choice: a template-driven model writes no
 * separate progress notes)*. display "updates" (progress updates instead of a summary) shows the
 * thought as "summarized" does *(choice: the thought streams as it is written, the finest update
 * there is; no second model summarises it here)*.
 */
function toThinking(t: ThinkingConfig | null | undefined, effort: string | null | undefined): ThinkingDisplay {
  if (effort != null && !EFFORTS.includes(effort)) throw bad("output_config.effort", `must be one of ${quoted(EFFORTS)} (got "${effort}")`);
  if (t && !THINKING_TYPES.includes(t.type)) throw bad("thinking.type", `must be one of ${quoted(THINKING_TYPES)} (got "${t.type}")`);
  if (t?.display != null && !THINKING_DISPLAYS.includes(t.display)) throw bad("thinking.display", `must be one of ${quoted(THINKING_DISPLAYS)} (got "${t.display}")`);
  if (!t || t.type === "disabled" || t.type === "between_tools") return "off";
  if (t.type === "adaptive" && effort === "low") return "off";
  // budget_tokens is a ceiling the chat layer cannot enforce separately: thinking counts toward max_tokens.
  return t.display === "omitted" ? "omitted" : "shown";
}

/** toFormat's refusals, named after output_format instead of output_config.format. */
function relabelFormat<T>(f: () => T): T {
  try {
    return f();
  } catch (e) {
    if (e instanceof ApiError && e.param?.startsWith("output_config.format")) {
      const param = e.param.replace("output_config.format", "output_format");
      throw bad(param, e.message.slice(e.param.length + 2));
    }
    throw e;
  }
}

/** output_config.format: {type:"json_schema", schema} → the chat request's response_format, enforced token by token. */
function toFormat(f: OutputFormat | null | undefined): ChatRequest["response_format"] {
  if (f == null) return undefined;
  if (f.type !== "json_schema") throw bad("output_config.format.type", `must be "json_schema" (got "${f.type}")`);
  if (!f.schema) throw bad("output_config.format.schema", 'is required when type is "json_schema"');
  return { type: "json_schema", json_schema: { name: "output", schema: f.schema } };
}

function toSystem(req: MessagesInput): { parts: ContentPart[]; origins: string[] } {
  const parts: ContentPart[] = [];
  const origins: string[] = [];
  const add = (text: string, at: string) => {
    parts.push({ type: "text", text });
    origins.push(at);
  };
  const s = req.system;
  if (typeof s === "string") {
    if (s) add(s, "system");
  } else if (s) s.forEach((b, j) => add(textBlock(b, `system[${j}]`), `system[${j}]`));
  // Spec §2.6: a message with role `system` inside the list is joined to the system prompt.
  req.messages.forEach((m, i) => {
    if (m.role !== "system") return;
    if (typeof m.content === "string") add(m.content, `messages[${i}].content`);
    else m.content.forEach((b, j) => add(textBlock(b, `messages[${i}].content[${j}]`), `messages[${i}].content[${j}]`));
  });
  return { parts, origins };
}

function textBlock(b: { type: string; text?: string }, at: string): string {
  if (b.type !== "text") throw bad(`${at}.type`, `"${b.type}" blocks are not allowed here (text only)`);
  if (typeof b.text !== "string") throw bad(`${at}.text`, "is required on a text block");
  return b.text;
}

const blocks = (m: InputMessage): ContentBlock[] => (typeof m.content === "string" ? [{ type: "text", text: m.content }] : m.content);

type Translated = { message: ChatMessage; origin: Origin };

/** A user turn: runs of text and image blocks become user messages; each tool_result a tool message. */
function fromUser(m: InputMessage, i: number, pending: Set<string>, answered: Set<string>): Translated[] {
  const out: Translated[] = [];
  let run: { parts: ContentPart[]; origin: Origin } | null = null;
  const flush = () => {
    if (run) out.push({ message: { role: "user", content: run.parts }, origin: run.origin });
    run = null;
  };
  const at = `messages[${i}]`;
  const all = blocks(m);
  all.forEach((b, j) => {
    const param = typeof m.content === "string" ? `${at}.content` : `${at}.content[${j}]`;
    if (b.type === "tool_result") {
      flush();
      out.push({ message: toolMessage(b, param, pending, answered), origin: { at: param, parts: [] } });
      return;
    }
    const part = b.type === "text" ? { type: "text", text: textBlock(b, param) } : b.type === "image" ? imagePart(b, param) : null;
    if (!part) throw bad(`${param}.type`, unsupportedBlock(b.type, "user", "text, image and tool_result"));
    run ??= { parts: [], origin: { at, parts: [] } };
    run.parts.push(part);
    run.origin.parts.push(param);
  });
  if (all.length === 0) out.push({ message: { role: "user", content: "" }, origin: { at, parts: [] } });
  flush();
  return out;
}

function imagePart(b: ContentBlock, at: string): ContentPart {
  const s = b.source;
  if (!s) throw bad(`${at}.source`, "is required on an image block");
  if (s.type === "base64") {
    if (!s.media_type) throw bad(`${at}.source.media_type`, "is required on a base64 image");
    if (!s.data) throw bad(`${at}.source.data`, "is required on a base64 image");
    return { type: "image_url", image_url: { url: `data:${s.media_type};base64,${s.data}` } };
  }
  if (s.type === "url") {
    if (!s.url) throw bad(`${at}.source.url`, "is required on a url image");
    return { type: "image_url", image_url: { url: s.url } };
  }
  throw bad(`${at}.source.type`, `must be "base64" or "url" (got "${s.type}"; the Files API is not available here)`);
}

function toolMessage(b: ContentBlock, at: string, pending: Set<string>, answered: Set<string>): ChatMessage {
  const id = b.tool_use_id;
  if (!id) throw bad(`${at}.tool_use_id`, "is required on a tool_result block");
  if (!pending.has(id))
    throw bad(`${at}.tool_use_id`, answered.has(id) ? `"${id}" was already answered` : `"${id}" does not answer a tool_use block of an earlier assistant message`);
  pending.delete(id);
  answered.add(id);
  const text = toolResultText(b.content, at);
  // The chat format has no error flag on a tool message: the model reads it in the text.
  return { role: "tool", tool_call_id: id, content: b.is_error ? `Error: ${text}` : text };
}

function toolResultText(content: string | ToolResultBlock[] | undefined, at: string): string {
  if (content === undefined) return "";
  if (typeof content === "string") return content;
  return content
    .map((c, k) => {
      const param = `${at}.content[${k}]`;
      // A client's tool search answers with references to the tools it found (deferred with
      // defer_loading); every tool is offered here from the start, so the model reads which.
      if (c.type === "tool_reference") {
        if (typeof c.tool_name !== "string" || !c.tool_name) throw bad(`${param}.tool_name`, "is required on a tool_reference block");
        return `Tool found: ${c.tool_name}`;
      }
      if (c.type !== "text") throw bad(`${param}.type`, `"${c.type}" blocks are not supported in a tool_result (text and tool_reference only)`);
      return textBlock(c, param);
    })
    .join("\n");
}

/** An assistant turn: text, thinking (passed on as reasoning), redacted_thinking (ignored), tool_use. */
function fromAssistant(m: InputMessage, i: number, pending: Set<string>): Translated {
  const at = `messages[${i}]`;
  const parts: ContentPart[] = [];
  const partOrigins: string[] = [];
  const thoughts: string[] = [];
  const calls: ToolCall[] = [];
  blocks(m).forEach((b, j) => {
    const param = typeof m.content === "string" ? `${at}.content` : `${at}.content[${j}]`;
    switch (b.type) {
      case "text":
        parts.push({ type: "text", text: textBlock(b, param) });
        partOrigins.push(param);
        return;
      case "thinking":
        // Any signature is accepted: it only proves the text came from a model.
        if (typeof b.thinking !== "string") throw bad(`${param}.thinking`, "is required on a thinking block");
        if (b.thinking) thoughts.push(b.thinking);
        return;
      case "redacted_thinking":
        return;
      case "tool_use":
        calls.push(toolCall(b, param, pending));
        return;
      default:
        throw bad(`${param}.type`, unsupportedBlock(b.type, "assistant", "text, thinking, redacted_thinking and tool_use"));
    }
  });
  const message: ChatMessage = {
    role: "assistant",
    content: parts.length ? parts : calls.length ? null : "",
    ...(thoughts.length ? { reasoning_content: thoughts.join("\n") } : {}),
    ...(calls.length ? { tool_calls: calls } : {}),
  };
  return { message, origin: { at, parts: partOrigins } };
}

function toolCall(b: ContentBlock, at: string, pending: Set<string>): ToolCall {
  if (!b.id) throw bad(`${at}.id`, "is required on a tool_use block");
  if (!b.name) throw bad(`${at}.name`, "is required on a tool_use block");
  if (typeof b.input !== "object" || b.input === null || Array.isArray(b.input)) throw bad(`${at}.input`, "must be an object");
  pending.add(b.id);
  return { id: b.id, type: "function", function: { name: b.name, arguments: JSON.stringify(b.input) } };
}

function unsupportedBlock(type: string, role: string, allowed: string): string {
  return `"${type}" blocks are not supported in a ${role} message on this server (${allowed} are)`;
}

/** Anthropic-defined tool families named in the refusal (spec §7: the 400 names `tools[n]`). */
const SERVER_TOOL = /^(web_search|web_fetch|code_execution|computer|bash|text_editor|memory|tool_search)/;
/**
 * The tools Anthropic's servers run for the model. None runs here: the contract (spec §7) refuses
 * them with a 400 naming `tools[n]`, unless the operator set `[compat] ignore_hosted_tools = true`
 * (then accepted and not offered); naming one in tool_choice is refused either way. The client-run
 * ones (bash, text_editor, computer, memory) are always refused.
 */
const SERVER_RUN_TOOL = /^(web_search|web_fetch|code_execution|tool_search)_/;

/** The names of the server-run tools in `tools`, to refuse forcing one by name. */
function serverRunNames(tools: Tool[] | undefined): Set<string> {
  return new Set((tools ?? []).filter((t) => t.type != null && SERVER_RUN_TOOL.test(t.type)).map((t) => t.name ?? ""));
}

function toTools(tools: Tool[], ignoreHosted: boolean): FunctionTool[] {
  const seen = new Set<string>();
  const out: FunctionTool[] = [];
  tools.forEach((t, n) => {
    const at = `tools[${n}]`;
    if (t.type != null && SERVER_RUN_TOOL.test(t.type)) {
      if (ignoreHosted) return;
      throw bad(at, `the server tool "${t.type}" does not run on this server: turn it off in the client (Claude Code: deny its WebSearch and WebFetch tools), or have the operator set [compat] ignore_hosted_tools = true to accept and ignore server tools`);
    }
    if (t.type != null && t.type !== "custom") {
      const kind = SERVER_TOOL.test(t.type) ? "a server tool" : "not a custom tool";
      throw bad(at, `"${t.type}" is ${kind}; only custom tools with an input_schema are supported on this server`);
    }
    if (!t.input_schema) throw bad(at, "only tools with an input_schema are supported on this server");
    if (!t.name) throw bad(`${at}.name`, "is required");
    if (!TOOL_NAME.test(t.name)) throw bad(`${at}.name`, "must be 1–64 characters: letters, digits, _ . -");
    if (seen.has(t.name)) throw bad(`${at}.name`, `duplicate tool name "${t.name}"`);
    seen.add(t.name);
    out.push({
      type: "function",
      function: {
        name: t.name,
        ...(t.description !== undefined ? { description: t.description } : {}),
        parameters: t.input_schema,
        ...(t.strict === true ? { strict: true } : {}),
      },
    });
  });
  return out;
}

function toToolChoice(c: MessagesInput["tool_choice"], tools: FunctionTool[], serverRun: Set<string>): Pick<ChatRequest, "tool_choice" | "parallel_tool_calls"> {
  if (c == null) return {};
  const parallel = c.disable_parallel_tool_use ? { parallel_tool_calls: false } : {};
  switch (c.type) {
    case "auto":
      return { tool_choice: "auto", ...parallel };
    case "none":
      return { tool_choice: "none" };
    case "any":
      if (!tools.length) throw bad("tool_choice", '"any" needs at least one tool in `tools`');
      return { tool_choice: "required", ...parallel };
    case "tool":
      if (!c.name) throw bad("tool_choice.name", 'is required when type is "tool"');
      if (serverRun.has(c.name)) throw bad("tool_choice.name", `"${c.name}" is a server tool: accepted in \`tools\` but it does not run on this server, so it cannot be forced`);
      if (!tools.some((t) => t.function.name === c.name)) throw bad("tool_choice.name", `"${c.name}" is not in tools`);
      return { tool_choice: { type: "function", function: { name: c.name } }, ...parallel };
    default:
      throw bad("tool_choice.type", `must be "auto", "any", "tool" or "none" (got "${c.type}")`);
  }
}

/**
 * An error the chat layer raised about the chat request, re-labelled with the Messages field it
 * came from ("messages[2].content[1]" of the chat request may be "messages[1].content[0]" here).
 */
export function relabel(e: unknown, origins: Origin[]): unknown {
  if (e instanceof ApiError && e.code === "context_length_exceeded") return overflow(e);
  if (!(e instanceof ApiError) || !e.param) return e;
  if (e.param.startsWith("response_format")) {
    const param = toMessagesParam(e.param, origins);
    return new ApiError(e.code, e.message.replace(/response_format(?:\.json_schema)?/g, "output_config.format"), { param, headers: e.headers });
  }
  const param = toMessagesParam(e.param, origins);
  if (param === e.param) return e;
  // Messages begin with the path they concern ("tools[0].function.parameters.properties.s: …").
  const colon = e.message.indexOf(": ");
  const head = colon > 0 ? e.message.slice(0, colon) : "";
  const message = head && !head.includes(" ") ? toMessagesParam(head, origins) + e.message.slice(colon) : e.message;
  return new ApiError(e.code, message, { param, headers: e.headers });
}

/** The chat engine's words for a context overflow (src/3-engines/llama/chat-engine.ts). */
const OVERFLOW = /context window is (\d+) tokens; the messages take (\d+)(?: and max_tokens asks for (\d+) more)?/;

/**
 * A context overflow worded as Anthropic words it, which clients parse: Claude Code retries with a
 * smaller max_tokens on ``input length and `max_tokens` exceed context limit: A + B > C`` and
 * compacts its history on `prompt is too long: N tokens > M maximum`.
 */
function overflow(e: ApiError): ApiError {
  const m = OVERFLOW.exec(e.message);
  if (!m) return e;
  const [window, prompt] = [Number(m[1]), Number(m[2])];
  const message =
    prompt > window || m[3] === undefined
      ? `prompt is too long: ${prompt} tokens > ${prompt > window ? window : window - 1} maximum`
      : `input length and \`max_tokens\` exceed context limit: ${prompt} + ${m[3]} > ${window}, decrease input length or \`max_tokens\` and try again`;
  return new ApiError(e.code, message, { param: e.param, headers: e.headers });
}

export function toMessagesParam(param: string, origins: Origin[]): string {
  const m = /^messages\[(\d+)\](?:\.content\[(\d+)\])?/.exec(param);
  if (m) {
    const origin = origins[Number(m[1])];
    if (!origin) return param;
    const base = m[2] !== undefined ? origin.parts[Number(m[2])] : origin.at;
    return base === undefined ? param : base + param.slice(m[0].length);
  }
  return param
    .replace(/^tools\[(\d+)\]\.function\.parameters/, "tools[$1].input_schema")
    .replace(/^tools\[(\d+)\]\.function\.name/, "tools[$1].name")
    .replace(/^tool_choice\.function\.name/, "tool_choice.name")
    .replace(/^stop$/, "stop_sequences")
    .replace(/^response_format(?:\.json_schema)?/, "output_config.format");
}
