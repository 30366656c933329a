import { expect, test } from "bun:test";
import { encodeSse, sseResponse } from "../../../src/1-api/http/sse";

test("events are encoded as data lines ending in a blank line", () => {
  expect(encodeSse({ data: { a: 1 } })).toBe('data: {"a":1}\n\n');
  expect(encodeSse({ event: "message_start", data: "x" })).toBe("event: message_start\ndata: x\n\n");
  expect(encodeSse({ data: "[DONE]" })).toBe("data: [DONE]\n\n");
  expect(encodeSse({ data: "two\nlines" })).toBe("data: two\ndata: lines\n\n");
});

test("a newline in an event name or id is refused", () => {
  expect(() => encodeSse({ event: "a\nb", data: 1 })).toThrow();
  expect(() => encodeSse({ id: "1\r", data: 1 })).toThrow();
});

test("a cancelled response runs the generator's finally and the cancel hook", async () => {
  let cleaned = false;
  let cancelled = false;
  async function* events() {
    try {
      yield { data: 1 };
      yield { data: 2 };
      await new Promise(() => {}); // would hang forever
    } finally {
      cleaned = true;
    }
  }
  const res = sseResponse(events(), () => (cancelled = true));
  expect(res.headers.get("content-type")).toBe("text/event-stream; charset=utf-8");
  const reader = res.body!.getReader();
  await reader.read();
  await reader.cancel();
  expect(cancelled).toBe(true);
  expect(cleaned).toBe(true);
});
