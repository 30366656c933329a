import type { Principal } from "../accounts/types";
import { asApiError, ERROR_TABLE } from "../../lib/errors";
import type { Clock } from "../../lib/clock";
import type { Logger } from "../../lib/log";
import type { BatchRow, BatchStore, LineRow } from "../../4-store/batches";
import { LineEnded, type LedgerEffect } from "../../4-store/ledger";
import { isBatchEndpoint } from "./endpoints";
import type { BatchLanes } from "./lanes";

// One batch line through the same service a live request uses, its lane (lanes.ts; STYLE: vLLM's
// run_batch runs lines through the handlers that serve HTTP). A completed line's result is committed in the
// transaction that charges it; a failed line is recorded with nothing charged (spec §7 rule 2).

export interface LineDeps {
  /** Where a failure is recorded (only if the line is still pending). */
  repo: Pick<BatchStore, "fail">;
  /** Each endpoint's runner and the error body's format, given by the edge (lanes.ts). */
  lanes: BatchLanes;
  clock: Clock;
  logger: Logger;
}

/** The ids a line's result carries: stable, so a retried line writes the same ones. */
export function lineIds(batchId: string, line: number) {
  const tag = `${batchId.replace(/^batch_/, "")}_${line}`;
  return { id: `batch_req_${tag}`, requestId: `req_${tag}` };
}


/** Runs a claimed line; "aborted" when `signal` stopped it (the line stays to be run again: its claimer hands it back). */
export async function runLine(deps: LineDeps, batch: BatchRow, line: LineRow, principal: Principal, signal: AbortSignal): Promise<"done" | "aborted"> {
  const { id, requestId } = lineIds(batch.id, line.line);
  // The result commits with the charge; a line that had already ended another way (failed as
  // crashed, cancelled) gates the charge off, and the settlement rejects with LineEnded.
  const record = (body: unknown): LedgerEffect => {
    const result = { id, custom_id: line.custom_id, response: { status_code: 200, request_id: requestId, body }, error: null };
    return { kind: "batch_line", batchId: batch.id, line: line.line, result: JSON.stringify(result), at: deps.clock.now() };
  };
  const body = JSON.parse(line.body);
  try {
    if (!isBatchEndpoint(batch.endpoint)) throw new Error(`batch endpoint ${batch.endpoint} has no runner`);
    await deps.lanes.lanes[batch.endpoint].run(principal, body, { requestId, endpoint: batch.endpoint, batch: true, signal, record });
    return "done";
  } catch (e) {
    if (e instanceof LineEnded) {
      // one result per line, and a line is charged with its result or not at all
      deps.logger.warn("batch line ended elsewhere while it ran; its answer is dropped, uncharged", { batch: batch.id, line: line.line });
      return "done";
    }
    if (signal.aborted) return "aborted";
    const { error, unexpected } = asApiError(e, requestId);
    if (unexpected) deps.logger.error("batch line failed", { batch: batch.id, line: line.line, error: (e as Error).message, stack: (e as Error).stack });
    const result = {
      id,
      custom_id: line.custom_id,
      response: { status_code: error.status, request_id: requestId, body: deps.lanes.errorBody(error) },
      error: { code: ERROR_TABLE[error.code].openaiCode ?? error.code, message: error.message },
    };
    if (!(await deps.repo.fail(batch.id, line.line, JSON.stringify(result), deps.clock.now())))
      deps.logger.warn("batch line ended elsewhere while it ran; its failure is not recorded", { batch: batch.id, line: line.line });
    return "done";
  }
}

/** The error-file line of a line that never ran (cancelled, expired). */
export function unrunResult(batchId: string, line: Pick<LineRow, "line" | "custom_id">, code: "batch_cancelled" | "batch_expired", message: string): string {
  return JSON.stringify({ id: lineIds(batchId, line.line).id, custom_id: line.custom_id, response: null, error: { code, message } });
}

/** The error-file line of a line the server stopped while running, MAX_STARTS times (issue 41 C2). */
export function crashedResult(batchId: string, line: Pick<LineRow, "line" | "custom_id" | "starts">): string {
  const message = `the server stopped while running this request ${line.starts === 2 ? "twice" : `${line.starts} times`} (it crashed or was killed); it is not run again, and nothing was charged for it`;
  return JSON.stringify({ id: lineIds(batchId, line.line).id, custom_id: line.custom_id, response: null, error: { code: "batch_line_crashed", message } });
}
