import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { axeViolations } from "../helpers/browser";
import { markdownPage, SAMPLE, type MarkdownPage } from "../helpers/markdown-page";

// The chat's rendered Markdown (web/markdown.js), issue 48, in a real browser (Debian's chromium
// through playwright-core) on the console page the server sends (test/helpers/markdown-page.ts):
// Copy puts the exact code on the clipboard (Clipboard API, and the execCommand fallback); every
// prefix of a document renders (the chat re-renders as a stream arrives); a sample with every
// construct passes axe-core's WCAG 2.1 A/AA rules at 390 px and 1440 px. Screenshots:
// test/output/console/markdown-390.png and -1440.png.

const SHOTS = join(import.meta.dir, "..", "output", "console");
let tab: MarkdownPage;
beforeAll(async () => {
  mkdirSync(SHOTS, { recursive: true });
  tab = await markdownPage("appliance-markdown-");
}, 60_000);
afterAll(() => tab?.close());

const CODE = 'const s = "<script>alert(1)</script>";\n\tindented\twith tabs  \n  trailing spaces   \nunicode: é 😀 \\n \\\\ ${x}\n';

test("Copy puts the exact code on the clipboard, through the Clipboard API and through the fallback", async () => {
  await tab.page.evaluate((code) => { (window as any).__clear(); (window as any).__render("```js\n" + code + "\n```"); }, CODE);
  expect(await tab.page.locator("#sandbox pre code").textContent()).toBe(CODE);
  const button = tab.page.getByRole("button", { name: "Copy code" });
  await button.click();
  expect(await tab.page.evaluate(() => navigator.clipboard.readText())).toBe(CODE);
  expect(await button.textContent()).toBe("Copied");
  expect(await tab.page.locator("#sandbox [aria-live]").textContent()).toBe("Copied");
  // Without the Clipboard API (it throws): a selected textarea and execCommand("copy").
  await tab.page.evaluate(async () => {
    await navigator.clipboard.writeText("something else");
    (window as any).__copied = null;
    document.addEventListener("copy", (e) => { const t = e.target as HTMLTextAreaElement; (window as any).__copied = t.value.slice(t.selectionStart, t.selectionEnd); }, { once: true });
    Object.defineProperty(navigator.clipboard, "writeText", { configurable: true, value: () => Promise.reject(new Error("denied")) });
  });
  await button.click();
  expect(await tab.page.evaluate(() => (window as any).__copied)).toBe(CODE);
  expect(await tab.page.evaluate(() => navigator.clipboard.readText())).toBe(CODE);
  expect(await tab.page.evaluate(() => [document.querySelectorAll("textarea").length, document.activeElement?.getAttribute("aria-label")])).toEqual([0, "Copy code"]);
  await tab.page.evaluate(() => delete (navigator.clipboard as any).writeText);
  expect(tab.errors).toEqual([]);
});

test("every prefix of a streamed answer renders without throwing and within the rules", async () => {
  const result = await tab.page.evaluate((doc) => {
    const w = window as any;
    const failures: string[] = [];
    let checked = 0;
    for (let k = 0; k <= doc.length; k++) {
      try {
        w.__clear();
        const box = w.__render(doc.slice(0, k));
        if (k % 7 === 0 || k === doc.length) {
          const bad = w.__audit(box);
          if (bad.length) failures.push(`${k}: ${bad.join(", ")}`);
          checked++;
        }
      } catch (e) {
        failures.push(`${k}: ${(e as Error).message}`);
      }
    }
    return { failures, checked };
  }, SAMPLE);
  expect(result.failures).toEqual([]);
  expect(result.checked).toBeGreaterThan(100);
  // Rendering is deterministic: the same text gives the same tree.
  const [a, b] = await tab.page.evaluate((doc) => [(window as any).__render(doc).innerHTML, (window as any).__render(doc).innerHTML], SAMPLE);
  expect(a).toBe(b);
});

for (const width of [390, 1440]) {
  test(`at ${width} px a sample with every construct passes axe-core's WCAG 2.1 A/AA rules and does not run past the page`, async () => {
    await tab.page.setViewportSize({ width, height: 900 });
    const shape = await tab.page.evaluate((doc) => {
      (window as any).__clear();
      return (window as any).__shape((window as any).__render(doc));
    }, SAMPLE);
    for (const part of ["<h3 class=\"md-h1\">", "<ol>", "<ul>", "<blockquote>", "<hr>", "<code-block python>", "<code-block json>", "<code-block ts>", "<table>", "<del>", "md-task", "md-image"]) expect(shape).toContain(part);
    expect(await tab.page.locator("#sandbox .tok-kw").count()).toBeGreaterThan(5);
    expect(await axeViolations(tab.page)).toEqual([]);
    expect(await tab.page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(width);
    await tab.page.screenshot({ path: join(SHOTS, `markdown-${width}.png`), fullPage: true });
    expect(tab.errors).toEqual([]);
  }, 60_000);
}
