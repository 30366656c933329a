import { afterAll, beforeAll, expect, test } from "bun:test";
import { renderDoc, type DocNode } from "../../../src/1-api/console/markdown";
import { testApp, type TestApp } from "../../helpers/app";
import { consoleAccount, consoleClient } from "./client";

// The manual in the console (issue 43): GET /console/api/docs lists web/docs/'s pages, GET
// /console/api/docs/{page} gives one as a tree of [tag, attributes, ...children] that web/docs.js
// builds with its DOM helper. Signed in only; an unknown page is the API's 404 envelope; and
// hostile Markdown cannot become markup, script or a javascript: link.

let t: TestApp;
beforeAll(() => {
  t = testApp();
});
afterAll(() => t.close());

test("signed in, the contents and every page; signed out, 401; an unknown page, 404", async () => {
  const c = consoleClient(t);
  expect((await c.call("GET", "/console/api/docs")).status).toBe(401);
  expect((await c.call("GET", "/console/api/docs/index")).status).toBe(401);
  await c.signIn("reader", await consoleAccount(t, "reader"));
  const list = await c.json("GET", "/console/api/docs");
  expect(list.data[0]).toEqual({ name: "index", title: "The appliance's manual" });
  expect(list.data.map((p: { name: string }) => p.name)).toContain("configuration");
  for (const { name, title } of list.data) {
    const page = await c.json("GET", `/console/api/docs/${name}`);
    expect(page).toMatchObject({ name, title });
    expect(page.tree[0][0]).toBe("h1");
  }
  const missing = await c.call("GET", "/console/api/docs/nope");
  expect(missing.status).toBe(404);
  expect((await missing.json()).error.code).toBe("not_found");
  expect((await c.call("GET", "/console/api/docs/toString")).status).toBe(404);
});

test("links between pages become console routes; headings carry the anchors the links name", async () => {
  const c = consoleClient(t);
  await c.signIn("linker", await consoleAccount(t, "linker"));
  const index = await c.json("GET", "/console/api/docs/index");
  const hrefs = collect(index.tree, "a").map((a) => a[1].href).filter(Boolean);
  expect(hrefs).toContain("#/docs/configuration");
  const readmeStyle = renderDoc("[a](web/docs/api.md#errors) [b](#x) [c](../../src/main.ts)\n\n# X\n", "api", new Set(["api"]));
  const links = collect(readmeStyle.tree, "a").map((a) => a[1]);
  expect(links).toEqual([{ href: "#/docs/api/errors" }, { href: "#/docs/api/x" }, { class: "doc-file", title: "../../src/main.ts (a file of the source tree)" }]);
  expect(collect(readmeStyle.tree, "h1")[0]![1]).toEqual({ id: "doc-x" });
});

test("hostile Markdown stays text: no HTML, no script, no event attributes, no javascript: links", () => {
  const hostile = [
    "# Title <img src=x onerror=alert(1)>",
    "<script>alert(1)</script>",
    "<div onclick=\"alert(1)\">x</div>",
    "[click](javascript:alert(1)) [data](data:text/html,<script>alert(1)</script>) [vb](vbscript:msgbox)",
    "![img](javascript:alert(1) \"t\")",
    "<a href=\"javascript:alert(1)\">a</a> <iframe src=//evil></iframe>",
    "```html\n<script>alert(1)</script>\n```",
    "| a <b>bold</b> |\n|---|\n| <svg onload=alert(1)> |",
  ].join("\n\n");
  const { tree } = renderDoc(hostile, "p", new Set(["p"]));
  const allowed = new Set(["h1", "h2", "h3", "h4", "h5", "h6", "p", "ul", "ol", "li", "a", "code", "pre", "em", "strong", "s", "blockquote", "table", "thead", "tbody", "tr", "th", "td", "hr", "br", "span"]);
  const elements = collect(tree);
  expect(elements.filter((e) => !allowed.has(e[0])).map((e) => e[0])).toEqual([]);
  for (const [, attrs] of elements) {
    for (const [k, v] of Object.entries(attrs)) {
      expect(k).not.toMatch(/^on/i);
      expect(["id", "href", "class", "title", "target", "rel", "start"]).toContain(k);
      if (k === "href") expect(v).toMatch(/^(#\/docs\/|https?:|mailto:)/);
    }
  }
  // The markup is there, as text the page shows.
  expect(JSON.stringify(tree)).toContain("<script>alert(1)</script>");
});

type El = [string, Record<string, string>, ...DocNode[]];
function collect(nodes: DocNode[], tag?: string): El[] {
  const out: El[] = [];
  const walk = (n: DocNode) => {
    if (typeof n === "string") return;
    if (!tag || n[0] === tag) out.push(n as El);
    (n.slice(2) as DocNode[]).forEach(walk);
  };
  nodes.forEach(walk);
  return out;
}
