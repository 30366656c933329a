import { Elysia } from "elysia";
import type { AppDeps } from "../../services";

// Placeholder while /v1/classify is being written (issue 5); replaced in full.
export function classifyRoutes(_deps: AppDeps) {
  return new Elysia({ name: "classify" });
}
