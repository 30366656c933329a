import { Elysia } from "elysia";
import { aggregate, type ChatCompletionChunk } from "../../chat/completion";
import type { ChatRun, ChatService } from "../../chat/service";
import type { Logger } from "../../log";
import { contextOf, principalOf } from "../http/context";
import { asApiError } from "../http/errors";
import { sseResponse, type SseEvent } from "../http/sse";
import { fromChatCompletion, toMessageId } from "./from-chat";
import { CountTokensRequest, MessagesRequest } from "./schema";
import { createMessagesStream, type MessagesStream, type MessagesStreamEvent } from "./stream";
import { relabel, toChatRequest, type Origin } from "./to-chat";
import type { CompatSettings } from "../../config";

// POST /v1/messages (spec §2.6) and POST /v1/messages/count_tokens: the Messages format as a
// translation onto the chat-completions service. Errors are answered in Anthropic's envelope by
// the app (formatFor); a failure after the stream started is an `error` event, then the end.

const ENDPOINT = "/v1/messages";

export function messagesRoutes(chat: ChatService, logger: Logger, compat?: CompatSettings) {
  const ignoreHostedTools = () => compat?.().ignore_hosted_tools === true;
  return new Elysia({ name: "anthropic-messages" })
    .post(
      ENDPOINT,
      async ({ body, request }) => {
        const rc = contextOf(request);
        const principal = principalOf(request);
        const { request: chatRequest, thinking, origins } = toChatRequest(body, { ignoreHostedTools: ignoreHostedTools() });
        const base = { requestId: rc.id, endpoint: ENDPOINT, includeReasoning: thinking !== "off" };
        if (!body.stream) {
          const run = await relabelled(chat.start(principal, chatRequest, { ...base, signal: request.signal }), origins);
          const chunks: ChatCompletionChunk[] = [];
          for await (const c of run.chunks) chunks.push(c);
          return Response.json(fromChatCompletion(aggregate(run.ids, chunks), { thinking, stopSequence: run.stopSequence() }));
        }
        const controller = new AbortController();
        request.signal.addEventListener("abort", () => controller.abort(), { once: true });
        const run = await relabelled(chat.start(principal, chatRequest, { ...base, signal: controller.signal }), origins);
        const stream = createMessagesStream({
          id: toMessageId(run.ids.id),
          model: run.ids.model,
          promptTokens: run.promptTokens,
          cachedTokens: run.cachedTokens,
          thinking,
        });
        return sseResponse(toSse(run, stream, rc.id, logger), () => controller.abort());
      },
      { body: MessagesRequest },
    )
    .post(
      `${ENDPOINT}/count_tokens`,
      async ({ body, request }) => {
        // The prompt as the model would see it, with its own template and tokenizer; nothing is billed.
        const { request: chatRequest, origins } = toChatRequest(body, { ignoreHostedTools: ignoreHostedTools() });
        return Response.json({ input_tokens: await relabelled(chat.countTokens(principalOf(request), chatRequest), origins) });
      },
      { body: CountTokensRequest },
    );
}

/** The chat layer's errors re-labelled with the Messages field they concern (to-chat.ts relabel). */
function relabelled<T>(p: Promise<T>, origins: Origin[]): Promise<T> {
  return p.catch((e) => {
    throw relabel(e, origins);
  });
}

async function* toSse(run: ChatRun, stream: MessagesStream, requestId: string, logger: Logger): AsyncGenerator<SseEvent[], void, void> {
  const sse = (events: MessagesStreamEvent[]) => events.map((e): SseEvent => ({ event: e.type, data: e }));
  try {
    yield sse(stream.start());
    for await (const c of run.chunks) yield sse(stream.push(c));
    yield sse(stream.finish({ stopSequence: run.stopSequence() }));
  } catch (e) {
    const { error, unexpected } = asApiError(e, requestId);
    if (unexpected) logger.error("messages stream failed", { request_id: requestId, error: (e as Error).message, stack: (e as Error).stack });
    yield sse(stream.fail(error));
  } finally {
    await run.chunks.return(undefined);
  }
}
