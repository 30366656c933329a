import { expect, test } from "bun:test";
import { imageMarker, locateRuns, reusablePrefix, withMarkers } from "../../../src/3-engines/llama/vision/prompt";
import { toLlamaHistory } from "../../../src/3-engines/llama/history";

// Placing images in a rendered prompt (pure parts of the vision path).

const P = 9; // the placeholder token in these examples

test("markers go where the images sat among the text parts, numbered across the request", () => {
  const m = (k: number) => `[${k}]`;
  expect(withMarkers("hello\nworld", [0, 5], m, 0)).toBe("[0]hello[1]\nworld");
  expect(withMarkers("abc", [3], m, 2)).toBe("abc[2]");
  const history = toLlamaHistory(
    [
      { role: "user", text: "first", images: [{ url: "u", param: "p", at: 5 }] },
      { role: "assistant", text: "ok", reasoning: "", toolCalls: [] },
      { role: "user", text: "second", images: [{ url: "u", param: "q", at: 0 }] },
    ],
    (k) => imageMarker("n0nce", k),
  );
  expect(history.map((h) => (h.type === "user" ? h.text : null))).toEqual([`first${imageMarker("n0nce", 0)}`, null, `${imageMarker("n0nce", 1)}second`]);
});

test("runs are found in order, adjacent images split by their lengths", () => {
  expect(locateRuns([1, P, P, P, 2, P, P, 3], P, [3, 2])).toEqual([
    { start: 1, length: 3, image: 0 },
    { start: 5, length: 2, image: 1 },
  ]);
  expect(locateRuns([1, P, P, P, P, P, 3], P, [3, 2])).toEqual([
    { start: 1, length: 3, image: 0 },
    { start: 4, length: 2, image: 1 },
  ]);
});

test("placeholders that do not add up are an error, never a silent misplacement", () => {
  expect(() => locateRuns([1, P, P, 2], P, [3])).toThrow("fewer placeholder tokens");
  expect(() => locateRuns([1, P, 2], P, [1, 1])).toThrow("holds 1 of the request's 2 images");
  expect(() => locateRuns([P, 2, P], P, [1])).toThrow("more image placeholders");
});

test("a held image is reused only when the same image sits at the same positions", () => {
  const runs = [{ start: 2, length: 4, image: 0 }];
  const held = [{ start: 2, length: 4, hash: "red" }];
  expect(reusablePrefix(10, runs, ["red"], held)).toBe(10); // same image: the whole common prefix
  expect(reusablePrefix(10, runs, ["blue"], held)).toBe(2); // another image: up to where it starts
  expect(reusablePrefix(10, runs, ["red"], [])).toBe(2); // nothing known of what the sequence holds
  expect(reusablePrefix(4, runs, ["red"], held)).toBe(2); // the common prefix ends inside the image
  expect(reusablePrefix(2, runs, ["red"], held)).toBe(2); // prefix ends before the image
});
