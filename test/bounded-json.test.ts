import { expect, test } from "bun:test";
import { ApiError } from "../src/1-api/http/errors";
import { jsonCostExceeded, parseClientJson } from "../src/lib/bounded-json";

test.each([
  { name: "flat JSON is within bounds", text: '{"a":[1,2,3],"b":{"c":"d"}}', bounds: {}, expected: null },
  { name: "depth at the bound passes", text: "[[[0]]]", bounds: { depth: 3 }, expected: null },
  { name: "one level past the bound is named", text: "[[[[0]]]]", bounds: { depth: 3 }, expected: "is nested deeper than 3 levels" },
  { name: "objects count as levels like arrays", text: '{"a":{"b":{"c":{}}}}', bounds: { depth: 3 }, expected: "is nested deeper than 3 levels" },
  { name: "brackets inside strings are text", text: '["[[[[{{{{"]', bounds: { depth: 1 }, expected: null },
  { name: "an escaped quote does not end a string", text: '["a\\"[[[["]', bounds: { depth: 1 }, expected: null },
  { name: "an escaped backslash before a quote does end it", text: '["a\\\\",[[[0]]]]', bounds: { depth: 3 }, expected: "is nested deeper than 3 levels" },
  { name: "siblings do not add depth", text: "[[0],[0],[0],[0]]", bounds: { depth: 2 }, expected: null },
  { name: "values are counted", text: "[1,2,3,4,5]", bounds: { values: 3 }, expected: "holds more than 3 values" },
  { name: "commas inside strings are text", text: '["1,2,3,4,5"]', bounds: { values: 3 }, expected: null },
  { name: "an unterminated string ends the scan", text: '["[[[[', bounds: { depth: 1 }, expected: null },
])("$name", ({ text, bounds, expected }) => {
  expect(jsonCostExceeded(text, bounds)).toBe(expected);
});

test("parseClientJson names the text and the param in a 400 invalid_json", () => {
  const err = (() => {
    try {
      parseClientJson("[[[0]]]", "arguments", "tools[0].arguments", { depth: 2 });
    } catch (e) {
      return e;
    }
  })() as ApiError;
  expect(err).toBeInstanceOf(ApiError);
  expect(err).toMatchObject({ code: "invalid_json", param: "tools[0].arguments", message: "arguments is nested deeper than 2 levels" });
  expect(() => parseClientJson("{nope", "body")).toThrow(/body is not valid JSON/);
  expect(parseClientJson('{"a":[1]}', "body")).toEqual({ a: [1] });
});
