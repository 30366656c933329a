import { Elysia } from "elysia";
import type { ChatService } from "../../chat/service";
import type { Logger } from "../../log";

// Placeholder while the Messages translation is being written (issue 4); replaced in full.
export function messagesRoutes(_chat: ChatService, _logger: Logger) {
  return new Elysia({ name: "anthropic-messages" });
}
