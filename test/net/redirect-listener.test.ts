import { expect, test } from "bun:test";
import { startRedirectListener } from "../../src/lib/net/listener";
import { statusWithoutHost } from "../helpers/raw-http";

test("the HTTPS redirect listener answers a request without a Host header by its path, never a 500 (issue 41 L2's class)", async () => {
  const server = startRedirectListener({ hostname: "127.0.0.1", port: 0, httpsPort: 8443, health: () => new Response("ok") });
  try {
    const url = `http://127.0.0.1:${server.port}`;
    expect(await statusWithoutHost(url, "/health")).toMatch(/^HTTP\/1\.[01] 200/);
    expect(await statusWithoutHost(url, "/v1/models")).toMatch(/^HTTP\/1\.[01] 308/);
  } finally {
    server.stop(true);
  }
});
