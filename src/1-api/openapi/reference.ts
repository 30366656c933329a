import type { JsonSchema } from "./schema";
import { SCHEMA_REF } from "./schema";
import type { OpenApiDocument, Operation, Parameter, SecurityRequirement } from "./document";
import { HTTP_METHODS } from "./document";

// The OpenAPI document as one readable HTML page, rendered on the server: no script, no external
// asset, one inline style allowed by its hash (REFERENCE_CSP), so the strictest CSP holds.

const CSS = `
body{font:15px/1.5 system-ui,sans-serif;margin:0;color:#1b1b1f;background:#fff}
header,main{max-width:72rem;margin:0 auto;padding:0 1.25rem}
header{padding-top:1rem;border-bottom:1px solid #ddd}
h1{margin:.5rem 0}h2{margin-top:2.5rem;border-bottom:2px solid #ddd}
nav ul{columns:3 16rem;padding-left:1.1rem}
section.op{border:1px solid #ddd;border-radius:6px;padding:.25rem 1rem 1rem;margin:1rem 0}
h3{font-size:1.05rem;margin:.75rem 0 .25rem}
h4{font-size:.95rem;margin:1rem 0 .25rem}
code{font:13px/1.4 ui-monospace,monospace;background:#f3f3f6;padding:0 .2em;border-radius:3px}
.method{display:inline-block;min-width:4.2em;text-align:center;font:700 12px/1.8 ui-monospace,monospace;border-radius:3px;color:#fff;background:#4b5563;margin-right:.4rem}
.get{background:#1d6fb8}.post{background:#1e7d4f}.delete{background:#b42318}.patch{background:#8a5a00}.put{background:#6d28d9}
table{border-collapse:collapse;width:100%;font-size:14px}
th,td{border:1px solid #ddd;padding:.25rem .5rem;text-align:left;vertical-align:top}
ul.schema{list-style:none;padding-left:1.1rem;border-left:2px solid #eee;margin:.2rem 0}
.type{color:#555}.req{color:#b42318;font-size:12px;font-weight:600}.note{color:#555;font-size:14px}
`;

/** The Content-Security-Policy /reference is served with: nothing but its own inline style. */
export const REFERENCE_CSP = `default-src 'none'; style-src 'sha256-${new Bun.CryptoHasher("sha256").update(CSS).digest("base64")}'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'`;

const esc = (s: unknown) =>
  String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]!);

/** Backticks in summaries and descriptions become <code>; everything else is escaped. */
const prose = (s: string) => esc(s).replace(/`([^`]+)`/g, "<code>$1</code>");

export function renderReference(doc: OpenApiDocument): string {
  const byTag = new Map<string, { method: string; path: string; op: Operation }[]>();
  for (const [path, item] of Object.entries(doc.paths))
    for (const method of HTTP_METHODS) {
      const op = item[method];
      if (!op) continue;
      for (const tag of op.tags.length ? op.tags : ["Other"]) {
        if (!byTag.has(tag)) byTag.set(tag, []);
        byTag.get(tag)!.push({ method, path, op });
      }
    }
  const tags = [...doc.tags.map((t) => t.name).filter((n) => byTag.has(n)), ...[...byTag.keys()].filter((n) => !doc.tags.some((t) => t.name === n))];
  const about = new Map(doc.tags.map((t) => [t.name, t.description]));
  const sections = tags.map((tag) => {
    const ops = byTag.get(tag)!;
    return `<section id="${anchor(`tag-${tag}`)}"><h2>${esc(tag)}</h2>${about.get(tag) ? `<p>${prose(about.get(tag)!)}</p>` : ""}${ops.map((o) => renderOperation(doc, o.method, o.path, o.op)).join("\n")}</section>`;
  });
  const envelopes = sharedSchemas(doc);
  if (envelopes.length)
    sections.push(
      `<section id="schemas"><h2>Error envelopes</h2>${envelopes.map((name) => `<section class="op" id="${anchor(`schema-${name}`)}"><h3><code>${esc(name)}</code></h3>${renderSchema(doc, { $ref: SCHEMA_REF + name }, 0, new Set())}</section>`).join("\n")}</section>`,
    );
  const nav = tags
    .map((tag) => `<li><a href="#${anchor(`tag-${tag}`)}">${esc(tag)}</a><ul>${byTag.get(tag)!.map((o) => `<li><a href="#${anchor(o.op.operationId)}">${esc(o.method.toUpperCase())} ${esc(o.path)}</a></li>`).join("")}</ul></li>`)
    .join("");
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${esc(doc.info.title)} API reference</title><style>${CSS}</style></head>
<body><header><h1>${esc(doc.info.title)} API reference <span class="type">${esc(doc.info.version)}</span></h1>
<p>${prose(doc.info.description ?? "")} The machine-readable document is <a href="/openapi.json"><code>/openapi.json</code></a> (OpenAPI ${esc(doc.openapi)}).</p></header>
<main><nav aria-label="Operations"><ul>${nav}${envelopes.length ? `<li><a href="#schemas">Error envelopes</a></li>` : ""}</ul></nav>
${sections.join("\n")}</main></body></html>
`;
}

/** The components the responses refer to (the error envelopes): rendered once, at the end. */
function sharedSchemas(doc: OpenApiDocument): string[] {
  const known = shared.get(doc);
  if (known) return known;
  const names = new Set<string>();
  for (const item of Object.values(doc.paths))
    for (const op of Object.values(item))
      for (const r of Object.values(op.responses))
        for (const m of Object.values(r.content ?? {})) {
          const found = JSON.stringify(m.schema ?? {}).matchAll(/"#\/components\/schemas\/([^"]+)"/g);
          for (const [, name] of found) names.add(name!);
        }
  shared.set(doc, [...names]);
  return [...names];
}

const shared = new WeakMap<OpenApiDocument, string[]>();

function anchor(s: string): string {
  return s.replace(/[^A-Za-z0-9_-]+/g, "-");
}

function renderOperation(doc: OpenApiDocument, method: string, path: string, op: Operation): string {
  const parts = [
    `<section class="op" id="${anchor(op.operationId)}">`,
    `<h3><span class="method ${method}">${method.toUpperCase()}</span><code>${esc(path)}</code></h3>`,
    `<p>${prose(op.summary)} <span class="note">(operationId <code>${esc(op.operationId)}</code>)</span></p>`,
  ];
  if (op.description) parts.push(`<p class="note">${prose(op.description)}</p>`);
  parts.push(`<p><strong>Auth:</strong> ${renderSecurity(doc, op.security)}</p>`);
  if (op.parameters?.length) parts.push(`<h4>Parameters</h4>${renderParameters(doc, op.parameters)}`);
  if (op.requestBody)
    for (const [type, media] of Object.entries(op.requestBody.content))
      parts.push(`<h4>Request body <code>${esc(type)}</code>${op.requestBody.required ? ' <span class="req">required</span>' : ""}</h4>${media.schema ? renderSchema(doc, media.schema, 0, new Set()) : ""}`);
  parts.push(`<h4>Responses</h4><table><thead><tr><th>Status</th><th>Description</th><th>Content</th></tr></thead><tbody>`);
  for (const [status, r] of Object.entries(op.responses)) {
    const content = Object.entries(r.content ?? {})
      .map(([type, m]) => `<code>${esc(type)}</code>${m.schema ? ` ${schemaLabel(doc, m.schema)}` : ""}`)
      .join("<br>");
    parts.push(`<tr><td>${esc(status)}</td><td>${prose(r.description)}</td><td>${content}</td></tr>`);
  }
  parts.push(`</tbody></table></section>`);
  return parts.join("\n");
}

function renderSecurity(doc: OpenApiDocument, security: SecurityRequirement[]): string {
  if (!security.length) return "none";
  return security
    .map((req) =>
      Object.keys(req)
        .map((name) => {
          const s = doc.components.securitySchemes[name];
          return `${esc(name)}${s?.description ? ` (${prose(s.description)})` : ""}`;
        })
        .join(" and "),
    )
    .join(" or ");
}

function renderParameters(doc: OpenApiDocument, params: Parameter[]): string {
  const rows = params.map(
    (p) =>
      `<tr><td><code>${esc(p.name)}</code></td><td>${esc(p.in)}</td><td>${p.required ? "yes" : "no"}</td><td>${schemaLabel(doc, p.schema)}</td><td>${prose(p.description ?? (typeof p.schema.description === "string" ? p.schema.description : ""))}</td></tr>`,
  );
  return `<table><thead><tr><th>Name</th><th>In</th><th>Required</th><th>Schema</th><th>Description</th></tr></thead><tbody>${rows.join("")}</tbody></table>`;
}

function deref(doc: OpenApiDocument, s: JsonSchema): { schema: JsonSchema; name: string | null } {
  const ref = s.$ref;
  if (typeof ref === "string" && ref.startsWith(SCHEMA_REF)) {
    const name = ref.slice(SCHEMA_REF.length);
    return { schema: doc.components.schemas[name] ?? {}, name };
  }
  return { schema: s, name: null };
}

/** A one-line type: `string`, `integer`, `"function"`, `string | null`, `array of X`, a component name. */
function schemaLabel(doc: OpenApiDocument, s: JsonSchema, depth = 0): string {
  const { schema, name } = deref(doc, s);
  if (name) return sharedSchemas(doc).includes(name) ? `<a class="type" href="#${anchor(`schema-${name}`)}">${esc(name)}</a>` : `<span class="type">${esc(name)}</span>`;
  if (depth > 3) return `<span class="type">…</span>`;
  if ("const" in schema) return `<code>${esc(JSON.stringify(schema.const))}</code>`;
  if (Array.isArray(schema.enum)) return schema.enum.map((v) => `<code>${esc(JSON.stringify(v))}</code>`).join(" | ");
  const variants = (schema.anyOf ?? schema.oneOf) as JsonSchema[] | undefined;
  if (variants) return variants.map((v) => schemaLabel(doc, v, depth + 1)).join(" | ");
  const type = Array.isArray(schema.type) ? schema.type.join(" | ") : (schema.type as string | undefined);
  if (type === "array" && schema.items) return `<span class="type">array of</span> ${schemaLabel(doc, schema.items as JsonSchema, depth + 1)}${constraints(schema)}`;
  if (type === "object" && schema.patternProperties && !schema.properties) {
    const values = Object.values(schema.patternProperties as Record<string, JsonSchema>)[0];
    return `<span class="type">map of string →</span> ${values ? schemaLabel(doc, values, depth + 1) : "any"}${constraints(schema)}`;
  }
  return `<span class="type">${esc(type ?? "any")}</span>${constraints(schema)}`;
}

const CONSTRAINTS = ["minLength", "maxLength", "minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum", "minItems", "maxItems", "maxProperties", "pattern", "format", "contentMediaType", "default"];

function constraints(s: JsonSchema): string {
  const list = CONSTRAINTS.filter((k) => s[k] !== undefined).map((k) => `${k} ${JSON.stringify(s[k])}`);
  return list.length ? ` <span class="note">(${esc(list.join(", "))})</span>` : "";
}

/** A schema as a nested list: objects list their properties, arrays and unions their complex parts. */
function renderSchema(doc: OpenApiDocument, s: JsonSchema, depth: number, seen: Set<string>): string {
  const { schema, name } = deref(doc, s);
  if (name) {
    if (seen.has(name) || depth > 8) return `<p class="note">See ${esc(name)} above.</p>`;
    seen = new Set(seen).add(name);
  }
  const about = describe(doc, schema);
  const head = `<p>${schemaLabel(doc, name ? schema : s)}${about ? ` — ${prose(about)}` : ""}</p>`;
  return name || depth === 0 ? `${name ? `<p class="note">Schema <code>${esc(name)}</code></p>` : ""}${head}${children(doc, schema, depth, seen)}` : children(doc, schema, depth, seen);
}

function children(doc: OpenApiDocument, schema: JsonSchema, depth: number, seen: Set<string>): string {
  const props = schema.properties as Record<string, JsonSchema> | undefined;
  if (props) {
    const required = new Set((schema.required as string[] | undefined) ?? []);
    const items = Object.entries(props).map(([key, prop]) => {
      const about = describe(doc, prop);
      return `<li><code>${esc(key)}</code> ${schemaLabel(doc, prop)}${required.has(key) ? ' <span class="req">required</span>' : ""}${about ? ` — ${prose(about)}` : ""}${nested(doc, prop, depth + 1, seen)}</li>`;
    });
    return `<ul class="schema">${items.join("")}</ul>`;
  }
  return nested(doc, schema, depth, seen);
}

/** The parts of a schema worth expanding: object properties, array items, object variants. */
function nested(doc: OpenApiDocument, s: JsonSchema, depth: number, seen: Set<string>): string {
  if (depth > 8) return "";
  const { schema, name } = deref(doc, s);
  if (name) return seen.has(name) ? "" : `<ul class="schema"><li>${renderSchema(doc, s, depth, seen)}</li></ul>`;
  if (schema.properties) return children(doc, schema, depth, seen);
  if (schema.items) return nested(doc, schema.items as JsonSchema, depth + 1, seen);
  const variants = ((schema.anyOf ?? schema.oneOf) as JsonSchema[] | undefined)?.filter((v) => hasStructure(doc, v));
  if (variants?.length === 1) return nested(doc, variants[0]!, depth + 1, seen);
  if (variants?.length) return `<ul class="schema">${variants.map((v, i) => `<li>variant ${i + 1}: ${schemaLabel(doc, v)}${nested(doc, v, depth + 1, seen)}</li>`).join("")}</ul>`;
  return "";
}

/** A schema's description, or the first one found on its items or union variants. */
function describe(doc: OpenApiDocument, s: JsonSchema, depth = 0): string | null {
  const { schema, name } = deref(doc, s);
  if (typeof schema.description === "string") return schema.description;
  if (name || depth > 2) return null;
  const inner = [...(((schema.anyOf ?? schema.oneOf) as JsonSchema[] | undefined) ?? []), ...(schema.items ? [schema.items as JsonSchema] : [])];
  for (const x of inner) {
    const d = describe(doc, x, depth + 1);
    if (d) return d;
  }
  return null;
}

function hasStructure(doc: OpenApiDocument, s: JsonSchema): boolean {
  const { schema, name } = deref(doc, s);
  if (name) return true;
  if (schema.properties) return true;
  if (schema.items) return hasStructure(doc, schema.items as JsonSchema);
  const variants = (schema.anyOf ?? schema.oneOf) as JsonSchema[] | undefined;
  return !!variants?.some((v) => hasStructure(doc, v));
}
