import type { Subprocess } from "bun";
import { readFileSync } from "node:fs";
import { selfCommand } from "./cuda-probe";
import type { GrammarJob, GrammarOutcome } from "./grammar-worker";

// The server's side of the grammar worker (grammar-worker.ts): a JSON Schema becomes a grammar in a
// process of its own, bounded in time and memory, so that no schema can crash, stall or bloat the
// server (issue 41). One worker, started on first use and again after it died; messages go one at a
// time. Grammars are cached by their job (agents send the same tools every turn), failures too, so a
// schema that kills the worker kills it once.

export const GRAMMAR_WORKER_ARGS = ["internal", "grammar-worker"];

export interface GrammarCompilerOptions {
  /** The worker's command (tests: another program). */
  command?: string[];
  /** A message's jobs must be done within this, or the worker is killed. */
  deadlineMs?: number;
  /** The worker's resident memory may not pass this while it works, or it is killed. */
  maxRssBytes?: number;
}

interface Pending {
  jobs: GrammarJob[];
  resolve: (r: GrammarOutcome[]) => void;
}

const CACHE_ENTRIES = 512;
const CACHE_BYTES = 64 * 1024 * 1024;

export class GrammarCompiler {
  private child: Worker | null = null;
  private readonly queue: Pending[] = [];
  private busy: { message: Pending; id: number } | null = null;
  private nextId = 1;
  private readonly cache = new Map<string, GrammarOutcome>();
  private cacheBytes = 0;
  /** Worker starts so far (metrics and tests). */
  starts = 0;

  constructor(private readonly o: GrammarCompilerOptions = {}) {}

  /** Each job's grammar, or the 400 that says why there is none. Never throws. */
  async compile(jobs: GrammarJob[]): Promise<GrammarOutcome[]> {
    const keys = jobs.map(cacheKey);
    const out: (GrammarOutcome | undefined)[] = keys.map((k) => this.cached(k));
    const missing = jobs.filter((_, i) => out[i] === undefined);
    if (missing.length) {
      const done = await this.send(missing);
      let m = 0;
      for (let i = 0; i < jobs.length; i++) if (out[i] === undefined) this.remember(keys[i]!, (out[i] = done[m++]!));
    }
    return out as GrammarOutcome[];
  }

  /** Stops the worker (it would stop by itself once this process's end closes its input). */
  close(): void {
    this.child?.proc.kill("SIGKILL");
    this.child = null;
  }

  private send(jobs: GrammarJob[]): Promise<GrammarOutcome[]> {
    return new Promise((resolve) => {
      this.queue.push({ jobs, resolve });
      void this.pump();
    });
  }

  private async pump(): Promise<void> {
    if (this.busy) return;
    const message = this.queue.shift();
    if (!message) return;
    const id = this.nextId++;
    this.busy = { message, id };
    let results: GrammarOutcome[];
    try {
      results = await this.exchange(message.jobs, id);
    } catch (e) {
      const why = (e as Error).message;
      if (message.jobs.length > 1) {
        // which job did it is not known: each goes again alone, so only that one fails
        const parts: GrammarOutcome[] = [];
        let left = message.jobs.length;
        const alone = message.jobs.map((job, i) => ({
          jobs: [job],
          resolve: (r: GrammarOutcome[]) => {
            parts[i] = r[0]!;
            if (--left === 0) message.resolve(parts);
          },
        }));
        this.queue.unshift(...alone);
        this.busy = null;
        void this.pump();
        return;
      }
      const job = message.jobs[0]!;
      results = [{ error: { code: "schema_too_complex", message: `${job.param}: the schema could not be compiled into a grammar: ${why}`, param: job.param } }];
    }
    this.busy = null;
    message.resolve(results);
    void this.pump();
  }

  /** Sends one message and waits for its answer, within the deadline and the memory bound; throws why not. */
  private async exchange(jobs: GrammarJob[], id: number): Promise<GrammarOutcome[]> {
    const { proc: child, lines } = this.start();
    const deadline = this.o.deadlineMs ?? 10_000;
    const maxRss = this.o.maxRssBytes ?? 1024 * 1024 * 1024;
    let killedFor: string | null = null;
    const kill = (why: string) => {
      killedFor ??= why;
      child.kill("SIGKILL");
    };
    const timer = setTimeout(() => kill(`it took longer than ${deadline / 1000} s`), deadline);
    const watch = setInterval(() => {
      const rss = residentBytes(child.pid);
      if (rss > maxRss) kill(`it needed more than ${Math.round(maxRss / 1024 / 1024)} MB`);
    }, 50);
    try {
      child.stdin.write(JSON.stringify({ id, jobs }) + "\n");
      child.stdin.flush();
      // the worker's end, not its pipe's (a pipe a grandchild still holds would never close)
      const exited = child.exited.then(() => null);
      for (;;) {
        const line = await Promise.race([lines.next(), exited]);
        if (line === null) {
          if (this.child?.proc === child) this.child = null;
          await child.exited;
          throw new Error(killedFor ?? `the converter crashed (${child.signalCode ?? `exit ${child.exitCode}`})`);
        }
        const reply = JSON.parse(line) as { id: number; results: GrammarOutcome[] };
        if (reply.id === id) return reply.results;
      }
    } finally {
      clearTimeout(timer);
      clearInterval(watch);
    }
  }

  private start(): Worker {
    const running = this.child;
    if (running && running.proc.exitCode === null && running.proc.signalCode === null) return running;
    const proc = Bun.spawn(this.o.command ?? selfCommand(GRAMMAR_WORKER_ARGS), { stdin: "pipe", stdout: "pipe", stderr: "pipe", env: process.env });
    proc.unref();
    this.starts++;
    void drain(proc.stderr);
    // each worker its own lines: a dead one's end never reaches the next
    this.child = { proc, lines: new Lines(proc.stdout) };
    return this.child;
  }

  private cached(key: string): GrammarOutcome | undefined {
    const hit = this.cache.get(key);
    if (hit) {
      this.cache.delete(key);
      this.cache.set(key, hit);
    }
    return hit;
  }

  private remember(key: string, outcome: GrammarOutcome): void {
    this.cache.set(key, outcome);
    this.cacheBytes += sizeOf(outcome);
    for (const [k, v] of this.cache) {
      if (this.cache.size <= CACHE_ENTRIES && this.cacheBytes <= CACHE_BYTES) break;
      this.cache.delete(k);
      this.cacheBytes -= sizeOf(v);
    }
  }
}

interface Worker {
  proc: Subprocess<"pipe", "pipe", "pipe">;
  lines: Lines;
}

/** A worker's stdout, a line at a time; null once it ends. */
class Lines {
  private readonly ready: (string | null)[] = [];
  private waiting: ((line: string | null) => void) | null = null;

  constructor(stdout: ReadableStream<Uint8Array>) {
    void this.read(stdout);
  }

  next(): Promise<string | null> {
    if (this.ready.length) return Promise.resolve(this.ready.shift()!);
    return new Promise((resolve) => (this.waiting = resolve));
  }

  private deliver(line: string | null): void {
    const waiting = this.waiting;
    this.waiting = null;
    if (waiting) waiting(line);
    else this.ready.push(line);
  }

  private async read(stdout: ReadableStream<Uint8Array>): Promise<void> {
    const decoder = new TextDecoder();
    let rest = "";
    try {
      for await (const chunk of stdout) {
        rest += decoder.decode(chunk, { stream: true });
        let nl;
        while ((nl = rest.indexOf("\n")) >= 0) {
          this.deliver(rest.slice(0, nl));
          rest = rest.slice(nl + 1);
        }
      }
    } catch {
      // the pipe broke: the worker is gone
    }
    this.deliver(null);
  }
}

function sizeOf(o: GrammarOutcome): number {
  return "gbnf" in o ? o.gbnf.length : o.error.message.length;
}

function cacheKey(job: GrammarJob): string {
  return new Bun.CryptoHasher("sha256").update(JSON.stringify(job)).digest("hex");
}

async function drain(stream: ReadableStream<Uint8Array>): Promise<void> {
  try {
    for await (const _ of stream);
  } catch {
    // gone with the worker
  }
}

/** A process's resident memory, from /proc (0 when it cannot be read). */
function residentBytes(pid: number): number {
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
    return m ? Number(m[1]) * 1024 : 0;
  } catch {
    return 0;
  }
}

/** The server's one compiler (every chat engine shares its worker). */
export const grammarCompiler = new GrammarCompiler();
