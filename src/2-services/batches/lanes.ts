import type { Principal } from "../accounts/types";
import type { ApiError } from "../../lib/errors";
import type { LedgerEffect } from "../../4-store/ledger";
import type { BatchEndpoint } from "./endpoints";

// What the edge gives the batch worker for each endpoint a batch may target (issue 43: layers point
// down, so the worker imports no route): the live route's own check of a body, worded as its 400,
// and its runner — the same service and translation a live request takes (STYLE: vLLM's run_batch
// runs lines through the handlers that serve HTTP). src/1-api/batch-lanes.ts builds them; createApp
// hands them over before the worker starts.

export interface LineCall {
  requestId: string;
  endpoint: string;
  batch: true;
  signal: AbortSignal;
  /** The line's answer as what commits with its charge, in one transaction (a batch line effect). */
  record: (body: unknown) => LedgerEffect;
}

export interface BatchLane {
  /** The body's first problem, as the live route's 400 words it (`param` is the field), or null. */
  firstProblem(body: unknown): { message: string; param: string | null } | null;
  /** Runs one line's body as the live route would; throws an ApiError as the route would answer it. */
  run(principal: Principal, body: unknown, call: LineCall): Promise<unknown>;
}

export interface BatchLanes {
  lanes: Record<BatchEndpoint, BatchLane>;
  /** A failed line's response body, in the batch file's wire format. */
  errorBody(error: ApiError): unknown;
}
