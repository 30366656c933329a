import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { toChatRequest as fromResponses } from "../../src/1-api/responses/to-chat";
import type { ResponsesRequest } from "../../src/1-api/responses/schema";
import type { ChatRequest } from "../../src/2-services/chat/request";
import { toChatJob } from "../../src/2-services/chat/from-request";

// What the pinned official SDKs' types allow for the enum-like settings is accepted: the values are
// read from the SDKs' own declarations, so an SDK upgrade that adds one (as `max` effort and the
// Responses reasoning `context`/`mode` were added) fails here until the translators know it.
// (The Anthropic SDK's thinking types, displays and efforts: test/api/anthropic/to-chat.test.ts.)

const declarations = (file: string) => readFileSync(join(import.meta.dir, "../../node_modules/openai/resources", file), "utf8");
const literals = (src: string) => [...src.matchAll(/'([a-z_]+)'/g)].map((m) => m[1]!);

const shared = declarations("shared.d.ts");
const efforts = literals(/export type ReasoningEffort = ([^;]+);/.exec(shared)?.[1] ?? "");
const reasoning = /export interface Reasoning \{([\s\S]*?)\n\}/.exec(shared)?.[1] ?? "";
const summaries = literals(/\n    summary\?: ([^;]+);/.exec(reasoning)?.[1] ?? "");

describe("the openai SDK's reasoning settings", () => {
  test("the declarations were read", () => {
    expect(efforts).toEqual(expect.arrayContaining(["none", "minimal", "low", "medium", "high", "xhigh", "max"]));
    expect(summaries).toEqual(["auto", "concise", "detailed"]);
    expect(reasoning).toContain("context?:");
    expect(reasoning).toContain("mode?:");
  });

  test.each(efforts)("chat completions accept reasoning_effort %p", (effort) => {
    expect(() => toChatJob({ model: "m", messages: [{ role: "user", content: "hi" }], reasoning_effort: effort } as ChatRequest)).not.toThrow();
  });

  test.each(efforts)("responses accept reasoning.effort %p", (effort) => {
    expect(() => fromResponses({ model: "m", input: "hi", reasoning: { effort } } as ResponsesRequest)).not.toThrow();
  });

  test.each(summaries)("responses accept reasoning.summary %p", (summary) => {
    expect(() => fromResponses({ model: "m", input: "hi", reasoning: { summary } } as ResponsesRequest)).not.toThrow();
  });

  test("responses accept reasoning.context and reasoning.mode at their defaults, and name them otherwise", () => {
    expect(() => fromResponses({ model: "m", input: "hi", reasoning: { context: "auto", mode: "standard" } } as ResponsesRequest)).not.toThrow();
    expect(() => fromResponses({ model: "m", input: "hi", reasoning: { context: "all_turns" } } as ResponsesRequest)).toThrow(/^reasoning\.context: /);
    expect(() => fromResponses({ model: "m", input: "hi", reasoning: { mode: "pro" } } as ResponsesRequest)).toThrow(/^reasoning\.mode: /);
  });
});
