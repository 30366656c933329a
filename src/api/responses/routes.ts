import { Elysia } from "elysia";
import type { ChatService } from "../../chat/service";
import type { Logger } from "../../log";

// Placeholder while the Responses translation is being written (issue 4); replaced in full.
export function responsesRoutes(_chat: ChatService, _logger: Logger) {
  return new Elysia({ name: "responses" });
}
