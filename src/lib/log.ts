// Structured logs: one JSON object per line on stdout.

export type Level = "debug" | "info" | "warn" | "error";
const RANK: Record<Level, number> = { debug: 10, info: 20, warn: 30, error: 40 };

export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
  flush(): void;
}

export function createLogger(opts: { level?: Level; write?: (line: string) => void; flush?: () => void } = {}): Logger {
  const min = RANK[opts.level ?? "info"];
  const write = opts.write ?? stdoutWriter();
  const log = (level: Level) => (msg: string, fields: Record<string, unknown> = {}) => {
    if (RANK[level] < min) return;
    write(JSON.stringify({ ts: new Date().toISOString(), level, msg, ...fields }) + "\n");
  };
  return { debug: log("debug"), info: log("info"), warn: log("warn"), error: log("error"), flush: opts.flush ?? (() => {}) };
}

/** Buffered stdout: a request log line must not cost a syscall. Flushed every 100 ms and at exit. */
function stdoutWriter(): (line: string) => void {
  const sink = Bun.stdout.writer({ highWaterMark: 64 * 1024 });
  const timer = setInterval(() => sink.flush(), 100);
  timer.unref();
  process.on("exit", () => sink.flush());
  return (line) => void sink.write(line);
}

/** A logger that keeps its lines, for tests. */
export function memoryLogger(): Logger & { lines: Record<string, any>[] } {
  const lines: Record<string, any>[] = [];
  const logger = createLogger({ level: "debug", write: (l) => lines.push(JSON.parse(l)) });
  return Object.assign(logger, { lines });
}
