import { Value } from "@sinclair/typebox/value";
import type { Principal } from "../accounts/types";
import type { ChatJob, ChatTurn } from "../../3-engines/chat-job";
import type { ChatEngine } from "../../3-engines/types";
import { ApiError } from "../../lib/errors";
import type { ModelManifest } from "../../lib/manifest";
import type { CapabilityDeps } from "../capability";
import type { LedgerEffect } from "../../4-store/ledger";
import { decisionPriceFor } from "../billing/pricing";
import { answerOf, answerTexts, checkQuestions, questionMessage, type Answer, type Question } from "./questions";
import { DecisionMessage, type DecisionPart, type DecisionQuestion, type DecisionRequest } from "./request";

// THE decisions service (issue 47): typed questions about an input, answered by a chat model's own
// probabilities (questions.ts), one question at a time on one slot, so the input's reading stays in
// the slot's cache for the next question; nothing is generated. Billed per input token at the
// decisions price (prices.decision_input_per_m, or the model's price.decision_input_per_m), nothing
// for output (no output is generated).

export interface DecisionCallOptions {
  requestId: string;
  endpoint?: string;
  batch?: boolean;
  signal?: AbortSignal;
  /** What commits with the charge, in one transaction (batch lines record their result this way). */
  record?: (response: DecisionResponse) => LedgerEffect;
}

export interface DecisionResponse {
  model: string;
  answers: Answer[];
  usage: {
    input_tokens: number;
    input_tokens_details: { cached_tokens: number; cache_write_tokens: number };
    output_tokens: number;
    output_tokens_details: { reasoning_tokens: number };
    total_tokens: number;
  };
}

export type DecisionService = ReturnType<typeof createDecisionService>;

export function createDecisionService(deps: CapabilityDeps) {
  const { registry, meter } = deps;

  async function decide(principal: Principal, req: DecisionRequest, opts: DecisionCallOptions): Promise<DecisionResponse> {
    const questions = req.questions.map((q, i) => toQuestion(q, i));
    checkQuestions(questions);
    return registry.using(req.model, "chat", (manifest, engine) => decideWith(manifest, engine, principal, req, questions, opts), opts.signal);
  }

  async function decideWith(manifest: ModelManifest, engine: ChatEngine, principal: Principal, req: DecisionRequest, questions: Question[], opts: DecisionCallOptions): Promise<DecisionResponse> {
    const turns = inputTurns(req.input, manifest);
    const jobs = questions.map((q): ChatJob => ({
      model: manifest.id,
      turns: [...turns, { role: "user", text: questionMessage(q), images: [] }],
      tools: [],
      toolChoice: "none",
      parallelToolCalls: false,
      format: null,
      thinking: false,
      maxTokens: 1,
      stop: [],
      sampling: { temperature: 0 },
      stream: false,
      includeUsage: true,
      ...(req.prompt_cache_key ? { cacheKey: req.prompt_cache_key } : {}),
    }));
    await engine.load();
    if (!engine.score) throw new ApiError("invalid_request", `model "${manifest.id}" cannot answer decisions (its engine scores no answers)`, { param: "model" });
    let estimate = 0;
    for (const j of jobs) estimate += await engine.countTokens(j);
    const price = decisionPriceFor(manifest, deps.config.prices);
    const request = { requestId: opts.requestId, model: manifest, endpoint: opts.endpoint ?? "/v1/decisions", inputTokens: estimate, maxOutputTokens: 0, batch: opts.batch, price };
    return meter.metered(principal, request, async () => {
      const answers: Answer[] = [];
      let input = 0;
      let cached = 0;
      for (const [i, q] of questions.entries()) {
        const r = await engine.score!(jobs[i]!, answerTexts(q), { batch: opts.batch === true, ...(opts.signal ? { signal: opts.signal } : {}) });
        answers.push(answerOf(q, r.logprobs));
        input += r.promptTokens;
        cached += r.cachedTokens;
      }
      const result: DecisionResponse = {
        model: manifest.id,
        answers,
        usage: {
          input_tokens: input,
          input_tokens_details: { cached_tokens: cached, cache_write_tokens: 0 },
          output_tokens: 0,
          output_tokens_details: { reasoning_tokens: 0 },
          total_tokens: input,
        },
      };
      return { result, usage: { inputTokens: input, outputTokens: 0, cachedTokens: cached }, effect: opts.record?.(result) };
    });
  }

  return { decide };
}

/** A question's instructions as text (JSON parts as JSON text); images are refused here (not yet supported). */
function toQuestion(q: DecisionQuestion, i: number): Question {
  const instructions = partsText(q.instructions, `questions[${i}].instructions`, null);
  if (q.type === "predicate") return { type: "predicate", instructions, ...(q.name !== undefined ? { name: q.name } : {}) };
  if (q.type === "choice") return { type: "choice", instructions, choices: q.choices, ...(q.name !== undefined ? { name: q.name } : {}) };
  return { type: "score", instructions, levels: q.levels, ...(q.name !== undefined ? { name: q.name } : {}) };
}

function partsText(content: string | readonly DecisionPart[], param: string, manifest: ModelManifest | null): string {
  if (typeof content === "string") return content;
  return content
    .map((p, k) => {
      if (p.type === "input_text" || p.type === "output_text") return p.text;
      if (p.type === "refusal") return p.refusal;
      if (p.type === "input_json") return JSON.stringify(p.data);
      throw new ApiError(
        "invalid_request",
        manifest && !manifest.vision
          ? `${param}[${k}]: model "${manifest.id}" does not accept images`
          : `${param}[${k}]: images in a decision's ${manifest ? "input" : "instructions"} are not supported by this appliance yet`,
        { param: `${param}[${k}]` },
      );
    })
    .join("\n");
}

/** The input as chat turns: a string is one user message; developer messages are system turns. */
function inputTurns(input: DecisionRequest["input"], manifest: ModelManifest): ChatTurn[] {
  if (typeof input === "string") {
    if (!input) throw new ApiError("invalid_request", "input: must not be empty", { param: "input" });
    return [{ role: "user", text: input, images: [] }];
  }
  if (input.length === 0) throw new ApiError("invalid_request", "input: give at least one message", { param: "input" });
  return input.map((item, i): ChatTurn => {
    const param = `input[${i}]`;
    if (!("role" in item) || !Value.Check(DecisionMessage, item))
      throw new ApiError("invalid_request", `${param}: input items of type "${String((item as { type?: unknown }).type)}" are not supported by this appliance; send messages (user, developer, system, assistant)`, {
        param,
      });
    const text = partsText(item.content, `${param}.content`, manifest);
    if (item.role === "user") return { role: "user", text, images: [] };
    if (item.role === "assistant") return { role: "assistant", text, reasoning: "", toolCalls: [] };
    return { role: "system", text };
  });
}
