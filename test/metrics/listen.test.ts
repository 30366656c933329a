import { afterAll, expect, test } from "bun:test";
import { validateConfig } from "../../src/lib/config";
import { parseListen, startMetricsListener } from "../../src/2-services/metrics/listen";
import { testApp } from "../helpers/app";
import { parseExposition } from "../helpers/prometheus";
import { statusWithoutHost } from "../helpers/raw-http";

const t = testApp({ config: { server: { metrics_listen: "127.0.0.1:0" } } });
afterAll(() => t.close());

test("the metrics listener serves /metrics with no key, and nothing else", async () => {
  const listener = startMetricsListener(t.deps);
  try {
    expect(listener.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    const res = await fetch(`${listener.url}/metrics`);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("text/plain; version=0.0.4; charset=utf-8");
    const e = parseExposition(await res.text());
    expect(e.types.get("appliance_http_requests_total")).toBe("counter");
    expect(e.value("appliance_rentals_active")).toBe(0);
    expect((await fetch(`${listener.url}/v1/models`)).status).toBe(404);
    expect((await fetch(`${listener.url}/metrics`, { method: "POST" })).status).toBe(405);
  } finally {
    listener.stop();
  }
});

test("an empty server.metrics_listen starts nothing", async () => {
  const off = testApp();
  try {
    expect(off.deps.config.server.metrics_listen).toBe("");
    const listener = startMetricsListener(off.deps);
    expect(listener.url).toBeNull();
    listener.stop();
  } finally {
    await off.close();
  }
});

test("server.metrics_listen takes host:port and refuses anything else at config validation", () => {
  expect(parseListen("127.0.0.1:9464")).toEqual({ hostname: "127.0.0.1", port: 9464 });
  expect(parseListen("[::1]:9464")).toEqual({ hostname: "::1", port: 9464 });
  expect(parseListen("metrics.internal:80")).toEqual({ hostname: "metrics.internal", port: 80 });
  expect(() => parseListen("127.0.0.1:70000")).toThrow("server.metrics_listen");
  for (const bad of ["9464", "127.0.0.1", "http://127.0.0.1:9464", "a b:1"])
    expect(() => validateConfig({ server: { metrics_listen: bad } }), bad).toThrow("metrics_listen");
  expect(validateConfig({ server: { metrics_listen: "0.0.0.0:9464" } }).server.metrics_listen).toBe("0.0.0.0:9464");
});

test("a request without a Host header is answered by its path, never a 500 (issue 41 L2's class: Bun hands the path alone)", async () => {
  const listener = startMetricsListener(t.deps);
  try {
    expect(await statusWithoutHost(listener.url!, "/metrics")).toMatch(/^HTTP\/1\.[01] 200/);
    expect(await statusWithoutHost(listener.url!, "/other")).toMatch(/^HTTP\/1\.[01] 404/);
  } finally {
    listener.stop();
  }
});
