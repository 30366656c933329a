// What the test helpers that start servers of their own (PostgreSQL, HAProxy) share: a free port
// (the one the rentals' process launcher uses), and whether a PID lives.
export { freePort } from "../../src/lib/net/free-port";

/** Whether process `pid` still exists (signal 0 checks without sending anything). */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
