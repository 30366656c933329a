import { Elysia } from "elysia";
import type { ConsoleAuth } from "../../2-services/console/auth";
import type { ConversationsService } from "../../2-services/console/conversations";
import { requireSession } from "./session";

// The console Chat page's conversations under /console/api/conversations (issue 48): the signed-in
// account's own, checked and kept by src/2-services/console/conversations.ts. Session auth as every
// console call (writes: same origin and X-CSRF-Token); another account's id is 404.

export function conversationRoutes(auth: ConsoleAuth, conversations: ConversationsService) {
  const accountOf = async (req: Request) => (await requireSession(auth, req)).accountId;
  return new Elysia({ name: "console-conversations" })
    .get("/console/api/conversations", async ({ request, query }) => conversations.list(await accountOf(request), query))
    .post("/console/api/conversations", async ({ request, body }) => conversations.create(await accountOf(request), body))
    .get("/console/api/conversations/:id", async ({ request, params }) => conversations.get(await accountOf(request), params.id))
    .patch("/console/api/conversations/:id", async ({ request, params, body }) => conversations.update(await accountOf(request), params.id, body))
    .delete("/console/api/conversations/:id", async ({ request, params }) => conversations.remove(await accountOf(request), params.id))
    .post("/console/api/conversations/:id/messages", async ({ request, params, body }) => conversations.append(await accountOf(request), params.id, body));
}
