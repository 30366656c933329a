// What a schema's `pattern` may ask of a grammar (issue 41). llama.cpp's grammar counts a repetition
// up to 2,000 (MAX_REPETITION_THRESHOLD: a larger minimum fails to parse, a larger maximum silently
// becomes unbounded), and a bounded repetition inside another is ambiguous: "a" after "aaa" may start
// an inner or an outer round, so the grammar follows every split at once. `^(a{0,2000}){0,2000}$`
// wedged a model's decode loop for everyone (every token multiplied the parse states); so the
// counts of repetitions nested in each other may multiply to NESTED_REPETITION_MAX at most.

/** The largest count llama.cpp's grammar enforces ({m,n}, minLength, maxItems…). */
export const GRAMMAR_REPETITION_MAX = 2000;
/** The largest product of the counts of repetitions nested in one another, in one pattern. */
export const NESTED_REPETITION_MAX = 1000;
/** Characters in one pattern. */
export const PATTERN_LENGTH_MAX = 4096;
/** Groups open inside one another in one pattern (the converter recurses once per group). */
export const PATTERN_GROUP_DEPTH_MAX = 32;

/** Why `pattern` asks more of a grammar than it gives, or null. Reads the subset llama.cpp converts. */
export function patternProblem(pattern: string): string | null {
  if (pattern.length > PATTERN_LENGTH_MAX) return `is longer than ${PATTERN_LENGTH_MAX} characters`;
  // per open group: the largest product of counts inside it so far
  const groups: number[] = [1];
  // the atom just read (its own product), waiting for a quantifier
  let atom: number | null = null;
  // (a repetition alone may count to GRAMMAR_REPETITION_MAX: only one inside another multiplies)
  const settle = (count: number) => {
    if (atom === null) return null;
    const nested = atom > 1 && count > 1;
    const product = atom * count;
    groups[groups.length - 1] = Math.max(groups.at(-1)!, product);
    atom = null;
    return nested && product > NESTED_REPETITION_MAX
      ? `nests repetitions whose counts multiply to ${product} (at most ${NESTED_REPETITION_MAX}): the grammar would follow every way of splitting the text between them`
      : null;
  };
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i]!;
    if (c === "{") {
      const m = /^\{(\d*)(,(\d*))?\}/.exec(pattern.slice(i, i + 64));
      if (m && m[1] !== "") {
        const min = Number(m[1]);
        const max = m[2] === undefined ? min : m[3] === "" ? Infinity : Number(m[3]);
        if (min > GRAMMAR_REPETITION_MAX || (Number.isFinite(max) && max > GRAMMAR_REPETITION_MAX))
          return `repeats ${m[0]}: a grammar counts at most ${GRAMMAR_REPETITION_MAX}`;
        const why = settle(Number.isFinite(max) ? Math.max(max, 1) : Math.max(min, 1));
        if (why) return why;
        i += m[0].length - 1;
        continue;
      }
    }
    if (c === "*" || c === "+" || c === "?") {
      const why = settle(1);
      if (why) return why;
      continue;
    }
    // anything else ends the atom before it unquantified
    const why = settle(1);
    if (why) return why;
    if (c === "\\") {
      i++;
      atom = 1;
    } else if (c === "[") {
      let j = i + 1;
      if (pattern[j] === "^") j++;
      if (pattern[j] === "]") j++;
      while (j < pattern.length && pattern[j] !== "]") j += pattern[j] === "\\" ? 2 : 1;
      i = j;
      atom = 1;
    } else if (c === "(") {
      groups.push(1);
      if (groups.length > PATTERN_GROUP_DEPTH_MAX + 1) return `opens groups more than ${PATTERN_GROUP_DEPTH_MAX} deep`;
      if (pattern.startsWith("?:", i + 1)) i += 2;
    } else if (c === ")") {
      if (groups.length > 1) atom = groups.pop()!;
    } else if (c !== "|" && c !== "^" && c !== "$") atom = 1;
  }
  return settle(1);
}
