import type { FuzzCase } from "./cases";
import { checkAnswer, expectedEnvelope, type Problem } from "./check";
import { documentedTypes } from "./operations";
import type { FuzzTarget } from "./target";

// Sends the cases, checks every answer, and keeps what a developer needs to reproduce a failure:
// the request as sent (method, path, headers, body), the answer, and what the server logged.

export interface CaseResult {
  c: FuzzCase;
  /** 0 when no answer came (timeout, or a request that could not be built). */
  status: number;
  ms: number;
  problems: Problem[];
  requestId: string | null;
  headers: Record<string, string>;
  /** The server's error log lines for this request (message and stack). */
  logged: Record<string, any>[];
}

export interface FuzzReport {
  results: CaseResult[];
  statuses: Record<string, number>;
  failures: CaseResult[];
  /** Cases that could not be sent (the client refused to build them): not the server's doing. */
  unsendable: number;
  healthMs: number[];
  /** /health sent 5 ms into each costly request (deep nesting, large bodies), timed from when it was due. */
  healthBesideMs: number[];
  finalHealthMs: number;
  finalHealthStatus: number;
  durationMs: number;
}

export interface RunOptions {
  /** Per-request limit: a request not answered (body included) by then is a failure. */
  timeoutMs?: number;
  concurrency?: number;
  /** GET /health after every this many cases (its latency is reported). */
  healthEvery?: number;
  onResult?: (r: CaseResult, done: number) => void;
}

/** The headers a case is sent with: its credentials as the run holds them, then its own. */
export function headersOf(t: FuzzTarget, c: FuzzCase): Record<string, string> {
  const h: Record<string, string> = {};
  if (c.auth === "key") {
    // Anthropic clients send x-api-key (and anthropic-version) on the Messages endpoints: a third of those cases do.
    if (c.path.startsWith("/v1/messages") && c.n % 3 === 0) Object.assign(h, { "x-api-key": t.key, "anthropic-version": "2023-06-01" });
    else h.authorization = `Bearer ${t.key}`;
  }
  if (c.path.startsWith("/console")) h.origin = t.base;
  if (c.auth === "session" || c.auth === "session-no-csrf") {
    h.cookie = t.session.cookie;
    if (c.auth === "session" && c.method !== "GET") h["x-csrf-token"] = t.session.csrf;
  }
  for (const [k, v] of Object.entries(c.headers)) h[k.toLowerCase()] = v;
  return h;
}

async function sendOne(t: FuzzTarget, c: FuzzCase, timeoutMs: number): Promise<CaseResult> {
  const headers = headersOf(t, c);
  const base = { c, headers, logged: [] as Record<string, any>[] };
  let req: Request;
  try {
    req = new Request(t.base + c.path, { method: c.method, headers, body: c.body, signal: AbortSignal.timeout(timeoutMs) });
  } catch (e) {
    return { ...base, status: -1, ms: 0, problems: [], requestId: null, logged: [{ unsendable: String(e) }] };
  }
  const started = performance.now();
  let timer: Timer | undefined;
  const late = new Promise<"timeout">((resolve) => (timer = setTimeout(() => resolve("timeout"), timeoutMs + 1000)));
  try {
    const answer = await Promise.race([
      (async () => {
        const res = await t.send(req);
        return { res, text: await res.text() };
      })(),
      late,
    ]);
    const ms = performance.now() - started;
    if (answer === "timeout") return { ...base, status: 0, ms, problems: [{ kind: "timeout", detail: `no answer within ${timeoutMs} ms` }], requestId: null };
    const { res, text } = answer;
    const requestId = res.headers.get("x-request-id");
    const pathname = new URL(req.url).pathname;
    const documented = documentedTypes(t.doc, c.method, pathname, res.status);
    const problems = checkAnswer({ status: res.status, contentType: res.headers.get("content-type") ?? "", text }, expectedEnvelope(pathname, req.headers), c.method, documented);
    return { ...base, status: res.status, ms, problems, requestId, logged: requestId ? t.errors(requestId) : [] };
  } catch (e) {
    const ms = performance.now() - started;
    const timedOut = (e as Error).name === "TimeoutError" || (e as Error).name === "AbortError";
    return { ...base, status: 0, ms, problems: [{ kind: timedOut ? "timeout" : "5xx", detail: timedOut ? `no answer within ${timeoutMs} ms` : `the request failed: ${String(e)}` }], requestId: null };
  } finally {
    clearTimeout(timer);
  }
}

async function health(t: FuzzTarget): Promise<{ ms: number; status: number }> {
  const started = performance.now();
  try {
    const res = await t.send(new Request(`${t.base}/health`, { signal: AbortSignal.timeout(10_000) }));
    await res.arrayBuffer();
    return { ms: performance.now() - started, status: res.status };
  } catch {
    return { ms: performance.now() - started, status: 0 };
  }
}

/** Bodies that cost the server to look at: /health must not wait for them (one event loop serves all). */
const COSTLY = new Set(["body:deep-nesting", "body:deep", "body:large"]);

/** /health sent `afterMs` from now; its latency counts from when it was due, so a blocked event loop shows. */
async function healthBeside(t: FuzzTarget, afterMs: number): Promise<number> {
  const due = performance.now() + afterMs;
  await Bun.sleep(afterMs);
  await health(t);
  return performance.now() - due;
}

/** A successful sign-out ends the run's session: sign in again before the next console case. */
const signsOut = (r: CaseResult) => r.status > 0 && r.status < 300 && /\/logout/i.test(r.c.path) && r.c.auth === "session";

export async function runFuzz(t: FuzzTarget, cases: FuzzCase[], o: RunOptions = {}): Promise<FuzzReport> {
  const timeoutMs = o.timeoutMs ?? 30_000;
  const healthEvery = o.healthEvery ?? 100;
  const results: CaseResult[] = [];
  const healthMs: number[] = [];
  const healthBesideMs: number[] = [];
  const started = performance.now();
  let next = 0;
  let refreshing: Promise<void> | null = null;
  const worker = async () => {
    while (next < cases.length) {
      const c = cases[next++]!;
      if (refreshing) await refreshing;
      let r: CaseResult;
      if (COSTLY.has(c.strategy)) {
        const [sent, lag] = await Promise.all([sendOne(t, c, timeoutMs), healthBeside(t, 5)]);
        r = sent;
        healthBesideMs.push(lag);
      } else r = await sendOne(t, c, timeoutMs);
      results.push(r);
      if (signsOut(r))
        await (refreshing ??= t
          .refreshSession()
          // The owner must be able to sign in again whatever the fuzzer sent to the sign-in route.
          .catch((e) => void r.problems.push({ kind: "session", detail: `signing in again after this sign-out failed: ${(e as Error).message}` }))
          .finally(() => (refreshing = null)));
      o.onResult?.(r, results.length);
      if (results.length % healthEvery === 0) healthMs.push((await health(t)).ms);
    }
  };
  await Promise.all(Array.from({ length: o.concurrency ?? 1 }, worker));
  const final = await health(t);
  results.sort((a, b) => a.c.n - b.c.n);
  const statuses: Record<string, number> = {};
  for (const r of results) if (r.status >= 0) statuses[String(r.status)] = (statuses[String(r.status)] ?? 0) + 1;
  return {
    results,
    statuses,
    failures: results.filter((r) => r.problems.length > 0),
    unsendable: results.filter((r) => r.status < 0).length,
    healthMs,
    healthBesideMs,
    finalHealthMs: final.ms,
    finalHealthStatus: final.status,
    durationMs: performance.now() - started,
  };
}

// ---- reporting ---------------------------------------------------------------------------------

const clip = (s: string, n: number) => (s.length > n ? `${s.slice(0, n)}… (${s.length} chars)` : s);

/** One failure as a reproduction: the request exactly as sent, the answer, the server's log. */
export function describeFailure(r: CaseResult, t: Pick<FuzzTarget, "key" | "session">): string {
  const redact = (v: string) => v.replace(t.key, "<fuzz key>").replace(t.session.cookie, "appliance_session=<session>").replace(t.session.csrf || "\u0000", "<csrf>");
  const headers = Object.entries(r.headers).map(([k, v]) => `    ${k}: ${clip(redact(v), 200)}`).join("\n");
  const lines = [
    `#${r.c.n} [${r.c.strategy}] ${r.c.op} — ${r.c.what}`,
    `  ${r.c.method} ${clip(r.c.path, 300)}`,
    headers,
    r.c.body === undefined ? "  (no body)" : `  body: ${clip(JSON.stringify(r.c.body), 600)}`,
    `  → ${r.status || "no answer"} in ${r.ms.toFixed(0)} ms; ${r.problems.map((p) => `${p.kind}: ${p.detail}`).join("; ")}`,
  ];
  for (const l of r.logged) lines.push(`  logged: ${l.msg ?? ""} ${l.error ?? ""}${l.stack ? `\n    ${String(l.stack).split("\n").slice(0, 8).join("\n    ")}` : ""}`);
  return lines.join("\n");
}

/** Requests, statuses, failures by kind and route, the slowest requests and /health's latency. */
export function summarize(report: FuzzReport, o: { slowest?: number } = {}): string {
  const lines: string[] = [];
  const sent = report.results.length - report.unsendable;
  lines.push(`requests ${sent} in ${(report.durationMs / 1000).toFixed(1)} s${report.unsendable ? ` (${report.unsendable} more could not be built by the client)` : ""}`);
  lines.push(`statuses ${Object.entries(report.statuses).sort().map(([s, n]) => `${s}:${n}`).join(" ")}`);
  const fivexx = report.results.filter((r) => r.problems.some((p) => p.kind === "5xx")).length;
  const byKind: Record<string, number> = {};
  for (const r of report.failures) for (const p of r.problems) byKind[p.kind] = (byKind[p.kind] ?? 0) + 1;
  lines.push(`5xx ${fivexx}; problems ${Object.entries(byKind).map(([k, n]) => `${k}:${n}`).join(" ") || "none"}`);
  if (report.failures.length) {
    const byRoute: Record<string, number> = {};
    for (const r of report.failures) byRoute[`${r.c.op} [${r.problems[0]!.kind}]`] = (byRoute[`${r.c.op} [${r.problems[0]!.kind}]`] ?? 0) + 1;
    lines.push("failures by route:");
    for (const [k, n] of Object.entries(byRoute).sort((a, b) => b[1] - a[1])) lines.push(`  ${String(n).padStart(5)}  ${k}`);
  }
  const slow = [...report.results].sort((a, b) => b.ms - a.ms).slice(0, o.slowest ?? 8);
  lines.push("slowest:");
  for (const r of slow) lines.push(`  ${r.ms.toFixed(0).padStart(6)} ms  ${r.status}  #${r.c.n} [${r.c.strategy}] ${r.c.method} ${clip(r.c.path, 60)} — ${clip(r.c.what, 80)}`);
  const h = [...report.healthMs].sort((a, b) => a - b);
  if (h.length) lines.push(`/health during the run: median ${h[Math.floor(h.length / 2)]!.toFixed(1)} ms, max ${h[h.length - 1]!.toFixed(1)} ms (${h.length} probes)`);
  const b = [...report.healthBesideMs].sort((a, b) => a - b);
  if (b.length) lines.push(`/health beside costly bodies: median ${b[Math.floor(b.length / 2)]!.toFixed(1)} ms, max ${b[b.length - 1]!.toFixed(1)} ms (${b.length} probes)`);
  lines.push(`/health after the run: ${report.finalHealthStatus} in ${report.finalHealthMs.toFixed(1)} ms`);
  return lines.join("\n");
}
