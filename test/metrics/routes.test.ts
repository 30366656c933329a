import { describe, expect, test } from "bun:test";
import { routeMatcher } from "../../src/metrics/routes";

describe("route patterns for requests answered before routing", () => {
  const match = routeMatcher([
    { method: "GET", path: "/v1/files" },
    { method: "GET", path: "/v1/files/:id" },
    { method: "GET", path: "/v1/files/:id/content" },
    { method: "GET", path: "/v1/models/*" },
    { method: "GET", path: "/v1/models/special" },
    { method: "POST", path: "/v1/chat/completions" },
  ]);
  const cases: [string, string, string][] = [
    ["GET", "/v1/files", "/v1/files"],
    ["GET", "/v1/files/file_abc", "/v1/files/:id"],
    ["GET", "/v1/files/file_abc/content", "/v1/files/:id/content"],
    ["GET", "/v1/models/org/name", "/v1/models/*"],
    ["GET", "/v1/models/special", "/v1/models/special"],
    ["POST", "/v1/chat/completions", "/v1/chat/completions"],
    ["GET", "/v1/chat/completions", "unmatched"],
    ["GET", "/v1/nothing/here", "unmatched"],
  ];
  for (const [method, path, route] of cases)
    test(`${method} ${path} → ${route}`, () => {
      expect(match(method, path)).toBe(route);
    });
});
