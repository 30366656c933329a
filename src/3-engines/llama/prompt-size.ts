import type { LlamaModel } from "node-llama-cpp";
import { ApiError } from "../../lib/errors";
import type { ChatJob } from "../chat-job";
import { llamaAddon } from "./native/addon-path";
import { nativeModel } from "./native/handles";

// A prompt too long for its model is refused before the template renders it and before the
// tokenizer runs on the JavaScript thread (issue 41, H1: a 62 MB prompt held every route for
// 20-26 s, then got its 400 for the length). Its text is counted first on a worker thread, in
// pieces, and only as far as the context: the work is bounded by the context, not by the text.

interface Addon {
  countTokensUpTo(model: unknown, text: string, limit: number): Promise<number>;
}

/** Pieces the count cuts the text into (native/tokens.cpp CHUNK): each cut may add a token. */
const PIECE_BYTES = 64 * 1024;

/** The text of a job that its prompt is made of, beside the template's own. */
function texts(job: ChatJob): string[] {
  const out: string[] = [];
  for (const t of job.turns) {
    out.push(t.text);
    if (t.role === "assistant") {
      out.push(t.reasoning);
      for (const c of t.toolCalls) out.push(c.arguments);
    }
  }
  for (const tool of job.tools) out.push(tool.description ?? "");
  return out.filter((s) => s !== "");
}

/**
 * Throws context_length_exceeded when the job's text alone takes more tokens than `contextSize`.
 * A text of fewer UTF-8 bytes than the context cannot (a token is at least a byte): nothing is counted.
 */
export async function refuseOverlongText(model: LlamaModel, job: ChatJob, contextSize: number): Promise<void> {
  const parts = texts(job);
  let bytes = 0;
  for (const p of parts) bytes += Buffer.byteLength(p);
  if (bytes <= contextSize) return;
  const addon = llamaAddon<Partial<Addon>>();
  if (!addon?.countTokensUpTo) return; // an older addon: the rendered prompt is counted as before
  const text = parts.join("\n");
  const margin = Math.ceil(bytes / PIECE_BYTES) + parts.length;
  const counted = await addon.countTokensUpTo(nativeModel(model), text, contextSize + margin);
  if (counted > contextSize + margin)
    // worded as chat-engine.ts words an overflow (the Messages format rewords it as Anthropic does)
    throw new ApiError("context_length_exceeded", `this model's context window is ${contextSize} tokens; the messages take ${counted} or more (counting stopped there)`, { param: "messages" });
}
