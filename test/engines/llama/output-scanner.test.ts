import { describe, expect, test } from "bun:test";
import { OutputScanner, type ScannedEvent } from "../../../src/engines/llama/output-scanner";

const qwen = { stops: [] as string[], templateStops: ["<|im_end|>", "<|endoftext|>"], thought: { open: "<think>\n", close: "\n</think>" } };

/** Feeds pieces one by one; returns every event (merged by type) and the stop. */
function scan(pieces: (string | { hidden: string })[], o: Partial<typeof qwen> = {}) {
  const s = new OutputScanner({ ...qwen, ...o });
  const events: ScannedEvent[] = [];
  const add = (es: ScannedEvent[]) => {
    for (const e of es) {
      const last = events.at(-1);
      if (last?.type === e.type) last.text += e.text;
      else events.push({ ...e });
    }
  };
  for (const p of pieces) add(typeof p === "string" ? s.push(p) : s.push(p.hidden, false));
  add(s.finish());
  return { events, stop: s.stop };
}

describe("output scanner", () => {
  test("plain text passes through as it comes", () => {
    const s = new OutputScanner(qwen);
    expect(s.push("Hello")).toEqual([{ type: "text", text: "Hello" }]);
    expect(s.push(", world")).toEqual([{ type: "text", text: ", world" }]);
    expect(s.finish()).toEqual([]);
  });

  test("a thought is reasoning, its markers are dropped, markers split across pieces included", () => {
    const r = scan(["<thi", "nk>\nI", " wonder", "\n</th", "ink>", "\n\nYes"]);
    expect(r.events).toEqual([
      { type: "reasoning", text: "I wonder" },
      { type: "text", text: "\n\nYes" },
    ]);
    expect(r.stop).toBeNull();
  });

  test("control tokens match markers by their written form and are never shown", () => {
    const r = scan([{ hidden: "<think>" }, "\nhmm", "\n", { hidden: "</think>" }, "ok", { hidden: "<|fim_pad|>" }, "!"]);
    expect(r.events).toEqual([
      { type: "reasoning", text: "hmm" },
      { type: "text", text: "ok!" },
    ]);
  });

  test("text held as a possible marker is shown once it cannot be one", () => {
    const s = new OutputScanner(qwen);
    expect(s.push("a <th")).toEqual([{ type: "text", text: "a " }]);
    expect(s.push("ing")).toEqual([{ type: "text", text: "<thing" }]);
  });

  test("a caller's stop string ends the output where it starts and is reported", () => {
    const r = scan(["one tw", "o STO", "P three"], { stops: ["STOP"] });
    expect(r.events).toEqual([{ type: "text", text: "one two " }]);
    expect(r.stop).toEqual({ stop: "STOP", custom: true });
  });

  test("a template stop written as text ends the output and is not reported as the caller's", () => {
    const r = scan(["done<|im_", "end|>more"]);
    expect(r.events).toEqual([{ type: "text", text: "done" }]);
    expect(r.stop).toEqual({ stop: "<|im_end|>", custom: false });
  });

  test("stop strings apply inside a thought too", () => {
    const r = scan(["<think>\nabc STOP def"], { stops: ["STOP"] });
    expect(r.events).toEqual([{ type: "reasoning", text: "abc " }]);
    expect(r.stop?.stop).toBe("STOP");
  });

  test("the earliest match wins; at the same place the longer one", () => {
    expect(scan(["x ab abc"], { stops: ["abc", "b"] }).events).toEqual([{ type: "text", text: "x a" }]);
    expect(scan(["x abc"], { stops: ["ab", "abc"] }).stop?.stop).toBe("abc");
  });

  test("nothing is taken after a stop", () => {
    const s = new OutputScanner({ ...qwen, stops: ["END"] });
    s.push("a END b");
    expect(s.push("more")).toEqual([]);
    expect(s.finish()).toEqual([]);
  });

  test("finish releases what was held (the output ended for another reason)", () => {
    const r = scan(["one two ST"], { stops: ["STOP"] });
    expect(r.events).toEqual([{ type: "text", text: "one two ST" }]);
    expect(r.stop).toBeNull();
  });

  test("without thought markers, <think> is text", () => {
    expect(scan(["<think>\nx"], { thought: undefined }).events).toEqual([{ type: "text", text: "<think>\nx" }]);
  });

  test("reasoning tokens: the tokens of pieces shown as reasoning, not those all marker", () => {
    const s = new OutputScanner(qwen);
    // "<think>" and "\n" open it; "a", "b" (two tokens for one character) and "c." are reasoning;
    // the lone "\n" is all closing marker; "x" is the answer
    for (const [text, tokens] of [["<think>", 1], ["\n", 1], ["a", 1], ["b", 2], ["c.", 1], ["\n", 1], ["</think>", 1], ["x", 1]] as const) s.push(text, true, tokens);
    s.finish();
    expect(s.reasoningTokens).toBe(4);
  });

  test("empty stop strings are ignored", () => {
    expect(scan(["abc"], { stops: [""] }).events).toEqual([{ type: "text", text: "abc" }]);
  });
});
