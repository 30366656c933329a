import { afterAll, expect, test } from "bun:test";
import { forwardToPeers, type Hop } from "../../src/1-api/cluster/forward";
import { HOP_HEADER, verifyHop } from "../../src/2-services/cluster/hop";
import { ApiError } from "../../src/lib/errors";
import { memoryLogger } from "../../src/lib/log";
import { freePort } from "../helpers/ports";

// The one hop's transport (src/1-api/cluster/forward.ts) against small HTTP servers standing in for
// the serving node, for what a real node does not do on demand: refuse a connection, answer that it
// takes no new work, break a stream mid-event. (The real nodes' path: forward.multi.test.ts.)

const SECRET = "k".repeat(40);
const servers: ReturnType<typeof Bun.serve>[] = [];
afterAll(() => servers.forEach((s) => s.stop(true)));

function peer(id: string, fetch: (req: Request) => Response | Promise<Response>) {
  const s = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch });
  servers.push(s);
  return { id, url: `http://127.0.0.1:${s.port}` };
}

/** A port nothing listens on: the connection is refused. */
async function deadPeer(id: string) {
  return { id, url: `http://127.0.0.1:${await freePort()}` };
}

const hop = (o: Partial<Hop> = {}): Hop => ({
  self: "node-a",
  secret: SECRET,
  requestId: "req_1",
  method: "POST",
  path: "/v1/chat/completions",
  route: "/v1/chat/completions",
  headers: new Headers({ authorization: "Bearer sk-client", "content-type": "application/json", connection: "keep-alive", [HOP_HEADER]: "forged" }),
  body: '{"model":"m","stream":true}',
  signal: new AbortController().signal,
  logger: memoryLogger(),
  ...o,
});

test("the hop carries the client's key and body, signed for the node it goes to; an unreachable node and one that takes no new work are passed over", async () => {
  const seen: string[] = [];
  const live = peer("node-c", async (req) => {
    const check = verifyHop(req.headers.get(HOP_HEADER)!, { secret: SECRET, self: "node-c", method: req.method, path: new URL(req.url).pathname, now: Date.now() });
    seen.push(`${check.ok} ${req.headers.get("authorization")} ${await req.text()}`);
    return Response.json({ ok: true }, { headers: { "x-ratelimit-remaining-requests": "9" } });
  });
  const draining = peer("node-d", () => Response.json({ error: { code: "node_not_serving", message: "draining" } }, { status: 503 }));
  const counted: string[][] = [];
  let open = 0;
  const opened = (to: string) => (counted.push([to, "open"]), open++, () => void open--);
  const res = await forwardToPeers([await deadPeer("node-b"), draining, live], hop({ count: (to, outcome) => counted.push([to, outcome]), open: opened }));
  expect(res.status).toBe(200);
  expect(counted).toEqual([
    ["node-b", "open"],
    ["node-b", "unreachable"],
    ["node-d", "open"],
    ["node-d", "not_serving"],
    ["node-c", "open"],
    ["node-c", "answered"],
  ]);
  expect(open).toBe(0); // every hop closed: a whole answer is read before it is returned
  expect(await res.json()).toEqual({ ok: true });
  expect(res.headers.get("x-ratelimit-remaining-requests")).toBe("9");
  expect(seen).toEqual(['true Bearer sk-client {"model":"m","stream":true}']);
});

test("another 503 (the model's own) is the answer; no node answering is model_unavailable", async () => {
  const busy = peer("node-e", () => Response.json({ error: { code: "model_unavailable" } }, { status: 503 }));
  const res = await forwardToPeers([busy], hop());
  expect(res.status).toBe(503);
  expect(((await res.json()) as { error: { code: string } }).error.code).toBe("model_unavailable");
  const err = await forwardToPeers([await deadPeer("node-f")], hop()).catch((e) => e);
  expect(err).toBeInstanceOf(ApiError);
  expect((err as ApiError).code).toBe("model_unavailable");
});

/** A node that sends `events` whole, then half of one more, then drops the connection. */
function breakingPeer(id: string, events: string[]) {
  return peer(id, () => {
    const enc = new TextEncoder();
    const body = new ReadableStream({
      async pull(ctrl) {
        for (const e of events) ctrl.enqueue(enc.encode(e));
        ctrl.enqueue(enc.encode('data: {"half'));
        await Bun.sleep(20);
        ctrl.error(new Error("node died"));
      },
    });
    return new Response(body, { headers: { "content-type": "text/event-stream" } });
  });
}

async function readAll(res: Response): Promise<string> {
  return await res.text();
}

test("a stream that breaks off ends after its last whole event with the format's error event: chat completions, responses, messages", async () => {
  const counted: string[] = [];
  let open = 0;
  const chat = await readAll(await forwardToPeers([breakingPeer("n1", ['data: {"object":"chat.completion.chunk"}\n\n'])], hop({ count: (_, outcome) => counted.push(outcome), open: () => (open++, () => void open--) })));
  expect(counted).toEqual(["broken"]);
  expect(open).toBe(0); // the broken stream's hop closed
  expect(chat.split("\n\n").filter(Boolean)).toEqual(['data: {"object":"chat.completion.chunk"}', expect.stringMatching(/^data: \{"error":\{.*"code":"upstream_error"\}\}$/)]);

  const responses = await readAll(
    await forwardToPeers([breakingPeer("n2", ['event: response.created\ndata: {"type":"response.created","sequence_number":0}\n\n', 'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","sequence_number":1}\n\n'])], hop({ route: "/v1/responses", path: "/v1/responses" })),
  );
  const last = responses.trimEnd().split("\n\n").at(-1)!;
  expect(last.split("\n")[0]).toBe("event: error");
  expect(JSON.parse(last.split("\n")[1]!.slice(6))).toMatchObject({ type: "error", code: "upstream_error", sequence_number: 2 });

  const messages = await readAll(await forwardToPeers([breakingPeer("n3", ['event: message_start\ndata: {"type":"message_start"}\n\n'])], hop({ route: "/v1/messages", path: "/v1/messages" })));
  const end = messages.trimEnd().split("\n\n");
  expect(end).toHaveLength(2);
  expect(end[1]!.split("\n")[0]).toBe("event: error");
  expect(JSON.parse(end[1]!.split("\n")[1]!.slice(6))).toMatchObject({ type: "error", error: { type: "api_error" } });
});

test("a whole (non-streamed) answer that breaks off is a clean upstream_error, not half a document", async () => {
  const broken = peer("n4", () => {
    const body = new ReadableStream({
      async pull(ctrl) {
        ctrl.enqueue(new TextEncoder().encode('{"object":"list","data":['));
        await Bun.sleep(20);
        ctrl.error(new Error("node died"));
      },
    });
    return new Response(body, { headers: { "content-type": "application/json" } });
  });
  const err = await forwardToPeers([broken], hop({ body: '{"model":"m"}' })).catch((e) => e);
  expect((err as ApiError).code).toBe("upstream_error");
});
