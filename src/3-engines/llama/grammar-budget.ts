/**
 * What one request's grammar may cost the decode loop (loop.cpp; issue 41, web/docs/limits.md): its
 * parse states, and its sampling time a token on average beyond an allowance for a few costly first
 * tokens. A request over either is ended with schema_too_complex and its slot freed; a grammar that
 * starts with more states is refused before it runs (json-schema.ts).
 */
export const GRAMMAR_BUDGET = { statesMax: 4096, msPerToken: 25, msAllowance: 1000 };
