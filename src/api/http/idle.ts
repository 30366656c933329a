import type { Server } from "bun";

// Bun closes a connection that has been quiet for `idleTimeout` (10 s by default), a response
// that has started streaming included. A chat stream is quiet between its first chunk and its
// first token for as long as the prompt takes, and between tokens while other requests' prompts
// are decoded: with a 0.5B model on 2 cores, 8 streams waited over 10 s and were reset
// (ECONNRESET). Requests that run work (every POST) may stay quiet as long as the work takes;
// idle keep-alive connections and slow request heads are still closed.

/** Whether `req` is exempt from the listener's idle timeout. */
export function runsWork(req: Request): boolean {
  return req.method === "POST";
}

/** Lifts the idle timeout for `req` when it runs work. */
export function liftIdleTimeout(req: Request, server: Pick<Server<unknown>, "timeout">): void {
  if (runsWork(req)) server.timeout(req, 0);
}
