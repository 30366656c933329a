import type { Principal } from "../accounts/types";
import type { ChatJob, ChatTurn, ImageInput } from "../../3-engines/chat-job";
import { decodeImages } from "../../3-engines/image-input";
import type { ChatEngine } from "../../3-engines/types";
import { ApiError } from "../../lib/errors";
import type { ModelManifest } from "../../lib/manifest";
import type { CapabilityDeps } from "../capability";
import { decisionPriceFor } from "../billing/pricing";
import { decideOnClassifier, refuseOnClassifier } from "./classifier";
import { imagesOf, premiseOf, toQuestions, toTurns, type AskedQuestion } from "./input";
import { answerOf, answerTexts, checkQuestions, questionMessage, type Answer } from "./questions";
import type { DecisionRequest } from "./request";
import { decisionResponse, type DecisionCallOptions, type DecisionResponse } from "./response";

export type { DecisionCallOptions, DecisionResponse } from "./response";

// THE decisions service (issue 47): typed questions about an input, answered by a model's own
// probabilities, nothing generated.
//   - a chat model: each question asked after the input (questions.ts), one at a time on one slot,
//     so the input's reading (its images included) stays in the slot's cache for the next question.
//     Images, in the input's user messages or in a question's instructions, go to a vision model as
//     images of their user turn; to a text-only model they are the 400 chat answers. Billed per
//     input token at the decisions price (prices.decision_input_per_m, or the model's
//     price.decision_input_per_m); image tokens count as input tokens, as in chat.
//   - an NLI classifier: predicate questions by entailment (classifier.ts).
//   - any other kind of model: a 400 naming the kinds that answer.
// Everything that can be refused is refused before credit is held: the question rules, the kind,
// images to a model that does not see them, an input past the context window.

export type DecisionService = ReturnType<typeof createDecisionService>;

export function createDecisionService(deps: CapabilityDeps) {
  const { registry, meter } = deps;

  async function decide(principal: Principal, req: DecisionRequest, opts: DecisionCallOptions): Promise<DecisionResponse> {
    const asked = toQuestions(req.questions);
    checkQuestions(asked.map((a) => a.question));
    const turns = toTurns(req.input);
    const images = imagesOf(turns, asked);
    const manifest = registry.resolve(req.model);
    if (manifest.kind === "classifier") {
      refuseOnClassifier(manifest, asked);
      refuseImages(manifest, images);
      return registry.using(req.model, "classifier", (m, engine) => decideOnClassifier(deps, m, engine, principal, premiseOf(turns), asked, opts), opts.signal);
    }
    if (manifest.kind !== "chat") {
      const fits = registry.list().filter((e) => e.kind === "chat" || e.kind === "classifier").map((e) => e.id);
      throw new ApiError(
        "wrong_model_kind",
        `model "${manifest.id}" is ${manifest.kind === "embedding" || manifest.kind === "image" ? "an" : "a"} ${manifest.kind} model and cannot answer decisions; a chat model answers every question type, a classifier predicate questions` +
          (fits.length ? `; use one of: ${fits.join(", ")}` : ""),
        { param: "model" },
      );
    }
    refuseImages(manifest, images);
    return registry.using(req.model, "chat", (m, engine) => decideOnChat(m, engine, principal, req, turns, asked, images, opts), opts.signal);
  }

  async function decideOnChat(
    manifest: ModelManifest,
    engine: ChatEngine,
    principal: Principal,
    req: DecisionRequest,
    turns: ChatTurn[],
    asked: AskedQuestion[],
    images: ImageInput[],
    opts: DecisionCallOptions,
  ): Promise<DecisionResponse> {
    const jobs = asked.map(({ question, images: own }): ChatJob => ({
      model: manifest.id,
      // the input's turns (and images) are the same objects in every job: decoded once
      turns: [...turns, { role: "user", text: questionMessage(question), images: own }],
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
    // every image of the request fetched and decoded once, under chat's limits (count, size, URLs)
    if (images.length) await decodeImages({ ...jobs[0]!, turns: [{ role: "user", text: "", images }] }, deps.config.image_input);
    await engine.load();
    if (!engine.score) throw new ApiError("invalid_request", `model "${manifest.id}" cannot answer decisions (its engine scores no answers)`, { param: "model" });
    let estimate = 0;
    for (const [i, job] of jobs.entries()) {
      const n = await promptTokens(engine, job);
      // an answer is at least one token; the engine checks the longest answer's own length again
      if (n + 1 > engine.contextSize)
        throw new ApiError("context_length_exceeded", `this model's context window is ${engine.contextSize} tokens; the input and questions[${i}] take ${n}, leaving no room for an answer`, {
          param: "input",
        });
      estimate += n;
    }
    const price = decisionPriceFor(manifest, deps.config.prices);
    const request = { requestId: opts.requestId, model: manifest, endpoint: opts.endpoint ?? "/v1/decisions", inputTokens: estimate, maxOutputTokens: 0, batch: opts.batch, price };
    return meter.metered(principal, request, async () => {
      const answers: Answer[] = [];
      let input = 0;
      let cached = 0;
      for (const [i, { question }] of asked.entries()) {
        const r = await engine.score!(jobs[i]!, answerTexts(question), { batch: opts.batch === true, ...(opts.signal ? { signal: opts.signal } : {}) });
        answers.push(answerOf(question, r.logprobs));
        input += r.promptTokens;
        cached += r.cachedTokens;
      }
      const result = decisionResponse(manifest.id, answers, input, cached);
      deps.judged?.("/v1/decisions", manifest.id, answers.length, input);
      return { result, usage: { inputTokens: input, outputTokens: 0, cachedTokens: cached }, effect: opts.record?.(result) };
    });
  }

  return { decide };
}

/** Images only for vision models: the 400 chat answers (chat/service.ts takeImages), naming the first image. */
function refuseImages(manifest: ModelManifest, images: readonly ImageInput[]): void {
  if (images.length === 0 || (manifest.kind === "chat" && manifest.vision)) return;
  const param = images[0]!.param;
  throw new ApiError("images_not_supported", `${param}: model "${manifest.id}" does not accept images (supports_vision is false)`, { param });
}

/** A job's prompt tokens; the engine's early refusal of an overlong text names the input. */
async function promptTokens(engine: ChatEngine, job: ChatJob): Promise<number> {
  try {
    return await engine.countTokens(job);
  } catch (e) {
    if (e instanceof ApiError && e.code === "context_length_exceeded") throw new ApiError(e.code, e.message, { param: "input" });
    throw e;
  }
}
