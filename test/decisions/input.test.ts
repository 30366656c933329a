import { expect, test } from "bun:test";
import { imagesOf, premiseOf, toQuestions, toTurns } from "../../src/2-services/decisions/input";
import { questionMessage } from "../../src/2-services/decisions/questions";
import type { DecisionRequest } from "../../src/2-services/decisions/request";
import { ApiError } from "../../src/lib/errors";

// A decision request's input and questions as the service gets them (issue 47): text parts joined,
// images placed where they sat among the text (as chat places image_url parts), the classifier's
// premise, and what is refused by name.

const img = (n: number) => ({ type: "input_image" as const, image_url: `data:image/png;base64,${n}` });
const refusal = (f: () => unknown) => {
  try {
    f();
  } catch (e) {
    return e instanceof ApiError ? { code: e.code, param: e.param } : e;
  }
  return null;
};

test("input: a string is one user message; parts joined by newlines, JSON as JSON text, images at their place in their user turn", () => {
  expect(toTurns("Hello")).toEqual([{ role: "user", text: "Hello", images: [] }]);
  const turns = toTurns([
    { role: "developer", content: "Be brief." },
    { role: "user", content: [{ type: "input_text", text: "Look:" }, img(1), { type: "input_json", data: { a: 1 } }, img(2)] },
    { role: "assistant", content: [{ type: "output_text", text: "Seen." }, { type: "refusal", refusal: "No." }] },
  ]);
  expect(turns).toEqual([
    { role: "system", text: "Be brief." },
    {
      role: "user",
      text: 'Look:\n{"a":1}',
      images: [
        { url: "data:image/png;base64,1", param: "input[1].content[1]", at: 5 },
        { url: "data:image/png;base64,2", param: "input[1].content[3]", at: 13 },
      ],
    },
    { role: "assistant", text: "Seen.\nNo.", reasoning: "", toolCalls: [] },
  ]);
  expect(premiseOf(turns)).toBe('Be brief.\nLook:\n{"a":1}\nSeen.\nNo.');
});

test("questions: instructions absent or null are empty; images in them placed after the message's lead (Statement: for a predicate)", () => {
  const asked = toQuestions([
    { type: "predicate", name: "p", instructions: [{ type: "input_text", text: "It looks like" }, img(3)] },
    { type: "choice", choices: [{ value: "a" }, { value: "b" }] },
    { type: "score", instructions: null, levels: [{ label: "0" }, { label: "1" }] },
  ] as DecisionRequest["questions"]);
  expect(asked.map((a) => a.question.instructions)).toEqual(["It looks like", "", ""]);
  const [p] = asked;
  expect(p!.images).toEqual([{ url: "data:image/png;base64,3", param: "questions[0].instructions[1]", at: "Statement: It looks like".length }]);
  expect(questionMessage(p!.question).slice(0, p!.images[0]!.at)).toBe("Statement: It looks like");
  const turns = toTurns([{ role: "user", content: [img(1)] }]);
  expect(imagesOf(turns, asked).map((i) => i.param)).toEqual(["input[0].content[0]", "questions[0].instructions[1]"]);
});

test("refused by name: an empty input, no messages, an image outside a user message, input items other than messages", () => {
  expect(refusal(() => toTurns(""))).toEqual({ code: "invalid_request", param: "input" });
  expect(refusal(() => toTurns([]))).toEqual({ code: "invalid_request", param: "input" });
  expect(refusal(() => toTurns([{ role: "system", content: [img(1)] }] as DecisionRequest["input"]))).toEqual({ code: "invalid_request", param: "input[0].content[0]" });
  expect(refusal(() => toTurns([{ role: "user", content: "x" }, { type: "function_call_output", call_id: "c", output: "y" }] as DecisionRequest["input"]))).toEqual({ code: "invalid_request", param: "input[1]" });
});
