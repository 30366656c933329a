import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import type { Browser, Page } from "playwright-core";
import { ensureChatModel } from "../../models/cache";
import { ensureOnnxModel } from "../../models/onnx/cache";
import { validateConfig } from "../../src/lib/config";
import { memoryLogger } from "../../src/lib/log";
import { startServer, type RunningServer } from "../../src/main";
import { launchChromium, adminPasswordOf, signIn, axeViolations, strayTexts } from "../helpers/browser";
import { tempDir } from "../helpers/app";

// The console's playground tools for issue 47 in a real browser (Debian's chromium through
// playwright-core) against the real server and engines: Decisions on the tiny chat model (a
// predicate and a choice, the probabilities shown as the API gave them; a score and a refusal from
// an answer made up in the page's network), Rerank on the generated cross-encoder (three documents
// ranked with their scores, a document cut to fit named), errors from the OpenAI envelope, the
// Models page's Price column, and the playground with its answers shown at 390 px and 1440 px
// under axe-core and the stray-text sweep. Screenshots go to
// test/output/console/playground-*.png and models-prices.png.

const SHOTS = join(import.meta.dir, "..", "output", "console");
const dir = tempDir("appliance-console-playground-");
let server: RunningServer;
let browser: Browser;
let page: Page;
let key: string;

beforeAll(async () => {
  mkdirSync(SHOTS, { recursive: true });
  const chat = await ensureChatModel("chat");
  const rerank = await ensureOnnxModel("rerank");
  const config = validateConfig({
    server: { data_dir: dir, port: 0 },
    rentals: { discover: false },
    engines: { device: "cpu", threads: 1 },
    models: [
      { id: "chat", name: "Tiny chat", kind: "chat", files: { model: chat }, max_context: 2048, slots: 1, load: "start" },
      { id: "rerank", name: "Tiny reranker", kind: "reranker", files: { model: rerank }, max_context: 512 },
    ],
  });
  const banner: string[] = [];
  server = await startServer(config, { logger: memoryLogger(), banner: (l) => banner.push(l) });
  key = (await server.deps.accounts.createKey({ account: "admin", kind: "premium", name: "playground" })).key;
  browser = await launchChromium();
  page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
  await page.goto(`${server.url}/console#/playground`);
  await signIn(page, "admin", adminPasswordOf(banner));
  await page.locator('#pg-dec-model option[value="chat"]').waitFor({ state: "attached" });
}, 180_000);

afterAll(async () => {
  await browser?.close();
  await server?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const shot = (name: string) => page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });
const percent = (p: number) => `${(p * 100).toFixed(1)}%`;

/** The page's next call to a /v1 path (through the console's inference route, as the signed-in account): what it sent, and the JSON it was given to show. */
const answerTo = (path: string) =>
  page.waitForResponse((r) => new URL(r.url()).pathname === `/console/api${path}`, { timeout: 60_000 }).then(async (r) => ({ sent: r.request().postDataJSON(), body: (await r.json()) as any }));

/** Waits for a tool's "Done." or its alert; returns the alert's text ('' when none). */
async function settled(status: string, alert: string): Promise<string> {
  await page.waitForFunction(([s, a]) => document.getElementById(s!)?.textContent === "Done." || !document.getElementById(a!)?.hidden, [status, alert], { timeout: 60_000 });
  return (await page.locator(`#${alert}`).isVisible()) ? ((await page.locator(`#${alert}`).textContent()) ?? "") : "";
}


const INPUT = "The parcel arrived two weeks late and the box was crushed.";
const STATEMENT = "The customer is unhappy.";
const ASK = "What is this message about?";
const CHOICES = ["delivery", "billing", "praise"];

/** Fills the Decisions tool: a predicate, then a choice of three values. */
async function askDecisions() {
  await page.locator("#pg-dec-model").selectOption("chat");
  await page.locator("#pg-dec-input").fill(INPUT);
  const first = page.locator("fieldset.question").nth(0);
  await first.getByLabel("Statement", { exact: true }).fill(STATEMENT);
  await first.getByLabel("Name (optional)", { exact: true }).fill("unhappy");
  await page.getByRole("button", { name: "Add question" }).click();
  const second = page.locator("fieldset.question").nth(1);
  await second.getByLabel("Type", { exact: true }).selectOption("choice");
  await second.getByLabel("Question", { exact: true }).fill(ASK);
  await second.getByLabel("Choices (one per line)", { exact: true }).fill(CHOICES.join("\n"));
  await page.locator("#pg-decide").click();
  return settled("pg-dec-status", "pg-dec-error");
}

test("Decisions answers a predicate and a choice on the chat model and shows the API's probabilities as bars", async () => {
  expect(await page.locator("#pg-dec-model option").allTextContents()).toEqual(["Tiny chat (chat)"]); // chat and classifier kinds only
  const answered = answerTo("/v1/decisions");
  expect(await askDecisions()).toBe("");
  const { sent, body: api } = await answered;
  expect(sent).toEqual({
    model: "chat",
    input: INPUT,
    questions: [
      { type: "predicate", name: "unhappy", instructions: STATEMENT },
      { type: "choice", instructions: ASK, choices: CHOICES.map((value) => ({ value })) },
    ],
  });
  const answers = page.locator("#pg-dec-answers > li");
  expect(await answers.count()).toBe(2);
  const [pred, choice] = api.answers;
  expect(pred.type).toBe("predicate");
  expect(choice.type).toBe("choice");

  const first = answers.nth(0);
  expect(await first.getAttribute("data-type")).toBe("predicate");
  expect(await first.locator("h3").textContent()).toBe("unhappy");
  expect(await first.locator(".prob-name").allTextContents()).toEqual(["yes", "no"]);
  expect(await first.locator(".prob-value").allTextContents()).toEqual([percent(pred.probability), percent(1 - pred.probability)]);
  expect(await first.locator(".verdict").textContent()).toContain(`P(yes) = ${percent(pred.probability)}`);
  const yesWidth = await first.locator(".prob-fill").first().evaluate((el) => (el as HTMLElement).style.width);
  expect(Number.parseFloat(yesWidth)).toBeCloseTo(pred.probability * 100, 3);

  const second = answers.nth(1);
  expect(await second.getAttribute("data-type")).toBe("choice");
  expect(await second.locator("h3").textContent()).toBe("Question 2");
  expect(await second.locator(".prob-name").allTextContents()).toEqual(CHOICES);
  expect(await second.locator(".prob-value").allTextContents()).toEqual(choice.probabilities.map((p: { probability: number }) => percent(p.probability)));
  expect(await second.locator(".verdict").textContent()).toBe(`Answer: ${choice.choice} · confidence ${percent(choice.confidence)}`);
  expect(await second.locator(".prob.best .prob-name").textContent()).toBe(choice.choice);
  const shown = (await second.locator(".prob-value").allTextContents()).reduce((s, t) => s + Number.parseFloat(t), 0);
  expect(Math.abs(shown - 100)).toBeLessThan(0.3);

  expect(await page.locator("#pg-dec-output .usage-line").textContent()).toMatch(/^Usage: \d+ input tokens/);
  await shot("playground-decisions");
}, 120_000);

test("a refused Decisions request shows the error envelope's message", async () => {
  const second = page.locator("fieldset.question").nth(1);
  await second.getByLabel("Choices (one per line)", { exact: true }).fill("delivery\ndelivery");
  await page.locator("#pg-decide").click();
  const alert = await settled("pg-dec-status", "pg-dec-error");
  expect(alert).toContain("questions[1].choices");
  expect(alert).not.toContain("{");
  // Back to a good question, and remove it: one question left, its Remove button hidden.
  await second.getByLabel("Choices (one per line)", { exact: true }).fill(CHOICES.join("\n"));
  await page.getByRole("button", { name: "Remove question 2" }).click();
  expect(await page.locator("fieldset.question").count()).toBe(1);
  expect(await page.getByRole("button", { name: "Remove question 1" }).count()).toBe(0);
  await page.getByRole("button", { name: "Add question" }).click();
  const again = page.locator("fieldset.question").nth(1);
  await again.getByLabel("Type", { exact: true }).selectOption("choice");
  await again.getByLabel("Question", { exact: true }).fill(ASK);
  await again.getByLabel("Choices (one per line)", { exact: true }).fill(CHOICES.join("\n"));
}, 60_000);

test("a score answer and a refusal are shown as the API types them (an answer made up here)", async () => {
  const made = {
    model: "chat",
    answers: [
      { type: "score", name: "severity", score: 1.5, confidence: 0.6, probabilities: [{ label: "low", value: 0, probability: 0.1 }, { label: "mid", value: 1, probability: 0.3 }, { label: "high", value: 2, probability: 0.6 }] },
      { type: "refusal", name: null },
    ],
    usage: { input_tokens: 1, input_tokens_details: { cached_tokens: 0, cache_write_tokens: 0 }, output_tokens: 0, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: 1 },
  };
  await page.route("**/v1/decisions", (route) => route.fulfill({ status: 200, contentType: "application/json", body: JSON.stringify(made) }));
  try {
    await page.locator("#pg-decide").click();
    expect(await settled("pg-dec-status", "pg-dec-error")).toBe("");
  } finally {
    await page.unroute("**/v1/decisions");
  }
  const answers = page.locator("#pg-dec-answers > li");
  expect(await answers.nth(0).locator(".verdict").textContent()).toBe("Score: 1.50 on 0–2 · most likely high · confidence 60.0%");
  expect(await answers.nth(0).locator(".prob-value").allTextContents()).toEqual(["10.0%", "30.0%", "60.0%"]);
  expect(await answers.nth(1).getAttribute("data-type")).toBe("refusal");
  expect(await answers.nth(1).locator("h3").textContent()).toBe("Question 2");
  expect(await answers.nth(1).locator(".verdict").textContent()).toBe("Refused: The model gave none of the offered answers any probability.");
  expect(await page.locator("#pg-dec-output .usage-line").textContent()).toBe("Usage: 1 input token");
  expect(await strayTexts(page)).toEqual([]);
}, 60_000);

const QUERY = "How do I reset my password?";
const DOCS = ["Open Settings, choose Account, then Reset password.", "Our office is closed on public holidays.", "Passwords must have at least twelve characters."];
/** A document far past the model's 512 tokens a pair: cut from its end, and the page says so. */
const LONG = Array.from({ length: 700 }, (_, i) => `word${i}`).join(" ");

async function rerank(docs: string[], topN?: number) {
  await page.locator("#pg-rr-model").selectOption("rerank");
  await page.locator("#pg-rr-query").fill(QUERY);
  await page.locator("#pg-rr-docs").fill(docs.join("\n"));
  await page.locator("#pg-rr-top-n").fill(topN ? String(topN) : "");
  await page.locator("#pg-rerank").click();
  return settled("pg-rr-status", "pg-rr-error");
}

test("Rerank ranks three documents on the reranker and shows their scores in the API's order", async () => {
  expect(await page.locator("#pg-rr-model option").allTextContents()).toEqual(["Tiny reranker (rerank)"]);
  const answered = answerTo("/v1/rerank");
  expect(await rerank(DOCS)).toBe("");
  const { sent, body: api } = await answered;
  expect(sent).toEqual({ model: "rerank", query: QUERY, documents: DOCS });
  const rows = page.locator("#pg-rr-results tbody tr");
  expect(await rows.count()).toBe(3);
  expect(await rows.evaluateAll((trs) => trs.map((tr) => Number(tr.getAttribute("data-index"))))).toEqual(api.results.map((r: { index: number }) => r.index));
  expect(await page.locator("#pg-rr-results .score").allTextContents()).toEqual(api.results.map((r: { relevance_score: number }) => r.relevance_score.toFixed(4)));
  expect(await rows.nth(0).locator(".doc-text").textContent()).toContain(DOCS[api.results[0].index]!);
  expect(await page.locator("#pg-rr-cut").count()).toBe(0);
  expect(await page.locator("#pg-rr-output .usage-line").textContent()).toBe(`Usage: ${api.usage.prompt_tokens} input tokens`);
  await shot("playground-rerank");
}, 120_000);

test("Rerank names the documents cut to fit the model, and keeps top_n", async () => {
  const answered = answerTo("/v1/rerank");
  expect(await rerank([...DOCS, LONG], 2)).toBe("");
  const { sent, body } = await answered;
  expect(sent.top_n).toBe(2);
  expect(body.meta.truncated.map((t: { index: number }) => t.index)).toEqual([3]);
  expect(await page.locator("#pg-rr-results tbody tr").count()).toBe(2);
  const note = (await page.locator("#pg-rr-cut").textContent()) ?? "";
  expect(note).toContain("Cut to fit the model (512 tokens a pair)");
  expect(note).toMatch(/document 4 “word0 word1 .*”: [\d,]+ tokens cut from its end/);
  await shot("playground-rerank-cut");
}, 120_000);

test("the Models page shows each model's price from /v1/models", async () => {
  const listed = (await (await fetch(`${server.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } })).json()) as { data: { id: string; pricing: unknown }[] };
  const consoleModels = (await page.evaluate(async () => (await fetch("/console/api/models")).json())) as { data: { id: string; pricing: unknown }[] };
  for (const m of listed.data) expect(consoleModels.data.find((c) => c.id === m.id)?.pricing).toEqual(m.pricing);

  await page.goto(`${server.url}/console#/models`);
  await page.locator('#models-table tr[data-model-id="rerank"]').waitFor();
  expect(await page.locator("#models-table thead th").allTextContents()).toContain("Price");
  const price = (id: string) => page.locator(`#models-table tr[data-model-id="${id}"] .price`).evaluate((td) => [td.firstChild?.textContent, td.querySelector("div")?.textContent]);
  expect(await price("chat")).toEqual(["$0.12 / $1.70 per M in/out · decisions $0.05 per M", "batch lines at 50%"]);
  expect(await price("rerank")).toEqual(["$0.02 per M", "batch lines at 50%"]);
  await shot("models-prices");
}, 60_000);




for (const width of [390, 1440]) {
  test(`at ${width} px the playground with its answers shown passes axe-core's WCAG 2.1 A/AA rules and prints no stray value`, async () => {
    await page.setViewportSize({ width, height: 900 });
    await page.goto(`${server.url}/console#/playground`);
    await page.reload(); // a fresh page: one question, no answers
    await page.locator('#pg-dec-model option[value="chat"]').waitFor({ state: "attached" });
    expect(await page.locator("#pg-key").count()).toBe(0); // no key is asked for: the session acts
    expect({ before: await axeViolations(page) }).toEqual({ before: [] });
    expect(await strayTexts(page)).toEqual([]);
    expect(await askDecisions()).toBe("");
    expect(await rerank([...DOCS, LONG])).toBe("");
    expect(await axeViolations(page)).toEqual([]);
    expect(await strayTexts(page)).toEqual([]);
    // Nothing of the page's own runs past the viewport's width (tables scroll in their own box).
    expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(width);
    await shot(`playground-${width}`);
  }, 180_000);
}
