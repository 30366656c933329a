import { expect } from "bun:test";
import { parseTypedSse } from "../../helpers/sse";

// Invariant checks for a Responses event stream (STYLE "Tests"), used on golden transcripts and
// on live streams alike: sequence numbers rise by one from 0; it opens with response.created and
// response.in_progress; exactly one terminal event, last; every item and content part is added
// once and done once, in order; deltas concatenate to the done text / arguments; the terminal
// response's output is exactly the finished items.

const TERMINAL = new Set(["response.completed", "response.incomplete", "response.failed", "error"]);

/** SSE text → the events' data (see test/helpers/sse.ts). */
export function parseSse(text: string): any[] {
  return parseTypedSse(text).map((e) => e.data);
}

interface ItemState {
  id: string;
  type: string;
  done: boolean;
  text: string;
  parts: number;
  partOpen: boolean;
  args: string;
}

export function checkStream(events: any[]): { terminal: any; items: any[] } {
  events.forEach((e, i) => expect(e.sequence_number).toBe(i));
  expect(events[0]?.type).toBe("response.created");
  expect(events[1]?.type).toBe("response.in_progress");
  const id = events[0].response.id;
  expect(events[0].response.status).toBe("in_progress");
  expect(events[0].response.output).toEqual([]);

  const terminals = events.filter((e) => TERMINAL.has(e.type));
  expect(terminals).toHaveLength(1);
  const terminal = terminals[0];
  expect(events.at(-1)).toBe(terminal);

  const items: ItemState[] = [];
  const done: any[] = [];
  const openItem = (e: any): ItemState => {
    const item = items[e.output_index];
    expect(item).toBeDefined();
    expect(item!.done).toBe(false);
    if ("item_id" in e) expect(e.item_id).toBe(item!.id);
    return item!;
  };
  for (const e of events) {
    if (e.response) {
      expect(e.response.id).toBe(id);
      expect(e.response.created_at).toBe(events[0].response.created_at);
    }
    switch (e.type) {
      case "response.output_item.added":
        expect(e.output_index).toBe(items.length);
        expect(e.item.status).toBe("in_progress");
        expect(items.some((i) => i.id === e.item.id)).toBe(false);
        if (items.length) expect(items.at(-1)!.done).toBe(true); // one item open at a time
        items.push({ id: e.item.id, type: e.item.type, done: false, text: "", parts: 0, partOpen: false, args: "" });
        break;
      case "response.content_part.added": {
        const item = openItem(e);
        expect(item.type).toBe("message");
        expect(item.partOpen).toBe(false);
        expect(e.content_index).toBe(item.parts++);
        item.partOpen = true;
        break;
      }
      case "response.output_text.delta": {
        const item = openItem(e);
        expect(item.partOpen).toBe(true);
        item.text += e.delta;
        break;
      }
      case "response.output_text.done":
        expect(e.text).toBe(openItem(e).text);
        break;
      case "response.content_part.done": {
        const item = openItem(e);
        expect(item.partOpen).toBe(true);
        expect(e.part.text).toBe(item.text);
        item.partOpen = false;
        break;
      }
      case "response.function_call_arguments.delta":
        openItem(e).args += e.delta;
        break;
      // A reasoning item's summary: one summary part at a time, its deltas concatenating to its text.
      case "response.reasoning_summary_part.added": {
        const item = openItem(e);
        expect(item.type).toBe("reasoning");
        expect(item.partOpen).toBe(false);
        expect(e.summary_index).toBe(item.parts++);
        expect(e.part).toEqual({ type: "summary_text", text: "" });
        item.partOpen = true;
        break;
      }
      case "response.reasoning_summary_text.delta": {
        const item = openItem(e);
        expect(item.partOpen).toBe(true);
        expect(e.summary_index).toBe(item.parts - 1);
        item.text += e.delta;
        break;
      }
      case "response.reasoning_summary_text.done":
        expect(e.text).toBe(openItem(e).text);
        break;
      case "response.reasoning_summary_part.done": {
        const item = openItem(e);
        expect(item.partOpen).toBe(true);
        expect(e.part).toEqual({ type: "summary_text", text: item.text });
        item.partOpen = false;
        break;
      }
      case "response.function_call_arguments.done":
        expect(e.arguments).toBe(openItem(e).args);
        break;
      case "response.output_item.done": {
        const item = openItem(e);
        expect(e.item.id).toBe(item.id);
        expect(item.partOpen).toBe(false);
        if (item.type === "message") expect(e.item.content.map((p: any) => p.text).join("")).toBe(item.text);
        else if (item.type === "reasoning") expect(e.item.summary.map((p: any) => p.text).join("")).toBe(item.text);
        else expect(e.item.arguments).toBe(item.args);
        expect(["completed", "incomplete"]).toContain(e.item.status);
        item.done = true;
        done.push(e.item);
        break;
      }
    }
  }
  if (terminal.type !== "error") {
    expect(items.every((i) => i.done)).toBe(true);
    expect(terminal.response.output).toEqual(done);
    expect(terminal.response.status).toBe(terminal.type === "response.completed" ? "completed" : "incomplete");
  }
  return { terminal, items: done };
}
