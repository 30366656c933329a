import { describe, expect, test } from "bun:test";
import { ApiError } from "../../src/1-api/http/errors";
import { checkSchema, checkTools, SCHEMA_LIMITS, schemaProblem } from "../../src/3-engines/schema-limits";
import recorded from "../fixtures/requests/messages-claude-code-recorded.json";

const P = "response_format.json_schema.schema";

/** `d0 → d1 → … → d(n-1)`: each def an object whose one property refers to the next. */
function refChain(n: number, alias = false) {
  const defs: Record<string, unknown> = {};
  for (let i = 0; i < n; i++) defs[`d${i}`] = i + 1 < n ? (alias ? { $ref: `#/$defs/d${i + 1}` } : { type: "object", properties: { x: { $ref: `#/$defs/d${i + 1}` } } }) : { type: "string" };
  return { $ref: "#/$defs/d0", $defs: defs };
}

describe("schemas within the bounds pass", () => {
  test.each([
    { name: "a plain object", schema: { type: "object", properties: { a: { type: "string" }, b: { type: "integer" } }, required: ["a"] } },
    { name: "a recursive tree (a $ref cycle through properties writes a value first)", schema: { $ref: "#/$defs/Node", $defs: { Node: { type: "object", properties: { value: { type: "string" }, children: { type: "array", items: { $ref: "#/$defs/Node" } } } } } } },
    { name: "mutually recursive defs through arrays", schema: { $ref: "#/$defs/A", $defs: { A: { type: "object", properties: { b: { $ref: "#/$defs/B" } } }, B: { type: "array", items: { anyOf: [{ $ref: "#/$defs/A" }, { type: "null" }] } } } } },
    { name: "an alias to an alias (no cycle)", schema: refChain(20, true) },
    { name: "a 100-link chain of objects", schema: refChain(100) },
    { name: "an enum of 1,000 values", schema: { type: "string", enum: Array.from({ length: 1000 }, (_, i) => `v${i}`) } },
    { name: "128 optional properties", schema: { type: "object", properties: Object.fromEntries(Array.from({ length: 128 }, (_, i) => [`p${i}`, { type: "string" }])) } },
    { name: "5,000 required properties", schema: { type: "object", properties: Object.fromEntries(Array.from({ length: 5000 }, (_, i) => [`p${i}`, {}])), required: Array.from({ length: 5000 }, (_, i) => `p${i}`) } },
  ])("$name", ({ schema }) => {
    expect(schemaProblem(schema, P)).toBeNull();
  });

  test("every tool Claude Code sends (a recorded request) passes", () => {
    const { tools } = (recorded as { body: { tools: { input_schema: unknown }[] } }).body;
    expect(tools.length).toBeGreaterThan(10);
    for (const [i, t] of tools.entries()) expect(schemaProblem(t.input_schema, `tools[${i}]`)).toBeNull();
  });
});

describe("schemas past a bound are named problems, before any converter runs", () => {
  test.each([
    {
      name: "C1: allOf over a $ref that refers to itself (the converter recursed until SIGSEGV)",
      schema: { allOf: [{ $ref: "#/$defs/A" }], $defs: { A: { $ref: "#/$defs/A" } } },
      kind: "invalid",
      says: /refers back to itself before any value is written/,
    },
    { name: "M1: a left-recursive $ref through anyOf", schema: { $ref: "#/$defs/E", $defs: { E: { anyOf: [{ $ref: "#/$defs/E" }, { type: "integer" }] } } }, kind: "invalid", says: /"#\/\$defs\/E" → "#\/\$defs\/E"/ },
    { name: "a two-def alias ring", schema: { $ref: "#/$defs/A", $defs: { A: { $ref: "#/$defs/B" }, B: { oneOf: [{ $ref: "#/$defs/A" }] } } }, kind: "invalid", says: /refers back to itself/ },
    { name: "a $ref to a def that is not there", schema: { $ref: "#/$defs/Missing", $defs: {} }, kind: "invalid", says: /names no entry/ },
    { name: "C3: a 20,000-link $ref chain (738 KB: overflowed the converter's stack)", schema: refChain(20_000), kind: "size", says: /larger than 256 KB/ },
    { name: "more than 10,000 subschemas", schema: { type: "array", prefixItems: Array.from({ length: 12_000 }, () => ({})) }, kind: "size", says: /more than 10000 subschemas/ },
    { name: "a 3,000-link chain within the subschema count, too deep with its $refs followed", schema: refChain(3_000), kind: "size", says: /deeper than 256 levels with its \$refs followed/ },
    { name: "a ring of 300 defs, each two deep, nests 600 levels", schema: (() => { const s = refChain(300); (s.$defs as any).d299 = { type: "object", properties: { x: { $ref: "#/$defs/d0" } } }; return s; })(), kind: "size", says: /deeper than 256/ },
    { name: "H4: an enum of 100,000 values (1.9 MB of JSON)", schema: { type: "string", enum: Array.from({ length: 100_000 }, (_, i) => `v${i}`) }, kind: "size", says: /larger than 256 KB/ },
    { name: "an enum of 5,000 values", schema: { type: "integer", enum: Array.from({ length: 5_000 }, (_, i) => i) }, kind: "size", says: /more than 1000 values/ },
    { name: "enums of 600 values twice", schema: { type: "object", properties: { a: { enum: Array.from({ length: 600 }, (_, i) => i) }, b: { enum: Array.from({ length: 600 }, (_, i) => i) } } }, kind: "size", says: /more than 1000 values in all/ },
    { name: "H2: 2,000 optional properties (the converter is cubic in them)", schema: { type: "object", properties: Object.fromEntries(Array.from({ length: 2000 }, (_, i) => [`p${i}`, { type: "string" }])) }, kind: "grammar", says: /at most 128 optional properties \(this one has 2000\)/ },
    { name: "5,001 properties", schema: { type: "object", properties: Object.fromEntries(Array.from({ length: 5001 }, (_, i) => [`p${i}`, {}])), required: Array.from({ length: 5001 }, (_, i) => `p${i}`) }, kind: "size", says: /more than 5000 properties/ },
    { name: "names past 120,000 characters", schema: { type: "string", enum: Array.from({ length: 100 }, () => "x".repeat(1300)) }, kind: "size", says: /more than 120000 characters/ },
    { name: "a schema over 256 KB", schema: { type: "string", description: "x".repeat(300_000) }, kind: "size", says: /larger than 256 KB/ },
  ])("$name", ({ schema, kind, says }) => {
    const p = schemaProblem(schema, P);
    expect(p?.kind).toBe(kind as "size" | "grammar" | "invalid");
    expect(p?.message).toMatch(says);
    expect(p?.message.startsWith(P)).toBe(true);
  });

  test("a problem names where it is", () => {
    const p = schemaProblem({ type: "object", properties: { deep: { type: "object", properties: Object.fromEntries(Array.from({ length: 200 }, (_, i) => [`p${i}`, {}])) } } }, P);
    expect(p?.param).toBe(`${P}.properties.deep.properties`);
  });

  test("the walk does not recurse: a chain of 3,000 nested objects is measured, not a stack overflow", () => {
    let s: Record<string, unknown> = { type: "string" };
    for (let i = 0; i < 3000; i++) s = { type: "object", properties: { x: s } };
    expect(schemaProblem(s, P)?.message).toMatch(/nested deeper than 256 levels/);
  });
});

describe("what is refused where", () => {
  const cycle = { allOf: [{ $ref: "#/$defs/A" }], $defs: { A: { $ref: "#/$defs/A" } } };
  const huge = { type: "string", enum: Array.from({ length: 5000 }, (_, i) => i) };
  const refusal = (f: () => unknown) => {
    try {
      f();
    } catch (e) {
      return { code: (e as ApiError).code, param: (e as ApiError).param, status: (e as ApiError).status };
    }
    return null;
  };

  test("under strict, every problem is a 400 schema_too_complex naming the place", () => {
    expect(refusal(() => checkSchema(cycle, P, true))).toEqual({ code: "schema_too_complex", param: `${P}.$ref`, status: 400 });
  });

  test("a hint (a non-strict tool) lets a problem only a grammar has pass (its grammar falls back to any object), not a size or a schema that defines nothing", () => {
    const optional = { type: "object", properties: Object.fromEntries(Array.from({ length: 200 }, (_, i) => [`p${i}`, {}])) };
    expect(refusal(() => checkSchema(optional, "tools[0].function.parameters", false))).toBeNull();
    expect(checkSchema(optional, "tools[0].function.parameters", false)?.kind).toBe("grammar");
    expect(refusal(() => checkSchema(optional, P, true))?.code).toBe("schema_too_complex");
    expect(refusal(() => checkSchema(cycle, "tools[0].function.parameters", false))?.code).toBe("schema_too_complex");
    expect(refusal(() => checkSchema(huge, "tools[0].function.parameters", false))?.code).toBe("schema_too_complex");
  });

  test("more tools than the bound is a 400 naming tools", () => {
    const tools = Array.from({ length: SCHEMA_LIMITS.tools + 1 }, () => ({ parameters: { type: "object" } }));
    expect(refusal(() => checkTools(tools, (i) => `tools[${i}].function.parameters`))).toEqual({ code: "schema_too_complex", param: "tools", status: 400 });
    expect(refusal(() => checkTools(tools.slice(1), (i) => `tools[${i}].function.parameters`))).toBeNull();
  });
});
