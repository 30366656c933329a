import { Type as T } from "@sinclair/typebox";
import { Elysia } from "elysia";
import type { FilesService } from "../../2-services/files/service";
import { principalOf } from "../http/context";

// Files (spec §2.10, §4): POST /v1/files (multipart, streamed to the store), GET /v1/files,
// GET /v1/files/{id}, GET /v1/files/{id}/content, DELETE /v1/files/{id}.

const ListQuery = T.Object({
  purpose: T.Optional(T.String()),
  after: T.Optional(T.String()),
  limit: T.Optional(T.String({ pattern: "^[0-9]+$" })),
  order: T.Optional(T.Union([T.Literal("desc"), T.Literal("asc")])),
});

export function filesRoutes(files: FilesService) {
  return new Elysia({ name: "openai-files" })
    // The multipart body is streamed to the store by the service: this route's parser hands Elysia the
    // unread stream (after the edge's own parse hook has authenticated the request), so no parser reads it.
    .post("/v1/files", ({ request }) => files.upload(principalOf(request), request.body, request.headers.get("content-type"), contentLengthOf(request)), {
      parse: ({ request }) => request.body ?? null,
    })
    .get("/v1/files", async ({ request, query }) => {
      const page = await files.list(principalOf(request), { purpose: query.purpose, after: query.after, limit: query.limit === undefined ? undefined : Number(query.limit) });
      return query.order === "asc" ? { ...page, data: page.data.reverse() } : page;
    }, { query: ListQuery })
    .get("/v1/files/:id", ({ request, params }) => files.get(principalOf(request), params.id))
    .get("/v1/files/:id/content", async ({ request, params }) =>
      new Response(await files.content(principalOf(request), params.id), { headers: { "content-type": "application/octet-stream" } }),
    )
    .delete("/v1/files/:id", ({ request, params }) => files.remove(principalOf(request), params.id));
}

/** The announced body size, or null (chunked): the storage checks refuse what it rules out before reading. */
function contentLengthOf(request: Request): number | null {
  const v = request.headers.get("content-length");
  return v !== null && /^[0-9]+$/.test(v) ? Number(v) : null;
}
