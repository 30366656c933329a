import type { TSchema } from "@sinclair/typebox";
import { TypeCompiler, type TypeCheck } from "@sinclair/typebox/compiler";
import { Value } from "@sinclair/typebox/value";
import { firstErrors, validationToApiError } from "./validation";
import type { ApiError } from "./errors";

// Elysia validates bodies and decides what is valid. But when a body fails, Elysia's
// ValidationError interpolates the rejected value into its message ("…but found: ${value}"),
// which throws a TypeError — a 500 — for a value such as {"toString": 1}. The route's error then
// arrives as that TypeError: this names the field from the route's own schema instead.

type RouteLike = { method: string; path: string; hooks?: { body?: unknown } };

/** `(method, route, body)` → the 400 for a body the route's schema rejects, or null. */
export function bodyErrorOf(routes: readonly RouteLike[]) {
  const checks = new Map<string, { schema: TSchema; check: TypeCheck<TSchema> } | null>();
  return (method: string, route: string, body: unknown): ApiError | null => {
    const key = `${method} ${route}`;
    let entry = checks.get(key);
    if (entry === undefined) {
      const schema = routes.find((r) => r.method === method && r.path === route)?.hooks?.body;
      entry = schema && typeof schema === "object" ? { schema: schema as TSchema, check: TypeCompiler.Compile(schema as TSchema) } : null;
      checks.set(key, entry);
    }
    if (!entry || body === undefined) return null;
    // As Elysia does before its check: fields a closed object does not declare are dropped.
    let value: unknown;
    try {
      value = Value.Clean(entry.schema, structuredClone(body));
    } catch {
      value = body;
    }
    if (entry.check.Check(value)) return null;
    return validationToApiError({ all: firstErrors(entry.check, value) });
  };
}
