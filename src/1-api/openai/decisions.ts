import { DecisionRequest } from "../../2-services/decisions/request";
import type { DecisionService } from "../../2-services/decisions/service";
import { capabilityRoute } from "../http/capability-route";

// POST /v1/decisions (issue 47): typed questions about an input, answered by a chat model's own
// probabilities. The request schema is src/2-services/decisions/request.ts.

export function decisionRoutes(deps: { decisions: DecisionService }) {
  return capabilityRoute("decisions", "/v1/decisions", DecisionRequest, (p, body, opts) => deps.decisions.decide(p, body, opts));
}
