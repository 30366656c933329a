import { ApiError } from "./errors";

// JSON from a client, parsed with its cost bounded first. JSON.parse itself is fast, but what runs
// over the parsed value afterwards (schema validation, grammar building, prompt rendering) recurses
// and copies: a 60 KB body nested 30,000 deep held the event loop for seconds and then ran out of
// memory. A linear scan (native regex and indexOf steps, no recursion) measures nesting depth and
// the number of values before anything is parsed.

/** serde_json's recursion limit: deeper than any JSON Schema or tool call a client sends. */
export const MAX_JSON_DEPTH = 128;
/** Values (array elements and object members) in one document: a 10,000-message chat holds ~50,000. */
export const MAX_JSON_VALUES = 1_000_000;

export interface JsonBounds {
  depth?: number;
  values?: number;
}

const STRUCTURE = /["[\]{},]/g;

/**
 * The nesting depth and value count of a JSON text, or the first bound it passes. Text that is not
 * JSON is measured as far as it goes; JSON.parse reports its own syntax errors afterwards.
 */
export function jsonCostExceeded(text: string, bounds: JsonBounds = {}): string | null {
  const maxDepth = bounds.depth ?? MAX_JSON_DEPTH;
  const maxValues = bounds.values ?? MAX_JSON_VALUES;
  let depth = 0;
  let values = 0;
  STRUCTURE.lastIndex = 0;
  for (let m = STRUCTURE.exec(text); m; m = STRUCTURE.exec(text)) {
    const c = m[0];
    if (c === '"') {
      STRUCTURE.lastIndex = stringEnd(text, m.index + 1);
    } else if (c === "[" || c === "{") {
      if (++depth > maxDepth) return `is nested deeper than ${maxDepth} levels`;
      if (++values > maxValues) return `holds more than ${maxValues} values`;
    } else if (c === ",") {
      if (++values > maxValues) return `holds more than ${maxValues} values`;
    } else depth--;
  }
  return null;
}

/** The index just past the closing quote of a string that opens before `from` (escapes skipped). */
function stringEnd(text: string, from: number): number {
  for (let i = text.indexOf('"', from); i >= 0; i = text.indexOf('"', i + 1)) {
    let backslashes = 0;
    while (text.charCodeAt(i - 1 - backslashes) === 92) backslashes++;
    if (backslashes % 2 === 0) return i + 1;
  }
  return text.length;
}

/**
 * JSON.parse for text a client sent: a named 400 (`invalid_json`) when the text is not JSON or
 * costs more than the bounds, never an exception of another kind. `what` names the text in the
 * message ("request body", "messages[2].tool_calls[0].function.arguments").
 */
export function parseClientJson(text: string, what: string, param: string | null = null, bounds?: JsonBounds): unknown {
  const over = jsonCostExceeded(text, bounds);
  if (over) throw new ApiError("invalid_json", `${what} ${over}`, { param });
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new ApiError("invalid_json", `${what} is not valid JSON (${(e as Error).message})`, { param });
  }
}
