import { afterAll, beforeAll } from "bun:test";
import { rmSync } from "node:fs";
import { validateConfig } from "../../src/lib/config";
import { memoryLogger } from "../../src/lib/log";
import { startServer, type RunningServer } from "../../src/main";
import { tempDir } from "../helpers/app";
import { recordingProxy, type RecordingProxy } from "./recording-proxy";

/**
 * `serve --demo` on a free port in a temp data dir, with the first-start key the banner prints,
 * and a recording proxy in front of it: clients are pointed at `proxy.url`.
 */
export async function startDemoServer(): Promise<{ server: RunningServer; key: string; proxy: RecordingProxy; close(): Promise<void> }> {
  const dir = tempDir("appliance-interop-");
  const banner: string[] = [];
  const server = await startServer(
    validateConfig({ demo: true, server: { data_dir: dir, port: 0 }, engines: { device: "cpu", threads: 1 }, rentals: { discover: false } }),
    { logger: memoryLogger(), banner: (l) => banner.push(l) },
  );
  const key = /(sk-apl-[0-9A-Za-z]{44})/.exec(banner.join("\n"))![1]!;
  const proxy = recordingProxy(server.url);
  return {
    server,
    key,
    proxy,
    async close() {
      proxy.stop();
      await server.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export type DemoServer = Awaited<ReturnType<typeof startDemoServer>>;

/**
 * `serve --demo` for the tests of one file: started before them (then `started` gets it), stopped
 * after them. The interop files each keep the key and the proxy they point their client at.
 */
export function useDemoServer(started: (s: DemoServer) => void): void {
  let s: DemoServer | undefined;
  beforeAll(async () => {
    s = await startDemoServer();
    started(s);
  }, 180_000);
  afterAll(() => s?.close());
}
