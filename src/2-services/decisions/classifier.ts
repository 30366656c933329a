import type { Principal } from "../accounts/types";
import type { ClassifierEngine, ClassifyItem } from "../../3-engines/types";
import { refuseLongText } from "../../3-engines/text-bounds";
import { MAX_CLASSIFY_TOKENS } from "../../lib/bounds";
import { ApiError } from "../../lib/errors";
import type { ModelManifest } from "../../lib/manifest";
import type { CapabilityDeps } from "../capability";
import { CLASSIFY_LABELS } from "../classify/service";
import type { AskedQuestion } from "./input";
import type { Answer } from "./questions";
import { decisionResponse, type DecisionCallOptions, type DecisionResponse } from "./response";

// Decisions on an NLI classifier (issue 47): a `predicate` is answered by entailment, with the
// input's text as the premise and the question's instructions as the hypothesis, each pair read by
// the classifier exactly as /v1/classify reads it. The rule: `probability` = P(entailment), the
// classifier's own probability for the pair, unchanged (/v1/classify's probs[1]). "Neutral" (the
// input does not say) is not "true": normalising entailment against contradiction alone would turn
// "the input does not say" into an even chance. Other question types need a chat model: a named 400.
// Billed as /v1/classify is, at the classifier's own price, per token of every pair read.

const ENTAILMENT = CLASSIFY_LABELS.indexOf("entailment");

/** Refuses what a classifier cannot answer, from the manifest alone (before the model loads). */
export function refuseOnClassifier(manifest: ModelManifest, asked: readonly AskedQuestion[]): void {
  asked.forEach(({ question }, i) => {
    if (question.type !== "predicate")
      throw new ApiError(
        "invalid_question",
        `questions[${i}]: model "${manifest.id}" is an NLI classifier and answers predicate questions only (by entailment); a ${question.type} question needs a chat model`,
        { param: `questions[${i}].type` },
      );
  });
}

export async function decideOnClassifier(
  deps: CapabilityDeps,
  manifest: ModelManifest,
  engine: ClassifierEngine,
  principal: Principal,
  premise: string,
  asked: readonly AskedQuestion[],
  opts: DecisionCallOptions,
): Promise<DecisionResponse> {
  if (!premise) throw new ApiError("invalid_request", "input: a classifier needs text in the input to judge (the premise)", { param: "input" });
  const items: ClassifyItem[] = asked.map(({ question }) => ({ premise, hypothesis: question.instructions }));
  await engine.load();
  const limit = Math.min(MAX_CLASSIFY_TOKENS, engine.maxTokens);
  const unit = "premise and hypothesis pair";
  // (the premise is the long side: the input is named; stops at the first pair over the limit)
  items.forEach((_, i) => refuseLongText(premise.length + asked[i]!.question.instructions.length, limit, "input", manifest.id, unit));
  const tokens = await engine.tokenize(items, limit);
  tokens.forEach(({ ids }, i) => {
    if (ids.length > limit)
      throw new ApiError(
        "context_length_exceeded",
        `the input with questions[${i}]'s statement is ${ids.length} tokens; model "${manifest.id}" takes at most ${limit} tokens per ${unit} (never truncated)`,
        { param: "input" },
      );
  });
  const inputTokens = tokens.reduce((n, t) => n + t.ids.length, 0);
  const request = { requestId: opts.requestId, model: manifest, endpoint: opts.endpoint ?? "/v1/decisions", inputTokens, maxOutputTokens: 0, batch: opts.batch };
  return deps.meter.metered(principal, request, async () => {
    const probs = await engine.classify(tokens, opts.signal);
    const answers = asked.map(({ question }, i): Answer => ({ type: "predicate", name: question.name ?? null, probability: probs[i]![ENTAILMENT]! }));
    const result = decisionResponse(manifest.id, answers, inputTokens, 0);
    deps.judged?.("/v1/decisions", manifest.id, answers.length, inputTokens);
    return { result, usage: { inputTokens, outputTokens: 0 }, effect: opts.record?.(result) };
  });
}
