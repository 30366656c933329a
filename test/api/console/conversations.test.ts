import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { rmSync } from "node:fs";
import { MAX_CONVERSATION_BYTES, MAX_CONVERSATIONS_PER_ACCOUNT } from "../../../src/2-services/console/conversations";
import { openStore } from "../../../src/4-store/db";
import { sqliteStore } from "../../../src/4-store/store";
import { BASE, tempDir, testApp } from "../../helpers/app";
import { backendApp, BACKENDS, type BackendApp } from "../../helpers/backends";
import { consoleAccount, consoleClient, type ConsoleClient } from "./client";

// The console Chat page's conversations over the app (issue 48), on both stores: the shapes the
// page is written against, one account never reaching another's conversations (404, never 403),
// session and CSRF on every route, each bad input a 400 naming its field, the bounds, and
// conversations surviving a restart on the same SQLite file.

const PNG = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";
const user = (content: string, more: Record<string, unknown> = {}) => ({ role: "user", content, ...more });
const reply = {
  role: "assistant",
  content: "**hello**",
  reasoning: "thinking…",
  tool_calls: [{ id: "call_1", name: "lookup", arguments: '{"q":"x"}' }],
  model: "tiny-chat",
  request_id: "req_1",
  usage: { input_tokens: 12, output_tokens: 3, cached_tokens: 0, cost_usd: 0.0001 },
  finish: "stop",
  created_at: 1_800_000_000,
};

async function error(res: Response) {
  const body = (await res.json()) as any;
  return { status: res.status, code: body.error?.code ?? null, param: body.error?.param ?? null, message: String(body.error?.message) };
}

for (const backend of BACKENDS) {
  describe(`on ${backend}`, () => {
    let b: BackendApp;
    let alice: ConsoleClient;
    let bob: ConsoleClient;
    beforeAll(async () => {
      b = await backendApp(backend);
      for (const name of ["alice", "bob"]) await consoleAccount(b.t, name);
      [alice, bob] = [consoleClient(b.t), consoleClient(b.t)];
      expect((await alice.signIn("alice", "pw-alice-0123456789")).status).toBe(200);
      expect((await bob.signIn("bob", "pw-bob-0123456789")).status).toBe(200);
    }, 30_000);
    afterAll(() => b.t.close());

    test("create, append, read, rename, list and delete: the shapes the Chat page reads", async () => {
      const made = await alice.json("POST", "/console/api/conversations", { title: "  Trip plans  ", model: "tiny-chat", settings: { system: "be brief", temperature: 0.7, max_tokens: 256, tools: "[]", image: { size: "256x256", n: 1, seed: 7, steps: 4 } } });
      expect(made).toEqual({
        id: expect.stringMatching(/^conv_[0-9A-Za-z]{24}$/),
        title: "Trip plans",
        model: "tiny-chat",
        settings: { system: "be brief", temperature: 0.7, max_tokens: 256, tools: "[]", image: { size: "256x256", n: 1, seed: 7, steps: 4 } },
        created_at: expect.any(Number),
        updated_at: expect.any(Number),
        message_count: 0,
        messages: [],
      });
      expect(Math.abs(made.created_at - Date.now() / 1000)).toBeLessThan(60);
      const bare = await alice.json("POST", "/console/api/conversations", {});
      expect(bare).toMatchObject({ title: "New conversation", model: null, settings: {}, message_count: 0 });

      const appended = await alice.json("POST", `/console/api/conversations/${made.id}/messages`, { keep: 0, messages: [user("Where to?", { images: [PNG] }), reply] });
      expect(appended.conversation).toEqual({ ...made, messages: undefined, message_count: 2, updated_at: expect.any(Number) });
      expect(appended.conversation).not.toHaveProperty("messages");
      expect(appended.messages).toEqual([
        { seq: 0, role: "user", content: "Where to?", images: [PNG], created_at: expect.any(Number) },
        { seq: 1, ...reply },
      ]);
      expect(Math.abs(appended.messages[0].created_at - Date.now() / 1000)).toBeLessThan(60);

      const regenerated = await alice.json("POST", `/console/api/conversations/${made.id}/messages`, { keep: 1, messages: [{ role: "assistant", content: "", finish: "error", error: "model_unavailable" }] });
      expect(regenerated.messages.map((m: any) => m.seq)).toEqual([1]);
      const read = await alice.json("GET", `/console/api/conversations/${made.id}`);
      expect(read).toMatchObject({ id: made.id, title: "Trip plans", message_count: 2 });
      expect(read.messages).toEqual([appended.messages[0], { seq: 1, role: "assistant", content: "", finish: "error", error: "model_unavailable", created_at: expect.any(Number) }]);

      const renamed = await alice.json("PATCH", `/console/api/conversations/${made.id}`, { title: "Paris", model: null, settings: { temperature: 1 } });
      expect(renamed).toEqual({ id: made.id, title: "Paris", model: null, settings: { temperature: 1 }, created_at: made.created_at, updated_at: expect.any(Number), message_count: 2 });

      const listed = await alice.json("GET", "/console/api/conversations");
      expect(listed.data.map((c: any) => c.id).sort()).toEqual([made.id, bare.id].sort());
      expect(listed.data.find((c: any) => c.id === made.id)).toEqual({ id: made.id, title: "Paris", model: null, created_at: made.created_at, updated_at: renamed.updated_at, message_count: 2 });
      expect((await alice.json("GET", "/console/api/conversations?q=PAR")).data.map((c: any) => c.id)).toEqual([made.id]);
      expect((await alice.json("GET", "/console/api/conversations?q=%25")).data).toEqual([]);
      expect((await alice.json("GET", "/console/api/conversations?limit=1")).data.length).toBe(1);

      expect(await alice.json("DELETE", `/console/api/conversations/${made.id}`)).toEqual({ id: made.id, deleted: true });
      expect((await b.rows("SELECT COUNT(*) AS n FROM console_messages WHERE conversation_id = ?", made.id))[0]!.n).toBe(0);
      expect(await error(await alice.call("GET", `/console/api/conversations/${made.id}`))).toMatchObject({ status: 404, code: "not_found" });
      expect(await error(await alice.call("DELETE", `/console/api/conversations/${made.id}`))).toMatchObject({ status: 404, code: "not_found" });
    });

    test("another account's conversation is 404 on every route, and never listed", async () => {
      const mine = await alice.json("POST", "/console/api/conversations", { title: "private plans" });
      await alice.json("POST", `/console/api/conversations/${mine.id}/messages`, { keep: 0, messages: [user("secret")] });
      const calls: [string, string, unknown?][] = [
        ["GET", `/console/api/conversations/${mine.id}`],
        ["PATCH", `/console/api/conversations/${mine.id}`, { title: "taken" }],
        ["POST", `/console/api/conversations/${mine.id}/messages`, { keep: 0, messages: [user("overwrite")] }],
        ["DELETE", `/console/api/conversations/${mine.id}`],
      ];
      for (const [method, path, body] of calls) {
        const res = await bob.call(method, path, body);
        const err = await error(res);
        expect({ method, status: err.status, code: err.code, leaks: err.message.includes("secret") || err.message.includes("private") }).toEqual({ method, status: 404, code: "not_found", leaks: false });
      }
      expect((await bob.json("GET", "/console/api/conversations?q=private")).data).toEqual([]);
      const still = await alice.json("GET", `/console/api/conversations/${mine.id}`);
      expect(still).toMatchObject({ title: "private plans", message_count: 1, messages: [{ seq: 0, content: "secret" }] });
    });

    test("no session is 401 on every route; a write without the X-CSRF-Token is 403 csrf_failed", async () => {
      const mine = await alice.json("POST", "/console/api/conversations", {});
      const routes: [string, string, unknown?][] = [
        ["GET", "/console/api/conversations"],
        ["POST", "/console/api/conversations", {}],
        ["GET", `/console/api/conversations/${mine.id}`],
        ["PATCH", `/console/api/conversations/${mine.id}`, { title: "x" }],
        ["DELETE", `/console/api/conversations/${mine.id}`],
        ["POST", `/console/api/conversations/${mine.id}/messages`, { keep: 0, messages: [] }],
      ];
      for (const [method, path, body] of routes) {
        const headers: Record<string, string> = { origin: BASE, ...(body === undefined ? {} : { "content-type": "application/json" }) };
        const res = await b.t.app.handle(new Request(BASE + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) }));
        expect({ method, path, ...(await error(res)) }).toMatchObject({ method, path, status: 401, code: "not_signed_in" });
        if (method === "GET") continue;
        const noToken = await alice.call(method, path, body, { "x-csrf-token": "" });
        expect({ method, path, ...(await error(noToken)) }).toMatchObject({ method, path, status: 403, code: "csrf_failed" });
        const crossSite = await alice.call(method, path, body, { origin: "https://evil.example" });
        expect({ method, path, status: crossSite.status }).toEqual({ method, path, status: 403 });
      }
      expect((await alice.json("GET", `/console/api/conversations/${mine.id}`)).message_count).toBe(0);
    });

    test("each bad input is a 400 naming its field, and nothing is kept", async () => {
      const c = await alice.json("POST", "/console/api/conversations", {});
      const append = (body: unknown) => alice.call("POST", `/console/api/conversations/${c.id}/messages`, body);
      const cases: [string, Promise<Response>][] = [
        ["messages[0].role", append({ keep: 0, messages: [{ role: "system", content: "x" }] })],
        ["messages[0].color", append({ keep: 0, messages: [user("x", { color: "red" })] })],
        ["extra", append({ keep: 0, messages: [], extra: 1 })],
        ["messages[0].images", append({ keep: 0, messages: [user("x", { images: [PNG, PNG, PNG, PNG, PNG] })] })],
        ["messages[0].images[0]", append({ keep: 0, messages: [user("x", { images: ["data:text/plain;base64,aGk="] })] })],
        ["messages[0].images[1]", append({ keep: 0, messages: [user("x", { images: [PNG, "data:image/png;base64,@@@@"] })] })],
        ["messages[0].images[0]", append({ keep: 0, messages: [user("x", { images: ["data:image/png;base64,aGVsbG8gd29ybGQh"] })] })],
        ["messages[0].images[0]", append({ keep: 0, messages: [user("x", { images: ["https://example.com/cat.png"] })] })],
        ["messages[0].usage.cost_usd", append({ keep: 0, messages: [{ ...reply, usage: { cost_usd: -1 } }] })],
        ["messages[0].finish", append({ keep: 0, messages: [{ ...reply, finish: "done" }] })],
        ["messages[0].content", append({ keep: 0, messages: [{ role: "user" }] })],
        ["messages", append({ keep: 0, messages: [user("1"), user("2"), user("3"), user("4"), user("5")] })],
        ["keep", append({ keep: -1, messages: [] })],
        ["keep", append({ keep: 1.5, messages: [] })],
        ["keep", append({ messages: [] })],
        ["title", alice.call("POST", "/console/api/conversations", { title: "x".repeat(201) })],
        ["model", alice.call("POST", "/console/api/conversations", { model: 5 })],
        ["settings.temperature", alice.call("POST", "/console/api/conversations", { settings: { temperature: 3 } })],
        ["settings.top_k", alice.call("POST", "/console/api/conversations", { settings: { top_k: 3 } })],
        ["color", alice.call("POST", "/console/api/conversations", { color: "red" })],
        ["title", alice.call("PATCH", `/console/api/conversations/${c.id}`, { title: "   " })],
        ["limit", alice.call("GET", "/console/api/conversations?limit=0")],
        ["limit", alice.call("GET", "/console/api/conversations?limit=501")],
        ["limit", alice.call("GET", "/console/api/conversations?limit=abc")],
        ["limit", alice.call("GET", "/console/api/conversations?limit=1.5")],
      ];
      const wrong = [];
      for (const [param, pending] of cases) {
        const err = await error(await pending);
        if (err.status !== 400 || err.code !== null || err.param !== param || !err.message.startsWith(`${param}: `)) wrong.push({ param, err });
      }
      expect(wrong).toEqual([]);
      expect(await alice.json("GET", `/console/api/conversations/${c.id}`)).toMatchObject({ title: "New conversation", message_count: 0, messages: [] });
    });

    test("keep past the messages the conversation holds is 409 conflict: it changed elsewhere", async () => {
      const c = await alice.json("POST", "/console/api/conversations", {});
      await alice.json("POST", `/console/api/conversations/${c.id}/messages`, { keep: 0, messages: [user("a"), reply] });
      const err = await error(await alice.call("POST", `/console/api/conversations/${c.id}/messages`, { keep: 3, messages: [user("b")] }));
      expect(err).toMatchObject({ status: 409, code: "conflict", param: "keep" });
      expect(err.message).toContain("changed elsewhere");
      expect((await alice.json("GET", `/console/api/conversations/${c.id}`)).message_count).toBe(2);
    });

    test("an append that would take a conversation past 32 MiB is refused, nothing written", async () => {
      const c = await alice.json("POST", "/console/api/conversations", {});
      await alice.json("POST", `/console/api/conversations/${c.id}/messages`, { keep: 0, messages: [user("a")] });
      // As if it had grown to the brim (filling 32 MiB through the API is slow and proves nothing more).
      await b.run("UPDATE console_conversations SET bytes = ? WHERE id = ?", MAX_CONVERSATION_BYTES - 10, c.id);
      const err = await error(await alice.call("POST", `/console/api/conversations/${c.id}/messages`, { keep: 1, messages: [user("one more")] }));
      expect(err).toMatchObject({ status: 400, code: null, param: "messages" });
      expect(err.message).toContain(String(MAX_CONVERSATION_BYTES));
      expect((await alice.json("GET", `/console/api/conversations/${c.id}`)).message_count).toBe(1);
    });

    test("an account keeps at most 1,000 conversations: one more is 409 conflict", async () => {
      const account = (await b.t.deps.accounts.getAccount("bob")).id;
      const have = (await b.rows("SELECT COUNT(*) AS n FROM console_conversations WHERE account_id = ?", account))[0]!.n as number;
      await b.run(
        `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
         INSERT INTO console_conversations (id, account_id, title, model, settings, message_count, bytes, created_at, updated_at)
         SELECT 'conv_fill' || i, ?, 'filler', NULL, '{}', 0, 0, 1, 1 FROM n`,
        MAX_CONVERSATIONS_PER_ACCOUNT - have - 1,
        account,
      );
      expect((await bob.call("POST", "/console/api/conversations", {})).status).toBe(200);
      const err = await error(await bob.call("POST", "/console/api/conversations", {}));
      expect(err).toMatchObject({ status: 409, code: "conflict" });
      expect(err.message).toContain("delete some");
      expect((await bob.json("GET", "/console/api/conversations?limit=500")).data.length).toBe(500);
      // Alice's count is her own.
      expect((await alice.call("POST", "/console/api/conversations", {})).status).toBe(200);
    });
  });
}

test("conversations survive a restart of the app on the same SQLite file", async () => {
  const dir = tempDir();
  try {
    const first = testApp({ store: sqliteStore(openStore(dir)) });
    const pw = await consoleAccount(first, "carol");
    const c1 = consoleClient(first);
    await c1.signIn("carol", pw);
    const made = await c1.json("POST", "/console/api/conversations", { title: "Kept", settings: { system: "s" } });
    await c1.json("POST", `/console/api/conversations/${made.id}/messages`, { keep: 0, messages: [user("hi ✓", { images: [PNG] }), reply] });
    const before = await c1.json("GET", `/console/api/conversations/${made.id}`);
    await first.close();

    const second = testApp({ store: sqliteStore(openStore(dir)) });
    try {
      const c2 = consoleClient(second);
      expect((await c2.signIn("carol", pw)).status).toBe(200);
      expect(await c2.json("GET", `/console/api/conversations/${made.id}`)).toEqual(before);
      expect(before.messages).toEqual([{ seq: 0, ...user("hi ✓", { images: [PNG] }), created_at: expect.any(Number) }, { seq: 1, ...reply }]);
    } finally {
      await second.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
