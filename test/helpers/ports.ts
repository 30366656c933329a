import { createServer } from "node:net";

// What the test helpers that start servers of their own (PostgreSQL, HAProxy) share: a free port, and whether a PID lives.

/** A port on 127.0.0.1 that nothing listens on now (taken and let go): for a server to bind, or a connection to be refused. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

/** Whether process `pid` still exists (signal 0 checks without sending anything). */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
