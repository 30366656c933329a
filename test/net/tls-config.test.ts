import { describe, expect, test } from "bun:test";
import { TlsError } from "../../src/lib/net/tls-ca";
import { withTlsTable } from "../../src/lib/net/tls-config";

// `tls init` edits the config as text: [server.tls] cert and key set, everything else as it was.

const paths = { cert: "/data/tls/server.crt", key: "/data/tls/server.key" };

describe("setting [server.tls] in the config text", () => {
  const cases: { name: string; input: string; expected: string }[] = [
    { name: "an empty file gets the table", input: "", expected: `[server.tls]\ncert = "/data/tls/server.crt"\nkey = "/data/tls/server.key"\n` },
    {
      name: "a file without the table keeps its comments and gets the table at the end",
      input: `# my appliance\n[server]\nport = 8443 # the port\n\n# models below\n[limits]\nfree_rpm = 5\n`,
      expected: `# my appliance\n[server]\nport = 8443 # the port\n\n# models below\n[limits]\nfree_rpm = 5\n\n[server.tls]\ncert = "/data/tls/server.crt"\nkey = "/data/tls/server.key"\n`,
    },
    {
      name: "an existing table gets its cert and key replaced in place, other keys and comments kept",
      input: `[server.tls]\n# from last year\ncert = "/old/a.crt"\nkey = "/old/a.key" # old\nredirect_port = 8080\n\n[limits]\nfree_rpm = 5\n`,
      expected: `[server.tls]\n# from last year\ncert = "/data/tls/server.crt"\nkey = "/data/tls/server.key"\nredirect_port = 8080\n\n[limits]\nfree_rpm = 5\n`,
    },
    {
      name: "a table missing one key gets it right under the header",
      input: `[ server.tls ] # https\nredirect_port = 80\ncert = "/old/a.crt"\n`,
      expected: `[ server.tls ] # https\nkey = "/data/tls/server.key"\nredirect_port = 80\ncert = "/data/tls/server.crt"\n`,
    },
  ];
  for (const c of cases) test(c.name, () => expect(withTlsTable(c.input, paths)).toBe(c.expected));

  test("paths with quotes and backslashes are written as valid TOML strings", () => {
    const odd = { cert: '/d/"x"\\y.crt', key: "/d/ü.key" };
    const out = Bun.TOML.parse(withTlsTable("", odd)) as { server: { tls: typeof odd } };
    expect(out.server.tls).toEqual(odd);
  });

  test("server.tls written another way (inline, dotted keys) is refused with the lines to add by hand", () => {
    expect(() => withTlsTable(`[server]\ntls = { cert = "a", key = "b" }\n`, paths, "c.toml")).toThrow(TlsError);
    expect(() => withTlsTable(`[server]\ntls.cert = "a"\n`, paths, "c.toml")).toThrow("c.toml: server.tls is not written as a [server.tls] table");
  });

  test("a file the edit would break is refused, not written", () => {
    expect(() => withTlsTable(`server = { port = 1 }\n`, paths, "c.toml")).toThrow(/c.toml \(as edited\)|add it by hand/);
    expect(() => withTlsTable(`[server\n`, paths, "c.toml")).toThrow("c.toml:");
  });
});
