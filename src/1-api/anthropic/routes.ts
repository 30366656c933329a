import { Elysia } from "elysia";
import { aggregate, type ChatCompletionChunk } from "../../2-services/chat/completion";
import type { ChatRun, ChatService } from "../../2-services/chat/service";
import type { Logger } from "../../lib/log";
import { contextOf, principalOf } from "../http/context";
import { asApiError } from "../http/errors";
import { sseResponse, type SseEvent } from "../http/sse";
import { fromChatCompletion, toMessageId, type MessagesResponse } from "./from-chat";
import { CountTokensRequest, MessagesRequest } from "./schema";
import { createMessagesStream, type MessagesStream, type MessagesStreamEvent } from "./stream";
import { beginThreadTurn, threadForCount, type ThreadsDeps, type ThreadTurn } from "./thread-turn";
import { relabelContinued } from "./threads";
import { relabel, toChatRequest, type ChatTranslation, type Origin } from "./to-chat";
import type { CompatSettings } from "../../lib/config";

// POST /v1/messages (spec §2.6) and POST /v1/messages/count_tokens: the Messages format as a
// translation onto the chat-completions service. Errors are answered in Anthropic's envelope by
// the app (formatFor); a failure after the stream started is an `error` event, then the end.
// `thread` (message threads) is resolved first (thread-turn.ts): a continue's request is its
// thread's history followed by the new messages, and every way out keeps the reply or releases it.

const ENDPOINT = "/v1/messages";

export function messagesRoutes(chat: ChatService, logger: Logger, compat?: CompatSettings, threads?: ThreadsDeps) {
  const ignoreHostedTools = () => compat?.().ignore_hosted_tools === true;
  return new Elysia({ name: "anthropic-messages" })
    .post(
      ENDPOINT,
      async ({ body, request }) => {
        const rc = contextOf(request);
        const principal = principalOf(request);
        const turn = await beginThreadTurn(threads, principal, rc.id, body);
        try {
          const { request: chatRequest, thinking, origins } = translated(turn, ignoreHostedTools());
          const base = { requestId: rc.id, endpoint: ENDPOINT, includeReasoning: thinking !== "off" };
          if (!body.stream) {
            const run = await relabelled(chat.start(principal, chatRequest, { ...base, signal: request.signal }), origins, turn.offset);
            const chunks: ChatCompletionChunk[] = [];
            for await (const c of run.chunks) chunks.push(c);
            const message = fromChatCompletion(aggregate(run.ids, chunks), { thinking, stopSequence: run.stopSequence() });
            await keep(turn, message, rc.id, logger);
            return Response.json(message);
          }
          const controller = new AbortController();
          request.signal.addEventListener("abort", () => controller.abort(), { once: true });
          const run = await relabelled(chat.start(principal, chatRequest, { ...base, signal: controller.signal }), origins, turn.offset);
          const stream = createMessagesStream({
            id: toMessageId(run.ids.id),
            model: run.ids.model,
            promptTokens: run.promptTokens,
            cachedTokens: run.cachedTokens,
            thinking,
          });
          // A stream cancelled before its first event never runs toSse's `finally`: the claim ends here too.
          return sseResponse(toSse(run, stream, { requestId: rc.id, logger, turn, thinking }), () => {
            controller.abort();
            void turn.release();
          });
        } catch (e) {
          await turn.release();
          throw e;
        }
      },
      { body: MessagesRequest },
    )
    .post(
      `${ENDPOINT}/count_tokens`,
      async ({ body, request }) => {
        // The prompt as the model would see it, with its own template and tokenizer; nothing is billed.
        // A continue counts the prompt it would run: the thread's history and the new messages.
        const principal = principalOf(request);
        const counted = await threadForCount(threads, principal, body);
        const { request: chatRequest, origins } = translated(counted, ignoreHostedTools());
        return Response.json({ input_tokens: await relabelled(chat.countTokens(principal, chatRequest), origins, counted.offset) });
      },
      { body: CountTokensRequest },
    );
}

/** The request translated, its errors named as the client sent it (a continue's follow the thread's history). */
function translated(turn: Pick<ThreadTurn, "request" | "offset">, ignoreHostedTools: boolean): ChatTranslation {
  try {
    return toChatRequest(turn.request, { ignoreHostedTools });
  } catch (e) {
    throw relabelContinued(e, turn.offset);
  }
}

/** The chat layer's errors re-labelled with the Messages field they concern (to-chat.ts relabel). */
function relabelled<T>(p: Promise<T>, origins: Origin[], offset: number): Promise<T> {
  return p.catch((e) => {
    throw relabelContinued(relabel(e, origins), offset);
  });
}

/**
 * The reply kept in its thread. A store failure does not take the answer from the client: the
 * thread is then not kept, and the next continue is answered thread_not_found (the SDK replays).
 */
async function keep(turn: ThreadTurn, message: MessagesResponse, requestId: string, logger: Logger): Promise<void> {
  try {
    await turn.keep(message);
  } catch (e) {
    logger.error("message thread not kept", { request_id: requestId, error: (e as Error).message });
  }
}

interface SseContext {
  requestId: string;
  logger: Logger;
  turn: ThreadTurn;
  thinking: ChatTranslation["thinking"];
}

async function* toSse(run: ChatRun, stream: MessagesStream, { requestId, logger, turn, thinking }: SseContext): AsyncGenerator<SseEvent[], void, void> {
  const sse = (events: MessagesStreamEvent[]) => events.map((e): SseEvent => ({ event: e.type, data: e }));
  // A threaded turn folds its chunks into the message it keeps, as the non-streamed answer is built.
  const chunks: ChatCompletionChunk[] | null = turn.threaded ? [] : null;
  try {
    yield sse(stream.start());
    for await (const c of run.chunks) {
      chunks?.push(c);
      yield sse(stream.push(c));
    }
    const end = stream.finish({ stopSequence: run.stopSequence() });
    // Kept before message_stop goes out: a client that read it may continue from this reply at once.
    if (chunks) await keep(turn, fromChatCompletion(aggregate(run.ids, chunks), { thinking, stopSequence: run.stopSequence() }), requestId, logger);
    yield sse(end);
  } catch (e) {
    const { error, unexpected } = asApiError(e, requestId);
    if (unexpected) logger.error("messages stream failed", { request_id: requestId, error: (e as Error).message, stack: (e as Error).stack });
    yield sse(stream.fail(error));
  } finally {
    // Cut short (an error, the client gone): the server holds none of the reply, and the claim ends.
    await turn.release();
    await run.chunks.return(undefined);
  }
}
