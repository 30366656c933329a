import { ERROR_TABLE } from "../../../src/1-api/http/errors";

// What every answer must be, whatever was sent: never a 5xx, and every error in the documented
// envelope of its wire format with a row of the error table behind it — OpenAI's
// {error:{message,type,param,code}} (code a string or null) everywhere, Anthropic's
// {type:"error",error:{type,message}} on /v1/messages* (and on /v1/models for Anthropic clients),
// and on Cohere's /v2/ paths (rerank) OpenAI's with Cohere's top-level `message` beside it, the same text.

export type Envelope = "openai" | "anthropic" | "either" | "cohere";

export interface Answer {
  status: number;
  contentType: string;
  text: string;
}

export interface Problem {
  kind: "5xx" | "envelope" | "stream-error" | "bad-json" | "timeout" | "session";
  detail: string;
}

const ROWS = Object.values(ERROR_TABLE);
const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === "object" && !Array.isArray(v);

/**
 * The envelope an error to this request must take. `pathname` is the path as the server parses it
 * (dot segments resolved). A path that only resembles a Messages path (other case, stray
 * characters) may be answered as an unknown path in either format.
 */
export function expectedEnvelope(pathname: string, headers: Headers): Envelope {
  const anthropicClient = headers.has("anthropic-version");
  if (pathname === "/v1/messages" || pathname.startsWith("/v1/messages/")) return "anthropic";
  if (anthropicClient && (pathname === "/v1/models" || pathname.startsWith("/v1/models/"))) return "anthropic";
  if (pathname.startsWith("/v2/")) return "cohere";
  const loose = pathname.toLowerCase().replace(/\/{2,}/g, "/");
  if (loose.includes("/v1/messages") || (anthropicClient && loose.includes("/v1/models"))) return "either";
  return "openai";
}

export function openAIEnvelopeProblem(body: unknown, status: number): string | null {
  if (!isObject(body) || !isObject(body.error)) return "not {error:{…}}";
  const extra = Object.keys(body).filter((k) => k !== "error");
  if (extra.length) return `fields beside "error": ${extra.join(", ")}`;
  const e = body.error;
  if (typeof e.message !== "string" || e.message === "") return "error.message is not a non-empty string";
  if (typeof e.type !== "string") return "error.type is not a string";
  if (!("param" in e) || (e.param !== null && typeof e.param !== "string")) return "error.param is not a string or null";
  if (!("code" in e) || (e.code !== null && typeof e.code !== "string")) return `error.code is ${JSON.stringify(e.code)}, not a string or null`;
  const row = ROWS.find((r) => r.openaiCode === e.code && r.openaiType === e.type && r.status === status);
  if (!row) return `no row of the error table gives status ${status}, type ${e.type}, code ${e.code}`;
  return null;
}

/** OpenAI's envelope plus Cohere's top-level `message`, which repeats error.message. */
export function cohereEnvelopeProblem(body: unknown, status: number): string | null {
  if (!isObject(body)) return "not an object";
  const { message, ...rest } = body;
  if (!isObject(rest.error) || message !== rest.error.message) return 'no top-level "message" equal to error.message';
  return openAIEnvelopeProblem(rest, status);
}

export function anthropicEnvelopeProblem(body: unknown, status: number): string | null {
  if (!isObject(body) || body.type !== "error" || !isObject(body.error)) return 'not {type:"error",error:{…}}';
  const e = body.error;
  if (typeof e.type !== "string") return "error.type is not a string";
  if (typeof e.message !== "string" || e.message === "") return "error.message is not a non-empty string";
  if (!ROWS.some((r) => r.anthropicType === e.type && r.status === status)) return `no row of the error table gives status ${status}, Anthropic type ${e.type}`;
  return null;
}

/** Internal failures reported inside a 200 stream (OpenAI, Responses or Anthropic events). */
const STREAM_FAILURE = /"(internal_error|server_error|api_error|overloaded_error)"/;

/**
 * `documented`: the content types /openapi.json gives for this status of the operation the request
 * landed on (null: no operation). An error documented as something other than JSON (none is today)
 * is held to that type instead of the envelope.
 */
export function checkAnswer(a: Answer, envelope: Envelope, method: string, documented: string[] | null = null): Problem[] {
  const problems: Problem[] = [];
  if (a.status >= 500) problems.push({ kind: "5xx", detail: `${a.status} ${a.text.slice(0, 300)}` });
  const otherType = documented?.length && !documented.includes("application/json") ? documented : null;
  if (a.status >= 400 && otherType) {
    if (!otherType.some((t) => t === "*/*" || a.contentType.toLowerCase().startsWith(t)))
      problems.push({ kind: "envelope", detail: `${a.status} with content-type ${a.contentType || "(none)"}; documented: ${otherType.join(", ")}` });
  } else if (a.status >= 400 && method !== "HEAD") {
    let body: unknown;
    try {
      body = JSON.parse(a.text);
    } catch {
      problems.push({ kind: "envelope", detail: `${a.status} with a body that is not JSON (${a.contentType || "no content-type"}): ${JSON.stringify(a.text.slice(0, 120))}` });
      return problems;
    }
    if (!/^application\/json\b/i.test(a.contentType)) problems.push({ kind: "envelope", detail: `${a.status} error with content-type ${a.contentType || "(none)"}` });
    const oa = openAIEnvelopeProblem(body, a.status);
    const an = anthropicEnvelopeProblem(body, a.status);
    const bad = envelope === "openai" ? oa : envelope === "anthropic" ? an : envelope === "cohere" ? cohereEnvelopeProblem(body, a.status) : oa && an;
    if (bad) problems.push({ kind: "envelope", detail: `${a.status} ${envelope} envelope: ${bad}: ${a.text.slice(0, 200)}` });
  } else if (a.status < 300 && /^application\/json\b/i.test(a.contentType) && method !== "HEAD") {
    try {
      JSON.parse(a.text);
    } catch {
      problems.push({ kind: "bad-json", detail: `${a.status} application/json that does not parse: ${JSON.stringify(a.text.slice(0, 120))}` });
    }
  } else if (a.status < 300 && /^text\/event-stream\b/i.test(a.contentType)) {
    const m = STREAM_FAILURE.exec(a.text);
    if (m) {
      const at = a.text.lastIndexOf("\n\n", m.index) + 2;
      problems.push({ kind: "stream-error", detail: `a ${m[1]} inside a 200 stream: ${a.text.slice(at, at + 300)}` });
    }
  }
  return problems;
}
