// A GBNF grammar without recursion (what llama.cpp's converter writes for numbers, strings and
// flat objects) as one JavaScript RegExp, so a test can ask whether the grammar admits a text
// without a model to sample it. Rules are inlined; a rule that refers back to itself throws.

export function gbnfRegex(gbnf: string, root = "root"): RegExp {
  const rules = new Map<string, string>();
  for (const line of gbnf.split("\n")) {
    const m = /^([a-zA-Z0-9-]+) ::= (.*)$/.exec(line);
    if (m) rules.set(m[1]!, m[2]!);
  }
  const expand = (name: string, stack: string[]): string => {
    const body = rules.get(name);
    if (body === undefined) throw new Error(`no rule ${name}`);
    if (stack.includes(name)) throw new Error(`rule ${name} refers to itself: not a regular grammar`);
    return `(?:${translate(body, [...stack, name])})`;
  };
  const translate = (body: string, stack: string[]): string => {
    let out = "";
    let i = 0;
    while (i < body.length) {
      const c = body[i]!;
      if (c === " ") i++;
      else if (c === '"') {
        let j = i + 1;
        let text = "";
        while (body[j] !== '"') {
          if (body[j] === "\\") {
            const [ch, len] = escape(body, j);
            text += ch;
            j += len;
          } else text += body[j++];
        }
        out += text.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&");
        i = j + 1;
      } else if (c === "[") {
        let j = i + 1;
        let cls = "[";
        if (body[j] === "^") {
          cls += "^";
          j++;
        }
        while (body[j] !== "]") {
          if (body[j] === "\\") {
            const [ch, len] = escape(body, j);
            cls += `\\u{${ch.codePointAt(0)!.toString(16)}}`;
            j += len;
          } else {
            const ch = body[j++]!;
            cls += /[\]\\^]/.test(ch) ? `\\${ch}` : ch;
          }
        }
        out += cls + "]";
        i = j + 1;
      } else if (c === "(" || c === ")" || c === "|" || c === "?" || c === "*" || c === "+") {
        out += c === "(" ? "(?:" : c;
        i++;
      } else if (c === "{") {
        const j = body.indexOf("}", i);
        out += body.slice(i, j + 1);
        i = j + 1;
      } else {
        const m = /^[a-zA-Z0-9-]+/.exec(body.slice(i))!;
        out += expand(m[0], stack);
        i += m[0].length;
      }
    }
    return out;
  };
  return new RegExp(`^${expand(root, [])}$`, "u");
}

function escape(s: string, at: number): [string, number] {
  const c = s[at + 1]!;
  const simple: Record<string, string> = { n: "\n", t: "\t", r: "\r", '"': '"', "\\": "\\", "[": "[", "]": "]", "-": "-" };
  if (c in simple) return [simple[c]!, 2];
  const width = c === "x" ? 2 : c === "u" ? 4 : c === "U" ? 8 : 0;
  if (!width) return [c, 2];
  return [String.fromCodePoint(Math.min(parseInt(s.slice(at + 2, at + 2 + width), 16), 0x10ffff)), 2 + width];
}
