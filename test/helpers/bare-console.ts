import { rmSync } from "node:fs";
import type { Browser, BrowserContextOptions, Page } from "playwright-core";
import { validateConfig } from "../../src/lib/config";
import { memoryLogger } from "../../src/lib/log";
import { startServer, type RunningServer } from "../../src/main";
import { tempDir } from "./app";
import { launchChromium } from "./browser";

// The console for browser tests that need no models: the real server on a fresh data directory
// (no models, no rental discovery) and Debian's chromium with one page, its uncaught errors kept.

export interface BareConsole {
  server: RunningServer;
  browser: Browser;
  page: Page;
  /** The lines the first start printed (the admin password is in them: adminPasswordOf). */
  banner: string[];
  /** The page's uncaught errors; a test may push what else it counts as one. */
  errors: string[];
  /** Closes the browser, stops the server and removes the data directory. */
  close(): Promise<void>;
}

/** Starts the server in a new temporary directory named from `prefix`, and a page with `context` (viewport, permissions). */
export async function bareConsole(prefix: string, context: BrowserContextOptions): Promise<BareConsole> {
  const dir = tempDir(prefix);
  const banner: string[] = [];
  let server: RunningServer | undefined;
  let browser: Browser | undefined;
  const close = async () => {
    await browser?.close();
    await server?.stop();
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    const config = validateConfig({ server: { data_dir: dir, port: 0 }, rentals: { discover: false }, models: [] });
    server = await startServer(config, { logger: memoryLogger(), banner: (l) => banner.push(l) });
    browser = await launchChromium();
    const page = await (await browser.newContext(context)).newPage();
    const errors: string[] = [];
    page.on("pageerror", (e) => errors.push(e.message));
    return { server, browser, page, banner, errors, close };
  } catch (e) {
    await close();
    throw e;
  }
}
