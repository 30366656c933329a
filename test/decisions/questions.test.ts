import { expect, test } from "bun:test";
import { answerOf, answerTexts, checkQuestions, instructionsAt, MAX_QUESTIONS, questionMessage, type Question } from "../../src/2-services/decisions/questions";
import { ApiError } from "../../src/lib/errors";

// The Decisions API's questions for a chat model (issue 47): what is refused, what the model is
// asked and scored against, and how its log-probabilities become the answer.

const refusal = (f: () => void) => {
  try {
    f();
  } catch (e) {
    return e instanceof ApiError ? { code: e.code, param: e.param, status: e.status } : e;
  }
  return null;
};

test("refused, each with its name and the field: too many questions, choices outside 2–255 or repeated, fewer than 2 levels", () => {
  const p: Question = { type: "predicate", instructions: "It is about billing." };
  expect(refusal(() => checkQuestions(Array(MAX_QUESTIONS).fill(p)))).toBeNull();
  expect(refusal(() => checkQuestions(Array(MAX_QUESTIONS + 1).fill(p)))).toEqual({ code: "too_many_questions", param: "questions", status: 400 });
  expect(refusal(() => checkQuestions([]))).toEqual({ code: "invalid_request", param: "questions", status: 400 });
  const choice = (values: (string | boolean)[]): Question => ({ type: "choice", instructions: "Pick.", choices: values.map((value) => ({ value })) });
  expect(refusal(() => checkQuestions([p, choice(["a"])]))).toEqual({ code: "invalid_question", param: "questions[1].choices", status: 400 });
  expect(refusal(() => checkQuestions([choice(Array.from({ length: 256 }, (_, i) => `v${i}`))]))).toEqual({ code: "invalid_question", param: "questions[0].choices", status: 400 });
  expect(refusal(() => checkQuestions([choice(Array.from({ length: 255 }, (_, i) => `v${i}`))]))).toBeNull();
  expect(refusal(() => checkQuestions([choice(["a", "b", "a"])]))).toEqual({ code: "invalid_question", param: "questions[0].choices[2]", status: 400 });
  // typed values: the string "true" and the boolean true are two values
  expect(refusal(() => checkQuestions([choice(["true", true])]))).toBeNull();
  // a predicate without a statement cannot be judged (the AI SDK may send a question without instructions)
  expect(refusal(() => checkQuestions([p, { type: "predicate", instructions: "  " }]))).toEqual({ code: "invalid_question", param: "questions[1].instructions", status: 400 });
  const levels = (labels: string[]): Question => ({ type: "score", instructions: "Rate.", levels: labels.map((label) => ({ label })) });
  expect(refusal(() => checkQuestions([levels(["only"])]))).toEqual({ code: "invalid_question", param: "questions[0].levels", status: 400 });
  expect(refusal(() => checkQuestions([levels(["low", "high", "low"])]))).toEqual({ code: "invalid_question", param: "questions[0].levels[2]", status: 400 });
});

test("the answers scored and the message asked: yes/no for a predicate, each value (booleans as true/false), each level in order", () => {
  expect(answerTexts({ type: "predicate", instructions: "x" })).toEqual(["yes", "no"]);
  const c: Question = { type: "choice", instructions: "Classify the ticket.", choices: [{ value: "billing" }, { value: "technical", description: "Software errors" }, { value: false }] };
  expect(answerTexts(c)).toEqual(["billing", "technical", "false"]);
  expect(questionMessage(c)).toContain("Classify the ticket.");
  expect(questionMessage(c)).toContain("- technical: Software errors");
  const s: Question = { type: "score", instructions: "How urgent?", levels: [{ label: "low" }, { label: "medium" }, { label: "high" }] };
  expect(answerTexts(s)).toEqual(["low", "medium", "high"]);
  expect(questionMessage({ type: "predicate", instructions: "The customer was charged twice." })).toContain("Statement: The customer was charged twice.");
  // without instructions (the options' descriptions say it all): the message starts with the options
  expect(questionMessage({ ...c, instructions: "" })).toStartWith("Answer with exactly one of these options, as written:\n- billing\n");
  // where the instructions begin in the message, for images placed among them
  for (const q of [c, s, { type: "predicate", instructions: "The customer was charged twice." } as Question])
    expect(questionMessage(q).slice(instructionsAt(q))).toStartWith(q.instructions);
});

test("log-probabilities become answers: normalised over the offered answers, in the question's order", () => {
  const ln = Math.log;
  expect(answerOf({ type: "predicate", instructions: "x", name: "billing" }, [ln(0.03), ln(0.01)])).toEqual({ type: "predicate", name: "billing", probability: expect.closeTo(0.75, 12) });
  const c: Question = { type: "choice", instructions: "x", choices: [{ value: "a" }, { value: true }, { value: "c" }] };
  const a = answerOf(c, [ln(1e-9), ln(3e-9), ln(6e-9)]);
  expect(a).toMatchObject({ type: "choice", name: null, choice: "c" });
  if (a.type !== "choice") throw new Error("a choice");
  expect(a.confidence).toBeCloseTo(0.6, 12);
  expect(a.probabilities.map((x) => x.value)).toEqual(["a", true, "c"]);
  expect(a.probabilities.map((x) => x.probability)).toEqual([expect.closeTo(0.1, 12), expect.closeTo(0.3, 12), expect.closeTo(0.6, 12)]);
  const s = answerOf({ type: "score", instructions: "x", levels: [{ label: "low" }, { label: "mid" }, { label: "high" }] }, [ln(0.5), ln(0.25), ln(0.25)]);
  if (s.type !== "score") throw new Error("a score");
  expect(s.score).toBeCloseTo(0.75, 12);
  expect(s.confidence).toBeCloseTo(0.5, 12);
  expect(s.probabilities).toEqual([
    { label: "low", value: 0, probability: expect.closeTo(0.5, 12) },
    { label: "mid", value: 1, probability: expect.closeTo(0.25, 12) },
    { label: "high", value: 2, probability: expect.closeTo(0.25, 12) },
  ]);
  // tiny log-probabilities (a random model's) still normalise without underflow
  const tiny = answerOf({ type: "predicate", instructions: "x" }, [-900, -901]);
  if (tiny.type !== "predicate") throw new Error("a predicate");
  expect(tiny.probability).toBeCloseTo(1 / (1 + Math.exp(-1)), 12);
  // every answer barred: a refusal, with the question's name
  expect(answerOf({ type: "predicate", instructions: "x", name: "q" }, [-Infinity, -Infinity])).toEqual({ type: "refusal", name: "q" });
});
