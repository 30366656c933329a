import { chmodSync, rmSync } from "node:fs";
import { join } from "node:path";
import { ApiError } from "../lib/errors";
import { renderError } from "./http/errors";
import type { Logger } from "../lib/log";
import { modelControl, type ModelsRegistry } from "../2-services/residency/service";

// The control socket `appliance ps` talks to (an edge of its own, beside the HTTP API): <data_dir>/control.sock, HTTP over a Unix socket.
//   GET  /models               → {object:"list", data:[status]}
//   POST /models/{id}/load     → the model's status once loaded
//   POST /models/{id}/unload   → {id, result}
// The same functions as the admin API (src/2-services/residency/service.ts), with no key: trust comes from the
// file's permissions. The socket is made 0600 (owner only) right after it is bound, in a data dir
// made 0700, so only the user the server runs as (or root) can connect — the user who can already
// read the store and the config. Errors are the API's OpenAI envelope.

export const CONTROL_SOCKET = "control.sock";

/** Where the server of `dataDir` listens for control requests. */
export function controlSocketPath(dataDir: string): string {
  return join(dataDir, CONTROL_SOCKET);
}

/** sun_path holds 108 bytes with its terminating NUL (Linux unix(7)). */
const MAX_SOCKET_PATH = 107;

export interface ControlSocket {
  /** The socket's path, or null when it could not be opened (logged). */
  path: string | null;
  stop(): void;
}

/**
 * Listens on `<dataDir>/control.sock`. The caller holds the data dir's lock (src/4-store/lock.ts),
 * so a socket file already there is a dead server's: it is removed. A socket that cannot be
 * opened is logged and the server runs on without it (`appliance ps` then says so).
 */
export function startControlSocket(dataDir: string, registry: ModelsRegistry, logger: Logger): ControlSocket {
  const path = controlSocketPath(dataDir);
  if (Buffer.byteLength(path) > MAX_SOCKET_PATH) {
    logger.warn("control socket not started: its path is too long for a Unix socket", { path, max_bytes: MAX_SOCKET_PATH });
    return { path: null, stop() {} };
  }
  const models = modelControl(registry);
  let server: ReturnType<typeof Bun.serve>;
  try {
    rmSync(path, { force: true });
    server = Bun.serve({
      // A load may take minutes; Bun puts no idle timeout on a Unix socket (Bun 1.4: a 12 s answer arrived).
      unix: path,
      fetch: (req) => answer(req, models, logger),
    });
    chmodSync(path, 0o600);
  } catch (e) {
    logger.warn("control socket not started", { path, error: (e as Error).message });
    return { path: null, stop() {} };
  }
  logger.info("control socket listening", { path });
  return {
    path,
    stop() {
      void server.stop(true);
      rmSync(path, { force: true });
    },
  };
}

async function answer(req: Request, models: ReturnType<typeof modelControl>, logger: Logger): Promise<Response> {
  try {
    const path = new URL(req.url).pathname;
    if (path === "/models" && req.method === "GET") return Response.json(models.list());
    if (path.startsWith("/models/") && req.method === "POST") return Response.json(await models.act(decode(path.slice("/models/".length))));
    throw new ApiError("not_found", `Invalid URL (${req.method} ${path.slice(0, 200)}): the control socket answers GET /models and POST /models/{id}/load|unload`);
  } catch (e) {
    if (e instanceof ApiError) return renderError(e, "openai");
    logger.error("control socket: unexpected error", { error: (e as Error)?.message, stack: (e as Error)?.stack });
    return renderError(new ApiError("internal_error", `internal error: ${(e as Error)?.message ?? String(e)}`), "openai");
  }
}

function decode(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    throw new ApiError("invalid_request", "the path has a malformed percent-escape", { param: "id" });
  }
}
