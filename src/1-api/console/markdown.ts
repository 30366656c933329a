import MarkdownIt from "markdown-it";

type Token = ReturnType<InstanceType<typeof MarkdownIt>["parse"]>[number];

// The manual's Markdown (web/docs/*.md) → a tree the console builds with its own DOM helper
// (web/docs.js), never HTML: each node is a string (text) or [tag, attributes, ...children], from
// a fixed list of tags and attributes, so no page can inject markup or script (raw HTML in the
// Markdown is kept as text). Pure. Links between pages become console routes (#/docs/PAGE/ANCHOR),
// headings carry GitHub's anchors (the ones the links name, as doc-ANCHOR), links out of the manual open in a new
// tab, and links to files of the source tree (which the console does not serve) are kept as text.

export type DocNode = string | [string, Record<string, string>, ...DocNode[]];

const md = new MarkdownIt({ html: false, linkify: false, typographer: false });

const TAGS = new Set(["h1", "h2", "h3", "h4", "h5", "h6", "p", "ul", "ol", "li", "a", "code", "pre", "em", "strong", "s", "blockquote", "table", "thead", "tbody", "tr", "th", "td", "hr", "br"]);

/** GitHub's heading anchor: lower case, punctuation dropped (letters, digits, spaces, - and _ kept), spaces → "-". */
export function slug(text: string): string {
  return text
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\p{M} _-]/gu, "")
    .replace(/ /g, "-");
}

/** The heading anchors of a page, in order, numbered as GitHub numbers repeats ("x", "x-1", …). */
function anchorsOf(tokens: Token[]): Map<Token, string> {
  const seen = new Map<string, number>();
  const out = new Map<Token, string>();
  tokens.forEach((t, i) => {
    if (t.type !== "heading_open") return;
    const base = slug(plain(tokens[i + 1]!));
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.set(t, n ? `${base}-${n}` : base);
  });
  return out;
}

function attr(t: Token, name: string): string | null {
  const v = t.attrGet(name);
  return v == null ? null : String(v);
}

function plain(inline: Token): string {
  return (inline.children ?? []).map((c) => (c.type === "text" || c.type === "code_inline" ? c.content : "")).join("");
}

/** Where a link in page `page` leads in the console; null: nowhere it serves (a source file). */
export function linkTarget(href: string, page: string, pages: ReadonlySet<string>): { href: string; external: boolean } | null {
  if (/^https?:\/\//i.test(href) || /^mailto:/i.test(href)) return { href, external: true };
  if (href.startsWith("#")) return { href: `#/docs/${page}/${href.slice(1)}`, external: false };
  const m = /^(?:\.\/)?(?:web\/docs\/)?([a-z0-9-]+)\.md(?:#(.*))?$/i.exec(href);
  if (m && pages.has(m[1]!)) return { href: `#/docs/${m[1]}${m[2] ? `/${m[2]}` : ""}`, external: false };
  return null;
}

export interface RenderedDoc {
  title: string;
  tree: DocNode[];
  /** The heading anchors of the page (what links may name). */
  anchors: string[];
}

export function renderDoc(markdown: string, page: string, pages: ReadonlySet<string>): RenderedDoc {
  const tokens = md.parse(markdown, {});
  const anchors = anchorsOf(tokens);
  const root: DocNode[] = [];
  const stack: DocNode[][] = [root];
  const top = () => stack[stack.length - 1]!;
  const open = (tag: string, attrs: Record<string, string>) => {
    const node: [string, Record<string, string>, ...DocNode[]] = [tag, attrs];
    top().push(node);
    stack.push(node as unknown as DocNode[]);
  };
  const close = () => void (stack.length > 1 && stack.pop());
  const leaf = (tag: string, attrs: Record<string, string>, text?: string) => top().push(text === undefined ? [tag, attrs] : [tag, attrs, text]);

  const walk = (list: Token[]) => {
    for (const t of list) {
      if (t.type === "inline") {
        walk(t.children ?? []);
        continue;
      }
      if (t.type === "text") top().push(t.content);
      else if (t.type === "code_inline") leaf("code", {}, t.content);
      else if (t.type === "fence" || t.type === "code_block") {
        const lang = t.info.trim().split(/\s+/)[0];
        top().push(["pre", {}, ["code", lang ? { class: `language-${lang.replace(/[^\w-]/g, "")}` } : {}, t.content]]);
      } else if (t.type === "softbreak") top().push("\n");
      else if (t.type === "hardbreak" || t.type === "hr") leaf(t.tag, {});
      else if (t.type === "html_inline" || t.type === "html_block") top().push(t.content); // html: false leaves none; kept as text if any
      else if (t.type === "image") top().push(t.content || (attr(t, "alt") ?? ""));
      else if (t.nesting === 1) open(TAGS.has(t.tag) ? t.tag : "span", attrsOf(t, anchors, page, pages));
      else if (t.nesting === -1) close();
    }
  };
  walk(tokens);
  const h1 = tokens.findIndex((t) => t.type === "heading_open" && t.tag === "h1");
  return { title: h1 >= 0 ? plain(tokens[h1 + 1]!) : page, tree: root, anchors: [...anchors.values()] };
}

function attrsOf(t: Token, anchors: Map<Token, string>, page: string, pages: ReadonlySet<string>): Record<string, string> {
  // Prefixed: the console's own elements have ids too (a heading "Password" is no sign-in field).
  if (t.type === "heading_open") return { id: `doc-${anchors.get(t)!}` };
  if (t.type === "ordered_list_open") {
    const start = attr(t, "start");
    return start ? { start } : {};
  }
  if (t.type === "th_open" || t.type === "td_open") {
    // markdown-it writes the column's alignment as a style attribute, which the console's CSP
    // refuses: a class instead.
    const align = /text-align:(left|right|center)/.exec(attr(t, "style") ?? "")?.[1];
    return align ? { class: `align-${align}` } : {};
  }
  if (t.type === "link_open") {
    const target = linkTarget(attr(t, "href") ?? "", page, pages);
    if (!target) return { class: "doc-file", title: `${attr(t, "href")} (a file of the source tree)` };
    return target.external ? { href: target.href, target: "_blank", rel: "noopener noreferrer" } : { href: target.href };
  }
  return {};
}
