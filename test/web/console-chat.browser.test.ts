import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import sharp from "sharp";
import type { Browser, Page } from "playwright-core";
import { ensureProjector } from "../../models/projector-cache";
import { ensureDiffusionModel } from "../../models/diffusion/cache";
import { ensureChatModel } from "../../models/cache";
import { setClientAddress } from "../../src/1-api/http/context";
import { launchChromium, signIn, axeViolations, strayTexts } from "../helpers/browser";
import { chatTestApp, forced } from "../helpers/chat";
import { consoleAccount } from "../api/console/client";

// The console's Chat page (issue 48) in a real browser (Debian's chromium through playwright-core)
// against the real app and engines over HTTP, signed in as an account with credit and no key: a
// two-turn conversation that survives a reload, kept in the store; Markdown with highlighted code
// and a copy button; reasoning folded; tool calls shown; an image attached reaching a vision model;
// Stop ending a stream, with only what was made billed; regenerate and edit-and-resend; images from
// an image model kept with the conversation; search, rename and delete; the keyboard; axe and the
// stray-text sweep at 390 px and 1440 px. (The test app's «force:TEXT» marker makes the tiny model
// say TEXT first, so answers are known.) Screenshots: test/output/console/chat-*.png.

const SHOTS = join(import.meta.dir, "..", "output", "console");
let t: Awaited<ReturnType<typeof chatTestApp>>;
let server: ReturnType<typeof Bun.serve>;
let url: string;
let browser: Browser;
let page: Page;

beforeAll(async () => {
  mkdirSync(SHOTS, { recursive: true });
  const chat = await ensureChatModel("chat");
  t = await chatTestApp({
    extraModels: [
      { id: "vision", name: "Tiny vision chat", kind: "chat", vision: true, files: { model: chat, mmproj: await ensureProjector("chat-vision") }, max_context: 4096, slots: 1, load: "first_use" },
      { id: "turbo", name: "Tiny turbo", kind: "image", files: { model: ensureDiffusionModel("diffusion-turbo") }, max_context: 77, slots: 1, load: "first_use" },
    ],
  });
  server = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    idleTimeout: 120,
    fetch: (req, srv) => {
      setClientAddress(req, srv.requestIP(req)?.address);
      return t.app.handle(req);
    },
  });
  url = `http://127.0.0.1:${server.port}`;
  const password = await consoleAccount(t, "alice", { creditUsd: 5 });
  browser = await launchChromium();
  const context = await browser.newContext({ viewport: { width: 1440, height: 900 } });
  await context.grantPermissions(["clipboard-read", "clipboard-write"], { origin: url });
  page = await context.newPage();
  await page.goto(`${url}/console#/chat`);
  await signIn(page, "alice", password);
  await page.locator("#chat-input").waitFor();
}, 180_000);

afterAll(async () => {
  await browser?.close();
  server?.stop(true);
  await t?.close();
});

const shot = (name: string) => page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });
const usageRow = (id: string) => (t.deps.store.kind === "sqlite" ? (t.deps.store.db.query("SELECT * FROM usage WHERE request_id = ?").get(id) as any) : null);
const conversations = () => (t.deps.store.kind === "sqlite" ? (t.deps.store.db.query("SELECT * FROM console_conversations ORDER BY created_at").all() as any[]) : []);
const storedMessages = (id: string) =>
  t.deps.store.kind === "sqlite" ? (t.deps.store.db.query("SELECT body FROM console_messages WHERE conversation_id = ? ORDER BY seq").all(id) as { body: string }[]).map((r) => JSON.parse(r.body)) : [];

/** Sends a message from the box with Enter and waits for its answer to be saved. */
async function say(text: string): Promise<void> {
  const before = await page.locator("#chat-log .msg-assistant").count();
  await page.locator("#chat-input").fill(text);
  await page.locator("#chat-input").press("Enter");
  await page.waitForFunction((n) => document.querySelectorAll("#chat-log .msg-assistant").length > n && !document.getElementById("chat-log")!.hasAttribute("aria-busy"), before, { timeout: 60_000 });
}

/** Opens the settings (a click on an open one would close it). */
async function openSettings(): Promise<void> {
  if ((await page.locator("#chat-settings").getAttribute("open")) === null) await page.locator("#chat-settings > summary").click();
}

const currentId = () => page.evaluate(() => /conv_[\w-]+/.exec(location.hash)?.[0] ?? null);

test("a two-turn conversation is streamed, rendered as Markdown with highlighted code, costed per answer, kept in the store, and survives a reload", async () => {
  await page.locator("#chat-model").selectOption("chat");
  await say(`Show me code ${forced("# Result\n\nHere is **code**:\n\n```js\nconst answer = 42; // the answer\n```\n")}`);
  const first = page.locator("#chat-log .msg-assistant").first();
  await expect(first.locator(".md .md-h1").first().textContent()).resolves.toBe("Result");
  await expect(first.locator(".md strong").first().textContent()).resolves.toBe("code");
  // (The tiny model goes on with noise after the forced text: the first of each is the forced one.)
  const code = first.locator(".md pre code").first();
  expect(await code.textContent()).toBe("const answer = 42; // the answer");
  expect(await code.locator(".tok-kw").first().textContent()).toBe("const");
  expect(await code.locator(".tok-com").first().textContent()).toBe("// the answer");
  // Copy puts the code itself on the clipboard.
  await first.getByRole("button", { name: "Copy code" }).first().click();
  expect(await page.evaluate(() => navigator.clipboard.readText())).toBe("const answer = 42; // the answer");
  // What the answer used and cost, as the meter settled it.
  const id = (await currentId())!;
  expect(id).toMatch(/^conv_/);
  const [, answer] = storedMessages(id);
  const row = usageRow(answer.request_id);
  expect(answer.usage).toEqual({ input_tokens: row.input_tokens, output_tokens: row.output_tokens, ...(row.cached_tokens ? { cached_tokens: row.cached_tokens } : {}), cost_usd: row.cost_micros / 1e6 });
  expect(await first.locator(".msg-meta").textContent()).toContain(`${row.output_tokens.toLocaleString("en-US")} out`);
  expect(await first.locator(".msg-meta").textContent()).toContain("$");

  await say(`And a second turn ${forced("Second answer.")}`);
  expect(await page.locator("#chat-log .msg").count()).toBe(4);
  // The second request carried the whole conversation.
  const second = storedMessages(id)[3];
  expect(usageRow(second.request_id).input_tokens).toBeGreaterThan(row.input_tokens);
  await shot("chat-1440");

  await page.reload();
  await page.locator("#chat-log .msg").nth(3).waitFor();
  expect(await page.locator("#chat-log .msg").count()).toBe(4);
  expect(await page.locator("#chat-log .msg-user").first().textContent()).toContain("Show me code");
  expect(await page.locator("#chat-log .msg-assistant").nth(1).locator(".md").textContent()).toContain("Second answer.");
  expect(await page.locator("#chat-title").textContent()).toContain("Show me code");
  expect(await page.locator(`#chat-conversations [data-conv-id="${id}"]`).count()).toBe(1);
  expect(conversations().map((c) => c.id)).toContain(id);
}, 120_000);

test("reasoning is folded and tool calls are shown", async () => {
  await page.locator("#chat-new").click();
  await openSettings();
  await page.locator("#chat-tools").fill(JSON.stringify([{ type: "function", function: { name: "get_time", description: "The time", parameters: { type: "object", properties: { zone: { type: "string" } } } } }]));
  await say(`What time is it? ${forced('<think>\nThe user asks the time.\n</think>\n\n<tool_call>\n{"name": "get_time", "arguments": {"zone": "UTC"}}\n</tool_call>')}`);
  const answer = page.locator("#chat-log .msg-assistant").last();
  const reasoning = answer.locator("details.reasoning");
  expect(await reasoning.getAttribute("open")).toBeNull();
  expect(await reasoning.locator("summary").textContent()).toBe("Reasoning");
  expect(await reasoning.textContent()).toContain("The user asks the time.");
  expect(await answer.locator(".tool-call code").first().textContent()).toBe("get_time");
  expect(JSON.parse((await answer.locator(".tool-call-args").first().textContent())!)).toEqual({ zone: "UTC" });
  const stored = storedMessages((await currentId())!)[1];
  expect(stored.tool_calls[0]).toMatchObject({ name: "get_time" });
  expect(stored.reasoning).toContain("The user asks the time.");
  expect(stored.finish).toBe("tool_calls");
}, 60_000);

test("an image attached reaches a vision model", async () => {
  await page.locator("#chat-new").click();
  await page.locator("#chat-model").selectOption("vision");
  const png = await sharp({ create: { width: 64, height: 48, channels: 3, background: { r: 200, g: 30, b: 30 } } }).png().toBuffer();
  await page.locator("#chat-file").setInputFiles({ name: "red.png", mimeType: "image/png", buffer: png });
  await page.locator("#chat-attachments img").waitFor();
  await say(`What is in the picture? ${forced("A red box.")}`);
  const id = (await currentId())!;
  const [user, answer] = storedMessages(id);
  expect(user.images).toHaveLength(1);
  expect(user.images[0]).toStartWith("data:image/png;base64,");
  expect(await page.locator("#chat-log .msg-user img").count()).toBe(1);
  // The same words without the image: the image's tokens are what the vision request read more.
  const plain = await t.app.handle(
    new Request(`${url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${await t.key({ account: "alice" })}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "vision", messages: [{ role: "user", content: `What is in the picture? ${forced("A red box.")}` }], max_tokens: 4 }),
    }),
  );
  const plainTokens = ((await plain.json()) as any).usage.prompt_tokens;
  expect(usageRow(answer.request_id).input_tokens).toBeGreaterThan(plainTokens + 8);
  await shot("chat-vision-1440");
  // A request carries at most 2 images: in a longer conversation the latest go, earlier ones are named in their text.
  const sent = await page.evaluate(async () => {
    const { toApiMessages } = await import("/console/chat.js" as string);
    return toApiMessages({ system: "Be brief." }, [
      { role: "user", content: "one", images: ["data:a", "data:b"] },
      { role: "assistant", content: "ok" },
      { role: "user", content: "two", images: ["data:c"] },
      { role: "assistant", content: "", images: ["data:generated"] },
      { role: "user", content: "three" },
    ]);
  });
  expect(sent).toEqual([
    { role: "system", content: "Be brief." },
    { role: "user", content: [{ type: "text", text: "one\n\n(an image was attached here)" }, { type: "image_url", image_url: { url: "data:b" } }] },
    { role: "assistant", content: "ok" },
    { role: "user", content: [{ type: "text", text: "two" }, { type: "image_url", image_url: { url: "data:c" } }] },
    { role: "user", content: "three" },
  ]);
  // Pasted and dropped images are attached too; a third, or a file that is not an image, is refused with a message.
  await page.evaluate(async (b64) => {
    const file = (name: string, type: string) => new File([Uint8Array.from(atob(b64), (c) => c.charCodeAt(0))], name, { type });
    const pasted = new DataTransfer();
    pasted.items.add(file("pasted.png", "image/png"));
    document.getElementById("chat-input")!.dispatchEvent(new ClipboardEvent("paste", { clipboardData: pasted, bubbles: true, cancelable: true }));
    await new Promise((r) => setTimeout(r, 200));
    const dropped = new DataTransfer();
    dropped.items.add(file("dropped.png", "image/png"));
    document.getElementById("chat-form")!.dispatchEvent(new DragEvent("drop", { dataTransfer: dropped, bubbles: true, cancelable: true }));
  }, png.toString("base64"));
  await page.waitForFunction(() => document.querySelectorAll("#chat-attachments img").length === 2, null, { timeout: 10_000 });
  await page.locator("#chat-file").setInputFiles({ name: "third.png", mimeType: "image/png", buffer: png });
  expect(await page.locator("#chat-error").textContent()).toBe("At most 2 images go with one message.");
  await page.getByRole("button", { name: "Remove attached image 2" }).click();
  await page.locator("#chat-file").setInputFiles({ name: "notes.txt", mimeType: "text/plain", buffer: Buffer.from("hello") });
  expect(await page.locator("#chat-error").textContent()).toBe("notes.txt is not a PNG, JPEG, WebP or GIF image.");
  expect(await page.locator("#chat-attachments img").count()).toBe(1);
  // A model that does not see images takes none: the attach button goes away, and so do the attached ones.
  await page.locator("#chat-model").selectOption("chat");
  expect(await page.locator("#chat-attach").isVisible()).toBe(false);
  expect(await page.locator("#chat-attachments img").count()).toBe(0);
}, 90_000);

test("Stop (and Esc) ends a stream; the answer is kept as stopped and billed only for what was made", async () => {
  await page.locator("#chat-new").click();
  await page.locator("#chat-model").selectOption("chat");
  await openSettings();
  await page.locator("#chat-max-tokens").fill("400");
  await page.locator("#chat-input").fill(`Count ${forced("one two three four five six seven eight nine ten ".repeat(40))}`);
  await page.locator("#chat-send").click();
  await page.waitForFunction(() => (document.querySelector("#chat-log .msg-assistant .md")?.textContent ?? "").length > 20, null, { timeout: 30_000 });
  await page.keyboard.press("Escape");
  await page.waitForFunction(() => document.getElementById("chat-status")?.textContent === "Stopped.", null, { timeout: 30_000 });
  await page.waitForFunction(() => !document.getElementById("chat-log")!.hasAttribute("aria-busy"), null, { timeout: 30_000 });
  const [, answer] = storedMessages((await currentId())!);
  expect(answer.finish).toBe("stopped");
  const row = usageRow(answer.request_id);
  expect(row.output_tokens).toBeLessThan(400);
  expect(row.output_tokens).toBeGreaterThan(0);
  expect(answer.usage.output_tokens).toBe(row.output_tokens);
  expect(await page.locator("#chat-log .msg-assistant .msg-meta").last().textContent()).toContain("Stopped");
}, 60_000);

test("regenerate replaces the last answer; edit-and-resend replaces the turn from the edited message on", async () => {
  await page.locator("#chat-new").click();
  await page.locator("#chat-model").selectOption("chat");
  await say(`First ${forced("Alpha.")}`);
  const id = (await currentId())!;
  const firstAnswer = storedMessages(id)[1].request_id;
  await page.getByRole("button", { name: "Regenerate the last answer" }).click();
  await page.waitForFunction((old) => !document.getElementById("chat-log")!.hasAttribute("aria-busy") && document.querySelectorAll("#chat-log .msg").length === 2, firstAnswer, { timeout: 60_000 });
  await page.waitForFunction(() => document.getElementById("chat-status")?.textContent === "Done.", null, { timeout: 60_000 });
  const regenerated = storedMessages(id);
  expect(regenerated).toHaveLength(2);
  expect(regenerated[1].request_id).not.toBe(firstAnswer);
  await page.getByRole("button", { name: "Edit message 1 and send it again" }).click();
  await page.getByLabel("Edit your message").fill(`Changed ${forced("Beta.")}`);
  await page.getByLabel("Edit your message").press("Enter");
  await page.waitForFunction(() => (document.querySelectorAll("#chat-log .msg-assistant .md")[0]?.textContent ?? "").includes("Beta."), null, { timeout: 60_000 });
  await page.waitForFunction(() => !document.getElementById("chat-log")!.hasAttribute("aria-busy"), null, { timeout: 60_000 });
  const edited = storedMessages(id);
  expect(edited).toHaveLength(2);
  expect(edited[0].content).toStartWith("Changed");
  expect(edited[1].content).toContain("Beta.");
}, 90_000);

test("an image model generates into the conversation, and the images are kept with it", async () => {
  await page.locator("#chat-new").click();
  await page.locator("#chat-model").selectOption("turbo");
  await openSettings();
  await page.locator("#img-size").selectOption("256x256");
  await page.locator("#img-seed").fill("7");
  await page.locator("#img-steps").fill("1");
  await say("a red square");
  const img = page.locator("#chat-log .msg-assistant img");
  await img.waitFor();
  expect(await img.getAttribute("alt")).toBe("generated image 1 for: a red square");
  const id = (await currentId())!;
  const [, answer] = storedMessages(id);
  expect(answer.images[0]).toStartWith("data:image/png;base64,");
  expect(answer.image_params).toMatchObject({ size: "256x256", seed: 7, steps: 1 });
  expect(usageRow(answer.request_id).images).toBe(1);
  await page.reload();
  await page.locator("#chat-log .msg-assistant img").waitFor();
  expect(await page.locator("#chat-settings #img-seed").inputValue()).toBe("7");
}, 120_000);

test("conversations are searched by title, renamed and deleted", async () => {
  await page.locator("#chat-search").fill("show me");
  await page.waitForFunction(() => document.querySelectorAll("#chat-conversations [data-conv-id]").length === 1, null, { timeout: 10_000 });
  const item = page.locator("#chat-conversations li").first();
  await item.getByRole("button", { name: /^Rename/ }).click();
  await page.getByLabel("New title").fill("Code sample");
  await page.getByLabel("New title").press("Enter");
  await page.locator("#chat-search").fill("code sample");
  await page.waitForFunction(() => document.querySelector("#chat-conversations .conv-title")?.textContent === "Code sample", null, { timeout: 10_000 });
  const renamed = conversations().find((c) => c.title === "Code sample");
  expect(renamed).toBeDefined();
  page.once("dialog", (d) => d.accept());
  await page.locator("#chat-conversations li").first().getByRole("button", { name: /^Delete/ }).click();
  await page.waitForFunction(() => !document.querySelector("#chat-conversations [data-conv-id]"), null, { timeout: 10_000 });
  expect(conversations().find((c) => c.id === renamed.id)).toBeUndefined();
  expect(storedMessages(renamed.id)).toEqual([]);
  await page.locator("#chat-search").fill("");
}, 60_000);


test("the chat page passes axe and prints no stray values at 390 px and 1440 px, with a conversation open", async () => {
  const withTools = conversations().find((c) => c.title.startsWith("What time"))!;
  for (const width of [390, 1440]) {
    await page.setViewportSize({ width, height: 900 });
    await page.goto(`${url}/console#/chat/${withTools.id}`);
    await page.reload();
    await page.locator("#chat-log .msg-assistant").first().waitFor();
    await openSettings();
    expect({ width, violations: await axeViolations(page) }).toEqual({ width, violations: [] });
    expect({ width, stray: await strayTexts(page) }).toEqual({ width, stray: [] });
    // Nothing wider than the window.
    expect(await page.evaluate(() => document.documentElement.scrollWidth <= innerWidth)).toBe(true);
    await shot(`chat-tools-${width}`);
  }
  await page.setViewportSize({ width: 390, height: 900 });
  const first = conversations()[0]!;
  await page.goto(`${url}/console#/chat/${first.id}`);
  await page.reload();
  await page.locator("#chat-log .msg").first().waitFor();
  await shot("chat-390");
  await page.setViewportSize({ width: 1440, height: 900 });
}, 90_000);
