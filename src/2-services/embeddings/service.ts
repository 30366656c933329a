import type { Principal } from "../accounts/types";
import type { LedgerEffect } from "../../4-store/ledger";
import type { EmbeddingsRequest } from "./request";
import { ApiError } from "../../lib/errors";
import type { ModelManifest } from "../../lib/manifest";
import type { EmbeddingEngine, EmbeddingInput } from "../../3-engines/types";
import { refuseLongText } from "../../3-engines/text-bounds";
import type { CapabilityDeps } from "../capability";

// THE embeddings service (spec §2.9): the HTTP route and batch lines end here. It checks the
// request (OpenAI's input forms, caps, empty inputs, `dimensions`), has the engine tokenize it,
// refuses any input over the model's length (never truncates), reserves credit for the input
// tokens, embeds (micro-batched with other requests) and settles — or releases on failure.

/** OpenAI's own cap on inputs per request. */
export const MAX_EMBEDDING_INPUTS = 2048;

export interface EmbeddingsCallOptions {
  requestId: string;
  /** Recorded on the usage row. */
  endpoint?: string;
  batch?: boolean;
  signal?: AbortSignal;
  /** What commits with the charge, in one transaction (batch lines record their result this way). */
  record?: (response: EmbeddingsResponse) => LedgerEffect;
}

export interface EmbeddingsResponse {
  object: "list";
  data: { object: "embedding"; index: number; embedding: number[] | string }[];
  model: string;
  usage: { prompt_tokens: number; total_tokens: number };
}

export type EmbeddingsService = ReturnType<typeof createEmbeddingsService>;

export function createEmbeddingsService(deps: CapabilityDeps) {
  const { registry, meter } = deps;

  async function create(principal: Principal, req: EmbeddingsRequest, opts: EmbeddingsCallOptions): Promise<EmbeddingsResponse> {
    // Held until the answer is built: a reload that removes the model unloads it only then.
    return registry.using(req.model, "embedding", (manifest, engine) => embedWith(manifest, engine, principal, req, toInputs(req.input), opts), opts.signal);
  }

  async function embedWith(
    manifest: ModelManifest,
    engine: EmbeddingEngine,
    principal: Principal,
    req: EmbeddingsRequest,
    inputs: { value: EmbeddingInput; param: string }[],
    opts: EmbeddingsCallOptions,
  ): Promise<EmbeddingsResponse> {
    await engine.load();
    if (req.dimensions !== undefined && req.dimensions !== engine.dimensions)
      throw new ApiError(
        "invalid_request",
        `dimensions: model "${manifest.id}" returns ${engine.dimensions}-dimension vectors and cannot shorten them; leave dimensions out or send ${engine.dimensions}`,
        { param: "dimensions" },
      );
    for (const i of inputs) if (typeof i.value === "string") refuseLongText(i.value.length, engine.maxTokens, i.param, manifest.id, "input");
    // (stops at the first input over the limit: no work is spent on a request that is refused)
    const tokens = await engine.tokenize(inputs.map((i) => i.value), engine.maxTokens).catch((e) => {
      throw renamed(e, inputs);
    });
    tokens.forEach((t, i) => {
      if (t.length > engine.maxTokens)
        throw new ApiError(
          "context_length_exceeded",
          `${inputs[i]!.param} is ${t.length} tokens; model "${manifest.id}" takes at most ${engine.maxTokens} tokens per input (inputs are never truncated)`,
          { param: inputs[i]!.param },
        );
    });
    const promptTokens = tokens.reduce((n, t) => n + t.length, 0);
    const request = { requestId: opts.requestId, model: manifest, endpoint: opts.endpoint ?? "/v1/embeddings", inputTokens: promptTokens, maxOutputTokens: 0, batch: opts.batch };
    return meter.metered(principal, request, async () => {
      const vectors = await engine.embed(tokens, opts.signal);
      const base64 = req.encoding_format === "base64";
      const response: EmbeddingsResponse = {
        object: "list",
        data: vectors.map((v, index) => ({ object: "embedding", index, embedding: base64 ? toBase64(v) : Array.from(v) })),
        model: manifest.id,
        usage: { prompt_tokens: promptTokens, total_tokens: promptTokens },
      };
      return { result: response, usage: { inputTokens: promptTokens, outputTokens: 0 }, effect: opts.record?.(response) };
    });
  }

  return { create };
}

/** OpenAI's forms of `input` → one item per vector, each with the name an error would give it. */
function toInputs(input: EmbeddingsRequest["input"]): { value: EmbeddingInput; param: string }[] {
  if (typeof input === "string") return [checked(input, "input")];
  if (!input.length) throw new ApiError("invalid_request", "input: must not be empty", { param: "input" });
  // A flat array of integers is one input given as token ids.
  if (input.every((x) => typeof x === "number")) return [checked(input as number[], "input")];
  if (input.length > MAX_EMBEDDING_INPUTS)
    throw new ApiError("invalid_request", `input: ${input.length} inputs; at most ${MAX_EMBEDDING_INPUTS} per request`, { param: "input" });
  return input.map((x, i) => {
    if (typeof x === "number")
      throw new ApiError("invalid_request", `input[${i}]: mix of token ids and other inputs; send strings, an array of token ids, or an array of such arrays`, {
        param: `input[${i}]`,
      });
    return checked(x, `input[${i}]`);
  });
}

/** The engine names inputs by index; a lone input is named `input` on the wire. */
function renamed(e: unknown, inputs: { param: string }[]): unknown {
  if (!(e instanceof ApiError) || e.param !== "input[0]" || inputs[0]?.param !== "input") return e;
  return new ApiError(e.code, e.message.replace(/^input\[0\]/, "input"), { param: "input" });
}

function checked(value: EmbeddingInput, param: string) {
  // OpenAI refuses empty inputs too: an empty text has no meaning to embed.
  if (value.length === 0) throw new ApiError("invalid_request", `${param}: must not be empty`, { param });
  return { value, param };
}

/** Little-endian float32 bytes, base64 (OpenAI's encoding_format "base64"). */
function toBase64(v: Float32Array): string {
  const bytes = new Uint8Array(v.length * 4);
  const view = new DataView(bytes.buffer);
  for (let i = 0; i < v.length; i++) view.setFloat32(i * 4, v[i]!, true);
  return Buffer.from(bytes).toString("base64");
}
