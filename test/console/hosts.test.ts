import { expect, test } from "bun:test";
import { hostAllowList, hostName } from "../../src/2-services/console/hosts";

// The console's Host allow-list: a DNS-rebinding page's name is refused, this machine's names pass.

test("Host values parse to a lower-case name without the port; malformed ones to null", () => {
  const table: [string, string | null][] = [
    ["LocalHost:8484", "localhost"],
    ["127.0.0.1:8484", "127.0.0.1"],
    ["[::1]:8484", "[::1]"],
    ["[::1]", "[::1]"],
    ["box.local.", "box.local"],
    ["[::1", null],
    ["[nope]:80", null],
    ["evil.example:80:80", null],
    ["a b", null],
    ["", null],
  ];
  for (const [host, name] of table) expect({ host, name: hostName(host) }).toEqual({ host, name });
});

test("IP literals, localhost, *.local and the machine's hostname pass; other names only when configured", () => {
  const allows = hostAllowList(["console.example.com", "*.corp.example", "0.0.0.0", ""], "Appliance-Box");
  const table: [string, boolean][] = [
    ["localhost:8484", true],
    ["app.localhost", true],
    ["127.0.0.1:8484", true],
    ["192.168.1.20", true],
    ["[::1]:8484", true],
    ["[fe80::1]", true],
    ["appliance-box:8484", true],
    ["appliance-box.local", true],
    ["printer.local", true],
    ["console.example.com", true],
    ["a.corp.example", true],
    ["corp.example", false],
    ["evil.example", false],
    ["evil.example:8484", false],
    ["localhost.evil.example", false],
    ["127.0.0.1.evil.example", false],
    [".local", false],
    ["local", false],
    ["", false],
  ];
  for (const [host, ok] of table) expect({ host, ok: allows(host) }).toEqual({ host, ok });
  expect(hostAllowList(["*"], "box")("evil.example")).toBe(true);
});
