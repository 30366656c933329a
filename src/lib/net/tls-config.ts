import { TlsError } from "./tls-ca";

// `appliance tls init` sets `[server.tls] cert = … key = …` in the config file as text, so the
// operator's comments, other tables and their order stay as they were. The result is parsed back
// and must differ from the original only in those two keys.

const TLS_HEADER = /^\s*\[\s*server\s*\.\s*tls\s*\]\s*(#.*)?$/;
const ANY_HEADER = /^\s*\[/;

function parse(text: string, what: string): Record<string, any> {
  try {
    return Bun.TOML.parse(text) as Record<string, any>;
  } catch (e) {
    throw new TlsError(`${what}: ${(e as Error).message}`);
  }
}

/** A TOML basic string (JSON's escapes are a subset of TOML's). */
const str = (s: string) => JSON.stringify(s);

/** Without server.tls.cert and .key: what must not change. */
function rest(doc: Record<string, any>): string {
  const copy = structuredClone(doc);
  const tls = copy.server?.tls;
  if (tls && typeof tls === "object") {
    delete tls.cert;
    delete tls.key;
    if (!Object.keys(tls).length) delete copy.server.tls;
    if (!Object.keys(copy.server).length) delete copy.server;
  }
  return JSON.stringify(copy);
}

/**
 * The config text with `[server.tls]`'s `cert` and `key` set: in place when the table is there
 * (its other keys and comments kept), else a new table appended at the end.
 */
export function withTlsTable(text: string, paths: { cert: string; key: string }, file = "config"): string {
  const before = parse(text, file);
  const lines = text.split("\n");
  const start = lines.findIndex((l) => TLS_HEADER.test(l));
  let out: string;
  if (start >= 0) {
    let end = start + 1;
    while (end < lines.length && !ANY_HEADER.test(lines[end]!)) end++;
    const body = lines.slice(start + 1, end);
    const missing: string[] = [];
    for (const [k, v] of Object.entries(paths)) {
      const at = body.findIndex((l) => new RegExp(`^\\s*${k}\\s*=`).test(l));
      if (at >= 0) body[at] = `${k} = ${str(v)}`;
      else missing.push(`${k} = ${str(v)}`);
    }
    out = [...lines.slice(0, start + 1), ...missing, ...body, ...lines.slice(end)].join("\n");
  } else {
    if (before.server?.tls !== undefined) throw new TlsError(`${file}: server.tls is not written as a [server.tls] table, so it cannot be edited; set cert = ${str(paths.cert)} and key = ${str(paths.key)} by hand`);
    const base = text.replace(/\s*$/, "");
    out = `${base}${base ? "\n\n" : ""}[server.tls]\ncert = ${str(paths.cert)}\nkey = ${str(paths.key)}\n`;
  }
  const after = parse(out, `${file} (as edited)`);
  if (after.server?.tls?.cert !== paths.cert || after.server?.tls?.key !== paths.key || rest(after) !== rest(before)) {
    throw new TlsError(`${file}: [server.tls] could not be set without changing the rest of the file; add it by hand:\n[server.tls]\ncert = ${str(paths.cert)}\nkey = ${str(paths.key)}`);
  }
  return out;
}
