import { expect, test } from "bun:test";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { DOC_PAGES } from "../../src/1-api/console/docs";
import { renderDoc } from "../../src/1-api/console/markdown";

// Issue 43: the README is short and the manual is web/docs/, served by the console. Every link
// between pages names a page that exists and a heading that page has (the anchors the console and
// GitHub both give headings); no link or mention leaves the repository for ../shared; every page
// is embedded in the server and listed in the contents; the README stays under 16 KB.

const ROOT = resolve(import.meta.dir, "../..");
const DOCS = join(ROOT, "web/docs");
const pages = readdirSync(DOCS).filter((f) => f.endsWith(".md")).map((f) => f.slice(0, -3));
const text = (file: string) => readFileSync(file, "utf8");
const anchors = new Map(pages.map((p) => [p, new Set(renderDoc(text(join(DOCS, `${p}.md`)), p, new Set(pages)).anchors)]));

/** Every [text](target) of a Markdown file, outside code. */
function linksOf(markdown: string): string[] {
  const prose = markdown.replace(/```[\s\S]*?```/g, "").replace(/`[^`\n]*`/g, "");
  return [...prose.matchAll(/\]\(([^)\s]+)\)/g)].map((m) => m[1]!);
}

/** What is wrong with one link of `file`; null when it leads somewhere real. */
function broken(file: string, href: string): string | null {
  if (/^(https?:|mailto:)/.test(href)) return null;
  const [path, anchor] = href.split("#") as [string, string | undefined];
  const target = path ? resolve(dirname(file), path) : file;
  if (!target.startsWith(ROOT + "/")) return "leaves the repository";
  try {
    statSync(target);
  } catch {
    return "no such file";
  }
  if (anchor === undefined || !target.endsWith(".md") || dirname(target) !== DOCS) return null;
  const page = target.slice(DOCS.length + 1, -3);
  return anchors.get(page)!.has(anchor) ? null : `no heading #${anchor} in ${page}.md`;
}

const files = [join(ROOT, "README.md"), ...pages.map((p) => join(DOCS, `${p}.md`))];

test("every relative link in the README and the manual leads to a file and heading that exist", () => {
  const bad = files.flatMap((f) => linksOf(text(f)).map((href) => ({ href, why: broken(f, href) })).filter((x) => x.why).map((x) => `${f.slice(ROOT.length + 1)}: ${x.href} (${x.why})`));
  expect(bad).toEqual([]);
  expect(files.reduce((n, f) => n + linksOf(text(f)).length, 0)).toBeGreaterThan(40);
});

test("nothing in the README or the manual points out of the repository to ../shared", () => {
  expect(files.filter((f) => text(f).includes("../shared")).map((f) => f.slice(ROOT.length + 1))).toEqual([]);
});

test("the README is at most 16 KB and starts with the two commands", () => {
  const readme = text(join(ROOT, "README.md"));
  expect(Buffer.byteLength(readme)).toBeLessThanOrEqual(16 * 1024);
  const sh = /```sh\n(.*)\n(.*)\n```/.exec(readme)!;
  expect(sh[1]).toStartWith("./install.sh && ~/.local/bin/appliance serve --demo");
  expect(sh[2]).toStartWith("./install.sh && test/setup-browser.sh");
  // .ci/run runs exactly the second command.
  expect(text(join(ROOT, ".ci/run"))).toContain(sh[2]!.replace(/\s+#.*$/, ""));
});

test("every page is embedded in the server, and listed in the contents", () => {
  expect([...DOC_PAGES].sort()).toEqual([...pages].sort());
  const listed = new Set(linksOf(text(join(DOCS, "index.md"))).map((h) => h.split("#")[0]!.replace(/\.md$/, "")));
  expect(pages.filter((p) => p !== "index" && !listed.has(p))).toEqual([]);
});
