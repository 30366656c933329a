import { readFileSync } from "node:fs";
import { chromium, type Browser, type Page } from "playwright-core";

// The web console's browser tests share these: Debian's chromium (test/setup-browser.sh) driven by
// playwright-core, headless, and the console's sign-in form.

export const CHROMIUM = process.env.APPLIANCE_CHROMIUM ?? "/usr/bin/chromium";
const ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"];

/** Chromium, with `env` for its process (e.g. a HOME holding an NSS database that trusts a CA). */
export function launchChromium(o: { env?: Record<string, string | undefined> } = {}): Promise<Browser> {
  return chromium.launch({ executablePath: CHROMIUM, args: ARGS, ...(o.env ? { env: o.env } : {}) });
}

/** The admin password the first start's banner printed. */
export function adminPasswordOf(banner: readonly string[]): string {
  return /password ([0-9A-Za-z]{20})/.exec(banner.join("\n"))![1]!;
}

/** Fills the console's sign-in form and submits it. */
export async function signIn(page: Page, account: string, password: string): Promise<void> {
  await page.getByLabel("Account").fill(account);
  await page.getByLabel("Password").fill(password);
  await page.getByRole("button", { name: "Sign in" }).click();
}

const AXE = readFileSync(require.resolve("axe-core/axe.min.js"), "utf8");

/** WCAG 2.1 A/AA violations axe-core finds on the page as it is now ("rule: the elements"). */
export async function axeViolations(page: Page): Promise<string[]> {
  await page.evaluate(AXE);
  const result = await page.evaluate(() => (window as any).axe.run(document, { runOnly: { type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"] } }));
  return (result.violations as { id: string; nodes: { target: string[] }[] }[]).map((v) => `${v.id}: ${v.nodes.map((n) => n.target.join(" ")).join(", ")}`);
}

/** Text nodes in the console's view that are a value printed by mistake ("null", "undefined", "NaN", a lone "false", …). */
export function strayTexts(page: Page): Promise<string[]> {
  return page.evaluate(() => {
    const out: string[] = [];
    const walk = document.createTreeWalker(document.getElementById("view")!, NodeFilter.SHOW_TEXT);
    for (let n = walk.nextNode(); n; n = walk.nextNode()) if (/(^|\s)(null|undefined|NaN|\[object Object\])(\s|$)|^\s*(false|true)\s*$/.test(n.textContent ?? "")) out.push(n.textContent!.trim());
    return out;
  });
}
