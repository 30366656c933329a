import { Elysia } from "elysia";
import type { OpenApiDocument } from "./document";
import { REFERENCE_CSP, renderReference } from "./reference";

export { renderReference } from "./reference";

// GET /openapi.json and GET /reference. The document is built on first request (the route table
// is complete by then, these two routes included) and kept: routes do not change while serving.

export function openapiRoutes(getDocument: () => OpenApiDocument) {
  let json: string | null = null;
  let html: string | null = null;
  const document = () => JSON.parse((json ??= JSON.stringify(getDocument()))) as OpenApiDocument;
  return new Elysia({ name: "openapi" })
    .get("/openapi.json", () => new Response((json ??= JSON.stringify(getDocument())), { headers: { "content-type": "application/json" } }))
    .get(
      "/reference",
      () =>
        new Response((html ??= renderReference(document())), {
          headers: {
            "content-type": "text/html; charset=utf-8",
            "content-security-policy": REFERENCE_CSP,
            "x-content-type-options": "nosniff",
            "referrer-policy": "no-referrer",
            "x-frame-options": "DENY",
          },
        }),
    );
}
