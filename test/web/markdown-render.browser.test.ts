import { afterAll, beforeAll, expect, test } from "bun:test";
import { markdownPage, type MarkdownPage } from "../helpers/markdown-page";

// The chat's Markdown renderer (web/markdown.js) and code highlighter (web/highlight.js), issue 48,
// in a real browser (Debian's chromium through playwright-core) on the console page the server
// sends (test/helpers/markdown-page.ts): the constructs chat models write render to the expected
// elements; tokens get their classes and the highlighted text is the code exactly.

let tab: MarkdownPage;
beforeAll(async () => void (tab = await markdownPage("appliance-markdown-")), 60_000);
afterAll(() => tab?.close());

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
  for (const [md] of CASES) got.push([md, (await tab.render(md)).shape]);
  expect(got).toEqual(CASES);
  expect(await tab.page.evaluate(() => [null, undefined, 42].map((v) => (window as any).__md.renderMarkdown(v, null).textContent))).toEqual(["", "", "42"]);
  // The chat's defaults can be changed: no line breaks for single newlines, headings from h1.
  expect((await tab.render("a\nb\n# H", { breaks: false, headingOffset: 0 })).shape).toBe('<p>a\nb</p><h1 class="md-h1">H</h1>');
  // Links open in a new tab without the opener or a referrer.
  const link = await tab.page.evaluate(() => {
    (window as any).__clear();
    const a = (window as any).__render("[x](https://e.example/)").querySelector("a");
    return [a.getAttribute("target"), a.getAttribute("rel")];
  });
  expect(link).toEqual(["_blank", "noopener noreferrer nofollow"]);
  // A code block: its header names the language, a button copies, the code sits in <pre><code>.
  const block = await tab.page.evaluate(() => {
    (window as any).__clear();
    const box = (window as any).__render("```Python\nx = 1\n```");
    const b = box.querySelector(".md-code-head button");
    return { lang: box.querySelector(".md-code-lang").textContent, button: [b.getAttribute("type"), b.getAttribute("aria-label"), b.textContent], code: box.querySelector("pre > code").className, live: box.querySelector("[aria-live]")?.getAttribute("aria-live") };
  });
  expect(block).toEqual({ lang: "python", button: ["button", "Copy code", "Copy"], code: "md-code-body md-lang-python", live: "polite" });
  expect(tab.errors).toEqual([]);
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
  const got = await tab.page.evaluate((cases) => cases.map(([lang, code]) => {
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
  expect(await tab.page.evaluate(() => { const f = (window as any).__hl.highlight("if (x) { y }", "brainfudge"); return [f.childNodes.length, f.firstChild.nodeType]; })).toEqual([1, 3]);
  // Random code in every language (unterminated strings and comments, odd bytes): the text is the code.
  const mismatches = await tab.page.evaluate(() => {
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
  const ms = await tab.page.evaluate(() => {
    const code = 'function f(a, b) { return a + "s" * 2; } // x\n'.repeat(5000);
    const t0 = performance.now();
    (window as any).__hl.highlight(code, "js");
    return performance.now() - t0;
  });
  expect(ms).toBeLessThan(1500);
});
