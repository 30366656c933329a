import { expect, test } from "bun:test";
import { patternProblem } from "../../../src/3-engines/llama/pattern-limits";

test.each([
  { pattern: "^[a-z]{2,5}-[0-9]+$", problem: null },
  { pattern: "^[A-Za-z0-9]{0,2000}$", problem: null },
  { pattern: "^(a{0,10}){0,10}$", problem: null },
  { pattern: "^(a*)*$", problem: null },
  { pattern: "^(a|aa|aaa)+b?$", problem: null },
  { pattern: "^((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\\.){3}(25[0-5]|[0-9]{1,2})$", problem: null },
  { pattern: "^[^{]{3}\\{2,5}$", problem: null },
  { pattern: "^a{1,2001}$", problem: /repeats \{1,2001\}: a grammar counts at most 2000/ },
  { pattern: "^a{3000}$", problem: /repeats \{3000\}/ },
  { pattern: "^a{2001,}$", problem: /repeats \{2001,\}/ },
  { pattern: "^(a{0,2000}){0,2000}$", problem: /multiply to 4000000 \(at most 1000\)/ },
  { pattern: "^((a{0,40}){0,40}){0,40}$", problem: /multiply to 1600/ },
  { pattern: "^(?:x(a{0,50})+y){0,30}$", problem: /multiply to 1500/ },
  { pattern: "^(x|(a[b-c]{2,40}){2,40})$", problem: /multiply to 1600/ },
  { pattern: "(".repeat(40) + "a" + ")".repeat(40), problem: /groups more than 32 deep/ },
  { pattern: "a".repeat(5000), problem: /longer than 4096 characters/ },
])("$pattern", ({ pattern, problem }) => {
  const p = patternProblem(pattern);
  if (problem === null) expect(p).toBeNull();
  else expect(p).toMatch(problem);
});
