import type { ChatMessage, ChatRequest, ContentPart, FunctionTool, ResponseFormat, ToolCall } from "../../2-services/chat/request";
import { ApiError } from "../http/errors";
import { parseClientJson } from "../../lib/bounded-json";
import { decodeThought } from "./reasoning";
import type { InputItem, InputPart, ResponsesRequest, TextFormat, Tool, ToolChoice } from "./schema";

// Responses request → chat-completions request (spec §2.5). Pure: plain data in, plain data out.
// Every field is either translated, echoed, or refused with a 400 that names it (spec §4 rule 2:
// nothing is dropped silently), so this file is also the list of what the endpoint supports.

const bad = (param: string, message: string) => new ApiError("invalid_request", `${param}: ${message}`, { param });

/** The request settings a Response object repeats back (OpenAI's Response echoes them). */
export interface ResponseEcho {
  instructions: string | null;
  max_output_tokens: number | null;
  parallel_tool_calls: boolean;
  reasoning: { effort: string | null; summary: string | null };
  store: boolean;
  temperature: number | null;
  text: { format: TextFormat; verbosity?: string };
  tool_choice: ToolChoice;
  tools: (EchoFunction | { type: "namespace"; name: string; description: string | null; tools: EchoFunction[] } | Record<string, unknown>)[];
  top_p: number | null;
  user: string | null;
  metadata: Record<string, string>;
}

type EchoFunction = { type: "function"; name: string; description: string | null; parameters: Record<string, unknown> | null; strict: boolean | null };

/** What the output carries beyond the chat answer: the thought, and the namespaced tool names. */
export interface OutputOptions {
  /** Return the thought as a reasoning item: with its text as summary, and/or with encrypted_content. */
  reasoning: { summary: boolean; encrypted: boolean } | null;
  /** The chat tool name of each function inside a namespace group → its name and namespace. */
  names: Record<string, { name: string; namespace: string }>;
}

/** Where each chat message (and each of its tool calls) came from, to name fields in errors. */
export interface ParamMap {
  messages: string[];
  toolCalls: string[][];
}

export interface ChatTranslation {
  chat: ChatRequest;
  echo: ResponseEcho;
  params: ParamMap;
  output: OutputOptions;
}

/** Top-level fields this server implements. */
const SUPPORTED = new Set([
  "model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls", "text", "max_output_tokens",
  "reasoning", "temperature", "top_p", "stream", "stream_options", "store", "metadata", "user", "include",
  // prompt_cache_key: passed on (a request prefers the slot that served its key). The others are
  // accepted and not acted on: none changes the answer (web/docs/api-chat.md).
  "prompt_cache_key", "client_metadata", "safety_identifier", "service_tier",
  // Caps calls to built-in tools only (OpenAI), and none run here: nothing to cap.
  "max_tool_calls",
]);

const STATELESS = "responses are not stored on this server (stateless); send the whole conversation in `input`, including the model's own output items";
const isNull = (v: unknown) => v == null;

/** OpenAI fields this server does not implement: accepted only at their "off" value. */
const UNSUPPORTED = new Map<string, [off: (v: unknown) => boolean, why: string]>(Object.entries({
  previous_response_id: [isNull, STATELESS],
  conversation: [isNull, `conversations are not kept: ${STATELESS}`],
  conversations: [isNull, `conversations are not kept: ${STATELESS}`],
  background: [(v) => v == null || v === false, "background mode is not supported (nothing is stored to poll); use stream: true for long answers"],
  prompt: [isNull, "stored prompt templates are not supported; send instructions and input"],
  truncation: [(v) => v == null || v === "disabled", 'only "disabled" is supported: a prompt longer than the context window is refused, never truncated'],
  top_logprobs: [(v) => v == null || v === 0, "log probabilities are not returned on this server"],
}));

const EFFORTS = ["none", "minimal", "low", "medium", "high", "xhigh", "max"];
const SUMMARIES = ["auto", "concise", "detailed"];
const VERBOSITIES = ["low", "medium", "high"];
/** `include` values: the thought is honoured; the hosted-tool ones have nothing to add here (no hosted tools run). */
const INCLUDES = new Set([
  "reasoning.encrypted_content", "file_search_call.results", "web_search_call.results", "web_search_call.action.sources",
  "code_interpreter_call.outputs", "computer_call_output.output.image_url", "message.input_image.image_url",
]);
/** Function tool fields accepted; defer_loading and the like only say when a client's tool is offered: it always is. */
const FUNCTION_FIELDS = ["type", "name", "description", "parameters", "strict", "defer_loading", "allowed_callers", "output_schema"];
const BUILT_IN_TOOLS = ["web_search", "file_search", "code_interpreter", "computer_use", "computer", "image_generation", "mcp", "local_shell", "shell", "apply_patch"];
/**
 * Built-in tools that OpenAI's servers would run on the model's behalf. None runs here: the contract
 * (spec §7) refuses them with a 400 naming `tools[n]`, and the message says how to turn the tool off
 * in the client. An operator may set `[compat] ignore_hosted_tools = true` to accept and not offer
 * them instead (Codex sends web_search by default). Forcing one is refused either way. The
 * client-run built-ins (shell, apply_patch, computer) are always refused.
 */
const SERVER_RUN_TOOLS = ["web_search", "file_search", "code_interpreter", "image_generation", "mcp"];
const isBuiltIn = (type: string, list: readonly string[]) => list.find((b) => type === b || type.startsWith(`${b}_`));

/** Server settings that change what the translation accepts. */
export interface TranslateOptions {
  /** `[compat] ignore_hosted_tools`: hosted tools are accepted and not offered, instead of a 400. */
  ignoreHostedTools?: boolean;
}

export function toChatRequest(req: ResponsesRequest, opts: TranslateOptions = {}): ChatTranslation {
  checkTopLevel(req);
  const names: OutputOptions["names"] = {};
  const tools = toTools(req.tools ?? [], names, opts.ignoreHostedTools === true);
  const toolChoice = toToolChoice(req.tool_choice, tools);
  const format = toFormat(req.text);
  const { effort, summary } = toReasoning(req.reasoning);
  const encrypted = toInclude(req.include);
  const { messages, params } = toMessages(req);
  // Spec §2.5: low, minimal and none switch the hidden reasoning pass off; any other effort, or
  // none given, leaves the model's default (thinking on).
  const thinkingOff = effort === "none" || effort === "minimal" || effort === "low";
  const chat: ChatRequest = {
    model: req.model,
    messages,
    ...(req.temperature != null && { temperature: req.temperature }),
    ...(req.top_p != null && { top_p: req.top_p }),
    ...(req.max_output_tokens != null && { max_tokens: req.max_output_tokens }),
    ...(req.stream === true && { stream: true }),
    ...(tools.length > 0 && { tools }),
    ...(toolChoice !== undefined && { tool_choice: toolChoice }),
    ...(req.parallel_tool_calls != null && { parallel_tool_calls: req.parallel_tool_calls }),
    ...(format && { response_format: format }),
    ...(thinkingOff && { chat_template_kwargs: { enable_thinking: false } }),
    ...(req.user !== undefined && { user: req.user }),
    ...(req.prompt_cache_key != null && { prompt_cache_key: req.prompt_cache_key }),
  };
  const echo: ResponseEcho = {
    instructions: req.instructions ?? null,
    max_output_tokens: req.max_output_tokens ?? null,
    parallel_tool_calls: req.parallel_tool_calls ?? true,
    reasoning: { effort, summary },
    // Nothing is stored whatever is asked; the flag is repeated as sent (false when absent).
    store: req.store ?? false,
    temperature: req.temperature ?? null,
    text: { format: req.text?.format ?? { type: "text" }, ...(req.text?.verbosity != null && { verbosity: req.text.verbosity }) },
    tool_choice: req.tool_choice ?? "auto",
    tools: echoTools(req.tools ?? []),
    top_p: req.top_p ?? null,
    user: req.user ?? null,
    metadata: req.metadata ?? {},
  };
  const reasoning = summary !== null || encrypted ? { summary: summary !== null, encrypted } : null;
  return { chat, echo, params, output: { reasoning, names } };
}

function checkTopLevel(req: ResponsesRequest) {
  for (const [key, value] of Object.entries(req)) {
    if (SUPPORTED.has(key) || value === undefined) continue;
    const rule = UNSUPPORTED.get(key); // a Map: a field named "toString" is not a rule
    if (!rule) throw bad(key, "unknown or unsupported field on /v1/responses");
    if (!rule[0](value)) throw bad(key, rule[1]);
  }
  const so = req.stream_options;
  if (so != null) {
    if (req.stream !== true) throw bad("stream_options", "is only allowed when stream is true");
    allow(so, ["include_obfuscation"], "stream_options");
    // Obfuscation pads deltas against length side channels; this server never adds the padding.
    if (so.include_obfuscation === true) throw bad("stream_options.include_obfuscation", "stream obfuscation is not supported; send false or leave it out");
  }
}

/** Refuses any field of `obj` outside `fields`, naming it. */
function allow(obj: object, fields: readonly string[], at: string) {
  for (const [k, v] of Object.entries(obj)) if (v !== undefined && !fields.includes(k)) throw bad(`${at}.${k}`, "unknown or unsupported field");
}

/** The chat name of a function inside a namespace: Codex's namespaces end in "__" ("mcp__docs__"), which joins as is. */
export function namespacedName(namespace: string, name: string): string {
  return /[_.-]$/.test(namespace) ? namespace + name : `${namespace}.${name}`;
}

/** The 400 for a hosted tool: what it is, and the two ways past it. */
export function hostedToolRefusal(type: string, clientHint: string): string {
  return `the hosted tool "${type}" does not run on this server: turn it off in the client (${clientHint}), or have the operator set [compat] ignore_hosted_tools = true to accept and ignore hosted tools`;
}

function toTools(tools: Tool[], names: OutputOptions["names"], ignoreHosted: boolean): FunctionTool[] {
  const out: FunctionTool[] = [];
  const seen = new Map<string, string>();
  const add = (f: FunctionTool, at: string) => {
    const before = seen.get(f.function.name);
    if (before) throw bad(`${at}.name`, `duplicate tool name "${f.function.name}" (also ${before})`);
    seen.set(f.function.name, at);
    out.push(f);
  };
  tools.forEach((t, i) => {
    const at = `tools[${i}]`;
    if (isBuiltIn(t.type, SERVER_RUN_TOOLS)) {
      if (ignoreHosted) return;
      throw bad(at, hostedToolRefusal(t.type, 'Codex: web_search = "disabled" in config.toml'));
    }
    if (t.type !== "namespace") return add(toTool(t, at), at);
    // A namespace groups function tools: each is offered, under its namespaced name (namespacedName).
    allow(t, ["type", "name", "description", "tools"], at);
    if (!t.name) throw bad(`${at}.name`, "is required on a namespace tool");
    (t.tools ?? []).forEach((inner, j) => {
      const param = `${at}.tools[${j}]`;
      const f = toTool(inner, param);
      const name = f.function.name;
      f.function.name = namespacedName(t.name!, name);
      if (!/^[A-Za-z0-9_.-]{1,64}$/.test(f.function.name)) throw bad(`${param}.name`, `"${t.name}" and "${name}" make the tool name "${f.function.name}", over 64 characters`);
      names[f.function.name] = { name, namespace: t.name! };
      add(f, param);
    });
  });
  return out;
}

function echoTools(tools: Tool[]): ResponseEcho["tools"] {
  const fn = (t: Tool): EchoFunction => ({ type: "function", name: t.name!, description: t.description ?? null, parameters: t.parameters ?? null, strict: t.strict ?? null });
  return tools.map((t) => {
    if (t.type === "namespace") return { type: "namespace", name: t.name!, description: t.description ?? null, tools: (t.tools ?? []).map(fn) };
    return t.type === "function" ? fn(t) : { ...t }; // a server-run built-in, repeated as sent
  });
}

function toTool(t: Omit<Tool, "tools">, at: string): FunctionTool {
  if (t.type !== "function") {
    const builtIn = isBuiltIn(t.type, BUILT_IN_TOOLS);
    throw bad(at, builtIn
      ? `the built-in tool "${t.type}" is not available on this server; only function tools are supported`
      : `tools of type "${t.type}" are not supported; only function tools are`);
  }
  allow(t, FUNCTION_FIELDS, at);
  if (!t.name) throw bad(`${at}.name`, "is required on a function tool");
  return {
    type: "function",
    function: {
      name: t.name,
      ...(t.description != null && { description: t.description }),
      ...(t.parameters != null && { parameters: t.parameters }),
      ...(t.strict != null && { strict: t.strict }),
    },
  };
}

function toToolChoice(c: ToolChoice | null | undefined, tools: FunctionTool[]): ChatRequest["tool_choice"] {
  if (c == null) return undefined;
  if (typeof c === "string") {
    if (c !== "none" && c !== "auto" && c !== "required") throw bad("tool_choice", 'must be "none", "auto", "required" or {"type":"function","name":…}');
    if (c === "required" && tools.length === 0) throw bad("tool_choice", '"required" needs at least one function tool in `tools`');
    return c;
  }
  if (c.type !== "function") {
    const why = isBuiltIn(c.type, SERVER_RUN_TOOLS) ? "it does not run on this server, so it cannot be forced" : "it is not available on this server";
    throw bad("tool_choice.type", `only a function can be chosen ("${c.type}": ${why})`);
  }
  allow(c, ["type", "name", "namespace"], "tool_choice");
  if (!c.name) throw bad("tool_choice.name", "is required");
  const ns = (c as { namespace?: unknown }).namespace;
  if (ns != null && typeof ns !== "string") throw bad("tool_choice.namespace", "must be a string");
  const name = ns ? namespacedName(ns, c.name) : c.name;
  if (!tools.some((t) => t.function.name === name)) throw bad("tool_choice.name", `"${c.name}"${ns ? ` (namespace "${ns}")` : ""} is not in tools`);
  return { type: "function", function: { name } };
}

function toFormat(text: ResponsesRequest["text"]): ResponseFormat | undefined {
  if (text == null) return undefined;
  allow(text, ["format", "verbosity"], "text");
  // Accepted, not acted on: the answer's length is the model's (and max_output_tokens').
  if (text.verbosity != null && !VERBOSITIES.includes(text.verbosity)) throw bad("text.verbosity", 'must be "low", "medium" or "high"');
  const f = text.format;
  if (!f) return undefined;
  switch (f.type) {
    case "text":
      allow(f, ["type"], "text.format");
      return { type: f.type };
    case "json_object":
      // A schema beside json_object is enforced, as on chat completions.
      allow(f, ["type", "schema"], "text.format");
      return f.schema == null ? { type: f.type } : { type: "json_object", schema: f.schema };
    case "json_schema":
      allow(f, ["type", "name", "description", "schema", "strict"], "text.format");
      if (!f.name) throw bad("text.format.name", 'is required when type is "json_schema"');
      if (!f.schema) throw bad("text.format.schema", 'is required when type is "json_schema"');
      return {
        type: "json_schema",
        json_schema: { name: f.name, ...(f.description !== undefined && { description: f.description }), schema: f.schema, ...(f.strict != null && { strict: f.strict }) },
      };
    default:
      throw bad("text.format.type", 'must be "text", "json_object" or "json_schema"');
  }
}

/**
 * reasoning.summary (or its older name generate_summary): any of auto, concise, detailed returns
 * the model's thought as a reasoning item whose summary is the thought itself *(choice)*: nothing
 * here can summarise it, and a small model's thought is short.
 */
function toReasoning(r: ResponsesRequest["reasoning"]): { effort: string | null; summary: string | null } {
  if (r == null) return { effort: null, summary: null };
  allow(r, ["effort", "summary", "generate_summary", "context", "mode"], "reasoning");
  // Which earlier turns' thought the model reads, and a slower "pro" pass: the chat template decides
  // the first and there is no second here, so only their default values are accepted.
  if (r.context != null && r.context !== "auto") throw bad("reasoning.context", 'only "auto" is supported (the model\'s chat template decides which earlier thoughts it reads)');
  if (r.mode != null && r.mode !== "standard") throw bad("reasoning.mode", 'only "standard" is supported on this server');
  for (const k of ["summary", "generate_summary"] as const)
    if (r[k] != null && !SUMMARIES.includes(r[k]!)) throw bad(`reasoning.${k}`, `must be one of ${SUMMARIES.map((e) => `"${e}"`).join(", ")}`);
  if (r.effort != null && !EFFORTS.includes(r.effort)) throw bad("reasoning.effort", `must be one of ${EFFORTS.map((e) => `"${e}"`).join(", ")}`);
  return { effort: r.effort ?? null, summary: r.summary ?? r.generate_summary ?? null };
}

/** Whether reasoning items carry encrypted_content; other values are refused by name or are no-ops. */
function toInclude(include: ResponsesRequest["include"]): boolean {
  (include ?? []).forEach((v, i) => {
    if (v === "message.output_text.logprobs") throw bad(`include[${i}]`, "log probabilities are not returned on this server");
    if (!INCLUDES.has(v)) throw bad(`include[${i}]`, `"${v}" is not a value this server knows (${[...INCLUDES].join(", ")})`);
  });
  return include?.includes("reasoning.encrypted_content") ?? false;
}

function toMessages(req: ResponsesRequest): { messages: ChatMessage[]; params: ParamMap } {
  const messages: ChatMessage[] = [];
  const params: ParamMap = { messages: [], toolCalls: [] };
  const push = (m: ChatMessage, param: string, calls: string[] = []) => {
    messages.push(m);
    params.messages.push(param);
    params.toolCalls.push(calls);
  };
  if (req.instructions) push({ role: "system", content: req.instructions }, "instructions");
  if (typeof req.input === "string") push({ role: "user", content: req.input }, "input");
  else {
    const pending = new Set<string>(); // call_ids of function_calls not yet answered
    // A reasoning item's thought belongs to the assistant turn that follows it.
    let thought: string[] = [];
    const withThought = (m: ChatMessage) => {
      if (thought.length && m.role === "assistant") m.reasoning_content = [m.reasoning_content, ...thought].filter(Boolean).join("\n");
      thought = [];
      return m;
    };
    req.input.forEach((item, i) => {
      const at = `input[${i}]`;
      const type = item.type ?? (item.role ? "message" : undefined);
      switch (type) {
        case "message": {
          const m = toMessage(item, at);
          if (m.role !== "assistant") thought = []; // a thought never crosses a user turn
          push(withThought(m), at);
          break;
        }
        case "function_call": {
          const call = toToolCall(item, at);
          pending.add(call.id);
          // A model turn is its text and then its calls: consecutive calls (parallel) and calls
          // right after the assistant's text join that assistant message, as the model wrote them.
          const last = messages.at(-1);
          if (last?.role === "assistant") {
            (last.tool_calls ??= []).push(call);
            params.toolCalls.at(-1)!.push(at);
            withThought(last);
          } else push(withThought({ role: "assistant", content: null, tool_calls: [call] }), at, [at]);
          break;
        }
        case "function_call_output": {
          allow(item, ["type", "call_id", "output", "id", "status"], at);
          if (!item.call_id) throw bad(`${at}.call_id`, "is required on a function_call_output item");
          if (!pending.delete(item.call_id))
            throw bad(`${at}.call_id`, `"${item.call_id}" does not answer a function_call earlier in input that is still unanswered`);
          if (item.output === undefined) throw bad(`${at}.output`, "is required on a function_call_output item");
          const content = typeof item.output === "string" ? item.output : item.output.map((p, j) => textPart(p, ["input_text"], "a function_call_output", `${at}.output[${j}]`));
          push({ role: "tool", tool_call_id: item.call_id, content }, at);
          break;
        }
        case "reasoning": {
          // The thought this server returned earlier: its encrypted_content (reasoning.ts), else
          // its summary (which is the thought itself here). Another server's ciphertext cannot be
          // read and is left aside. The chat template keeps the thought of the turn in progress
          // (a tool loop) and drops earlier ones, as the model was trained.
          allow(item, ["type", "id", "summary", "encrypted_content", "content", "status"], at);
          let text: string | null = null;
          if (item.encrypted_content != null) {
            try {
              text = decodeThought(item.encrypted_content);
            } catch (e) {
              throw bad(`${at}.encrypted_content`, (e as Error).message);
            }
          }
          text ??= (item.summary ?? []).map((p) => p.text).join("\n\n");
          if (text) thought.push(text);
          break;
        }
        case "item_reference":
          throw bad(at, `item references cannot be resolved: ${STATELESS}`);
        case undefined:
          throw bad(`${at}.type`, "is required (or a role, for a message)");
        default:
          throw bad(`${at}.type`, `input items of type "${type}" are not supported (message, function_call, function_call_output and reasoning are)`);
      }
    });
  }
  if (messages.length === 0) throw bad("input", "must hold at least one message");
  return { messages, params };
}

function toMessage(item: InputItem, at: string): ChatMessage {
  allow(item, ["type", "role", "content", "id", "status"], at);
  const role = item.role;
  if (!role) throw bad(`${at}.role`, "is required on a message item");
  if (item.content == null) throw bad(`${at}.content`, "is required on a message item");
  if (typeof item.content === "string") return { role, content: item.content };
  const content = item.content.map((p, j): ContentPart => {
    const param = `${at}.content[${j}]`;
    if (role === "user" && p.type === "input_image") return imagePart(p, param);
    const kinds = role === "assistant" ? ["output_text"] : role === "user" ? ["input_text", "input_image"] : ["input_text"];
    return textPart(p, kinds, role === "assistant" ? "an assistant message" : `a ${role} message`, param);
  });
  return { role, content };
}

function textPart(p: InputPart, kinds: string[], where: string, at: string): ContentPart {
  if (!kinds.includes(p.type)) throw bad(`${at}.type`, `"${p.type}" parts are not allowed in ${where} (${kinds.join(", ")})`);
  // output_text comes back from this server's own output, annotations and all.
  allow(p, p.type === "output_text" ? ["type", "text", "annotations", "logprobs"] : ["type", "text"], at);
  if (typeof p.text !== "string") throw bad(`${at}.text`, `is required on an ${p.type} part`);
  return { type: "text", text: p.text };
}

function imagePart(p: InputPart, at: string): ContentPart {
  allow(p, ["type", "image_url", "file_id", "detail"], at);
  if (p.file_id != null) throw bad(`${at}.file_id`, "files are not supported here; send the image as image_url (a base64 data URL or an image URL)");
  if (!p.image_url) throw bad(`${at}.image_url`, "is required on an input_image part (a base64 data URL or an image URL)");
  return { type: "image_url", image_url: { url: p.image_url, ...(p.detail !== undefined && { detail: p.detail }) } };
}

function toToolCall(item: InputItem, at: string): ToolCall {
  allow(item, ["type", "call_id", "name", "arguments", "id", "status", "namespace"], at);
  if (!item.call_id) throw bad(`${at}.call_id`, "is required on a function_call item");
  if (!item.name) throw bad(`${at}.name`, "is required on a function_call item");
  if (item.arguments === undefined) throw bad(`${at}.arguments`, "is required on a function_call item (a JSON string)");
  try {
    parseClientJson(item.arguments, "the text");
  } catch (e) {
    throw bad(`${at}.arguments`, `must be a JSON string (${(e as Error).message})`);
  }
  const name = item.namespace ? namespacedName(item.namespace, item.name) : item.name;
  return { id: item.call_id, type: "function", function: { name, arguments: item.arguments } };
}

// Errors raised below this translation (chat service, engine) name chat-completions fields;
// the client sent Responses fields, so the names are rewritten to what it sent.
const CHAT_PARAM = /messages\[(\d+)\](?:\.tool_calls\[(\d+)\](?:\.function)?)?|tools\[(\d+)\]\.function|response_format(?:\.json_schema)?|\bmax_tokens\b|\btool_choice\.function\b/g;

export function toResponsesParam(text: string, map: ParamMap): string {
  if (text === "messages") return "input"; // a param naming the whole prompt (context length)
  return text.replace(CHAT_PARAM, (whole, msg?: string, call?: string, tool?: string) => {
    if (msg !== undefined) return (call !== undefined ? map.toolCalls[+msg]?.[+call] : map.messages[+msg]) ?? whole;
    if (tool !== undefined) return `tools[${tool}]`;
    if (whole.startsWith("response_format")) return "text.format";
    if (whole === "max_tokens") return "max_output_tokens";
    return "tool_choice";
  });
}

/** A chat-level ApiError with its param and message in Responses terms; anything else as is. */
export function toResponsesError(e: unknown, map: ParamMap): unknown {
  if (!(e instanceof ApiError)) return e;
  return new ApiError(e.code, toResponsesParam(e.message, map), { param: e.param && toResponsesParam(e.param, map), headers: e.headers });
}
