import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdirSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import type { Browser, BrowserContext, Page } from "playwright-core";
import { validateConfig } from "../../src/lib/config";
import { memoryLogger } from "../../src/lib/log";
import { startServer, type RunningServer } from "../../src/main";
import { launchChromium } from "../helpers/browser";
import { tempDir } from "../helpers/app";

// The chat's Markdown renderer (web/markdown.js) and code highlighter (web/highlight.js), issue 48,
// in a real browser (Debian's chromium through playwright-core) on the console page the server
// sends, under its CSP: hostile Markdown (script, event handlers, javascript:/data: links, images,
// raw HTML, deep nesting, 200 KB) builds only allow-listed elements and attributes, runs nothing and
// shows the HTML as text; the constructs chat models write render to the expected elements; tokens
// get their classes and the highlighted text is the code exactly; Copy puts the exact code on the
// clipboard (Clipboard API, and the execCommand fallback); every prefix of a document renders (the
// chat re-renders as a stream arrives); a sample with every construct passes axe-core's WCAG 2.1
// A/AA rules at 390 px and 1440 px. Screenshots: test/output/console/markdown-390.png and -1440.png.

const SHOTS = join(import.meta.dir, "..", "output", "console");
const dir = tempDir("appliance-markdown-");
let server: RunningServer;
let browser: Browser;
let context: BrowserContext;
let page: Page;
const errors: string[] = [];

beforeAll(async () => {
  mkdirSync(SHOTS, { recursive: true });
  const config = validateConfig({ server: { data_dir: dir, port: 0 }, rentals: { discover: false }, models: [] });
  server = await startServer(config, { logger: memoryLogger(), banner: () => {} });
  browser = await launchChromium();
  context = await browser.newContext({ viewport: { width: 1440, height: 900 }, permissions: ["clipboard-read", "clipboard-write"] });
  page = await context.newPage();
  page.on("pageerror", (e) => errors.push(e.message));
  page.on("console", (m) => void (m.type() === "error" && !m.text().includes("401") && errors.push(m.text())));
  await page.goto(`${server.url}/console`);
  await page.locator("#signin").waitFor();
  await page.evaluate(async () => {
    const w = window as any;
    const assets = ["/console/markdown.js", "/console/highlight.js"]; // the console's own URLs (not paths here)
    w.__md = await import(assets[0]!);
    w.__hl = await import(assets[1]!);
    document.getElementById("signin")!.hidden = true;
    const sandbox = document.createElement("section");
    sandbox.id = "sandbox";
    sandbox.setAttribute("aria-label", "Rendered Markdown");
    document.getElementById("main")!.appendChild(sandbox);
    /** Renders into a fresh .md box in the sandbox (the chat's container); returns the box. */
    w.__render = (text: string, opts?: object) => {
      const box = document.createElement("div");
      box.className = "md";
      box.appendChild(w.__md.renderMarkdown(text, opts));
      document.getElementById("sandbox")!.appendChild(box);
      return box;
    };
    w.__clear = () => document.getElementById("sandbox")!.replaceChildren();
    const TAGS = new Set(["DIV", "SPAN", "P", "H1", "H2", "H3", "H4", "H5", "H6", "UL", "OL", "LI", "BLOCKQUOTE", "HR", "BR", "PRE", "CODE", "EM", "STRONG", "DEL", "A", "TABLE", "THEAD", "TBODY", "TR", "TH", "TD", "BUTTON"]);
    const ATTRS = new Set(["class", "href", "target", "rel", "title", "start", "type", "aria-label", "aria-live", "tabindex", "scope"]);
    /** What in `root` breaks the renderer's rules (empty when nothing does). */
    w.__audit = (root: Element) => {
      const bad: string[] = [];
      for (const e of Array.from(root.querySelectorAll("*"))) {
        if (!TAGS.has(e.tagName)) bad.push(`element ${e.tagName}`);
        for (const a of e.getAttributeNames()) {
          if (!ATTRS.has(a) || a.startsWith("on") || a === "style") bad.push(`${e.tagName} attribute ${a}`);
        }
        if (e.tagName === "A") {
          const href = e.getAttribute("href") ?? "";
          if (!/^(https?:|mailto:)/.test(href)) bad.push(`href ${href}`);
          if (e.getAttribute("target") !== "_blank" || e.getAttribute("rel") !== "noopener noreferrer nofollow") bad.push(`link ${href} without target/rel`);
        }
      }
      for (const t of ["img", "script", "iframe", "svg", "object", "embed", "form", "input", "style", "link", "textarea", "video", "audio", "source", "math", "base", "meta"])
        if (root.querySelector(t)) bad.push(`a <${t}>`);
      return bad;
    };
    /** The rendered structure: tags, their attributes (but target/rel/tabindex/scope/aria), text; a code block as one line. */
    const shape = (node: Node): string => {
      let out = "";
      for (const n of Array.from(node.childNodes)) {
        if (n.nodeType === 3) { out += n.textContent; continue; }
        const e = n as Element;
        if (e.classList.contains("md-code")) { out += `<code-block ${e.querySelector(".md-code-lang")!.textContent}>${e.querySelector("pre")!.textContent}</code-block>`; continue; }
        const tag = e.tagName.toLowerCase();
        const attrs = e.getAttributeNames().sort().filter((a) => !["target", "rel", "tabindex", "scope"].includes(a)).map((a) => ` ${a}="${e.getAttribute(a)}"`).join("");
        out += tag === "br" || tag === "hr" ? `<${tag}${attrs}>` : `<${tag}${attrs}>${shape(e)}</${tag}>`;
      }
      return out;
    };
    w.__shape = shape;
  });
  errors.length = 0;
}, 60_000);

afterAll(async () => {
  await browser?.close();
  await server?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** Renders `text` in the page: the .md box's rule breaks, its text, its shape, and how long it took. */
async function render(text: string, opts?: object) {
  return page.evaluate(
    ([text, opts]) => {
      const w = window as any;
      w.__clear();
      const t0 = performance.now();
      const box = w.__render(text, opts);
      const ms = performance.now() - t0;
      return { bad: w.__audit(box) as string[], text: box.textContent as string, shape: w.__shape(box) as string, ms };
    },
    [text, opts ?? {}] as const,
  );
}

const PWN = "window.__pwned=1";
const HOSTILE = [
  `<script>${PWN}</script>`,
  `<img src=x onerror="${PWN}">`,
  `<IMG SRC=x ONERROR=${PWN}>`,
  `[x](javascript:${PWN})`,
  `[x](JaVaScRiPt:${PWN})`,
  `[x](JaVaScRiPt&colon;${PWN})`,
  `[x](javascript&#58;${PWN})`,
  `[x](&#106;avascript:${PWN})`,
  `[x](jav&#x09;ascript:${PWN})`,
  `[x]( javascript:${PWN})`,
  `[x](<javascript:${PWN}>)`,
  `[x](\u2028javascript:${PWN})`,
  `[x](data:text/html,<script>${PWN}</script>)`,
  `[x](data:text/html;base64,PHNjcmlwdD53aW5kb3cuX19wd25lZD0xPC9zY3JpcHQ+)`,
  `[x](vbscript:msgbox(1))`,
  `[x](file:///etc/passwd)`,
  `[x](//evil.example/x) [y](/relative) [z](relative.html) [w](#frag)`,
  `[x](https:evil.example) [y](http:/evil.example)`,
  `<a href=javascript:${PWN}>click</a>`,
  `<a href="javascript:${PWN}">click</a>`,
  `<javascript:${PWN}>`,
  `![x](https://evil.example/p.png)`,
  `![x](javascript:${PWN})`,
  `![x](data:image/png;base64,iVBORw0KGgo=)`,
  `<svg onload=${PWN}>`,
  `<svg><script>${PWN}</script></svg>`,
  `<iframe src="javascript:${PWN}"></iframe>`,
  `<iframe srcdoc="<script>parent.__pwned=1</script>"></iframe>`,
  `<object data=x></object><embed src=x><form action=x><input name=x autofocus onfocus=${PWN}><style>*{color:red}</style><link rel=stylesheet href=x>`,
  `<details open ontoggle=${PWN}>`,
  `"><img src=x onerror=${PWN}>`,
  `&lt;script&gt;${PWN}&lt;/script&gt; &amp;lt; &#x3C;img src=x onerror=${PWN}&#x3E;`,
  `[**bold** \`<img src=x onerror=${PWN}>\` <b>](https://ok.example/)`,
  `[link [inner](https://a.example/)](https://b.example/)`,
  `[x](https://ok.example/ "title\\" onmouseover=\\"${PWN}")`,
  `[x](https://ok.example/"onmouseover="${PWN})`,
  `https://ok.example/path?q=1&x=<script>${PWN}</script>`,
  `| a | b |\n|---|---|\n| <img src=x onerror=${PWN}> | [x](javascript:${PWN}) |`,
  `- [ ] <script>${PWN}</script>\n- [x] done`,
  `> <iframe srcdoc="<script>parent.__pwned=1</script>">`,
  "````\n```\nnested\n```\n````",
  "```\n```js\n```\n```", // fences in fences
  "~~~js\nalert(1)\n~~~~",
  "```<script>\ncode\n```",
  `\`\`\`js" onmouseover="${PWN}\ncode\n\`\`\``,
  `[x](mailto:a@b.example?subject=<script>) <a@b.example> <https://ok.example/a>`,
  "<!-- comment --> <?php echo 1 ?> <![CDATA[ x ]]>",
  "\u0000<scr\u0000ipt>",
  "```html\n<script>window.__pwned=1</script>\n", // unclosed: the rest of a document is code
];

const DEEP: [string, string][] = [
  ["10,000 [", "[".repeat(10000)],
  ["10,000 ]", "]".repeat(10000)],
  ["10,000 nested brackets", "[".repeat(10000) + "x" + "]".repeat(10000)],
  ["10,000 [ and a link", "[".repeat(10000) + "x](https://ok.example/)" + "]".repeat(10000)],
  ["10,000 ![", "![".repeat(10000)],
  ["10,000 [](", "[](".repeat(10000)],
  ["10,000 >", ">".repeat(10000) + " deep"],
  ["10,000 > with spaces", "> ".repeat(10000) + "deep"],
  ["10,000 > lines", Array.from({ length: 2000 }, (_, i) => "> ".repeat(i % 60) + "x").join("\n")],
  ["10,000 *", "*".repeat(10000)],
  ["emphasis 10,000 deep", "*".repeat(10000) + "a" + "*".repeat(10000)],
  ["10,000 alternating", "*_".repeat(5000) + "a" + "_*".repeat(5000)],
  ["~~ runs", "~~".repeat(5000) + "a" + "~~".repeat(5000)],
  ["nested list markers", "- ".repeat(5000) + "x"],
  ["indented list ladder", Array.from({ length: 400 }, (_, i) => "  ".repeat(i) + "- x").join("\n")],
  ["ordered list markers", "1. ".repeat(3000) + "x"],
  ["10,000 backticks", "`".repeat(10000)],
  ["backtick runs of every length", Array.from({ length: 400 }, (_, i) => "`".repeat(i + 1)).join("a")],
  ["10,000 (", "[a](" + "(".repeat(10000)],
  ["10,000 <", "<".repeat(10000)],
  ["10,000 &#", "&#".repeat(10000)],
  ["10,000 \\", "\\".repeat(10000)],
  ["openers then links", "*a ".repeat(20000) + "[x](https://a.example/) ".repeat(5000)],
  ["spaces in a link destination", "[a](<" + " ".repeat(100000) + "x>)"],
  ["a long run of spaces", "a" + " ".repeat(100000) + "b\nc"],
  ["a wide table", "|".repeat(10000) + "\n" + "-|".repeat(5000) + "\n" + "a\n".repeat(100)],
  ["a 64-column table with many rows", "|" + "h|".repeat(64) + "\n|" + "-|".repeat(64) + "\n" + "|x\n".repeat(3000)],
  ["a URL of closing parens", "https://x.example/" + ")".repeat(50000)],
  ["unclosed titles", '[a](x "'.repeat(10000)],
  ["unclosed fences", "```\n".repeat(5000)],
];

test("hostile Markdown builds only allow-listed elements and attributes, runs nothing, and shows the HTML as text", async () => {
  await page.evaluate(() => delete (window as any).__pwned);
  for (const md of HOSTILE) {
    const r = await render(md);
    expect({ md, bad: r.bad }).toEqual({ md, bad: [] });
  }
  // All of it in one document, kept in the page a moment (an onerror or onload would have fired).
  const all = HOSTILE.join("\n\n");
  const r = await render(all);
  expect(r.bad).toEqual([]);
  await page.waitForTimeout(300);
  expect(await page.evaluate(() => (window as any).__pwned)).toBeUndefined();
  const visible = await page.evaluate(() => (document.querySelector("#sandbox .md") as HTMLElement).innerText);
  for (const literal of [`<script>${PWN}</script>`, `<img src=x onerror="${PWN}">`, `<svg onload=${PWN}>`, `<iframe src="javascript:${PWN}"></iframe>`, `<a href=javascript:${PWN}>click</a>`, "<!-- comment -->"])
    expect(visible).toContain(literal);
  // The refused links are their text, the refused image its alt text; nothing points anywhere but http(s)/mailto.
  const links = await page.evaluate(() => Array.from(document.querySelectorAll("#sandbox a")).map((a) => [a.getAttribute("href"), a.textContent]));
  expect(links).toEqual([
    ["https://evil.example/", "x"], // [x](https:evil.example): the URL parser reads it as https://evil.example/
    ["http://evil.example/", "y"],
    ["https://evil.example/p.png", "x"], // an image: a link to it, its alt text, never loaded
    ["https://ok.example/", "bold <img src=x onerror=window.__pwned=1> <b>"],
    ["https://a.example/", "inner"], // a link holds no link: "[link " and "](" stay text,
    ["https://b.example/", "https://b.example/"], // and the URL after "(" is a bare URL
    ["https://ok.example/", "x"],
    ["https://ok.example/%22onmouseover=%22window.__pwned=1", "x"],
    ["https://ok.example/path?q=1&x=", "https://ok.example/path?q=1&x="],
    ["mailto:a@b.example?subject=%3Cscript%3E", "x"],
    ["mailto:a@b.example", "a@b.example"],
    ["https://ok.example/a", "https://ok.example/a"],
  ]);
  expect(await page.evaluate(() => document.querySelector("#sandbox a[title]:not(.md-image)")?.getAttribute("title"))).toBe(`title" onmouseover="${PWN}`);
  expect(await page.evaluate(() => document.querySelectorAll("#sandbox .md-image").length)).toBe(1);
  const image = await render("![a tracking pixel](https://evil.example/p.png)");
  expect(image.shape).toBe('<p><a class="md-image" href="https://evil.example/p.png" title="Image (not loaded)">a tracking pixel</a></p>');
  expect(await page.evaluate(() => (window as any).__pwned)).toBeUndefined();
  expect(errors).toEqual([]);
}, 60_000);

test("deep nesting and 200 KB render in linear-ish time and stay within the rules", async () => {
  const times: Record<string, number> = {};
  for (const [name, md] of DEEP) {
    const r = await render(md);
    times[name] = Math.round(r.ms);
    expect({ name, bad: r.bad }).toEqual({ name, bad: [] });
  }
  // A chat answer of every construct, repeated to 200 KB; and the hostile corpus to 200 KB.
  const big = SAMPLE.repeat(Math.ceil(200_000 / SAMPLE.length));
  const r = await render(big);
  times["200 KB answer"] = Math.round(r.ms);
  expect(r.bad).toEqual([]);
  expect(r.text).toContain("Conclusion");
  const hostile = HOSTILE.join("\n").repeat(Math.ceil(200_000 / HOSTILE.join("\n").length));
  const h = await render(hostile);
  times["200 KB hostile"] = Math.round(h.ms);
  expect(h.bad).toEqual([]);
  console.log("render times (ms):", JSON.stringify(times));
  for (const [name, ms] of Object.entries(times)) expect({ name, slow: ms > 1500 }).toEqual({ name, slow: false });
  expect(await page.evaluate(() => (window as any).__pwned)).toBeUndefined();
  expect(errors).toEqual([]);
}, 120_000);

const CASES: [string, string][] = [
  ["# Title", '<h3 class="md-h1">Title</h3>'],
  ["## Two ##\n### Three\n#### Four\n##### Five\n###### Six", '<h4 class="md-h2">Two</h4><h5 class="md-h3">Three</h5><h6 class="md-h4">Four</h6><h6 class="md-h5">Five</h6><h6 class="md-h6">Six</h6>'],
  ["Setext\n======\n\nTwo\n---", '<h3 class="md-h1">Setext</h3><h4 class="md-h2">Two</h4>'],
  ["#NoSpace and ####### seven", "<p>#NoSpace and ####### seven</p>"],
  ["line one\nline two\n\nnext paragraph", "<p>line one<br>line two</p><p>next paragraph</p>"],
  ["hard  \nbreak\\\nagain", "<p>hard<br>break<br>again</p>"],
  ["*em* **strong** ***both*** ~~gone~~ _u_ __uu__ snake_case_name 2*3*4", "<p><em>em</em> <strong>strong</strong> <em><strong>both</strong></em> <del>gone</del> <em>u</em> <strong>uu</strong> snake_case_name 2<em>3</em>4</p>"],
  ["**bold *with em* inside** and ~5 minutes ~ish", "<p><strong>bold <em>with em</em> inside</strong> and ~5 minutes ~ish</p>"],
  ["`a <b> c` and `` x ` y `` and \\*not em\\*", '<p><code class="md-inline-code">a <b> c</code> and <code class="md-inline-code">x ` y</code> and *not em*</p>'],
  ["&copy; &lt;b&gt; &#65; &#x1F600; &bogus; AT&T", "<p>© <b> A 😀 &bogus; AT&T</p>"],
  ["- a\n- b\n  - c\n  - d\n- e", "<ul><li>a</li><li>b<ul><li>c</li><li>d</li></ul></li><li>e</li></ul>"],
  ["* star\n+ plus", "<ul><li>star</li></ul><ul><li>plus</li></ul>"],
  ["1. one\n2. two\n   1. sub\n   2. sub two\n3. three", "<ol><li>one</li><li>two<ol><li>sub</li><li>sub two</li></ol></li><li>three</li></ol>"],
  ["1. step\n  - two-space detail", "<ol><li>step<ul><li>two-space detail</li></ul></li></ol>"],
  ["3) three\n4) four", '<ol start="3"><li>three</li><li>four</li></ol>'],
  ["- a\n\n- b", "<ul><li><p>a</p></li><li><p>b</p></li></ul>"],
  ["- item\ncontinued lazily", "<ul><li>item<br>continued lazily</li></ul>"],
  ["- [ ] todo\n- [x] done", '<ul><li class="md-task"><span class="md-task-box">☐ </span>todo</li><li class="md-task"><span class="md-task-box">☑ </span>done</li></ul>'],
  ["Intro:\n- a\n- b", "<p>Intro:</p><ul><li>a</li><li>b</li></ul>"],
  ["> quote\n> more\n>\n> > nested", "<blockquote><p>quote<br>more</p><blockquote><p>nested</p></blockquote></blockquote>"],
  ["> lazy\ncontinuation", "<blockquote><p>lazy<br>continuation</p></blockquote>"],
  ["a\n\n---\n\n***\n\n___", "<p>a</p><hr><hr><hr>"],
  ["```python\nprint(\"hi\")\n```", '<code-block python>print("hi")</code-block>'],
  ["```js title=x\nlet a\n\n  b\n```\nafter", "<code-block js>let a\n\n  b</code-block><p>after</p>"],
  ["~~~\nplain\n~~~", "<code-block text>plain</code-block>"],
  ["```ts\nstill streaming", "<code-block ts>still streaming</code-block>"],
  ["    indented\n    code\n\ntext", "<code-block text>indented\ncode</code-block><p>text</p>"],
  ["1. Install:\n   ```bash\n   npm i\n   ```\n2. Run", "<ol><li>Install:<code-block bash>npm i</code-block></li><li>Run</li></ol>"],
  ["| a | b | c |\n|:--|:-:|--:|\n| 1 | **2** | `3` |\n| x \\| y |", '<div class="md-table-wrap"><table><thead><tr><th class="md-align-left">a</th><th class="md-align-center">b</th><th class="md-align-right">c</th></tr></thead><tbody><tr><td class="md-align-left">1</td><td class="md-align-center"><strong>2</strong></td><td class="md-align-right"><code class="md-inline-code">3</code></td></tr><tr><td class="md-align-left">x | y</td><td class="md-align-center"></td><td class="md-align-right"></td></tr></tbody></table></div>'],
  ["Text\n| h |\n| - |\n| v |", '<p>Text</p><div class="md-table-wrap"><table><thead><tr><th>h</th></tr></thead><tbody><tr><td>v</td></tr></tbody></table></div>'],
  ["[x](https://e.example/a \"T\") [**b**](http://e.example/b)", '<p><a href="https://e.example/a" title="T">x</a> <a href="http://e.example/b"><strong>b</strong></a></p>'],
  ["<https://e.example> <me@e.example> see https://e.example/a_b. (https://e.example/p(1))", '<p><a href="https://e.example/">https://e.example</a> <a href="mailto:me@e.example">me@e.example</a> see <a href="https://e.example/a_b">https://e.example/a_b</a>. (<a href="https://e.example/p(1)">https://e.example/p(1)</a>)</p>'],
  ["[mail](mailto:me@e.example) [rel](./x) [bad](javascript:alert(1))", '<p><a href="mailto:me@e.example">mail</a> rel bad</p>'],
  ["![alt *text*](https://e.example/i.png) ![](https://e.example/i.png) ![no](ftp://e.example/i.png)", '<p><a class="md-image" href="https://e.example/i.png" title="Image (not loaded)">alt text</a> <a class="md-image" href="https://e.example/i.png" title="Image (not loaded)">image</a> no</p>'],
  ["<b>raw</b> <div>html</div>", "<p><b>raw</b> <div>html</div></p>"],
  ["Intro:\n-", "<p>Intro:<br>-</p>"], // a stream's next bullet, not a setext heading for a moment
  ["**a**b a**b** __a__b", "<p><strong>a</strong>b a<strong>b</strong> __a__b</p>"],
  ["> - a\n> - b\n>\n> ```sh\n> ls\n> ```", "<blockquote><ul><li>a</li><li>b</li></ul><code-block sh>ls</code-block></blockquote>"],
  ["[a](https://x.example/a_(b)) [b](<https://x.example/with space>)", '<p><a href="https://x.example/a_(b)">a</a> <a href="https://x.example/with%20space">b</a></p>'],
  ["9. nine\n10. ten", '<ol start="9"><li>nine</li><li>ten</li></ol>'],
  ["- ## heading in a list\n  text", '<ul><li><h4 class="md-h2">heading in a list</h4><p>text</p></li></ul>'],
  ["* * *\n- - -", "<hr><hr>"],
  ["a | b\n--|--\n1 | 2", "<div class=\"md-table-wrap\"><table><thead><tr><th>a</th><th>b</th></tr></thead><tbody><tr><td>1</td><td>2</td></tr></tbody></table></div>"],
  ["``` unclosed `` and ` odd", "<p>``` unclosed `` and ` odd</p>"], // a backtick fence's info holds no backtick
  ["text ``` not a fence", "<p>text ``` not a fence</p>"],
  ["", ""],
];

test("each construct renders to the expected elements", async () => {
  const got = [];
  for (const [md] of CASES) got.push([md, (await render(md)).shape]);
  expect(got).toEqual(CASES);
  expect(await page.evaluate(() => [null, undefined, 42].map((v) => (window as any).__md.renderMarkdown(v, null).textContent))).toEqual(["", "", "42"]);
  // The chat's defaults can be changed: no line breaks for single newlines, headings from h1.
  expect((await render("a\nb\n# H", { breaks: false, headingOffset: 0 })).shape).toBe('<p>a\nb</p><h1 class="md-h1">H</h1>');
  // Links open in a new tab without the opener or a referrer.
  const link = await page.evaluate(() => {
    (window as any).__clear();
    const a = (window as any).__render("[x](https://e.example/)").querySelector("a");
    return [a.getAttribute("target"), a.getAttribute("rel")];
  });
  expect(link).toEqual(["_blank", "noopener noreferrer nofollow"]);
  // A code block: its header names the language, a button copies, the code sits in <pre><code>.
  const block = await page.evaluate(() => {
    (window as any).__clear();
    const box = (window as any).__render("```Python\nx = 1\n```");
    const b = box.querySelector(".md-code-head button");
    return { lang: box.querySelector(".md-code-lang").textContent, button: [b.getAttribute("type"), b.getAttribute("aria-label"), b.textContent], code: box.querySelector("pre > code").className, live: box.querySelector("[aria-live]")?.getAttribute("aria-live") };
  });
  expect(block).toEqual({ lang: "python", button: ["button", "Copy code", "Copy"], code: "md-code-body md-lang-python", live: "polite" });
  expect(errors).toEqual([]);
});

const HL: [string, string, [string, string][]][] = [
  ["js", 'const x = "hi"; // note\nfunction f(a) { return a + 1.5e-3; }\nclass Foo extends Bar {}\nlet t = `a ${b}`; /* block */ null', [
    ["tok-kw", "const"], ["tok-str", '"hi"'], ["tok-com", "// note"], ["tok-kw", "function"], ["tok-fn", "f"], ["tok-kw", "return"], ["tok-num", "1.5e-3"], ["tok-kw", "class"], ["tok-type", "Foo"], ["tok-type", "Bar"], ["tok-str", "`a ${b}`"], ["tok-com", "/* block */"], ["tok-lit", "null"],
  ]],
  ["typescript", "interface A { n: number }\nexport type B = string | null;", [["tok-kw", "interface"], ["tok-type", "A"], ["tok-type", "number"], ["tok-kw", "export"], ["tok-kw", "type"], ["tok-type", "string"], ["tok-lit", "null"]]],
  ["python", '@dataclass\ndef greet(name: str) -> None:\n    """Doc."""\n    # say it\n    print(f"hi {name}", 42, True)', [
    ["tok-meta", "@dataclass"], ["tok-kw", "def"], ["tok-fn", "greet"], ["tok-type", "str"], ["tok-lit", "None"], ["tok-str", '"""Doc."""'], ["tok-com", "# say it"], ["tok-fn", "print"], ["tok-str", '"hi {name}"'], ["tok-num", "42"], ["tok-lit", "True"],
  ]],
  ["json", '{"name": "x", "n": -1.5, "ok": true, "none": null, "list": [1, 2]}', [["tok-key", '"name"'], ["tok-str", '"x"'], ["tok-key", '"n"'], ["tok-num", "1.5"], ["tok-lit", "true"], ["tok-lit", "null"], ["tok-punct", "{"]]],
  ["bash", '# install\nexport PATH="$HOME/bin:$PATH"\nif [ -f "$f" ]; then echo $USER ${HOME} | grep -v x; fi\nFOO=1 npm run build', [
    ["tok-com", "# install"], ["tok-kw", "export"], ["tok-str", '"$HOME/bin:$PATH"'], ["tok-kw", "if"], ["tok-attr", "-f"], ["tok-kw", "then"], ["tok-fn", "echo"], ["tok-var", "$USER"], ["tok-var", "${HOME}"], ["tok-fn", "grep"], ["tok-attr", "-v"], ["tok-kw", "fi"], ["tok-var", "FOO"], ["tok-fn", "npm"],
  ]],
  ["sh", "ls -la # list", [["tok-fn", "ls"], ["tok-attr", "-la"], ["tok-com", "# list"]]],
  ["c", '#include <stdio.h>\nint main(void) { printf("%d\\n", 1); return 0; }', [["tok-meta", "#include <stdio.h>"], ["tok-type", "int"], ["tok-fn", "main"], ["tok-type", "void"], ["tok-fn", "printf"], ["tok-str", '"%d\\n"'], ["tok-kw", "return"]]],
  ["cpp", "template <typename T> auto f() -> std::vector<T> { return {}; } // c", [["tok-kw", "template"], ["tok-kw", "typename"], ["tok-com", "// c"]]],
  ["go", 'package main\nfunc main() { fmt.Println("hi", nil) }', [["tok-kw", "package"], ["tok-kw", "func"], ["tok-fn", "main"], ["tok-fn", "Println"], ["tok-str", '"hi"'], ["tok-lit", "nil"]]],
  ["rust", "fn main<'a>(x: &'a str) -> Option<u8> { println!(\"{}\", 'c'); None }", [["tok-kw", "fn"], ["tok-type", "'a"], ["tok-type", "str"], ["tok-type", "Option"], ["tok-type", "u8"], ["tok-fn", "println!"], ["tok-str", '"{}"'], ["tok-str", "'c'"], ["tok-lit", "None"]]],
  ["java", "@Override public String toString() { return \"x\"; }", [["tok-meta", "@Override"], ["tok-kw", "public"], ["tok-type", "String"], ["tok-fn", "toString"], ["tok-str", '"x"']]],
  ["sql", "SELECT id, name FROM users WHERE age > 21 -- adults\nAND name LIKE 'A%';", [["tok-kw", "SELECT"], ["tok-kw", "FROM"], ["tok-kw", "WHERE"], ["tok-num", "21"], ["tok-com", "-- adults"], ["tok-kw", "LIKE"], ["tok-str", "'A%'"]]],
  ["html", '<!DOCTYPE html>\n<a href="x" hidden>t &amp; u</a><!-- c -->', [["tok-meta", "<!DOCTYPE html>"], ["tok-tag", "a"], ["tok-attr", "href"], ["tok-str", '"x"'], ["tok-attr", "hidden"], ["tok-lit", "&amp;"], ["tok-com", "<!-- c -->"]]],
  ["xml", '<?xml version="1.0"?><r a=\'1\'/>', [["tok-meta", '<?xml version="1.0"?>'], ["tok-tag", "r"], ["tok-attr", "a"], ["tok-str", "'1'"], ["tok-punct", "/>"]]],
  ["css", "/* c */\n.btn:hover, #id { color: #fff; margin: 0 1.5rem; width: calc(100% - 2px) !important; }\n@media (max-width: 640px) {}", [["tok-com", "/* c */"], ["tok-attr", ".btn"], ["tok-type", "hover"], ["tok-attr", "#id"], ["tok-prop", "color"], ["tok-num", "#fff"], ["tok-num", "1.5rem"], ["tok-fn", "calc"], ["tok-num", "100%"], ["tok-kw", "!important"], ["tok-kw", "@media"]]],
  ["yaml", "# c\nname: app\nlist:\n  - key: 'v'\n    n: 3\n    on: true\nref: *anchor", [["tok-com", "# c"], ["tok-key", "name"], ["tok-key", "list"], ["tok-key", "key"], ["tok-str", "'v'"], ["tok-num", "3"], ["tok-lit", "true"], ["tok-var", "*anchor"]]],
  ["toml", '[server]\nport = 8080 # c\nname = "x"\nflag = false', [["tok-type", "[server]"], ["tok-key", "port"], ["tok-num", "8080"], ["tok-com", "# c"], ["tok-key", "name"], ["tok-str", '"x"'], ["tok-lit", "false"]]],
  ["diff", "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-old\n+new\n same", [["tok-meta", "diff --git a/x b/x"], ["tok-meta", "--- a/x"], ["tok-meta", "+++ b/x"], ["tok-meta", "@@ -1 +1 @@"], ["tok-del", "-old"], ["tok-add", "+new"]]],
  ["kotlin", 'fun main() { val s = "x" } // c', [["tok-kw", "fun"], ["tok-fn", "main"], ["tok-kw", "val"], ["tok-str", '"x"'], ["tok-com", "// c"]]],
];

test("highlight gives keywords, strings, comments, … their classes, and its text is the code exactly", async () => {
  const got = await page.evaluate((cases) => cases.map(([lang, code]) => {
    const el = document.createElement("code");
    el.appendChild((window as any).__hl.highlight(code, lang));
    return { text: el.textContent, tags: [...new Set(Array.from(el.querySelectorAll("*")).map((e) => e.tagName))], spans: Array.from(el.querySelectorAll("span")).map((s) => [s.className, s.textContent]) };
  }), HL);
  HL.forEach(([lang, code, want], k) => {
    expect({ lang, text: got[k]!.text }).toEqual({ lang, text: code });
    expect(got[k]!.tags.filter((t) => t !== "SPAN")).toEqual([]);
    for (const pair of want) expect({ lang, has: got[k]!.spans }).toEqual({ lang, has: expect.arrayContaining([pair]) });
  });
  // An unknown language is plain text: one text node, no spans.
  expect(await page.evaluate(() => { const f = (window as any).__hl.highlight("if (x) { y }", "brainfudge"); return [f.childNodes.length, f.firstChild.nodeType]; })).toEqual([1, 3]);
  // Random code in every language (unterminated strings and comments, odd bytes): the text is the code.
  const mismatches = await page.evaluate(() => {
    const langs = ["js", "ts", "json", "python", "bash", "c", "cpp", "go", "rust", "java", "sql", "html", "xml", "css", "yaml", "toml", "diff", "ruby", "", "nope"];
    const alphabet = ["a", "Z", "_", "$", "@", "#", "0", "9", ".", "e", "-", "+", "'", '"', "`", "\\", "/", "*", "<", ">", "!", "-", "=", ":", "{", "}", "(", ")", "[", "]", ";", "&", " ", "\t", "\n", "\r", "é", "😀", "\u0000", "if", "class", "<!--", "-->", "/*", "*/", "//", '"""', "${", "<?", "]]>"];
    let seed = 42;
    const rnd = (n: number) => ((seed = (seed * 1103515245 + 12345) & 0x7fffffff) % n);
    const out: string[] = [];
    for (let k = 0; k < 2000; k++) {
      let code = "";
      const len = rnd(60);
      for (let j = 0; j < len; j++) code += alphabet[rnd(alphabet.length)];
      const lang = langs[k % langs.length]!;
      const el = document.createElement("code");
      el.appendChild((window as any).__hl.highlight(code, lang));
      if (el.textContent !== code) out.push(`${lang}: ${JSON.stringify(code)}`);
    }
    return out;
  });
  expect(mismatches).toEqual([]);
  // A big file highlights in linear time.
  const ms = await page.evaluate(() => {
    const code = 'function f(a, b) { return a + "s" * 2; } // x\n'.repeat(5000);
    const t0 = performance.now();
    (window as any).__hl.highlight(code, "js");
    return performance.now() - t0;
  });
  expect(ms).toBeLessThan(1500);
});

const CODE = 'const s = "<script>alert(1)</script>";\n\tindented\twith tabs  \n  trailing spaces   \nunicode: é 😀 \\n \\\\ ${x}\n';

test("Copy puts the exact code on the clipboard, through the Clipboard API and through the fallback", async () => {
  await page.evaluate((code) => { (window as any).__clear(); (window as any).__render("```js\n" + code + "\n```"); }, CODE);
  expect(await page.locator("#sandbox pre code").textContent()).toBe(CODE);
  const button = page.getByRole("button", { name: "Copy code" });
  await button.click();
  expect(await page.evaluate(() => navigator.clipboard.readText())).toBe(CODE);
  expect(await button.textContent()).toBe("Copied");
  expect(await page.locator("#sandbox [aria-live]").textContent()).toBe("Copied");
  // Without the Clipboard API (it throws): a selected textarea and execCommand("copy").
  await page.evaluate(async () => {
    await navigator.clipboard.writeText("something else");
    (window as any).__copied = null;
    document.addEventListener("copy", (e) => { const t = e.target as HTMLTextAreaElement; (window as any).__copied = t.value.slice(t.selectionStart, t.selectionEnd); }, { once: true });
    Object.defineProperty(navigator.clipboard, "writeText", { configurable: true, value: () => Promise.reject(new Error("denied")) });
  });
  await button.click();
  expect(await page.evaluate(() => (window as any).__copied)).toBe(CODE);
  expect(await page.evaluate(() => navigator.clipboard.readText())).toBe(CODE);
  expect(await page.evaluate(() => [document.querySelectorAll("textarea").length, document.activeElement?.getAttribute("aria-label")])).toEqual([0, "Copy code"]);
  await page.evaluate(() => delete (navigator.clipboard as any).writeText);
  expect(errors).toEqual([]);
});

// A chat answer with every construct the renderer knows.
const SAMPLE = `# Getting started

Here is a **short** answer with *emphasis*, ~~a mistake~~, \`inline code\`, a [link](https://example.com/docs "Docs")
and a bare URL https://example.com/path?q=1. Raw <b>HTML</b> stays text &amp; so does &lt;this&gt;.

## Steps

1. Install the tool:
   \`\`\`bash
   npm install --save my-lib # pinned
   export TOKEN="$HOME/.token"
   \`\`\`
2. Configure it
   - nested bullet
   - another, with \`code\`
     1. deeper
3. Run

- [x] done task
- [ ] open task

> A quote with **bold**
> > and a nested one

---

### Code

\`\`\`python
@cache
def fib(n: int) -> int:
    """Fibonacci."""
    return n if n < 2 else fib(n - 1) + fib(n - 2)  # recursive
\`\`\`

\`\`\`json
{"model": "chat", "temperature": 0.7, "stream": true, "stop": null}
\`\`\`

\`\`\`ts
export async function main(): Promise<void> { const x: number = 42; console.log(\`x=\${x}\`); }
\`\`\`

    indented code block

| Name | Value | Note |
|:-----|------:|:----:|
| alpha | 1 | **first** |
| beta | 22.5 | a long cell with a [link](https://example.com/very/long/path/that/keeps/going/and/going) |

![diagram](https://example.com/diagram.png)

#### Conclusion
That's all — see <https://example.com> or mail <help@example.com>.
`;

test("every prefix of a streamed answer renders without throwing and within the rules", async () => {
  const result = await page.evaluate((doc) => {
    const w = window as any;
    const failures: string[] = [];
    let checked = 0;
    for (let k = 0; k <= doc.length; k++) {
      try {
        w.__clear();
        const box = w.__render(doc.slice(0, k));
        if (k % 7 === 0 || k === doc.length) {
          const bad = w.__audit(box);
          if (bad.length) failures.push(`${k}: ${bad.join(", ")}`);
          checked++;
        }
      } catch (e) {
        failures.push(`${k}: ${(e as Error).message}`);
      }
    }
    return { failures, checked };
  }, SAMPLE);
  expect(result.failures).toEqual([]);
  expect(result.checked).toBeGreaterThan(100);
  // Rendering is deterministic: the same text gives the same tree.
  const [a, b] = await page.evaluate((doc) => [(window as any).__render(doc).innerHTML, (window as any).__render(doc).innerHTML], SAMPLE);
  expect(a).toBe(b);
});

test("random Markdown made of the renderer's own markers never throws and stays within the rules", async () => {
  const failures = await page.evaluate(() => {
    const w = window as any;
    const pieces = ["*", "**", "_", "~~", "`", "```", "~~~", "[", "]", "(", ")", "![", "<", ">", "> ", "#", "# ", "- ", "1. ", "|", "---", "\\", "&", "&amp;", "&#", ";", "\n", "\n\n", "    ", " ", "\t", "a", "word", "https://x.example/", "javascript:", "data:", "mailto:", "<script>", "<img src=x onerror=window.__pwned=1>", '"', "'", "[ ]", "[x] ", "é", "😀", "\u0000"];
    let seed = 7;
    const rnd = (n: number) => ((seed = (seed * 1103515245 + 12345) & 0x7fffffff) % n);
    const out: string[] = [];
    for (let k = 0; k < 3000; k++) {
      let doc = "";
      const len = 1 + rnd(80);
      for (let j = 0; j < len; j++) doc += pieces[rnd(pieces.length)];
      try {
        w.__clear();
        const bad = w.__audit(w.__render(doc));
        if (bad.length) out.push(`${JSON.stringify(doc)}: ${bad.join(", ")}`);
      } catch (e) {
        out.push(`${JSON.stringify(doc)}: ${(e as Error).message}`);
      }
    }
    return out;
  });
  expect(failures).toEqual([]);
  await page.waitForTimeout(200);
  expect(await page.evaluate(() => (window as any).__pwned)).toBeUndefined();
});

const AXE = readFileSync(require.resolve("axe-core/axe.min.js"), "utf8");

for (const width of [390, 1440]) {
  test(`at ${width} px a sample with every construct passes axe-core's WCAG 2.1 A/AA rules and does not run past the page`, async () => {
    await page.setViewportSize({ width, height: 900 });
    const shape = await page.evaluate((doc) => {
      (window as any).__clear();
      return (window as any).__shape((window as any).__render(doc));
    }, SAMPLE);
    for (const part of ["<h3 class=\"md-h1\">", "<ol>", "<ul>", "<blockquote>", "<hr>", "<code-block python>", "<code-block json>", "<code-block ts>", "<table>", "<del>", "md-task", "md-image"]) expect(shape).toContain(part);
    expect(await page.locator("#sandbox .tok-kw").count()).toBeGreaterThan(5);
    await page.evaluate(AXE);
    const result = await page.evaluate(() => (window as any).axe.run(document, { runOnly: { type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"] } }));
    const violations = (result.violations as { id: string; nodes: { target: string[] }[] }[]).map((v) => `${v.id}: ${v.nodes.map((n) => n.target.join(" ")).join(", ")}`);
    expect(violations).toEqual([]);
    expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(width);
    await page.screenshot({ path: join(SHOTS, `markdown-${width}.png`), fullPage: true });
    expect(errors).toEqual([]);
  }, 60_000);
}
