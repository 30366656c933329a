import { ApiError } from "../../lib/errors";

// The Decisions API's questions (issue 47, OpenAI's POST /v1/decisions as the `openai` SDK 7.57
// types it), translated for a chat model: each question becomes a user message after the input and
// a closed list of answer texts; the model's log-probability of each answer text (the chat engine's
// `score`) becomes the answer. Pure: no engine, no store.
//   - predicate: the answers "yes" and "no"; `probability` is P(yes) over the two.
//   - choice: each value's text (a boolean as "true"/"false"); `choice` the most probable value,
//     `confidence` its probability, `probabilities` in the question's order.
//   - score: each level's label; `probabilities` with `value` the level's place from 0 (lowest),
//     `score` the expected value, `confidence` the most probable level's probability.
// Probabilities are normalised over the offered answers. A refusal: the model gives every offered
// answer zero probability (a bias, or a grammar of the model's own, barred them all); nothing
// else refuses.

/** The most questions one request may ask (the SDK's types allow 400; this appliance asks the model once per question). */
export const MAX_QUESTIONS = 10;
export const MAX_CHOICES = 255;

export type Value = string | boolean;
export interface Predicate {
  type: "predicate";
  instructions: string;
  name?: string;
}
export interface Choice {
  type: "choice";
  instructions: string;
  choices: { value: Value; description?: string }[];
  name?: string;
}
export interface Score {
  type: "score";
  instructions: string;
  levels: { label: string; description?: string }[];
  name?: string;
}
export type Question = Predicate | Choice | Score;

export type Answer =
  | { type: "predicate"; name: string | null; probability: number }
  | { type: "choice"; name: string | null; choice: Value; confidence: number; probabilities: { value: Value; probability: number }[] }
  | { type: "score"; name: string | null; score: number; confidence: number; probabilities: { label: string; value: number; probability: number }[] }
  | { type: "refusal"; name: string | null };

/** Refuses a request's questions that cannot be asked: too many, a predicate without a statement, choices outside 2–255 or repeated, fewer than 2 levels. */
export function checkQuestions(questions: readonly Question[]): void {
  if (questions.length === 0) throw new ApiError("invalid_request", "questions: ask at least one question", { param: "questions" });
  if (questions.length > MAX_QUESTIONS)
    throw new ApiError("too_many_questions", `questions: at most ${MAX_QUESTIONS} questions a request on this appliance (${questions.length} asked); split them over several requests`, {
      param: "questions",
    });
  questions.forEach((q, i) => {
    const at = `questions[${i}]`;
    if (q.type === "predicate" && !q.instructions.trim())
      throw new ApiError("invalid_question", `${at}.instructions: a predicate needs a statement to judge (text; none given)`, { param: `${at}.instructions` });
    if (q.type === "choice") {
      if (q.choices.length < 2 || q.choices.length > MAX_CHOICES)
        throw new ApiError("invalid_question", `${at}.choices: give between 2 and ${MAX_CHOICES} choices (${q.choices.length} given)`, { param: `${at}.choices` });
      const seen = new Set<string>();
      q.choices.forEach((c, k) => {
        // typed: a string and a boolean with the same text are distinct values
        const key = `${typeof c.value}:${String(c.value)}`;
        if (seen.has(key)) throw new ApiError("invalid_question", `${at}.choices[${k}]: the value ${JSON.stringify(c.value)} is offered twice; each choice must be unique`, { param: `${at}.choices[${k}]` });
        seen.add(key);
      });
    }
    if (q.type === "score") {
      if (q.levels.length < 2) throw new ApiError("invalid_question", `${at}.levels: give at least 2 ordered levels (${q.levels.length} given)`, { param: `${at}.levels` });
      const seen = new Set<string>();
      q.levels.forEach((l, k) => {
        if (seen.has(l.label)) throw new ApiError("invalid_question", `${at}.levels[${k}]: the label ${JSON.stringify(l.label)} is given twice; each level must be unique`, { param: `${at}.levels[${k}]` });
        seen.add(l.label);
      });
    }
  });
}

const text = (v: Value) => (typeof v === "boolean" ? (v ? "true" : "false") : v);
const listed = (items: { text: string; description?: string | undefined }[]) => items.map((i) => `- ${i.text}${i.description ? `: ${i.description}` : ""}`).join("\n");

/** The texts the model's reply is scored against, in the question's order. */
export function answerTexts(q: Question): string[] {
  if (q.type === "predicate") return ["yes", "no"];
  if (q.type === "choice") return q.choices.map((c) => text(c.value));
  return q.levels.map((l) => l.label);
}

const STATEMENT = "Statement: ";

/** The user message that asks the question, after the input. */
export function questionMessage(q: Question): string {
  if (q.type === "predicate") return `${STATEMENT}${q.instructions}\n\nIs this statement true of the input above? Answer with exactly one word: yes or no.`;
  // a choice or score without instructions (the AI SDK sends none when the options say it all)
  const lead = q.instructions ? `${q.instructions}\n\n` : "";
  if (q.type === "choice")
    return `${lead}Answer with exactly one of these options, as written:\n${listed(q.choices.map((c) => ({ text: text(c.value), description: c.description })))}`;
  return `${lead}Answer with exactly one of these levels, as written, from the lowest to the highest:\n${listed(q.levels.map((l) => ({ text: l.label, description: l.description })))}`;
}

/** Where the instructions begin in questionMessage(q): images among them are placed from here. */
export function instructionsAt(q: Question): number {
  return q.type === "predicate" ? STATEMENT.length : 0;
}

/** The answer from each answer text's log-probability (answerTexts' order). */
export function answerOf(q: Question, logprobs: readonly number[]): Answer {
  const name = q.name ?? null;
  const top = Math.max(...logprobs);
  if (!Number.isFinite(top)) return { type: "refusal", name };
  const weights = logprobs.map((lp) => Math.exp(lp - top));
  const total = weights.reduce((s, w) => s + w, 0);
  const p = weights.map((w) => w / total);
  const best = p.indexOf(Math.max(...p));
  if (q.type === "predicate") return { type: "predicate", name, probability: p[0]! };
  if (q.type === "choice")
    return { type: "choice", name, choice: q.choices[best]!.value, confidence: p[best]!, probabilities: q.choices.map((c, i) => ({ value: c.value, probability: p[i]! })) };
  return {
    type: "score",
    name,
    score: p.reduce((s, x, i) => s + x * i, 0),
    confidence: p[best]!,
    probabilities: q.levels.map((l, i) => ({ label: l.label, value: i, probability: p[i]! })),
  };
}
