import type { TSchema } from "@sinclair/typebox";
import { Value } from "@sinclair/typebox/value";
import type { BatchLane, BatchLanes } from "../2-services/batches/lanes";
import { ChatRequest } from "../2-services/chat/request";
import type { ChatService } from "../2-services/chat/service";
import type { CompatSettings } from "../lib/config";
import { DecisionRequest } from "../2-services/decisions/request";
import type { DecisionService } from "../2-services/decisions/service";
import { EmbeddingsRequest } from "../2-services/embeddings/request";
import type { EmbeddingsService } from "../2-services/embeddings/service";
import { RerankRequest } from "../2-services/rerank/request";
import type { RerankService } from "../2-services/rerank/service";
import { toOpenAIErrorBody } from "./http/errors";
import { describeFirstError } from "./http/validation";
import { respond } from "./responses/routes";
import { requestErrors as responsesErrors, type ResponsesRequest } from "./responses/schema";

// The batch worker's lanes (src/2-services/batches/lanes.ts), built at the edge: each endpoint's body check is
// the very schema its live route validates with, worded by the same describer, and its runner the
// service (chat, embeddings, decisions, rerank) or translation (Responses) the live route calls.

type Errors = Parameters<typeof describeFirstError>[0];

const schemaCheck = (schema: TSchema) => (body: unknown) => describeFirstError([...Value.Errors(schema, body)] as unknown as Errors);

export function batchLanes(deps: { chat: ChatService; embeddings: EmbeddingsService; decisions: DecisionService; rerank: RerankService; compat?: CompatSettings }): BatchLanes {
  const chat: BatchLane = {
    firstProblem: schemaCheck(ChatRequest),
    run: (principal, body, call) => deps.chat.complete(principal, body as ChatRequest, { ...call, includeReasoning: (body as ChatRequest).reasoning_format === "deepseek" }),
  };
  const responses: BatchLane = {
    firstProblem: (body) => describeFirstError(responsesErrors(body) as unknown as Errors),
    run: (principal, body, call) => respond(deps.chat, principal, body as ResponsesRequest, { ...call, compat: deps.compat }),
  };
  const embeddings: BatchLane = {
    firstProblem: schemaCheck(EmbeddingsRequest),
    run: (principal, body, call) => deps.embeddings.create(principal, body as EmbeddingsRequest, call),
  };
  const decisions: BatchLane = {
    firstProblem: schemaCheck(DecisionRequest),
    run: (principal, body, call) => deps.decisions.decide(principal, body as DecisionRequest, call),
  };
  const rerank: BatchLane = {
    firstProblem: schemaCheck(RerankRequest),
    run: (principal, body, call) => deps.rerank.rerank(principal, body as RerankRequest, call),
  };
  return { lanes: { "/v1/chat/completions": chat, "/v1/responses": responses, "/v1/embeddings": embeddings, "/v1/decisions": decisions, "/v1/rerank": rerank }, errorBody: toOpenAIErrorBody };
}
