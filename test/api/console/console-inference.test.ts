import { afterAll, beforeAll, expect, test } from "bun:test";
import { BASE } from "../../helpers/app";
import { chatTestApp, forced } from "../../helpers/chat";
import { consoleAccount, consoleClient, type ConsoleClient } from "./client";

// The console's chat acts as the signed-in account (issue 48): POST /console/api/v1/<endpoint> with
// the session cookie and the CSRF token, served through the whole API edge with the account's
// console key, billed to the account, under the request id the page sees.

let t: Awaited<ReturnType<typeof chatTestApp>>;
let alice: ConsoleClient;

beforeAll(async () => {
  t = await chatTestApp({ config: { limits: { premium_rpm: 0 } } });
  alice = consoleClient(t);
  await alice.signIn("alice", await consoleAccount(t, "alice", { creditUsd: 5 }));
});
afterAll(() => t.close());

const usageOf = (id: string) => t.deps.store.kind === "sqlite" ? (t.deps.store.db.query("SELECT * FROM usage WHERE request_id = ?").get(id) as any) : null;
const keyRow = (id: string) => (t.deps.store.kind === "sqlite" ? (t.deps.store.db.query("SELECT * FROM api_keys WHERE id = ?").get(id) as any) : null);
const chatBody = (o: Record<string, unknown> = {}) => ({ model: "chat", messages: [{ role: "user", content: "Hello there" }], max_tokens: 8, ...o });

test("a signed-in session's chat is served and billed to its account through the account's console key, under the request id it is answered with", async () => {
  const before = (await t.deps.accounts.getAccount("alice")).balance_micros;
  const res = await alice.call("POST", "/console/api/v1/chat/completions", chatBody());
  expect(res.status).toBe(200);
  const body = (await res.json()) as any;
  expect(body.object).toBe("chat.completion");
  const id = res.headers.get("x-request-id")!;
  const row = usageOf(id);
  expect(row).toMatchObject({ model: "chat", endpoint: "/v1/chat/completions", input_tokens: body.usage.prompt_tokens, output_tokens: body.usage.completion_tokens });
  expect(row.cost_micros).toBeGreaterThan(0);
  expect((await t.deps.accounts.getAccount("alice")).balance_micros).toBe(before - row.cost_micros);
  const key = keyRow(row.key_id);
  expect({ purpose: key.purpose, kind: key.kind, name: key.name }).toEqual({ purpose: "console", kind: "premium", name: "Console" });
  // The page reads what the answer cost by its request id.
  const cost = await alice.json("GET", `/console/api/requests/${id}`);
  expect(cost).toMatchObject({ request_id: id, model: "chat", input_tokens: body.usage.prompt_tokens, output_tokens: body.usage.completion_tokens, cost_usd: row.cost_micros / 1e6 });
  // One console key, reused; not among the keys the Keys page lists.
  const again = await alice.call("POST", "/console/api/v1/chat/completions", chatBody());
  expect(usageOf(again.headers.get("x-request-id")!).key_id).toBe(row.key_id);
  const keys = (await alice.json("GET", "/console/api/keys")).data as { id: string }[];
  expect(keys.map((k) => k.id)).not.toContain(row.key_id);
  const recent = (await alice.json("GET", "/console/api/usage")).recent as { key: string }[];
  expect(recent[0]!.key).toBe("console chat");
});

test("the console key cannot be rotated or given scopes; revoked, the next request makes a new one", async () => {
  const res = await alice.call("POST", "/console/api/v1/chat/completions", chatBody());
  const keyId = usageOf(res.headers.get("x-request-id")!).key_id;
  await expect(t.deps.accounts.rotateKey(keyId)).rejects.toThrow(/console's own key/);
  await expect(t.deps.accounts.setScope(keyId, "rental", true)).rejects.toThrow(/console's own key/);
  await t.deps.accounts.revokeKey(keyId);
  const next = await alice.call("POST", "/console/api/v1/chat/completions", chatBody());
  expect(next.status).toBe(200);
  const nextKey = usageOf(next.headers.get("x-request-id")!).key_id;
  expect(nextKey).not.toBe(keyId);
  expect(keyRow(nextKey).purpose).toBe("console");
});

test("a stream the page stops is billed for what was sent before the stop, and the answer streams through unchanged", async () => {
  // The answer forced to run the whole 400 tokens when left alone.
  const streamed = chatBody({ messages: [{ role: "user", content: forced("one two three four ".repeat(120)) }], stream: true, stream_options: { include_usage: true }, max_tokens: 400 });
  // The same request left to run: what the stopped one would have cost.
  const whole = await alice.call("POST", "/console/api/v1/chat/completions", { ...streamed, stream: false, stream_options: undefined });
  const wholeTokens = ((await whole.json()) as any).usage.completion_tokens as number;
  expect(wholeTokens).toBe(400);
  const ctl = new AbortController();
  const res = await t.app.handle(
    new Request(`${BASE}/console/api/v1/chat/completions`, {
      method: "POST",
      signal: ctl.signal,
      headers: { origin: BASE, cookie: alice.cookie!, "x-csrf-token": alice.csrf!, "content-type": "application/json" },
      body: JSON.stringify(streamed),
    }),
  );
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toContain("text/event-stream");
  const id = res.headers.get("x-request-id")!;
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let text = "";
  let chunks = 0;
  while (chunks < 6) {
    const { value, done } = await reader.read();
    if (done) break;
    text += decoder.decode(value, { stream: true });
    chunks = (text.match(/"delta":\{"content"/g) ?? []).length;
  }
  ctl.abort();
  await reader.cancel().catch(() => {});
  let row: any = null;
  for (let i = 0; i < 100 && !row; i++) (row = usageOf(id)) || (await Bun.sleep(50));
  expect(row).not.toBeNull();
  // Billed for what was sent (the chunks read, and those made while the stop travelled: the tiny
  // model makes a token in about a millisecond), not for the whole answer.
  expect(chunks).toBe(6);
  expect(row.output_tokens).toBeGreaterThanOrEqual(chunks);
  expect(row.output_tokens).toBeLessThan(100);
});

test("what the console's inference route refuses: no session, no CSRF token, another origin, an endpoint the console does not use, a body that is not an object", async () => {
  const anon = consoleClient(t);
  const noSession = await anon.call("POST", "/console/api/v1/chat/completions", chatBody());
  expect([noSession.status, ((await noSession.json()) as any).error.code]).toEqual([401, "not_signed_in"]);
  const noCsrf = await alice.call("POST", "/console/api/v1/chat/completions", chatBody(), { "x-csrf-token": "wrong" });
  expect([noCsrf.status, ((await noCsrf.json()) as any).error.code]).toEqual([403, "csrf_failed"]);
  const crossSite = await alice.call("POST", "/console/api/v1/chat/completions", chatBody(), { origin: "http://evil.example" });
  expect(crossSite.status).toBe(403);
  const other = await alice.call("POST", "/console/api/v1/embeddings", { model: "chat", input: "x" });
  expect([other.status, ((await other.json()) as any).error.code]).toEqual([404, "not_found"]);
  const notObject = await alice.call("POST", "/console/api/v1/chat/completions", [1, 2]);
  expect(notObject.status).toBe(400);
  // The API's own validation answers in its format: a missing model.
  const bad = await alice.call("POST", "/console/api/v1/chat/completions", { messages: [] });
  expect(bad.status).toBe(400);
  expect(((await bad.json()) as any).error.message).toBeString();
  // Nothing of this reached the meter.
  expect(usageOf(noSession.headers.get("x-request-id") ?? "none")).toBeNull();
});

test("an account without credit that holds its free key chats on the free key's trial", async () => {
  const bob = consoleClient(t);
  await bob.signIn("bob", await consoleAccount(t, "bob"));
  const free = await t.deps.accounts.createKey({ account: "bob", kind: "free" });
  const res = await bob.call("POST", "/console/api/v1/chat/completions", chatBody());
  expect(res.status).toBe(200);
  const row = usageOf(res.headers.get("x-request-id")!);
  expect(row.key_id).toBe(free.info.id);
  expect(row.trial_tokens).toBeGreaterThan(0);
  expect(row.cost_micros).toBe(0);
  // Without credit and without a free key: the console key, which answers that credit is needed.
  const carol = consoleClient(t);
  await carol.signIn("carol", await consoleAccount(t, "carol"));
  const broke = await carol.call("POST", "/console/api/v1/chat/completions", chatBody());
  expect(broke.status).toBe(402);
});

test("the console key is held to the premium rate limit like any premium key", async () => {
  const rl = await chatTestApp({ config: { limits: { premium_rpm: 2 } } });
  try {
    const dave = consoleClient(rl);
    await dave.signIn("dave", await consoleAccount(rl, "dave", { creditUsd: 1 }));
    const statuses: number[] = [];
    for (let i = 0; i < 3; i++) statuses.push((await dave.call("POST", "/console/api/v1/chat/completions", chatBody({ max_tokens: 1 }))).status);
    expect(statuses).toEqual([200, 200, 429]);
  } finally {
    await rl.close();
  }
});

test("what a request used and cost is read back by its id on both stores, and only by its own account", async () => {
  const { backendApp, BACKENDS } = await import("../../helpers/backends");
  for (const backend of BACKENDS) {
    const b = await backendApp(backend);
    try {
      const erin = consoleClient(b.t);
      await erin.signIn("erin", await consoleAccount(b.t, "erin", { creditUsd: 1 }));
      const other = consoleClient(b.t);
      await other.signIn("frank", await consoleAccount(b.t, "frank", { creditUsd: 1 }));
      const key = await b.t.deps.accounts.createKey({ account: "erin", kind: "premium" });
      const [acct] = await b.rows<{ id: string }>("SELECT id FROM accounts WHERE name = ?", "erin");
      await b.run(
        "INSERT INTO usage (request_id, account_id, key_id, model, endpoint, input_tokens, output_tokens, cached_tokens, images, batch, cost_micros, trial_tokens, created_at) VALUES (?, ?, ?, 'chat', '/v1/chat/completions', 12, 34, 5, 0, 0, 4321, 0, 1800000000000)",
        "req_read_back", acct!.id, key.info.id,
      );
      expect(await erin.json("GET", "/console/api/requests/req_read_back")).toEqual({
        request_id: "req_read_back", model: "chat", endpoint: "/v1/chat/completions", input_tokens: 12, output_tokens: 34, cached_tokens: 5, images: 0, trial_tokens: 0, created_at: 1_800_000_000, cost_usd: 0.004321,
      });
      expect((await other.call("GET", "/console/api/requests/req_read_back")).status).toBe(404);
      expect((await erin.call("GET", "/console/api/requests/req_unknown")).status).toBe(404);
    } finally {
      await b.t.close();
    }
  }
});
