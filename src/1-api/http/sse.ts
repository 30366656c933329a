// The one place server-sent events are encoded (STYLE "Translation is pure": translators yield
// typed objects; this turns them into bytes).

const encoder = new TextEncoder();

export interface SseEvent {
  event?: string;
  id?: string;
  /** Serialised as JSON unless it is already a string (e.g. "[DONE]"). */
  data: unknown;
}

export function encodeSse(e: SseEvent): string {
  let out = "";
  if (e.event !== undefined) out += `event: ${singleLine(e.event, "event")}\n`;
  if (e.id !== undefined) out += `id: ${singleLine(e.id, "id")}\n`;
  const data = typeof e.data === "string" ? e.data : JSON.stringify(e.data);
  // JSON.stringify never emits a raw newline; a plain string is split into data lines.
  for (const line of data.split("\n")) out += `data: ${line}\n`;
  return out + "\n";
}

function singleLine(value: string, field: string): string {
  if (/[\r\n]/.test(value)) throw new Error(`SSE ${field} must not contain a newline`);
  return value;
}

export const SSE_HEADERS = {
  "content-type": "text/event-stream; charset=utf-8",
  "cache-control": "no-cache",
  connection: "keep-alive",
  "x-accel-buffering": "no",
} as const;

/** The end of each body sseResponse made (closed, failed or cancelled), for InFlight to follow without re-wrapping it. */
const ends = new WeakMap<ReadableStream, Promise<void>>();

/** When a body that sseResponse made has ended, or undefined for another body. */
export function sseBodyEnd(body: ReadableStream): Promise<void> | undefined {
  return ends.get(body);
}

/**
 * A streaming response from an async iterator of events. A yielded array (the events one chunk of
 * generation produced) is written at once, in one piece: on a socket, separate small writes of
 * one moment cost the client a millisecond or more. `onCancel` runs when the client goes away
 * before the end (the generator's `return` is also called, so its `finally` blocks run).
 */
export function sseResponse(events: AsyncGenerator<SseEvent | SseEvent[], void, void>, onCancel?: () => void): Response {
  let ended!: () => void;
  const end = new Promise<void>((resolve) => (ended = resolve));
  const body = new ReadableStream<Uint8Array>({
    async pull(controller) {
      try {
        let next = await events.next();
        // Skip empty batches (a chunk that produced no event) rather than writing nothing.
        while (!next.done && Array.isArray(next.value) && next.value.length === 0) next = await events.next();
        const { value, done } = next;
        if (done) {
          controller.close();
          ended();
        } else controller.enqueue(encoder.encode(Array.isArray(value) ? value.map(encodeSse).join("") : encodeSse(value)));
      } catch (e) {
        controller.error(e);
        ended();
      }
    },
    async cancel() {
      // the client is gone: the response has ended, whenever the generator lets go
      ended();
      onCancel?.();
      await events.return(undefined);
    },
  });
  ends.set(body, end);
  return new Response(body, { status: 200, headers: SSE_HEADERS });
}
