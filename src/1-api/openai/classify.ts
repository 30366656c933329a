import { ClassifyRequest } from "../../2-services/classify/request";
import type { ClassifyService } from "../../2-services/classify/service";
import { capabilityRoute } from "../http/capability-route";

// POST /v1/classify (spec §2.7): premise/hypothesis pairs or raw strings → three-class NLI.
// The request schema is src/2-services/classify/request.ts.

export function classifyRoutes(deps: { classify: ClassifyService }) {
  return capabilityRoute("classify", "/v1/classify", ClassifyRequest, (p, body, opts) => deps.classify.classify(p, body, opts));
}
