import { afterAll, beforeAll, expect, test } from "bun:test";
import { markdownPage, SAMPLE, type MarkdownPage } from "../helpers/markdown-page";

// The chat's Markdown renderer (web/markdown.js), issue 48, against hostile input in a real browser
// (Debian's chromium through playwright-core) on the console page the server sends, under its CSP
// (test/helpers/markdown-page.ts): hostile Markdown (script, event handlers, javascript:/data:
// links, images, raw HTML) builds only allow-listed elements and attributes, runs nothing and shows
// the HTML as text; deep nesting and 200 KB render in linear-ish time; random Markdown made of the
// renderer's own markers never throws.

let tab: MarkdownPage;
beforeAll(async () => void (tab = await markdownPage("appliance-markdown-")), 60_000);
afterAll(() => tab?.close());

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
  await tab.page.evaluate(() => delete (window as any).__pwned);
  for (const md of HOSTILE) {
    const r = await tab.render(md);
    expect({ md, bad: r.bad }).toEqual({ md, bad: [] });
  }
  // All of it in one document, kept in the page a moment (an onerror or onload would have fired).
  const all = HOSTILE.join("\n\n");
  const r = await tab.render(all);
  expect(r.bad).toEqual([]);
  await tab.page.waitForTimeout(300);
  expect(await tab.page.evaluate(() => (window as any).__pwned)).toBeUndefined();
  const visible = await tab.page.evaluate(() => (document.querySelector("#sandbox .md") as HTMLElement).innerText);
  for (const literal of [`<script>${PWN}</script>`, `<img src=x onerror="${PWN}">`, `<svg onload=${PWN}>`, `<iframe src="javascript:${PWN}"></iframe>`, `<a href=javascript:${PWN}>click</a>`, "<!-- comment -->"])
    expect(visible).toContain(literal);
  // The refused links are their text, the refused image its alt text; nothing points anywhere but http(s)/mailto.
  const links = await tab.page.evaluate(() => Array.from(document.querySelectorAll("#sandbox a")).map((a) => [a.getAttribute("href"), a.textContent]));
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
  expect(await tab.page.evaluate(() => document.querySelector("#sandbox a[title]:not(.md-image)")?.getAttribute("title"))).toBe(`title" onmouseover="${PWN}`);
  expect(await tab.page.evaluate(() => document.querySelectorAll("#sandbox .md-image").length)).toBe(1);
  const image = await tab.render("![a tracking pixel](https://evil.example/p.png)");
  expect(image.shape).toBe('<p><a class="md-image" href="https://evil.example/p.png" title="Image (not loaded)">a tracking pixel</a></p>');
  expect(await tab.page.evaluate(() => (window as any).__pwned)).toBeUndefined();
  expect(tab.errors).toEqual([]);
}, 60_000);

test("deep nesting and 200 KB render in linear-ish time and stay within the rules", async () => {
  const times: Record<string, number> = {};
  for (const [name, md] of DEEP) {
    const r = await tab.render(md);
    times[name] = Math.round(r.ms);
    expect({ name, bad: r.bad }).toEqual({ name, bad: [] });
  }
  // A chat answer of every construct, repeated to 200 KB; and the hostile corpus to 200 KB.
  const big = SAMPLE.repeat(Math.ceil(200_000 / SAMPLE.length));
  const r = await tab.render(big);
  times["200 KB answer"] = Math.round(r.ms);
  expect(r.bad).toEqual([]);
  expect(r.text).toContain("Conclusion");
  const hostile = HOSTILE.join("\n").repeat(Math.ceil(200_000 / HOSTILE.join("\n").length));
  const h = await tab.render(hostile);
  times["200 KB hostile"] = Math.round(h.ms);
  expect(h.bad).toEqual([]);
  console.log("render times (ms):", JSON.stringify(times));
  for (const [name, ms] of Object.entries(times)) expect({ name, slow: ms > 1500 }).toEqual({ name, slow: false });
  expect(await tab.page.evaluate(() => (window as any).__pwned)).toBeUndefined();
  expect(tab.errors).toEqual([]);
}, 120_000);

test("random Markdown made of the renderer's own markers never throws and stays within the rules", async () => {
  const failures = await tab.page.evaluate(() => {
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
  await tab.page.waitForTimeout(200);
  expect(await tab.page.evaluate(() => (window as any).__pwned)).toBeUndefined();
});
