import { expect } from "bun:test";

export interface TypedEvent {
  event: string;
  data: any;
}

/**
 * SSE text of a typed stream (Responses, Messages) → events. Every event must be exactly one
 * `event:` line and one `data:` line, and the event name must equal its data's `type`.
 */
export function parseTypedSse(text: string): TypedEvent[] {
  expect(text.endsWith("\n\n")).toBe(true);
  return text
    .slice(0, -2)
    .split("\n\n")
    .map((raw) => {
      const lines = raw.split("\n");
      expect(lines).toHaveLength(2);
      expect(lines[0]!.startsWith("event: ")).toBe(true);
      expect(lines[1]!.startsWith("data: ")).toBe(true);
      const event = lines[0]!.slice(7);
      const data = JSON.parse(lines[1]!.slice(6));
      expect(data.type).toBe(event);
      return { event, data };
    });
}

/** The rest of a response body a test has been reading chunk by chunk, as text. */
export async function readRest(reader: ReadableStreamDefaultReader<Uint8Array>): Promise<string> {
  const decoder = new TextDecoder();
  let text = "";
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return text + decoder.decode();
    text += decoder.decode(value, { stream: true });
  }
}
