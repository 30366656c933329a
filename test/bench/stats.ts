// The figures every benchmark reports its rounds by.

/** The p-quantile (0–1) of `xs` by rank (NaN for none). */
export const pct = (xs: number[], p: number): number => (xs.length ? [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * p))]! : NaN);

/** The median by rank: the upper one of an even count (NaN for none). */
export const median = (xs: number[]): number => pct(xs, 0.5);
