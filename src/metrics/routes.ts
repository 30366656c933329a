// Request → the route pattern it would match ("/v1/files/:id"), for requests the edge answers
// before the router sees them (a 401, a 429, a 413): logs and metrics then name the route, not
// the raw path, whose ids would make label values unbounded. Elysia's precedence: a static path
// first, then patterns with parameters, then wildcards.

export type RouteMatcher = (method: string, path: string) => string;

interface Pattern {
  method: string;
  path: string;
  re: RegExp;
  /** Lower is tried first: static segments beat parameters, which beat a wildcard. */
  rank: number;
}

export function routeMatcher(routes: readonly { method: string; path: string }[]): RouteMatcher {
  const statics = new Map<string, string>();
  const patterns: Pattern[] = [];
  for (const { method, path } of routes) {
    if (!path.includes(":") && !path.includes("*")) {
      statics.set(`${method} ${path}`, path);
      continue;
    }
    const segments = path.split("/").map((s) => {
      if (s === "*") return ".*";
      if (s.startsWith(":")) return s.endsWith("?") ? "[^/]*" : "[^/]+";
      return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
    });
    const source = segments.join("/");
    const params = path.split("/").filter((s) => s.startsWith(":")).length;
    patterns.push({ method, path, re: new RegExp(`^${source}$`), rank: path.includes("*") ? 1000 : params });
  }
  patterns.sort((a, b) => a.rank - b.rank);
  return (method, path) => {
    const exact = statics.get(`${method} ${path}`) ?? statics.get(`ALL ${path}`);
    if (exact) return exact;
    for (const p of patterns) if ((p.method === method || p.method === "ALL") && p.re.test(path)) return p.path;
    return "unmatched";
  };
}
