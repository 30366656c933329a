import { describe, expect, test } from "bun:test";
import { OutputScanner, type ScannedEvent, type ScannerOptions } from "../../../src/3-engines/llama/output-scanner";

const qwen = { stops: [] as string[], templateStops: ["<|im_end|>", "<|endoftext|>"], thought: { open: "<think>\n", close: "\n</think>" } };
const calls = { prefix: '<tool_call>\n{"name": "', paramsPrefix: '", "arguments": ', suffix: "}\n</tool_call>", betweenCalls: "\n", sectionSuffix: "<|im_end|>\n" };
const call = (name: string, args: string) => `${calls.prefix}${name}${calls.paramsPrefix}${args}${calls.suffix}`;

/** Appends events, merging text with text, reasoning with reasoning and one call's arguments. */
function merge(into: ScannedEvent[], es: ScannedEvent[]) {
  for (const e of es) {
    const last = into.at(-1);
    if (last && last.type === e.type && "text" in last && "text" in e && (e.type !== "tool_args" || (last as { index: number }).index === e.index)) last.text += e.text;
    else into.push({ ...e });
  }
}

/** Feeds pieces one by one; returns every event (merged) and the scanner. */
function run(pieces: (string | { hidden: string })[], o: Partial<ScannerOptions> = {}) {
  const s = new OutputScanner({ ...qwen, ...o });
  const events: ScannedEvent[] = [];
  for (const p of pieces) merge(events, typeof p === "string" ? s.push(p) : s.push(p.hidden, false));
  merge(events, s.finish());
  return { events, scanner: s };
}

function scan(pieces: (string | { hidden: string })[], o: Partial<ScannerOptions> = {}) {
  const { events, scanner } = run(pieces, o);
  return { events, stop: scanner.stop };
}

/** The same output fed whole and one character at a time must come out the same. */
function both(text: string, o: Partial<ScannerOptions> = {}) {
  const whole = run([text], o);
  const chars = run([...text], o);
  expect(chars.events).toEqual(whole.events);
  expect(chars.scanner.calls).toEqual(whole.scanner.calls);
  expect(chars.scanner.stop).toEqual(whole.scanner.stop);
  return whole;
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

describe("output scanner: tool calls", () => {
  const withCalls = { calls };

  test("text before a call is text; the call's name, then its arguments as they come", () => {
    const s = new OutputScanner({ ...qwen, calls });
    expect(s.push("Let me check.\n<tool_")).toEqual([{ type: "text", text: "Let me check.\n" }]);
    expect(s.push('call>\n{"name": "get_')).toEqual([]);
    expect(s.push('weather", "arguments": {"ci')).toEqual([
      { type: "tool_call", index: 0, name: "get_weather" },
      { type: "tool_args", index: 0, text: '{"ci' },
    ]);
    expect(s.callOpen).toBe(true);
    // the closing brace closes the JSON value: shown at once, though the suffix starts with "}"
    expect(s.push('ty": "Paris"}')).toEqual([{ type: "tool_args", index: 0, text: 'ty": "Paris"}' }]);
    expect(s.push("}\n</tool_call>")).toEqual([]);
    expect(s.callOpen).toBe(false);
    expect(s.finish()).toEqual([]);
    expect(s.calls).toEqual([{ name: "get_weather", arguments: '{"city": "Paris"}' }]);
  });

  test("several calls: indexes in order; what lies between and after them is not shown", () => {
    const r = both(`${call("a", '{"x": 1}')}\n${call("b", "{}")}<|im_end|>\n`, withCalls);
    expect(r.events).toEqual([
      { type: "tool_call", index: 0, name: "a" },
      { type: "tool_args", index: 0, text: '{"x": 1}' },
      { type: "tool_call", index: 1, name: "b" },
      { type: "tool_args", index: 1, text: "{}" },
    ]);
    expect(r.scanner.calls).toEqual([
      { name: "a", arguments: '{"x": 1}' },
      { name: "b", arguments: "{}" },
    ]);
    // the section's end written as text is the template's stop: it ends the output
    expect(r.scanner.stop).toEqual({ stop: "<|im_end|>", custom: false });
    expect(both(`${call("a", "{}")}\nDone, as you see.\n\n${call("b", "{}")}`, withCalls).events.map((e) => e.type)).toEqual(["tool_call", "tool_args", "tool_call", "tool_args"]);
  });

  test("a call prefix inside a thought is reasoning; after it, a call", () => {
    const r = both(`<think>\nI could use <tool_call>\n{"name": "x", "arguments": {}}\n</tool_call> here\n</think>\n\n${call("now", "{}")}`, withCalls);
    expect(r.events).toEqual([
      { type: "reasoning", text: 'I could use <tool_call>\n{"name": "x", "arguments": {}}\n</tool_call> here' },
      { type: "text", text: "\n\n" },
      { type: "tool_call", index: 0, name: "now" },
      { type: "tool_args", index: 0, text: "{}" },
    ]);
  });

  test("a suffix inside a JSON string is arguments; text between the value and the suffix is not", () => {
    const code = '{"code": "x = {}\\n}\\n</tool_call>", "n": [1, {"a": "]}"}]}';
    expect(both(call("run", code), withCalls).scanner.calls).toEqual([{ name: "run", arguments: code }]);
    // the same with the newline written out inside the string (JSON allows no raw newline, a model might)
    const raw = '{"code": "}\n</tool_call>"}';
    expect(both(call("run", raw), withCalls).scanner.calls).toEqual([{ name: "run", arguments: raw }]);
    expect(both(`${calls.prefix}f${calls.paramsPrefix}{"a": 1} stray}\n</tool_call>`, withCalls).scanner.calls).toEqual([{ name: "f", arguments: '{"a": 1}' }]);
    // the outer brace left out (no grammar): the next call still counts
    const r = both(`${calls.prefix}f${calls.paramsPrefix}{"a": 1}\n</tool_call>\n${call("g", "{}")}`, withCalls);
    expect(r.scanner.calls).toEqual([
      { name: "f", arguments: '{"a": 1}' },
      { name: "g", arguments: "{}" },
    ]);
    expect(r.scanner.callOpen).toBe(false);
  });

  test("arguments that are not JSON run to the suffix, whitespace at their end held and dropped", () => {
    const s = new OutputScanner({ ...qwen, calls });
    s.push(`${calls.prefix}f${calls.paramsPrefix}`);
    expect(s.push("bare words ")).toEqual([{ type: "tool_args", index: 0, text: "bare words" }]);
    expect(s.push(" \n")).toEqual([]);
    expect(s.push("more\t")).toEqual([{ type: "tool_args", index: 0, text: "  \nmore" }]);
    expect(s.push("\n}\n</tool_call>")).toEqual([]);
    expect(s.calls).toEqual([{ name: "f", arguments: "bare words  \nmore" }]);
    expect(both(`${calls.prefix}f${calls.paramsPrefix}${calls.suffix}`, withCalls).scanner.calls).toEqual([{ name: "f", arguments: "" }]);
  });

  test("whitespace inside JSON arguments is held until more follows", () => {
    const s = new OutputScanner({ ...qwen, calls });
    s.push(`${calls.prefix}f${calls.paramsPrefix}`);
    expect(s.push('{\n  ')).toEqual([{ type: "tool_args", index: 0, text: "{" }]);
    expect(s.push('"a": 1\n')).toEqual([{ type: "tool_args", index: 0, text: '\n  "a": 1' }]);
    expect(s.push("}\n")).toEqual([{ type: "tool_args", index: 0, text: "\n}" }]);
    expect(s.push("}\n</tool_call>")).toEqual([]);
    expect(s.calls[0]!.arguments).toBe('{\n  "a": 1\n}');
  });

  test("cut off in the arguments (max tokens): the call stays as far as it got", () => {
    const r = both(`Sure. ${calls.prefix}get_weather${calls.paramsPrefix}{"city": "Par `, withCalls);
    expect(r.scanner.calls).toEqual([{ name: "get_weather", arguments: '{"city": "Par' }]);
    expect(r.scanner.callOpen).toBe(true);
    expect(r.events.at(-1)).toEqual({ type: "tool_args", index: 0, text: '{"city": "Par' });
    // cut right after the value: complete arguments, the call still open
    const done = both(`${calls.prefix}f${calls.paramsPrefix}{"a": 1}`, withCalls);
    expect(done.scanner.calls).toEqual([{ name: "f", arguments: '{"a": 1}' }]);
    expect(done.scanner.callOpen).toBe(true);
  });

  test("cut off in the name: no call (its name is not known), the call open", () => {
    const r = both(`Hi ${calls.prefix}get_wea`, withCalls);
    expect(r.events).toEqual([{ type: "text", text: "Hi " }]);
    expect(r.scanner.calls).toEqual([]);
    expect(r.scanner.callOpen).toBe(true);
  });

  test("stop strings end the output inside a call too", () => {
    const r = both(`${calls.prefix}f${calls.paramsPrefix}{"a": "x STOP y"}${calls.suffix}`, { calls, stops: ["STOP"] });
    expect(r.scanner.stop).toEqual({ stop: "STOP", custom: true });
    expect(r.scanner.calls).toEqual([{ name: "f", arguments: '{"a": "x' }]);
    expect(both(`${calls.prefix}fSTOP`, { calls, stops: ["STOP"] }).scanner.calls).toEqual([]);
    expect(both(`${call("f", "{}")}\nSTOP`, { calls, stops: ["STOP"] }).scanner.stop?.stop).toBe("STOP");
  });

  test("a name no tool has is still reported (the caller decides)", () => {
    expect(both(call("rm -rf", "{}"), withCalls).scanner.calls).toEqual([{ name: "rm -rf", arguments: "{}" }]);
  });

  test("without call syntax, a call is text", () => {
    expect(scan([call("f", "{}")]).events).toEqual([{ type: "text", text: call("f", "{}") }]);
  });

  test("a call prefix that is a control token (never shown) still opens a call", () => {
    const r = run([{ hidden: "<tool_call>" }, '\n{"name": "f", "arguments": {}}\n', { hidden: "</tool_call>" }], withCalls);
    expect(r.scanner.calls).toEqual([{ name: "f", arguments: "{}" }]);
    expect(r.scanner.callOpen).toBe(false);
  });

  test("Qwen 3.5's syntax: arguments between parameter tags", () => {
    const q35 = { prefix: "<tool_call>\n<function=", paramsPrefix: ">\n<parameter=params>\n", suffix: "\n</parameter>\n</function>\n</tool_call>", betweenCalls: "\n" };
    const r = both(`<tool_call>\n<function=lookup>\n<parameter=params>\n{"q": "a\\nb"}\n</parameter>\n</function>\n</tool_call>`, { calls: q35 });
    expect(r.scanner.calls).toEqual([{ name: "lookup", arguments: '{"q": "a\\nb"}' }]);
  });

  test("a thought the prompt opened: the output starts as reasoning", () => {
    const r = both("still thinking\n</think>\n\nAnswer", { thoughtOpenedInPrompt: true });
    expect(r.events).toEqual([
      { type: "reasoning", text: "still thinking" },
      { type: "text", text: "\n\nAnswer" },
    ]);
    const s = new OutputScanner({ ...qwen, thoughtOpenedInPrompt: true });
    s.push("hm");
    expect(s.inThought).toBe(true);
    s.push("\n</think>");
    expect(s.inThought).toBe(false);
  });

  test("reasoning tokens are counted as before, calls or not", () => {
    const s = new OutputScanner({ ...qwen, calls });
    for (const [text, tokens] of [["<think>", 1], ["\n", 1], ["a", 1], ["b", 2], ["\n", 1], ["</think>", 1], ["<tool_call>", 1], ['\n{"name": "f", "arguments": {}}\n</tool_call>', 9]] as const) s.push(text, true, tokens);
    s.finish();
    expect(s.reasoningTokens).toBe(3);
    expect(s.calls).toHaveLength(1);
  });

  test("odd text never throws, comes out the same however it is split, and calls are their events", () => {
    // fragments of every marker, JSON and text in random orders and random pieces; stop strings rarely
    const parts = ["<tool_call>", "\n", '{"name": "', '", "arguments": ', "}", "{", '"', "\\", "</tool_call>", "<think>\n", "\n</think>", " ", "x", "[", "]", "S", "é", "😀", "}\n</tool_call>", call("f", '{"a": [1]}'), calls.prefix, `${calls.prefix}g${calls.paramsPrefix}`];
    const stops = ["<|im_end|>", "STOP"];
    let seed = 7;
    const random = (n: number) => {
      // mulberry32
      seed = (seed + 0x6d2b79f5) | 0;
      let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
      t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
      return ((t ^ (t >>> 14)) >>> 0) % n;
    };
    const seen = { calls: 0, open: 0, stops: 0 };
    for (let round = 0; round < 500; round++) {
      let text = "";
      for (let k = random(40); k > 0; k--) text += random(40) ? parts[random(parts.length)] : stops[random(2)];
      const options = { calls, stops: round % 2 ? ["STOP"] : [], thoughtOpenedInPrompt: round % 5 === 0 };
      const whole = run([text], options);
      const pieces: string[] = [];
      for (let i = 0; i < text.length; ) {
        const n = 1 + random(6);
        pieces.push(text.slice(i, i + n));
        i += n;
      }
      const split = run(pieces, options);
      expect(split.events).toEqual(whole.events);
      expect(split.scanner.calls).toEqual(whole.scanner.calls);
      // every call is its tool_call event and its tool_args joined, indexes in order
      const fromEvents: { name: string; arguments: string }[] = [];
      for (const e of whole.events) {
        if (e.type === "tool_call") {
          expect(e.index).toBe(fromEvents.length);
          fromEvents.push({ name: e.name, arguments: "" });
        } else if (e.type === "tool_args") fromEvents[e.index]!.arguments += e.text;
      }
      expect(whole.scanner.calls).toEqual(fromEvents);
      for (const c of whole.scanner.calls) expect(c.arguments).toBe(c.arguments.trimEnd());
      seen.calls += whole.scanner.calls.length;
      seen.open += Number(whole.scanner.callOpen);
      seen.stops += Number(whole.scanner.stop !== null);
    }
    // the rounds did reach calls, calls left open and stops
    expect(seen.calls).toBeGreaterThan(300);
    expect(seen.open).toBeGreaterThan(50);
    expect(seen.stops).toBeGreaterThan(50);
  });
});
