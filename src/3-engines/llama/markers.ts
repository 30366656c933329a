import { LlamaText, type ChatWrapper, type LlamaModel } from "node-llama-cpp";
import type { CallSyntax } from "./tool-calls";

// What a chat template writes around an answer, in written form (control tokens as their text), for
// OutputScanner: its stop strings, its thought markers and its tool-call syntax. Read from
// node-llama-cpp's chat wrapper of the model, which also renders the prompt.


export interface OutputMarkers {
  templateStops: string[];
  thought?: { open: string; close: string };
  /** How the template writes a tool call; absent when it has no call syntax. */
  calls?: CallSyntax;
}

type Text = string | LlamaText;
const isText = (x: unknown): x is Text => typeof x === "string" || x instanceof LlamaText;

/**
 * The markers of a template. Segments other than a thought (e.g. gpt-oss's commentary) are not
 * told apart: their text is part of the answer (web/docs/api-chat.md).
 */
export function outputMarkers(model: LlamaModel, wrapper: ChatWrapper, stopTriggers: readonly LlamaText[]): OutputMarkers {
  const written = (t: Text) => model.detokenize(LlamaText(t).tokenize(model.tokenizer), true);
  const thought = wrapper.settings.segments?.thought;
  const call = wrapper.settings.functions?.call;
  const parallel = wrapper.settings.functions?.parallelism?.call;
  const open = thought && isText(thought.prefix) ? written(thought.prefix) : "";
  const close = thought && isText(thought.suffix) ? written(thought.suffix) : "";
  const calls =
    call && isText(call.prefix) && isText(call.paramsPrefix) && isText(call.suffix) && written(call.prefix)
      ? {
          prefix: written(call.prefix),
          paramsPrefix: written(call.paramsPrefix),
          suffix: written(call.suffix),
          ...(parallel && isText(parallel.betweenCalls) ? { betweenCalls: written(parallel.betweenCalls) } : {}),
          ...(parallel && isText(parallel.sectionSuffix) ? { sectionSuffix: written(parallel.sectionSuffix) } : {}),
        }
      : undefined;
  return {
    templateStops: [...new Set(stopTriggers.map(written).filter((s) => s.length > 0))],
    ...(open && close ? { thought: { open, close } } : {}),
    ...(calls ? { calls } : {}),
  };
}
