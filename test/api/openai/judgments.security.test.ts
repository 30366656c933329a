import { authSuite } from "../http/auth-suite";

// /v1/decisions, /v1/rerank and Cohere's /v2/rerank under the one auth suite. (/v2/rerank once took
// a key of any scope, uncounted by the rpm limit: test/api/openapi.test.ts checks every route for that.)

authSuite({
  name: "decisions and rerank",
  scope: "inference",
  format: "openai",
  routes: [
    { method: "POST", path: "/v1/decisions", body: { model: "chat", input: "hi", questions: [{ type: "predicate", instructions: "x" }] } },
    { method: "POST", path: "/v1/rerank", body: { model: "rerank", query: "q", documents: ["d"] } },
    { method: "POST", path: "/v2/rerank", body: { model: "rerank", query: "q", documents: ["d"] } },
  ],
});
