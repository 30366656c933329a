import { afterEach, expect, test } from "bun:test";
import { rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ensureChatModel } from "../../models/cache";
import { tempDir } from "../helpers/app";
import { serveCli } from "../helpers/cli";

// `appliance serve` as operators run it: SIGTERM drains running requests (streams finish, new
// connections are refused), a timeout cuts what runs too long, SIGHUP reloads limits and prices.

const dirs: string[] = [];
const children: ReturnType<typeof Bun.spawn>[] = [];
afterEach(() => {
  for (const c of children.splice(0)) c.kill("SIGKILL");
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

async function configFile(dir: string, extra = "") {
  const chat = await ensureChatModel("chat");
  const file = join(dir, "config.toml");
  writeFileSync(
    file,
    `[server]\nlog_level = "info"\n${extra}\n[engines]\ndevice = "cpu"\nthreads = 1\n[rentals]\ndiscover = false\n` +
      `[[models]]\nid = "chat"\nname = "chat"\nkind = "chat"\nfiles = { model = "${chat}" }\nmax_context = 4096\nslots = 2\nload = "start"\n`,
  );
  return file;
}

async function start(serverExtra = "") {
  const dir = tempDir("appliance-life-");
  dirs.push(dir);
  const config = await configFile(dir, serverExtra);
  const { child, url, banner } = await serveCli(dir, ["--port", "0"], { APPLIANCE_CONFIG: config });
  children.push(child);
  const key = /(sk-apl-[0-9A-Za-z]{44})/.exec(banner)![1]!;
  const logs: string[] = [];
  const reading = (async () => {
    for await (const chunk of child.stdout as ReadableStream<Uint8Array>) logs.push(new TextDecoder().decode(chunk));
  })();
  /** Exit code, once the process has exited and all it logged has been read. */
  const exited = async () => {
    const code = await child.exited;
    await reading;
    return code;
  };
  return { child, url, key, dir, config, exited, logs: () => logs.join("") };
}

/** A schema the answer cannot end before: at least 150 integers (the grammar enforces minItems). */
const LONG = {
  type: "json_schema",
  json_schema: { name: "long", schema: { type: "object", properties: { xs: { type: "array", items: { type: "integer" }, minItems: 150 } }, required: ["xs"] } },
};

const chat = (url: string, key: string, body: Record<string, unknown>) =>
  fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "chat", messages: [{ role: "user", content: "Tell me a long story." }], ...body }),
  });

test("SIGTERM: a running stream finishes to [DONE], new connections are refused, the process exits 0", async () => {
  const s = await start();
  const res = await chat(s.url, s.key, { stream: true, max_tokens: 3000, response_format: LONG, chat_template_kwargs: { enable_thinking: false } });
  const reader = res.body!.getReader();
  let text = new TextDecoder().decode((await reader.read()).value);
  s.child.kill("SIGTERM");
  await Bun.sleep(200);
  const refused = await fetch(`${s.url}/health`).then(() => false, () => true);
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    text += new TextDecoder().decode(value);
  }
  expect(refused).toBe(true);
  expect(text.trim().endsWith("data: [DONE]")).toBe(true);
  // It ran on long after SIGTERM (which came after its first chunk): 150 integers at least.
  expect(text).toContain('"finish_reason"');
  expect(Number(/"completion_tokens":(\d+)/.exec(text)?.[1])).toBeGreaterThanOrEqual(300);
  expect(await s.exited()).toBe(0);
  expect(s.logs()).toContain("shutdown: running requests finished");
  expect(s.logs()).toContain('"msg":"stopped"');
}, 60_000);

test("SIGTERM with a short timeout cuts a request that runs too long, then exits", async () => {
  const s = await start("shutdown_timeout_s = 0.3");
  const res = await chat(s.url, s.key, { stream: true, max_tokens: 3000, response_format: LONG, chat_template_kwargs: { enable_thinking: false } });
  const reader = res.body!.getReader();
  await reader.read();
  // Keep reading: a client that goes away ends its stream itself (and that is not a cut).
  const reading = (async () => {
    try {
      while (!(await reader.read()).done);
    } catch {}
  })();
  s.child.kill("SIGTERM");
  expect(await s.exited()).toBe(0);
  await reading;
  expect(s.logs()).toContain("requests still running after the timeout are cut");
}, 60_000);

test("SIGTERM's timeout answers a request still queued for a slot with a 503 it can retry, and logs no 500", async () => {
  const s = await start("shutdown_timeout_s = 0.5");
  const long = () => chat(s.url, s.key, { stream: true, max_tokens: 3000, response_format: LONG, chat_template_kwargs: { enable_thinking: false } });
  // Both slots stream; their clients keep reading until the cut.
  const readers = (await Promise.all([long(), long()])).map((r) => r.body!.getReader());
  for (const r of readers) await r.read();
  const draining = readers.map(async (r) => {
    try {
      while (!(await r.read()).done);
    } catch {}
  });
  const queued = chat(s.url, s.key, { max_tokens: 4 });
  await Bun.sleep(200);
  s.child.kill("SIGTERM");
  const res = await queued;
  expect(res.status).toBe(503);
  expect(res.headers.get("retry-after")).toBe("5");
  expect(((await res.json()) as any).error).toMatchObject({ code: "model_unavailable", message: "the server is shutting down; retry once it is back" });
  expect(await s.exited()).toBe(0);
  await Promise.all(draining);
  expect(s.logs()).not.toContain('"status":500');
  expect(s.logs()).not.toContain("unhandled error");
}, 60_000);

test("SIGHUP reloads limits (a new rpm cap applies at once); a broken config is refused and the old one kept", async () => {
  const s = await start();
  for (let i = 0; i < 3; i++) expect((await chat(s.url, s.key, { max_tokens: 1 })).status).toBe(200);
  writeFileSync(s.config, (await Bun.file(s.config).text()).replace("[engines]", "[limits]\npremium_rpm = 2\n[engines]"));
  s.child.kill("SIGHUP");
  await Bun.sleep(500);
  expect(s.logs()).toContain('"msg":"config reloaded"');
  expect(s.logs()).toContain("limits.premium_rpm");
  const statuses = [];
  for (let i = 0; i < 3; i++) statuses.push((await chat(s.url, s.key, { max_tokens: 1 })).status);
  expect(statuses).toEqual([200, 200, 429]);

  writeFileSync(s.config, "[server\nbroken");
  s.child.kill("SIGHUP");
  await Bun.sleep(500);
  expect(s.logs()).toContain("config reload failed; the running config is kept");
  expect((await fetch(`${s.url}/health`)).status).toBe(200);
}, 60_000);
