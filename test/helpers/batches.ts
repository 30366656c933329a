import type OpenAI from "openai";
import { toFile } from "openai";

export type Line = { custom_id: string; method?: string; url: string; body: unknown };

/** Uploads lines (objects, or raw text) as a batch input file; returns the file id. */
export async function uploadLines(client: OpenAI, lines: Line[] | string): Promise<string> {
  const text = typeof lines === "string" ? lines : lines.map((l) => JSON.stringify({ method: "POST", ...l })).join("\n") + "\n";
  return (await client.files.create({ file: await toFile(Buffer.from(text), "input.jsonl"), purpose: "batch" })).id;
}

const TERMINAL = new Set(["completed", "failed", "expired", "cancelled"]);

/** Polls until the batch reaches `until` (default: any terminal status). */
export async function waitForBatch(client: OpenAI, id: string, until: (b: OpenAI.Batch) => boolean = (b) => TERMINAL.has(b.status), timeoutMs = 60_000) {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const b = await client.batches.retrieve(id);
    if (until(b)) return b;
    if (Date.now() > end) throw new Error(`batch ${id} still ${b.status} after ${timeoutMs} ms: ${JSON.stringify(b.request_counts)}`);
    await Bun.sleep(50);
  }
}

/** The JSONL lines of a file, parsed. */
export async function fileLines(client: OpenAI, id: string | null | undefined): Promise<any[]> {
  if (!id) return [];
  const text = await (await client.files.content(id)).text();
  return text.split("\n").filter(Boolean).map((l) => JSON.parse(l));
}
