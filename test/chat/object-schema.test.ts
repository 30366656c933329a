import { describe, expect, test } from "bun:test";
import { ApiError } from "../../src/1-api/http/errors";
import { objectsOnly, requireObjects } from "../../src/3-engines/object-schema";

// Issue 42: a tool's arguments and json_object's answer are JSON objects whatever the schema's top says.

const flat = { type: "object", properties: { a: { type: "integer" } } };

describe("objectsOnly narrows a schema's top to the objects it admits", () => {
  test.each([
    { name: "an empty schema is any object", input: {}, expected: { schema: { type: "object" } } },
    { name: "true is any object", input: true, expected: { schema: { type: "object" } } },
    { name: "properties without a type are an object", input: { properties: { a: {} } }, expected: { schema: { properties: { a: {} }, type: "object" } } },
    { name: "an object stands as written", input: flat, expected: { schema: flat } },
    { name: "a type list keeps object", input: { type: ["object", "null"], properties: {} }, expected: { schema: { type: "object", properties: {} } } },
    { name: "nullable is left out", input: { ...flat, nullable: true }, expected: { schema: flat } },
    { name: "a union keeps its object members", input: { anyOf: [{ type: "string" }, flat, { type: "null" }] }, expected: { schema: { anyOf: [flat] } } },
    { name: "oneOf is read before anyOf, as the converter does", input: { oneOf: [{ type: "number" }, flat], anyOf: [{ type: "string" }] }, expected: { schema: { oneOf: [flat], anyOf: [{ type: "string" }] } } },
    { name: "a $ref to an object stands", input: { $ref: "#/$defs/A", $defs: { A: flat } }, expected: { schema: { $ref: "#/$defs/A", $defs: { A: flat } } } },
    { name: "a $ref to a union is inlined narrowed, its defs kept", input: { $ref: "#/definitions/U", definitions: { U: { anyOf: [{ type: "integer" }, flat] } } }, expected: { schema: { definitions: { U: { anyOf: [{ type: "integer" }, flat] } }, anyOf: [flat] } } },
    { name: "an enum keeps its object values", input: { enum: [1, { a: 1 }] }, expected: { schema: { enum: [{ a: 1 }] } } },
    { name: "an object const stands", input: { const: { a: 1 } }, expected: { schema: { const: { a: 1 } } } },
    { name: "allOf stands (the converter builds an object)", input: { allOf: [flat, { required: ["a"] }] }, expected: { schema: { allOf: [flat, { required: ["a"] }] } } },
    { name: "a scalar type admits none", input: { type: "string" }, expected: { none: ".type" } },
    { name: "a type list without object admits none", input: { type: ["string", "null"] }, expected: { none: ".type" } },
    { name: "a union of scalars admits none", input: { anyOf: [{ type: "string" }, { type: "number" }] }, expected: { none: ".anyOf" } },
    { name: "a $ref to a scalar admits none", input: { $ref: "#/$defs/S", $defs: { S: { type: "string" } } }, expected: { none: ".$ref" } },
    { name: "a const read before the type", input: { type: "object", const: 3 }, expected: { none: ".const" } },
    { name: "an enum of scalars admits none", input: { enum: ["a", 1, null] }, expected: { none: ".enum" } },
    { name: "allOf over enums admits none", input: { allOf: [{ enum: [1, 2] }, { enum: [2] }] }, expected: { none: ".allOf" } },
    { name: "a schema that is not one admits none", input: false, expected: { none: "" } },
  ])("$name", ({ input, expected }) => {
    expect(objectsOnly(input)).toEqual(expected as never);
  });

  test("a $ref cycle ends (left as written, refused where refs are checked)", () => {
    const cycle = { $ref: "#/$defs/A", $defs: { A: { $ref: "#/$defs/A" } } };
    expect(objectsOnly(cycle)).toEqual({ schema: cycle });
  });
});

test("requireObjects refuses a schema that admits no object, naming the keyword", () => {
  try {
    requireObjects({ anyOf: [{ type: "string" }] }, "response_format.schema", 'type "json_object" answers a JSON object');
    throw new Error("expected a refusal");
  } catch (e) {
    expect(e).toBeInstanceOf(ApiError);
    expect((e as ApiError).param).toBe("response_format.schema.anyOf");
    expect((e as ApiError).message).toStartWith("response_format.schema.anyOf: admits no JSON object");
  }
});
