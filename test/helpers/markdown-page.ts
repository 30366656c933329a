import type { Page } from "playwright-core";
import { bareConsole } from "./bare-console";

// The page the chat's Markdown tests (test/web/markdown-*.browser.test.ts) work in: the console
// page the server sends, under its CSP, with web/markdown.js and web/highlight.js imported from the
// console's own URLs as window.__md and window.__hl, and a sandbox section to render into:
// __render(text, opts) renders into a fresh .md box there (the chat's container) and returns it,
// __clear() empties the sandbox, __audit(root) lists what in `root` breaks the renderer's rules
// (elements and attributes off the allow-list, links that are not http(s)/mailto or lack
// target/rel), and __shape(node) writes the rendered structure as a string.

export interface MarkdownPage {
  page: Page;
  /** The page's uncaught errors and console errors (but 401s). */
  errors: string[];
  /** Renders `text` in the page: the .md box's rule breaks, its text, its shape, and how long it took. */
  render(text: string, opts?: object): Promise<{ bad: string[]; text: string; shape: string; ms: number }>;
  /** Closes the browser and stops the server. */
  close(): Promise<void>;
}

/** A server with no models and Chromium at 1440 × 900 (clipboard allowed) on the console page, set up as above. */
export async function markdownPage(prefix: string): Promise<MarkdownPage> {
  const c = await bareConsole(prefix, { viewport: { width: 1440, height: 900 }, permissions: ["clipboard-read", "clipboard-write"] });
  const { page, errors } = c;
  try {
    page.on("console", (m) => void (m.type() === "error" && !m.text().includes("401") && errors.push(m.text())));
    await page.goto(`${c.server.url}/console`);
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
  } catch (e) {
    await c.close();
    throw e;
  }
  errors.length = 0;
  const render = (text: string, opts?: object) =>
    page.evaluate(
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
  return { page, errors, render, close: c.close };
}

// A chat answer with every construct the renderer knows.
export const SAMPLE = `# Getting started

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
