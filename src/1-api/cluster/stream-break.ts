import { ApiError, toAnthropicErrorBody, toOpenAIErrorBody } from "../http/errors";
import { encodeSse } from "../http/sse";

// A forwarded stream whose serving node broke off (it died, or the link between the nodes did):
// the client gets what it would get had the stream failed here — the error event of the route's
// wire format, after the last whole event it received — and the stream ends. Pure: the bytes of
// that event, from the route and the last event passed on.

export const STREAM_BROKEN = "the node serving this request stopped answering mid-stream; what was not sent is not billed";

/** The error event for `route`'s format; `lastEvent` is the last whole event sent (for the Responses sequence). */
export function streamBreakEvent(route: string, lastEvent: string): string {
  const error = new ApiError("upstream_error", STREAM_BROKEN);
  if (route === "/v1/messages") return encodeSse({ event: "error", data: toAnthropicErrorBody(error) });
  if (route === "/v1/responses") {
    const seq = /"sequence_number":(\d+)/.exec(lastEvent);
    const body = toOpenAIErrorBody(error).error;
    return encodeSse({ event: "error", data: { type: "error", code: body.code, message: body.message, param: body.param, sequence_number: seq ? Number(seq[1]) + 1 : 0 } });
  }
  return encodeSse({ data: toOpenAIErrorBody(error) });
}

/**
 * Splits a byte stream of server-sent events at event boundaries (a blank line), so a break
 * mid-event drops its partial tail rather than handing the client half an event.
 */
export class SseFramer {
  private pending = "";
  private readonly decoder = new TextDecoder();
  last = "";
  /** The whole events completed by `chunk`, as one string ("" when none). */
  push(chunk: Uint8Array): string {
    this.pending += this.decoder.decode(chunk, { stream: true });
    // The nodes' own streams (http/sse.ts) end every event with "\n\n".
    const end = this.pending.lastIndexOf("\n\n");
    if (end < 0) return "";
    const whole = this.pending.slice(0, end + 2);
    this.pending = this.pending.slice(end + 2);
    const events = whole.trimEnd().split("\n\n");
    this.last = events[events.length - 1] ?? this.last;
    return whole;
  }
  /** What is left when the stream ended cleanly (a final event without its blank line). */
  rest(): string {
    return this.pending + this.decoder.decode();
  }
}
