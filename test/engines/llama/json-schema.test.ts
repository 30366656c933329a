import { describe, expect, test } from "bun:test";
import { ApiError } from "../../../src/api/http/errors";
import { toGrammarSchema } from "../../../src/engines/llama/json-schema";

const P = "response_format.json_schema.schema";

describe("schemas the grammar can enforce pass through", () => {
  test.each([
    { name: "object with enum, bounded array and bounded string", schema: { type: "object", properties: { mood: { enum: ["happy", "sad"] }, tags: { type: "array", items: { type: "string", maxLength: 8 }, minItems: 1, maxItems: 3 } }, required: ["mood"], additionalProperties: false } },
    { name: "nullable basic types", schema: { type: ["string", "null"] } },
    { name: "refs into $defs", schema: { type: "object", properties: { a: { $ref: "#/$defs/A" } }, $defs: { A: { type: "integer" } } } },
    { name: "date formats", schema: { type: "string", format: "date-time" } },
  ])("$name", ({ schema }) => {
    expect(toGrammarSchema(schema, P)).toMatchObject(schema);
  });

  test("anyOf becomes oneOf (a grammar union accepts any alternative)", () => {
    expect(toGrammarSchema({ anyOf: [{ type: "string" }, { type: "number" }] }, P)).toEqual({ oneOf: [{ type: "string" }, { type: "number" }] });
  });

  test("annotations are accepted and dropped", () => {
    expect(toGrammarSchema({ type: "string", title: "T", $schema: "x", default: "d" }, P)).toEqual({ type: "string" });
  });

  test("a schema that constrains nothing means any JSON", () => {
    expect(toGrammarSchema({ description: "anything" }, P)).toBeNull();
  });
});

describe("keywords the grammar would not enforce are refused, named", () => {
  test.each([
    { name: "minimum", schema: { type: "object", properties: { n: { type: "integer", minimum: 0 } } }, param: `${P}.properties.n.minimum` },
    { name: "pattern", schema: { type: "string", pattern: "^a" }, param: `${P}.pattern` },
    { name: "allOf", schema: { allOf: [{ type: "string" }] }, param: `${P}.allOf` },
    { name: "uniqueItems", schema: { type: "array", uniqueItems: true }, param: `${P}.uniqueItems` },
    { name: "an unknown format", schema: { type: "string", format: "email" }, param: `${P}.format` },
    { name: "a $ref outside $defs", schema: { $ref: "#/definitions/A" }, param: `${P}.$ref` },
    { name: "a list type with an object", schema: { type: ["object", "null"] }, param: `${P}.type` },
    { name: "an invented type", schema: { type: "date" }, param: `${P}.type` },
  ])("$name", ({ schema, param }) => {
    try {
      toGrammarSchema(schema, P);
      throw new Error("expected a refusal");
    } catch (e) {
      expect(e).toBeInstanceOf(ApiError);
      expect((e as ApiError).code).toBe("unsupported_schema");
      expect((e as ApiError).param).toBe(param);
    }
  });
});
