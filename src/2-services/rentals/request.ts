import { ApiError } from "../../lib/errors";

// POST /api/v1/rentals (spec §2.3): what a client may send, and the request it becomes.

/** The body as sent: anything, checked by `validateRental`. */
export interface CreateRental {
  node_id?: unknown;
  type?: unknown;
  hours?: unknown;
}

export interface RentalRequest {
  node_id: string;
  type: "jupyter";
  /** Auto-stop after this many hours; null: until stopped. */
  hours: number | null;
}

/** The body as a request, or the 400 naming the field that is wrong. */
export function validateRental(body: CreateRental, maxHours: number): RentalRequest {
  if (typeof body !== "object" || body === null) throw new ApiError("invalid_request", "the body must be a JSON object");
  if (typeof body.node_id !== "string" || body.node_id === "") throw new ApiError("invalid_request", "node_id is required (a node's UUID from GET /api/v1/gpus)", { param: "node_id" });
  if (body.type !== "jupyter") throw new ApiError("invalid_request", `type must be "jupyter"${body.type === undefined ? "" : ` (got ${JSON.stringify(body.type)})`}`, { param: "type" });
  let hours: number | null = null;
  if (body.hours !== undefined && body.hours !== null) {
    if (typeof body.hours !== "number" || !Number.isFinite(body.hours) || body.hours <= 0 || body.hours > maxHours)
      throw new ApiError("invalid_request", `hours must be a number > 0 and ≤ ${maxHours}`, { param: "hours" });
    hours = body.hours;
  }
  return { node_id: body.node_id, type: "jupyter", hours };
}
