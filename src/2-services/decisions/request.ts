import { Type as T, type Static } from "@sinclair/typebox";

// POST /v1/decisions request (issue 47), as the `openai` SDK 7.57 types it (DecisionCreateParams):
// an input (a string, or messages) and typed questions. Unknown fields are accepted (STYLE);
// prompt_cache_key, prompt_cache_options and safety_identifier are accepted and need nothing here
// (every prompt is cached by its tokens). A question's `instructions` may be absent or null: the
// AI SDK's decisionModel (@ai-sdk/openai 4.0) sends a choice or score question without them when
// its options' descriptions define the judgment; a predicate without a statement is refused by name
// in the service.

const Text = T.Object({ type: T.Literal("input_text"), text: T.String(), prompt_cache_breakpoint: T.Optional(T.Unknown()) });
const OutputText = T.Object({ type: T.Literal("output_text"), text: T.String() });
const Refusal = T.Object({ type: T.Literal("refusal"), refusal: T.String() });
const Image = T.Object({ type: T.Literal("input_image"), image_url: T.String(), detail: T.Optional(T.Union([T.String(), T.Null()])) });
const Json = T.Object({ type: T.Literal("input_json"), data: T.Union([T.Record(T.String(), T.Unknown()), T.Array(T.Record(T.String(), T.Unknown()))]) });

export const DecisionPart = T.Union([Text, Image, Json, OutputText, Refusal]);
export type DecisionPart = Static<typeof DecisionPart>;

export const DecisionMessage = T.Object({
  type: T.Optional(T.Literal("message")),
  role: T.Union([T.Literal("user"), T.Literal("developer"), T.Literal("system"), T.Literal("assistant")]),
  content: T.Union([T.String(), T.Array(DecisionPart)]),
});
export type DecisionMessage = Static<typeof DecisionMessage>;

/** Other input items the SDK types (function calls and their outputs): refused by name in the service. */
const OtherItem = T.Object({ type: T.String() });

const Instructions = T.Optional(T.Union([T.String(), T.Array(T.Union([Text, Image, Json])), T.Null()]));
const Named = { name: T.Optional(T.String()) };

export const DecisionQuestion = T.Union([
  T.Object({ type: T.Literal("predicate"), instructions: Instructions, ...Named }),
  T.Object({
    type: T.Literal("choice"),
    instructions: Instructions,
    choices: T.Array(T.Object({ value: T.Union([T.String(), T.Boolean()]), description: T.Optional(T.String()) })),
    ...Named,
  }),
  T.Object({ type: T.Literal("score"), instructions: Instructions, levels: T.Array(T.Object({ label: T.String({ minLength: 1 }), description: T.Optional(T.String()) })), ...Named }),
]);
export type DecisionQuestion = Static<typeof DecisionQuestion>;

export const DecisionRequest = T.Object({
  model: T.String({ minLength: 1 }),
  input: T.Union([T.String(), T.Array(T.Union([DecisionMessage, OtherItem]))]),
  questions: T.Array(DecisionQuestion, { minItems: 1 }),
  prompt_cache_key: T.Optional(T.Union([T.String(), T.Null()])),
  prompt_cache_options: T.Optional(T.Unknown()),
  safety_identifier: T.Optional(T.Union([T.String(), T.Null()])),
});
export type DecisionRequest = Static<typeof DecisionRequest>;
