import { ClassifyRequest } from "../../classify/request";
import type { AppDeps } from "../../services";
import { capabilityRoute } from "../http/capability-route";

// POST /v1/classify (spec §2.7): premise/hypothesis pairs or raw strings → three-class NLI.
// The request schema is src/classify/request.ts.

export function classifyRoutes(deps: AppDeps) {
  return capabilityRoute("classify", "/v1/classify", ClassifyRequest, (p, body, opts) => deps.classify.classify(p, body, opts));
}
