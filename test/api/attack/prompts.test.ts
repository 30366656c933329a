import { afterAll, beforeAll, expect, test } from "bun:test";
import { errorOf, post, startAttackServer, whileOthersAsk, type AttackServer } from "./server";

// Issue 41's prompt findings against a real server process: a huge prompt is refused without
// freezing the other users (H1), a client that leaves during its prompt stops its work and pays
// only for what was done (M3), and SIGTERM ends the process in bounded time whatever runs.

let s: AttackServer;
beforeAll(async () => {
  s = await startAttackServer();
}, 180_000);
afterAll(() => s.stop());

const HUGE = "lorem ipsum dolor sit amet ".repeat(Math.round(62_000_000 / 27));

test("H1: a 62 MB prompt is refused for its length, and other users are answered meanwhile (every route froze 20-26 s before)", async () => {
  const { value, slowestS, answered } = await whileOthersAsk(s, async () => {
    const started = performance.now();
    const chat = await errorOf(await post(s, "/v1/chat/completions", { model: "chat", max_tokens: 4, messages: [{ role: "user", content: HUGE }] }));
    const count = await errorOf(await post(s, "/v1/messages/count_tokens", { model: "chat", messages: [{ role: "user", content: HUGE }] }));
    return { chat, count, seconds: (performance.now() - started) / 1000 };
  });
  expect(s.alive()).toBe(true);
  expect(value.chat).toMatchObject({ status: 400, code: "context_length_exceeded" });
  expect(value.count).toMatchObject({ status: 400, code: "invalid_request_error" });
  expect(value.count.message).toMatch(/^prompt is too long: \d+ tokens > 4096 maximum$/);
  expect(value.seconds).toBeLessThan(15);
  expect(answered).toBeGreaterThan(0);
  expect(slowestS).toBeLessThan(3);
}, 120_000);

test("H1's class: a 20 MB embeddings input and classifier pair, and 2,048 inputs over the length, are refused before tokenizing, while other users are answered (18-36 s of the event loop each before)", async () => {
  const big = HUGE.slice(0, 20_000_000);
  const dense = HUGE.slice(0, 8000);
  const { value, slowestS, answered } = await whileOthersAsk(s, async () => {
    const started = performance.now();
    const answers = [
      await errorOf(await post(s, "/v1/embeddings", { model: "embed", input: big })),
      await errorOf(await post(s, "/v1/embeddings", { model: "embed", input: Array.from({ length: 2048 }, () => dense) })),
      await errorOf(await post(s, "/v1/classify", { model: "nli", pairs: [{ premise: big, hypothesis: "x" }] })),
      await errorOf(await post(s, "/v1/classify", { model: "nli", input: Array.from({ length: 256 }, () => HUGE.slice(0, 60_000)) })),
    ];
    return { answers, seconds: (performance.now() - started) / 1000 };
  });
  expect(s.alive()).toBe(true);
  for (const a of value.answers) expect(a).toMatchObject({ status: 400, code: "context_length_exceeded" });
  expect(value.seconds).toBeLessThan(10);
  expect(answered).toBeGreaterThan(0);
  expect(slowestS).toBeLessThan(3);
}, 120_000);

test("M3: a client that leaves while its prompt is decoded stops the work; the rest of the prompt is neither decoded nor billed", async () => {
  const text = Array.from({ length: 1100 }, (_, i) => `word${i % 97} number ${i}.`).join(" ");
  const counted = (await (await post(s, "/v1/messages/count_tokens", { model: "long", messages: [{ role: "user", content: text }] })).json()) as { input_tokens: number };
  expect(counted.input_tokens).toBeGreaterThan(8000);
  const controller = new AbortController();
  const { slowestS } = await whileOthersAsk(
    s,
    async () => {
      const gone = post(s, "/v1/chat/completions", { model: "long", max_tokens: 5, messages: [{ role: "user", content: text }] }, s.attacker, { signal: controller.signal }).catch(() => null);
      await Bun.sleep(700);
      controller.abort();
      await gone;
      // its end is recorded once the loop let go of its slot
      for (let i = 0; i < 300 && !/"status":499/.test(s.log()); i++) await Bun.sleep(20);
    },
    "long",
  );
  expect(slowestS).toBeLessThan(5);
  expect(s.log()).toMatch(/"route":"\/v1\/chat\/completions","status":499/);
  const row = s.store().query<{ input_tokens: number; output_tokens: number }, []>(
    "SELECT input_tokens, output_tokens FROM usage WHERE account_id = (SELECT id FROM accounts WHERE name = 'attacker') AND model = 'long' ORDER BY rowid DESC LIMIT 1",
  ).get();
  expect(row).not.toBeNull();
  expect(row!.output_tokens).toBe(0);
  expect(row!.input_tokens).toBeLessThan(counted.input_tokens);
}, 120_000);

test("SIGTERM ends the process within shutdown_timeout_s and its margin while a stream generates, a prompt is decoded and a grammar runs", async () => {
  const own = await startAttackServer();
  try {
    const long = Array.from({ length: 1100 }, (_, i) => `word${i % 97} number ${i}.`).join(" ");
    const work = [
      post(own, "/v1/chat/completions", { model: "chat", max_tokens: 3000, stream: true, messages: [{ role: "user", content: "go on" }] }, own.other),
      post(own, "/v1/chat/completions", { model: "long", max_tokens: 5, messages: [{ role: "user", content: long }] }),
      post(own, "/v1/chat/completions", { model: "chat", max_tokens: 3000, chat_template_kwargs: { enable_thinking: false }, messages: [{ role: "user", content: "a" }], response_format: { type: "json_schema", json_schema: { name: "a", schema: { type: "string", pattern: "^(a{0,10}){0,100}$" } } } }),
    ].map((p) => p.then((r) => r.text()).catch(() => null));
    await Bun.sleep(500);
    const started = performance.now();
    process.kill(own.pid, "SIGTERM");
    for (let i = 0; i < 400 && own.alive(); i++) await Bun.sleep(50);
    const seconds = (performance.now() - started) / 1000;
    expect(own.alive()).toBe(false);
    // shutdown_timeout_s = 3, and the stop's own margin (cli/commands/serve.ts SHUTDOWN_MARGIN_S)
    expect(seconds).toBeLessThan(3 + 15);
    await Promise.all(work);
  } finally {
    await own.stop();
  }
}, 120_000);
