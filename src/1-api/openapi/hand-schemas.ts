import { Type as T } from "@sinclair/typebox";
import { ERROR_TABLE } from "../http/errors";

// Schemas for what some routes read and check by hand instead of through an Elysia `body` /
// `query` hook: these describe the checks, they do not perform them. Each names the function that
// validates; test/api/openapi.test.ts sends each one's minimal example and its "required field
// missing" twin through the app, so a check that drifts from its description fails there.

/** POST /v1/files — read part by part as it streams to disk: receiveUpload() in src/2-services/files/service.ts. */
export const FileUploadForm = T.Object({
  file: T.String({ contentMediaType: "application/octet-stream", description: "The JSONL file, at most 50 MB; one `file` part per upload." }),
  purpose: T.Literal("batch", { description: "Only `batch` is accepted." }),
});

/** POST /api/v1/rentals — validateRental() in src/2-services/rentals/request.ts. */
export const CreateRentalRequest = T.Object({
  node_id: T.String({ minLength: 1, description: "A node's id from GET /api/v1/gpus." }),
  type: T.Literal("jupyter", { description: "A JupyterLab rental (the only type)." }),
  hours: T.Optional(
    T.Union([T.Number({ exclusiveMinimum: 0 }), T.Null()], {
      description: "Auto-stop after this many hours, at most `rentals.max_hours` (720 unless configured); absent or null: runs until stopped.",
    }),
  ),
});

/** POST /console/api/login — signIn() in src/2-services/console/auth.ts. */
export const ConsoleLoginRequest = T.Object({
  account: T.String({ minLength: 1, maxLength: 64 }),
  password: T.String({ minLength: 1, maxLength: 1024 }),
});

/** POST /console/api/keys — createKey() in src/2-services/console/views.ts. */
export const ConsoleCreateKeyRequest = T.Object({
  kind: T.Union([T.Literal("free"), T.Literal("premium")], { description: "An account has at most one free key, ever." }),
  name: T.Optional(T.String({ maxLength: 64 })),
  rental: T.Optional(T.Boolean({ description: "true: the key also gets the rental scope." })),
});

/** PATCH /console/api/keys/{id} — updateKey() in src/2-services/console/views.ts (caps: checkCap() in src/2-services/accounts/service.ts). */
export const ConsoleUpdateKeyRequest = T.Object({
  rental: T.Optional(T.Boolean({ description: "Grants or removes the rental scope." })),
  max_active_rentals: T.Optional(T.Integer({ minimum: 0, maximum: 1_000_000 })),
});

/** POST /console/api/admin/accounts/{name}/credit — admin.credit() in src/2-services/console/views.ts. */
export const ConsoleCreditRequest = T.Object({
  usd: T.Number({ exclusiveMinimum: 0, maximum: 1_000_000, description: "Dollars added to the balance." }),
});

/** GET /console/api/usage — the query is read by the route, checked by usage() in src/2-services/console/views.ts. */
export const ConsoleUsageQuery = T.Object({
  days: T.Optional(T.Integer({ minimum: 1, maximum: 366, default: 30 })),
});

// The two error envelopes, with the closed lists of `type` and `code` taken from ERROR_TABLE
// (toOpenAIErrorBody / toAnthropicErrorBody in src/1-api/http/errors.ts render them).

const rows = Object.values(ERROR_TABLE);
const literals = (values: string[]) => [...new Set(values)].sort().map((v) => T.Literal(v));

export const OpenAIErrorBody = T.Object({
  error: T.Object({
    message: T.String(),
    type: T.Union(literals(rows.map((r) => r.openaiType))),
    param: T.Union([T.String(), T.Null()], { description: "The field at fault, e.g. `messages[0].role`." }),
    code: T.Union([...literals(rows.flatMap((r) => (r.openaiCode === null ? [] : [r.openaiCode]))), T.Null()], {
      description: "A string or null, never a number.",
    }),
  }),
});

export const AnthropicErrorBody = T.Object({
  type: T.Literal("error"),
  error: T.Object({
    type: T.Union(literals(rows.map((r) => r.anthropicType))),
    message: T.String(),
    details: T.Optional(
      T.Object(
        { error_code: T.String({ description: "What the Anthropic SDK recovers by, e.g. `thread_not_found` (message threads)." }) },
        { additionalProperties: true },
      ),
    ),
  }),
});
