import { Elysia } from "elysia";
import type { AppDeps } from "../../services";

// Placeholder while /v1/images/generations is being written (issue 5); replaced in full.
export function imagesRoutes(_deps: AppDeps) {
  return new Elysia({ name: "openai-images" });
}
