import { ApiError, type ErrorCode } from "../../lib/errors";
import type { JsonSchema } from "../chat-job";
import { toGbnf, toToolGbnf } from "./json-schema";

// The grammar worker: a process of its own (`appliance internal grammar-worker`) where JSON Schemas
// become grammars through llama.cpp's converter and parser, so that whatever a schema does to them
// — recurse until the stack gives out, allocate gigabytes, run for minutes — costs this process,
// never the server's (issue 41: a 70-byte schema killed the server with SIGSEGV; grammar-compiler.ts
// bounds this process's time and memory and starts another). One JSON message a line each way:
//   in:  {"id": 1, "jobs": [GrammarJob, …]}
//   out: {"id": 1, "results": [GrammarOutcome, …]}

export type GrammarJob =
  /** A response_format's answer: its schema, or null for any JSON object (json_object). */
  | { kind: "answer"; schema: JsonSchema | null; param: string }
  /** A tool's arguments (json-schema.ts toToolGbnf). */
  | { kind: "tool"; parameters?: JsonSchema; strict: boolean; param: string };

export type GrammarOutcome = { gbnf: string } | { error: { code: ErrorCode; message: string; param: string | null } };

/** One job, as the worker runs it: a grammar, or the 400 that says why not. */
export function compileJob(job: GrammarJob): GrammarOutcome {
  try {
    if (job.kind === "tool") return { gbnf: toToolGbnf(job.parameters, job.strict, job.param) };
    return { gbnf: job.schema ? toGbnf(job.schema, job.param) : toGbnf({ type: "object" }, job.param, true) };
  } catch (e) {
    if (e instanceof ApiError) return { error: { code: e.code, message: e.message, param: e.param } };
    return { error: { code: "unsupported_schema", message: `${job.param}: the schema could not be compiled into a grammar (${(e as Error).message})`, param: job.param } };
  }
}

/** The worker's loop: reads messages from stdin until it closes (the server went away). */
export async function runGrammarWorker(): Promise<number> {
  const decoder = new TextDecoder();
  let rest = "";
  for await (const chunk of Bun.stdin.stream()) {
    rest += decoder.decode(chunk, { stream: true });
    let nl;
    while ((nl = rest.indexOf("\n")) >= 0) {
      const line = rest.slice(0, nl);
      rest = rest.slice(nl + 1);
      if (!line.trim()) continue;
      const { id, jobs } = JSON.parse(line) as { id: number; jobs: GrammarJob[] };
      process.stdout.write(JSON.stringify({ id, results: jobs.map(compileJob) }) + "\n");
    }
  }
  return 0;
}
