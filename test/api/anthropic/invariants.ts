import { expect } from "bun:test";
import { parseTypedSse, type TypedEvent } from "../../helpers/sse";

// Invariants of a Messages event stream (spec §6, STYLE "Tests"), checked on golden transcripts
// and on live streams: one message_start first; every content block opened, filled and closed
// exactly once with consecutive indexes and deltas of its own kind; a thinking block's signature
// just before it stops; one message_delta and one message_stop at the end — or one error event,
// last. Also a fold of the events into the message, as a client rebuilds it.

export type Sse = TypedEvent;

/** SSE text → events (see test/helpers/sse.ts). */
export const parseSse = parseTypedSse;

const DELTA_OF: Record<string, string[]> = {
  text: ["text_delta"],
  thinking: ["thinking_delta", "signature_delta"],
  tool_use: ["input_json_delta"],
};

export function checkMessagesStream(events: Sse[]): void {
  const types = events.map((e) => e.event);
  expect(types[0]).toBe("message_start");
  expect(types.filter((t) => t === "message_start")).toHaveLength(1);
  const failed = types.includes("error");
  if (failed) {
    expect(types.filter((t) => t === "error")).toHaveLength(1);
    expect(types.at(-1)).toBe("error");
    expect(types).not.toContain("message_delta");
    expect(types).not.toContain("message_stop");
  } else {
    expect(types.filter((t) => t === "message_delta")).toHaveLength(1);
    expect(types.filter((t) => t === "message_stop")).toHaveLength(1);
    expect(types.slice(-2)).toEqual(["message_delta", "message_stop"]);
  }

  const start = events[0]!.data.message;
  expect(start.content).toEqual([]);
  expect(start.stop_reason).toBeNull();
  expect(start.id).toMatch(/^msg_/);

  const blocks: { type: string; json: string; stopped: boolean; signed: number }[] = [];
  let open: number | null = null;
  let lastWasSignature = false;
  const stopReason = events.find((e) => e.event === "message_delta")?.data.delta.stop_reason;
  for (const { event, data } of events.slice(1)) {
    if (event === "content_block_start") {
      expect(open).toBeNull(); // blocks never interleave
      expect(data.index).toBe(blocks.length); // 0, 1, 2, … in order
      blocks.push({ type: data.content_block.type, json: "", stopped: false, signed: 0 });
      open = data.index;
    } else if (event === "content_block_delta") {
      expect(data.index).toBe(open!);
      const b = blocks[data.index]!;
      expect(DELTA_OF[b.type]).toContain(data.delta.type);
      expect(b.signed).toBe(0); // nothing follows the signature
      if (data.delta.type === "signature_delta") b.signed++;
      if (data.delta.type === "input_json_delta") b.json += data.delta.partial_json;
    } else if (event === "content_block_stop") {
      expect(data.index).toBe(open!);
      const b = blocks[data.index]!;
      expect(b.stopped).toBe(false);
      if (b.type === "thinking") expect(lastWasSignature).toBe(true);
      b.stopped = true;
      open = null;
    } else if (event === "message_delta" || event === "message_stop") {
      expect(open).toBeNull(); // every block closed before the message ends
    }
    lastWasSignature = event === "content_block_delta" && data.delta.type === "signature_delta";
  }
  if (failed) return;
  blocks.forEach((b, i) => {
    expect(b.stopped).toBe(true);
    if (b.type === "thinking") expect(b.signed).toBe(1);
    // Tool input deltas concatenate to JSON, except a call cut by max_tokens (the last block).
    if (b.type === "tool_use" && !(stopReason === "max_tokens" && i === blocks.length - 1)) expect(() => JSON.parse(b.json)).not.toThrow();
  });
}

/** The message a client rebuilds from a complete stream (tool input parsed; cut input is {}). */
export function foldMessagesStream(events: Sse[]): any {
  const message = structuredClone(events[0]!.data.message);
  const json: string[] = [];
  for (const { event, data } of events.slice(1)) {
    if (event === "content_block_start") message.content[data.index] = structuredClone(data.content_block);
    else if (event === "content_block_delta") {
      const b = message.content[data.index];
      const d = data.delta;
      if (d.type === "text_delta") b.text += d.text;
      else if (d.type === "thinking_delta") b.thinking += d.thinking;
      else if (d.type === "signature_delta") b.signature = d.signature;
      else if (d.type === "input_json_delta") json[data.index] = (json[data.index] ?? "") + d.partial_json;
    } else if (event === "content_block_stop") {
      const b = message.content[data.index];
      if (b.type === "tool_use") {
        try {
          b.input = JSON.parse(json[data.index] ?? "{}");
        } catch {
          b.input = {};
        }
      }
    } else if (event === "message_delta") {
      Object.assign(message, data.delta);
      Object.assign(message.usage, data.usage);
    }
  }
  return message;
}
