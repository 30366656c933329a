import { closeSync, existsSync, fstatSync, openSync, readSync } from "node:fs";

// A rental's notebook-server log lives in its work dir (`jupyter.log`): the process launcher writes
// it as the server runs; the docker launcher saves the container's log there before removing it.

export const LOG_FILE = "jupyter.log";

/** The last `maxBytes` of the file at `path` ("" when it does not exist). */
export function tailOf(path: string, maxBytes: number): string {
  if (!existsSync(path)) return "";
  const fd = openSync(path, "r");
  try {
    const size = fstatSync(fd).size;
    const n = Math.min(size, maxBytes);
    const buf = Buffer.alloc(n);
    readSync(fd, buf, 0, n, size - n);
    return buf.toString("utf8");
  } finally {
    closeSync(fd);
  }
}
