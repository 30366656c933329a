import { Elysia } from "elysia";
import type { ChatRun, ChatService } from "../../2-services/chat/service";
import type { Logger } from "../../lib/log";
import { contextOf, principalOf } from "../http/context";
import { asApiError, toOpenAIErrorBody } from "../http/errors";
import { sseResponse, type SseEvent } from "../http/sse";
import { ChatRequest } from "../../2-services/chat/request";

// POST /v1/chat/completions (spec §2.4): JSON, or SSE chunks ending with a usage chunk and
// `data: [DONE]`. A failure after the stream started becomes an error event, then the stream ends.

export function chatRoutes(chat: ChatService, logger: Logger) {
  return new Elysia({ name: "openai-chat" }).post(
    "/v1/chat/completions",
    async ({ body, request }) => {
      const rc = contextOf(request);
      const principal = principalOf(request);
      const base = { requestId: rc.id, endpoint: "/v1/chat/completions", includeReasoning: body.reasoning_format === "deepseek" };
      if (!body.stream) return Response.json(await chat.complete(principal, body, { ...base, signal: request.signal }));
      const controller = new AbortController();
      request.signal.addEventListener("abort", () => controller.abort(), { once: true });
      const run = await chat.start(principal, body, { ...base, signal: controller.signal });
      return sseResponse(toSse(run, rc.id, logger), () => controller.abort());
    },
    { body: ChatRequest },
  );
}

async function* toSse(run: ChatRun, requestId: string, logger: Logger): AsyncGenerator<SseEvent, void, void> {
  try {
    for await (const c of run.chunks) {
      if (c.usage && !run.job.includeUsage) continue;
      yield { data: c };
    }
    yield { data: "[DONE]" };
  } catch (e) {
    const { error, unexpected } = asApiError(e, requestId);
    if (unexpected) logger.error("chat stream failed", { request_id: requestId, error: (e as Error).message, stack: (e as Error).stack });
    yield { data: toOpenAIErrorBody(error) };
  } finally {
    await run.chunks.return(undefined);
  }
}
