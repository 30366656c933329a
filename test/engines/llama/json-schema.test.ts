import { describe, expect, test } from "bun:test";
import { ApiError } from "../../../src/1-api/http/errors";
import { toConverterSchema, toFunctionParams, toGbnf, toToolGbnf } from "../../../src/3-engines/llama/json-schema";
import { gbnfRegex } from "../../helpers/gbnf-regex";

const P = "response_format.json_schema.schema";

function refusedAt(f: () => unknown): string | null | undefined {
  try {
    f();
  } catch (e) {
    expect(e).toBeInstanceOf(ApiError);
    expect((e as ApiError).code).toBe("unsupported_schema");
    return (e as ApiError).param;
  }
  throw new Error("expected a refusal");
}

describe("structured output compiles through llama.cpp's converter", () => {
  test.each([
    { name: "zod .int() bounds", schema: { type: "object", properties: { n: { type: "integer", minimum: -9007199254740991, maximum: 9007199254740991 } }, required: ["n"] } },
    { name: "exclusive integer bounds", schema: { type: "integer", exclusiveMinimum: 0, exclusiveMaximum: 10 } },
    { name: "email, url, uuid, date-time, ipv4, hostname formats", schema: { type: "object", properties: Object.fromEntries(["email", "uri", "uuid", "date-time", "ipv4", "hostname", "date", "time"].map((f) => [f, { type: "string", format: f }])) } },
    { name: "an anchored pattern", schema: { type: "string", pattern: "^[a-z]{2,5}-[0-9]+$" } },
    { name: "an unanchored pattern (matches anywhere)", schema: { type: "string", pattern: "abc" } },
    { name: "untyped properties, nullable, allOf, $ref", schema: { type: "object", properties: { any: {}, a: { $ref: "#/$defs/A" }, n: { type: ["string", "null"] }, o: { type: "string", nullable: true }, all: { allOf: [{ type: "object", properties: { x: { type: "integer" } } }] } }, $defs: { A: { anyOf: [{ type: "integer" }, { type: "boolean" }] } } } },
    { name: "extra non-schema keys are ignored", schema: { type: "object", properties: { s: { type: "string" } }, defer_loading: true, additionalProperties: false } },
  ])("$name", ({ schema }) => {
    const gbnf = toGbnf(schema, P);
    expect(gbnf).toContain("root ::=");
  });

  test("boolean schemas: true is any value, a false property is left out, items false is an empty array", () => {
    expect(toGbnf({ type: "object", properties: { a: true, b: false } }, P)).not.toContain("b-kv");
    expect(toGbnf({ type: "array", items: false }, P)).toContain('root ::= "[" space  space "]"');
  });

  test("integer bounds are in the grammar", () => {
    expect(toGbnf({ type: "integer", minimum: 0, maximum: 10 }, P)).toContain('"10"');
  });
});

describe("under structured output, keywords no grammar can express are refused, named", () => {
  test.each([
    { name: "uniqueItems", schema: { type: "array", uniqueItems: true }, param: `${P}.uniqueItems` },
    { name: "not", schema: { type: "object", properties: { n: { not: { type: "string" } } } }, param: `${P}.properties.n.not` },
    { name: "if/then", schema: { type: "object", if: { required: ["a"] }, then: { required: ["b"] } }, param: `${P}.if` },
    { name: "an unknown format", schema: { type: "string", format: "iri-reference" }, param: `${P}.format` },
    { name: "bounds on a non-integer number", schema: { type: "number", minimum: 0.5 }, param: `${P}.minimum` },
    { name: "a pattern outside the converter's subset", schema: { type: "string", pattern: "^(?=a)b$" }, param: `${P}.pattern` },
    { name: "a remote $ref", schema: { $ref: "https://example.com/a.json" }, param: `${P}.$ref` },
    { name: "minLength above maxLength (nothing can match)", schema: { type: "string", minLength: 5, maxLength: 2 }, param: `${P}.minLength` },
    { name: "integer bounds that leave no integer", schema: { type: "integer", exclusiveMinimum: 3, exclusiveMaximum: 4 }, param: `${P}.exclusiveMinimum` },
  ])("$name", ({ schema, param }) => {
    expect(refusedAt(() => toGbnf(schema, P))).toBe(param);
  });
});

describe("non-strict tool parameters are hints: nothing is refused", () => {
  test.each([
    { name: "Claude-Code-like", schema: { type: "object", properties: { command: { type: "string" }, timeout_ms: { type: "number", minimum: 0, maximum: 600000 }, anything: {} }, required: ["command"], defer_loading: true, $schema: "http://json-schema.org/draft-07/schema#" } },
    { name: "zod-like", schema: { type: "object", properties: { n: { type: "integer", minimum: -9007199254740991, maximum: 9007199254740991 }, e: { type: "string", format: "email" }, u: { type: "string", format: "uri" }, r: { type: "string", pattern: "^a+$" } }, required: ["n", "e", "u", "r"], additionalProperties: false } },
    { name: "inexpressible keywords", schema: { type: "object", properties: { l: { type: "array", items: { type: "string" }, uniqueItems: true }, x: { not: { type: "null" } } }, if: {}, then: {} } },
    { name: "nested anyOf/allOf/$ref", schema: { type: "object", properties: { a: { $ref: "#/definitions/A" }, b: { allOf: [{ type: "object", properties: { x: { type: "string" } } }, { properties: { y: { type: "integer" } } }] } }, definitions: { A: { anyOf: [{ type: "string", maxLength: 20 }, { type: "null" }] } } } },
  ])("$name", ({ schema }) => {
    expect(toFunctionParams(schema)).not.toBeNull();
  });

  test("a property without type means any JSON value", () => {
    const p = toFunctionParams({ type: "object", properties: { x: {} } })!;
    expect((p.properties as any).x.oneOf).toHaveLength(3);
  });

  test("keywords the call grammar cannot express are dropped", () => {
    expect(toFunctionParams({ type: "object", properties: { n: { type: "integer", minimum: 0 }, s: { type: "string", format: "email" } } })).toEqual({
      type: "object",
      properties: { n: { type: "integer" }, s: { type: "string" } },
    });
  });

  test("a schema that constrains nothing means any arguments", () => {
    expect(toFunctionParams({ description: "anything" })).toBeNull();
  });
});

describe("strict tool parameters are enforced like structured output", () => {
  test("a keyword no grammar can express is refused under strict, naming it", () => {
    expect(refusedAt(() => toToolGbnf({ type: "object", properties: { n: { type: "array", uniqueItems: true } } }, true, "tools[0].function.parameters"))).toBe(
      "tools[0].function.parameters.properties.n.uniqueItems",
    );
  });

  test("minimum under strict is accepted: the hint is documented, the call grammar is llama.cpp's", () => {
    const schema = { type: "object", properties: { n: { type: "integer", minimum: 0 } }, required: ["n"] };
    expect(toFunctionParams(schema)!.properties).toEqual({ n: { type: "integer" } });
    // llama.cpp's converter writes a minimum as a rule of digits that never starts with "-"
    expect(toToolGbnf(schema, true, "p")).toBe(toGbnf(schema, "p").replace(/^space ::= .*$/m, 'space ::= | " "'));
    expect(toToolGbnf(schema, true, "p")).not.toContain('"-"');
  });
});

describe("non-strict tool parameters: what the grammar can express is still enforced", () => {
  const zodLike = { type: "object", properties: { id: { type: "integer", minimum: 1, maximum: 9007199254740991 }, l: { type: "array", uniqueItems: true }, p: { type: "string", pattern: "^(?=a)b$" }, f: { type: "string", format: "iri" } }, required: ["id"] };

  test("the converter leaves out what it cannot express, keeps the rest, and refuses nothing", () => {
    expect(toConverterSchema(zodLike, "p", true)).toEqual({ type: "object", properties: { id: { type: "integer", minimum: 1, maximum: 9007199254740991 }, l: { type: "array" }, p: { type: "string" }, f: { type: "string" } }, required: ["id"] });
    expect(toConverterSchema({ type: "number", minimum: 0.5, maximum: 2 }, "p", true)).toEqual({ type: "number" });
    expect(toConverterSchema({ type: "integer", exclusiveMinimum: 3, exclusiveMaximum: 4 }, "p", true)).toEqual({ type: "integer" });
    expect(toConverterSchema({ type: "string", minLength: 5, maxLength: 2 }, "p", true)).toEqual({ type: "string", maxLength: 2 });
  });

  test("a non-strict tool's call grammar is llama.cpp's, with the integer bound in it", () => {
    expect(toToolGbnf(zodLike, false, "tools[0].function.parameters")).toContain("root ::=");
    expect(toGbnf({ ...zodLike, properties: { ...zodLike.properties, id: { type: "integer", minimum: 1, maximum: 10 } } }, "p", true)).toContain('"10"');
  });

  test("a pattern beside a format is the constraint (zod's .email() sends both): accepted under strict too", () => {
    const email = { type: "string", format: "email", pattern: "^[a-z]+@[a-z]+\\.[a-z]{2,3}$" };
    expect(toConverterSchema(email, "p")).toEqual({ type: "string", pattern: "^[a-z]+@[a-z]+\\.[a-z]{2,3}$" });
    expect(toGbnf(email, P)).toContain("root ::=");
  });
});

test("a schema whose type names a property of Object.prototype is a named 400 (the converter refuses it), not a crash", () => {
  for (const type of ["toString", "constructor", "__proto__"]) {
    expect(refusedAt(() => toGbnf({ type }, P))).toBe(P);
    expect(toToolGbnf({ type: "object", properties: { x: { type } } }, false, "tools[0].function.parameters")).toContain("root ::=");
    expect(refusedAt(() => toGbnf({ type: "string", format: type }, P))).toBe(`${P}.format`);
  }
});

describe("what a grammar can count (issue 41)", () => {
  const code = (f: () => unknown) => {
    try {
      f();
    } catch (e) {
      return { code: (e as ApiError).code, param: (e as ApiError).param };
    }
    return null;
  };

  test.each([
    { name: "M1: minLength 10,000,000 (llama.cpp's parser refused it: a 500 before)", schema: { type: "string", minLength: 10_000_000 }, param: `${P}.minLength` },
    { name: "M1: minItems 1,000,000", schema: { type: "array", items: { type: "integer" }, minItems: 1_000_000 }, param: `${P}.minItems` },
    { name: "maxLength 5,000 (the grammar silently made it unbounded)", schema: { type: "string", maxLength: 5000 }, param: `${P}.maxLength` },
    { name: "a fractional maxItems", schema: { type: "array", maxItems: 2.5 }, param: `${P}.maxItems` },
    { name: "an integer bound past 2^53 (the converter read it as a 64-bit integer)", schema: { type: "integer", minimum: 1e300 }, param: `${P}.minimum` },
    { name: "C4: a nested repetition in a pattern", schema: { type: "string", pattern: "^(a{0,2000}){0,2000}$" }, param: `${P}.pattern` },
  ])("under strict, $name is a named 400", ({ schema, param }) => {
    expect(code(() => toGbnf(schema, P))).toEqual({ code: "unsupported_schema", param });
  });

  test("in a hint the same keywords are left out and the rest kept (Claude Code sends maxLength 524288)", () => {
    const gbnf = toToolGbnf({ type: "object", properties: { content: { type: "string", maxLength: 524288 }, n: { type: "integer", minimum: 1e300 }, p: { type: "string", pattern: "^(a{0,2000}){0,2000}$" } }, required: ["content"] }, false, "tools[0].function.parameters");
    expect(gbnf).toContain("content");
    expect(gbnf).not.toContain("524288");
  });

  test("2,000 is counted: a maxLength of 2,000 is in the grammar", () => {
    expect(toGbnf({ type: "string", maxLength: 2000 }, P)).toContain("{0,2000}");
  });

  test("C1's schema never reaches the converter: a named 400 (it killed the process with SIGSEGV)", () => {
    expect(code(() => toGbnf({ allOf: [{ $ref: "#/$defs/A" }], $defs: { A: { $ref: "#/$defs/A" } } }, P))).toEqual({ code: "schema_too_complex", param: `${P}.$ref` });
    // a non-strict tool whose schema has more optional properties than a grammar follows gets the any-object grammar
    expect(toToolGbnf({ type: "object", properties: Object.fromEntries(Array.from({ length: 200 }, (_, i) => [`p${i}`, {}])) }, false, "tools[0].function.parameters")).toContain("root ::= object");
  });

  test("a grammar llama.cpp's parser refuses is a named 400, checked before it reaches the decode loop", () => {
    // (the converter writes a counted repetition of a repetition: the parser's product check refuses it)
    const r = code(() => toGbnf({ type: "array", items: { type: "array", items: { type: "string", minLength: 40, maxLength: 60 }, minItems: 40, maxItems: 60 }, minItems: 40, maxItems: 60 }, P));
    expect(r === null || r.code === "unsupported_schema").toBe(true);
  });
});

test("C5: a hint inlines $refs within a budget (k properties referring back: k³ nodes rendered into the prompt before)", () => {
  const hintOf = (k: number) => {
    const schema = { $ref: "#/$defs/N", $defs: { N: { type: "object", properties: Object.fromEntries(Array.from({ length: k }, (_, i) => [`p${i}`, { $ref: "#/$defs/N" }])) } } };
    const started = performance.now();
    const params = toFunctionParams(schema) as { properties: object };
    expect(performance.now() - started).toBeLessThan(1000);
    expect(Object.keys(params.properties)).toHaveLength(k);
    return JSON.stringify(params).length;
  };
  const [small, large] = [hintOf(100), hintOf(300)];
  // three times the properties: about three times the hint (it was 27 times: k=100 took 68 s and 7.9 GB)
  expect(large / small).toBeLessThan(4);
  expect(small).toBeLessThan(200_000);
});

test("minProperties and maxProperties (which llama.cpp's converter ignores) are refused under strict unless the grammar keeps them anyway, and left out of a hint", () => {
  const props = { a: { type: "string" }, b: { type: "string" }, c: { type: "string" } };
  const code = (schema: Record<string, unknown>) => {
    try {
      toGbnf(schema, P);
      return null;
    } catch (e) {
      return (e as ApiError).param;
    }
  };
  expect(code({ type: "object", properties: props, required: ["a", "b"], minProperties: 2 })).toBeNull();
  expect(code({ type: "object", properties: props, additionalProperties: false, maxProperties: 3 })).toBeNull();
  expect(code({ type: "object", properties: props, required: ["a"], minProperties: 2 })).toBe(`${P}.minProperties`);
  expect(code({ type: "object", properties: props, maxProperties: 2 })).toBe(`${P}.maxProperties`);
  expect(toToolGbnf({ type: "object", properties: props, maxProperties: 1 }, false, "tools[0].function.parameters")).toContain("root ::=");
});

// Issue 42: 13 of 48 numbers from the demo model under a strict schema were like 1e601694 (JSON.parse:
// Infinity) and an integer came back as 9397587937937979 (past 2^53: zod's .int() refuses it).
describe("numbers a client can use", () => {
  const admits = (schema: Record<string, unknown>, text: string) => gbnfRegex(toGbnf(schema, P)).test(text);

  test("a number's exponent has at most two digits: always a finite double", () => {
    for (const text of ["1e601694", "-942e610", "1e308", "9e999"]) expect(admits({ type: "number" }, text)).toBe(false);
    for (const text of ["0", "-3.25", "1e99", "999999999999999.9999999999999999E+99", "5e-99"]) expect(admits({ type: "number" }, text)).toBe(true);
    expect(Number.isFinite(JSON.parse("999999999999999.9999999999999999e99"))).toBe(true);
  });

  test("an integer without bounds has at most 15 digits: always a safe integer", () => {
    for (const text of ["9397587937937979", "1000000000000000", "-9007199254740992"]) expect(admits({ type: "integer" }, text)).toBe(false);
    for (const text of ["0", "-7", "999999999999999", "-999999999999999"]) expect(admits({ type: "integer" }, text)).toBe(true);
  });

  test("an integer bounded on one side is bounded by the safe limit on the other, and exactly (llama.cpp admitted 20 for minimum 200)", () => {
    expect(admits({ type: "integer", minimum: 200 }, "20")).toBe(false);
    expect(admits({ type: "integer", minimum: 200 }, "200")).toBe(true);
    expect(admits({ type: "integer", minimum: 200 }, String(Number.MAX_SAFE_INTEGER))).toBe(true);
    expect(admits({ type: "integer", minimum: 200 }, "9007199254740992")).toBe(false);
    expect(admits({ type: "integer", exclusiveMaximum: -12 }, "-12")).toBe(false);
    expect(admits({ type: "integer", exclusiveMaximum: -12 }, "-13")).toBe(true);
    expect(admits({ type: "integer", maximum: 3 }, "-9007199254740992")).toBe(false);
    expect(admits({ type: "integer", minimum: 0, maximum: 10 }, "11")).toBe(false);
  });

  test("the same rules hold inside objects and arrays, in tool arguments and in json_object's any-object", () => {
    const schema = { type: "object", properties: { n: { type: "number" }, i: { type: "array", items: { type: "integer" } } }, required: ["n", "i"] };
    expect(admits(schema, '{"n": 1.5e3, "i": [1, -2]}')).toBe(true);
    expect(admits(schema, '{"n": 1e601694, "i": [1]}')).toBe(false);
    expect(admits(schema, '{"n": 1, "i": [9397587937937979]}')).toBe(false);
    for (const gbnf of [toToolGbnf(schema, true, "t"), toToolGbnf(schema, false, "t"), toGbnf({ type: "object" }, P, true), toGbnf({}, P)]) {
      expect(gbnf).not.toContain("[0-9]{0,15}");
      expect(gbnf).not.toContain("[eE] [-+]? integral-part");
      if (gbnf.includes("integral-part ::=")) expect(gbnf).toContain("integral-part ::= [0] | [1-9] [0-9]{0,14}");
    }
  });
});

// Issue 42: a tool with `parameters: {}` was called with 34452e6, 53.9, null or a string.
describe("a tool's arguments are always an object", () => {
  test("empty parameters, and parameters without a type, mean an object", () => {
    for (const strict of [true, false]) {
      expect(toToolGbnf({}, strict, "t")).toMatch(/^root ::= object$/m);
      expect(toToolGbnf({ properties: { a: { type: "string" } } }, strict, "t")).toMatch(/^root ::= "\{"/m);
    }
    expect(toToolGbnf(undefined, false, "t")).toMatch(/^root ::= "\{" space "\}"$/m);
  });

  test("a type that leaves out object is refused under strict, naming it, and is any object in a hint", () => {
    expect(refusedAt(() => toToolGbnf({ type: "string" }, true, "tools[0].function.parameters"))).toBe("tools[0].function.parameters.type");
    expect(toToolGbnf({ type: "array", items: {} }, false, "t")).toMatch(/^root ::= object$/m);
    expect(toToolGbnf({ type: ["object", "null"], properties: { a: { type: "integer" } } }, false, "t")).toMatch(/^root ::= "\{"/m);
  });
});

// Issue 42, the rest of the class: a top-level union, reference or nullable was taken as written, so
// `anyOf: [{type: "string"}, {type: "number"}]` was called with -96 and 5E45.
describe("a tool's arguments are an object whatever the top level of its schema says", () => {
  const A = "tools[0].function.parameters";
  const flat = { type: "object", properties: { a: { type: "integer" } }, required: ["a"], additionalProperties: false };
  const admits = (gbnf: string, text: string) => gbnfRegex(gbnf).test(text);

  test("a union keeps its object members only; one with none is refused under strict, naming it, and any object in a hint", () => {
    for (const key of ["anyOf", "oneOf"]) {
      const mixed = { [key]: [{ type: "string", maxLength: 3 }, { type: "number" }, flat] };
      for (const strict of [true, false]) {
        const gbnf = toToolGbnf(mixed, strict, A);
        expect(admits(gbnf, '{"a": 1}')).toBe(true);
        for (const text of ['"ab"', "-96", "5E45", "null"]) expect(admits(gbnf, text)).toBe(false);
      }
      const scalars = { [key]: [{ type: "string" }, { type: "number" }] };
      expect(refusedAt(() => toToolGbnf(scalars, true, A))).toBe(`${A}.${key}`);
      expect(toToolGbnf(scalars, false, A)).toMatch(/^root ::= object$/m);
    }
  });

  test("a top-level $ref is followed: to an object it stands, to anything else it is refused under strict and any object in a hint", () => {
    const toObject = { $ref: "#/definitions/Args", definitions: { Args: flat } };
    for (const strict of [true, false]) expect(admits(toToolGbnf(toObject, strict, A), '{"a": 1}')).toBe(true);
    const toString = { $ref: "#/$defs/S", $defs: { S: { type: "string", maxLength: 3 } } };
    expect(refusedAt(() => toToolGbnf(toString, true, A))).toBe(`${A}.$ref`);
    expect(toToolGbnf(toString, false, A)).toMatch(/^root ::= object$/m);
    const toUnion = { $ref: "#/$defs/U", $defs: { U: { anyOf: [{ type: "integer" }, flat] } } };
    for (const strict of [true, false]) {
      expect(admits(toToolGbnf(toUnion, strict, A), '{"a": 1}')).toBe(true);
      expect(admits(toToolGbnf(toUnion, strict, A), "7")).toBe(false);
    }
  });

  test("nullable, a null in the type list and non-object enum values are left out at the top", () => {
    for (const strict of [true, false]) {
      for (const schema of [{ ...flat, nullable: true }, { ...flat, type: ["object", "null"] }]) {
        expect(admits(toToolGbnf(schema, strict, A), "null")).toBe(false);
        expect(admits(toToolGbnf(schema, strict, A), '{"a": 1}')).toBe(true);
      }
    }
    expect(refusedAt(() => toToolGbnf({ enum: [1, "x"] }, true, A))).toBe(`${A}.enum`);
    expect(toToolGbnf({ const: 3 }, false, A)).toMatch(/^root ::= object$/m);
  });
});
