import { ApiError } from "../../lib/errors";
import { parseClientJson } from "../../lib/bounded-json";
import type { Registry } from "../../3-engines/registry";
import type { ModelKind } from "../../lib/manifest";
import { BATCH_ENDPOINTS, type BatchEndpoint } from "./endpoints";
import type { BatchLane } from "./lanes";

// Validation of a batch input file before anything runs (spec §3 Batch, §7 rule 1): every line
// is checked — JSON, custom_id (present, unique), method, url, the body against the endpoint's
// own schema, the model — and every problem is listed with its line number. Read as a stream from
// the store (a piece at a time: a 50 MB file is never whole in memory).

export const MAX_BATCH_LINES = 50_000;

export interface LineProblem {
  code: string;
  message: string;
  param: string | null;
  line: number | null;
}

export interface ValidLine {
  line: number;
  custom_id: string;
  model: string;
  body: string;
}

export async function validateBatchFile(input: ReadableStream<Uint8Array>, endpoint: BatchEndpoint, lane: BatchLane, registry: Pick<Registry, "resolve">): Promise<{ lines: ValidLine[]; errors: LineProblem[] }> {
  const rules = BATCH_ENDPOINTS[endpoint];
  const lines: ValidLine[] = [];
  const errors: LineProblem[] = [];
  const seen = new Map<string, number>();
  let requests = 0;
  const problem = (line: number | null, code: string, message: string, param: string | null = null) => errors.push({ code, message, param, line });

  for await (const { n, text } of readLines(input)) {
    if (text.trim() === "") continue;
    requests++;
    if (requests > MAX_BATCH_LINES) {
      if (requests === MAX_BATCH_LINES + 1) problem(null, "too_many_requests", `a batch may hold at most ${MAX_BATCH_LINES} requests`);
      continue;
    }
    let req: any;
    try {
      req = parseClientJson(text, `line ${n}`);
    } catch (e) {
      problem(n, "invalid_json", (e as Error).message);
      continue;
    }
    if (typeof req !== "object" || req === null || Array.isArray(req)) {
      problem(n, "invalid_request", `line ${n} must be a JSON object with custom_id, method, url and body`);
      continue;
    }
    const before = errors.length;
    if (typeof req.custom_id !== "string" || req.custom_id === "") problem(n, "missing_custom_id", `line ${n} has no custom_id (a non-empty string)`, "custom_id");
    else if (seen.has(req.custom_id)) problem(n, "duplicate_custom_id", `line ${n}: custom_id "${req.custom_id}" is already used on line ${seen.get(req.custom_id)}`, "custom_id");
    else seen.set(req.custom_id, n);
    if (req.method !== "POST") problem(n, "invalid_method", `line ${n}: method must be "POST"`, "method");
    if (req.url !== endpoint) problem(n, "invalid_url", `line ${n}: url must be "${endpoint}", the batch's endpoint (got ${JSON.stringify(req.url)})`, "url");
    if (typeof req.body !== "object" || req.body === null || Array.isArray(req.body)) problem(n, "invalid_request", `line ${n}: body must be a JSON object`, "body");
    else {
      // worded as a live request's 400 is (a union field says what it takes, not "expected union value")
      const first = lane.firstProblem(req.body);
      if (first) {
        const field = first.param;
        const said = first.message.slice(`${field ?? "request body"}: `.length);
        problem(n, "invalid_request", `line ${n}: body${field ? `.${field}` : ""}: ${said.charAt(0).toLowerCase()}${said.slice(1)}`, field ? `body.${field}` : "body");
      } else if (req.body.stream === true) problem(n, "invalid_request", `line ${n}: body.stream must not be true in a batch (results are written to a file)`, "body.stream");
      else {
        try {
          // served (here, or on another node) as one of the endpoint's kinds; else the first kind's refusal
          const kinds: readonly ModelKind[] = rules.kinds;
          let refusal: unknown = null;
          for (const kind of kinds) {
            try {
              registry.resolve(req.body.model, kind);
              refusal = null;
              break;
            } catch (e) {
              refusal ??= e;
            }
          }
          if (refusal) throw refusal;
        } catch (e) {
          const err = e as ApiError;
          problem(n, err.code === "model_not_found" ? "model_not_found" : "invalid_request", `line ${n}: ${err.message}`, "body.model");
        }
      }
    }
    if (errors.length === before) lines.push({ line: n, custom_id: req.custom_id, model: req.body.model, body: JSON.stringify(req.body) });
  }
  if (requests === 0) problem(null, "empty_file", "the input file holds no requests");
  return { lines, errors };
}

/** The file's lines with their 1-based numbers (a final line without a newline counts). */
async function* readLines(input: ReadableStream<Uint8Array>): AsyncGenerator<{ n: number; text: string }> {
  const decoder = new TextDecoder();
  let rest = "";
  let n = 0;
  for await (const chunk of input) {
    rest += decoder.decode(chunk, { stream: true });
    let from = 0;
    let i;
    while ((i = rest.indexOf("\n", from)) >= 0) {
      yield { n: ++n, text: rest.slice(from, i).replace(/\r$/, "") };
      from = i + 1;
    }
    rest = rest.slice(from);
  }
  rest += decoder.decode();
  if (rest !== "") yield { n: ++n, text: rest.replace(/\r$/, "") };
}
