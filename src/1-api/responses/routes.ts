import { Elysia } from "elysia";
import type { LedgerEffect } from "../../4-store/ledger";
import type { Principal } from "../../2-services/accounts/types";
import type { ChatCallOptions, ChatRun, ChatService } from "../../2-services/chat/service";
import { newId } from "../../lib/ids";
import type { Logger } from "../../lib/log";
import { contextOf, principalOf } from "../http/context";
import { ApiError, asApiError, toOpenAIErrorBody } from "../http/errors";
import { sseResponse, type SseEvent } from "../http/sse";
import { validationToApiError } from "../http/validation";
import type { ResponseContext, ResponseObject } from "./from-chat";
import { requestErrors, ResponsesRequest } from "./schema";
import { createResponsesStream, type ResponseEvent, type ResponsesStream } from "./stream";
import { toChatRequest, toResponsesError, type ChatTranslation, type TranslateOptions } from "./to-chat";
import type { CompatSettings } from "../../lib/config";
const translateOptions = (compat: CompatSettings | undefined): TranslateOptions => ({ ignoreHostedTools: compat?.().ignore_hosted_tools === true });

// POST /v1/responses (spec §2.5): translated onto the chat-completions service, answered as one
// response object or as typed SSE events from response.created to the terminal event. Nothing is
// stored (spec §4), so the routes that would read a stored response answer 404.

const ENDPOINT = "/v1/responses";

export function responsesRoutes(chat: ChatService, logger: Logger, compat?: CompatSettings) {
  return new Elysia({ name: "responses" })
    .post(
      ENDPOINT,
      async ({ body, request }) => {
        const rc = contextOf(request);
        const controller = new AbortController();
        request.signal.addEventListener("abort", () => controller.abort(), { once: true });
        const { run, stream, t } = await startResponse(chat, principalOf(request), body, { requestId: rc.id, endpoint: ENDPOINT, signal: controller.signal }, translateOptions(compat));
        if (body.stream !== true) return Response.json(await fold(run, stream, t));
        return sseResponse(toSse(run, stream, t, rc.id, logger), () => controller.abort());
      },
      {
        body: ResponsesRequest,
        // Runs before Elysia validates the body, to name the field inside a union (schema.ts).
        transform({ body }) {
          const errors = requestErrors(body);
          if (errors.length) throw validationToApiError({ all: errors });
        },
      },
    )
    .get(`${ENDPOINT}/:id`, ({ params }) => notStored(params.id))
    .delete(`${ENDPOINT}/:id`, ({ params }) => notStored(params.id))
    .post(`${ENDPOINT}/:id/cancel`, ({ params }) => notStored(params.id))
    .get(`${ENDPOINT}/:id/input_items`, ({ params }) => notStored(params.id));
}

function notStored(id: string): never {
  throw new ApiError(
    "not_found",
    `No response found with id '${id}': this server does not store responses (stateless), so none can be retrieved, deleted, cancelled or listed`,
  );
}

/** Translates and starts a response on the chat service; errors name the Responses fields. */
async function startResponse(chat: ChatService, principal: Principal, body: ResponsesRequest, opts: ChatCallOptions, translate: TranslateOptions) {
  const t = toChatRequest(body, translate);
  let run: ChatRun;
  try {
    run = await chat.start(principal, t.chat, { ...opts, includeReasoning: t.output.reasoning !== null });
  } catch (e) {
    throw toResponsesError(e, t.params);
  }
  return { run, t, stream: createResponsesStream(responseContext(run, t)) };
}

/**
 * A whole (non-streamed) response, as POST /v1/responses answers it, for batch lines: `record`
 * is committed with the charge, in one transaction.
 */
export async function respond(
  chat: ChatService,
  principal: Principal,
  body: ResponsesRequest,
  opts: ChatCallOptions & { record: (r: ResponseObject) => LedgerEffect; compat?: CompatSettings },
): Promise<ResponseObject> {
  const { compat, ...callOpts } = opts;
  const { run, stream, t } = await startResponse(chat, principal, { ...body, stream: false }, { ...callOpts, settleLater: true }, translateOptions(compat));
  try {
    const response = await fold(run, stream, t);
    await run.settle(opts.record(response));
    return response;
  } finally {
    await run.release();
  }
}

/** Ids and created_at fixed once for the whole request (STYLE): item ids are minted once each. */
function responseContext(run: ChatRun, t: ChatTranslation): ResponseContext {
  const items = new Map<string, string>();
  return {
    id: newId("resp_"),
    createdAt: run.ids.created,
    model: run.ids.model,
    echo: t.echo,
    output: t.output,
    itemId(kind, index) {
      const key = `${kind}${index}`;
      let id = items.get(key);
      if (!id) items.set(key, (id = newId(`${kind}_`)));
      return id;
    },
  };
}

/** The non-streamed answer: the very same fold of the chunks, keeping only the final object. */
async function fold(run: ChatRun, stream: ResponsesStream, t: ChatTranslation): Promise<ResponseObject> {
  stream.start();
  try {
    for await (const c of run.chunks) stream.push(c);
  } catch (e) {
    throw toResponsesError(e, t.params);
  }
  stream.finish();
  return stream.result();
}

async function* toSse(run: ChatRun, stream: ResponsesStream, t: ChatTranslation, requestId: string, logger: Logger): AsyncGenerator<SseEvent[], void, void> {
  const sse = (events: ResponseEvent[]): SseEvent[] => events.map((e) => ({ event: e.type, data: e }));
  try {
    yield sse(stream.start());
    for await (const c of run.chunks) yield sse(stream.push(c));
    yield sse(stream.finish());
  } catch (e) {
    const { error, unexpected } = asApiError(toResponsesError(e, t.params), requestId);
    if (unexpected) logger.error("responses stream failed", { request_id: requestId, error: (e as Error).message, stack: (e as Error).stack });
    yield sse(stream.fail(toOpenAIErrorBody(error).error));
  } finally {
    await run.chunks.return(undefined);
  }
}
