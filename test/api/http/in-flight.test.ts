import { expect, test } from "bun:test";
import { InFlight } from "../../../src/1-api/http/in-flight";
import { sseResponse } from "../../../src/1-api/http/sse";

// What a graceful stop waits for (main.ts): a request counts until its body has been sent.

async function* events(n: number) {
  for (let i = 0; i < n; i++) yield { data: i };
}

test("an event stream counts until it has been read to its end, through the body sseResponse made", async () => {
  const inFlight = new InFlight();
  const made = sseResponse(events(3));
  const res = await inFlight.track(async () => made);
  // followed, not re-wrapped: each chunk goes through one stream
  expect(res.body).toBe(made.body);
  expect(inFlight.size).toBe(1);
  expect(await res.text()).toBe("data: 0\n\ndata: 1\n\ndata: 2\n\n");
  await Bun.sleep(0);
  expect(inFlight.size).toBe(0);
  expect(await inFlight.drained(10)).toBe(true);
});

test("an event stream the client leaves stops counting at once, though its generator never ends", async () => {
  const inFlight = new InFlight();
  async function* stuck() {
    yield { data: 1 };
    await new Promise(() => {});
  }
  const res = await inFlight.track(async () => sseResponse(stuck()));
  const reader = res.body!.getReader();
  await reader.read();
  expect(inFlight.size).toBe(1);
  void reader.cancel();
  await Bun.sleep(0);
  expect(inFlight.size).toBe(0);
});

test("other streamed bodies and answers in memory are followed too", async () => {
  const inFlight = new InFlight();
  const file = await inFlight.track(async () => new Response(new Blob(["abc"]).stream(), { headers: { "content-type": "application/octet-stream" } }));
  expect(inFlight.size).toBe(1);
  expect(await file.text()).toBe("abc");
  await Bun.sleep(0);
  expect(inFlight.size).toBe(0);
  await inFlight.track(async () => Response.json({ ok: true }));
  expect(inFlight.size).toBe(0);
});
