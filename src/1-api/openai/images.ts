import { ImagesRequest } from "../../2-services/images/request";
import type { ImagesService } from "../../2-services/images/service";
import { capabilityRoute } from "../http/capability-route";

// POST /v1/images/generations (spec §2.8): JSON in, JSON out with data[].b64_json PNGs. Text to
// image only: /v1/images/edits and /v1/images/variations are not routes here (404).

export function imagesRoutes(deps: { images: ImagesService }) {
  return capabilityRoute("openai-images", "/v1/images/generations", ImagesRequest, (p, body, opts) => deps.images.generate(p, body, opts));
}
