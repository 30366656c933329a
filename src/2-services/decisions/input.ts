import { Value } from "@sinclair/typebox/value";
import type { ChatTurn, ImageInput } from "../../3-engines/chat-job";
import { ApiError } from "../../lib/errors";
import { instructionsAt, type Question } from "./questions";
import { DecisionMessage, type DecisionPart, type DecisionQuestion, type DecisionRequest } from "./request";

// A decision request's input and questions, translated (issue 47). Pure: no engine, no store.
// Text parts are joined by newlines (JSON parts as JSON text). An `input_image` part becomes an
// image of its turn at the place it sat among the text parts, as chat's `image_url` parts do
// (chat/from-request.ts): in a user message of the input, or in a question's instructions (the
// user message that asks it). Whether the model may see images is the service's to decide.

/** A question as asked: its text form, and the images among its instructions. */
export interface AskedQuestion {
  question: Question;
  images: ImageInput[];
}

/** The questions, each with its instructions as text and the images among them. */
export function toQuestions(questions: readonly DecisionQuestion[]): AskedQuestion[] {
  return questions.map((q, i) => {
    const { text, images } = partsOf(q.instructions ?? "", `questions[${i}].instructions`);
    const named = q.name !== undefined ? { name: q.name } : {};
    const question: Question =
      q.type === "predicate"
        ? { type: "predicate", instructions: text, ...named }
        : q.type === "choice"
          ? { type: "choice", instructions: text, choices: q.choices, ...named }
          : { type: "score", instructions: text, levels: q.levels, ...named };
    // placed where the instructions begin in the message that asks the question
    const offset = instructionsAt(question);
    return { question, images: images.map((img) => ({ ...img, at: img.at + offset })) };
  });
}

/** The input as chat turns: a string is one user message; developer messages are system turns. */
export function toTurns(input: DecisionRequest["input"]): ChatTurn[] {
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
    const { text, images } = partsOf(item.content, `${param}.content`);
    if (item.role === "user") return { role: "user", text, images };
    // the SDK's types allow images in user messages only
    if (images.length) throw new ApiError("invalid_request", `${images[0]!.param}: images are accepted in user messages only (this is a ${item.role} message)`, { param: images[0]!.param });
    if (item.role === "assistant") return { role: "assistant", text, reasoning: "", toolCalls: [] };
    return { role: "system", text };
  });
}

/** Every image of the request, in order: the input's, then each question's. */
export function imagesOf(turns: readonly ChatTurn[], asked: readonly AskedQuestion[]): ImageInput[] {
  return [...turns.flatMap((t) => (t.role === "user" ? t.images : [])), ...asked.flatMap((a) => a.images)];
}

/** The classifier's premise: the text of every message of the input, in order, one a line. */
export function premiseOf(turns: readonly ChatTurn[]): string {
  return turns.map((t) => t.text).filter((t) => t !== "").join("\n");
}

function partsOf(content: string | readonly DecisionPart[], param: string): { text: string; images: ImageInput[] } {
  if (typeof content === "string") return { text: content, images: [] };
  const texts: string[] = [];
  const images: ImageInput[] = [];
  content.forEach((p, k) => {
    if (p.type === "input_image") images.push({ url: p.image_url, param: `${param}[${k}]`, at: texts.join("\n").length });
    else texts.push(p.type === "refusal" ? p.refusal : p.type === "input_json" ? JSON.stringify(p.data) : p.text);
  });
  return { text: texts.join("\n"), images };
}
