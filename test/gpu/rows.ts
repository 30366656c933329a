import { appendFileSync } from "node:fs";

// The device check's table rows (test/gpu/device-check.sh): each helper appends its rows, one a
// line, tab-separated, to the file DEVICE_CHECK_ROWS names; the script renders them as one Markdown
// table. Without the variable (a helper run by hand) the rows are printed.

export interface Row {
  /** What was checked ("decode probe: CUDA 13 build", "vs llama-server, 8 streams"). */
  check: string;
  device: string;
  /** ok / failed / fell back / not usable / PASS / FAIL / skipped … */
  result: string;
  figure?: string;
  notes?: string;
}

/** One cell: no tabs or line breaks (they would split the row); the script escapes pipes. */
export const cell = (s: string | undefined) => (s ?? "").replace(/[\t\r\n]+/g, " ").trim();

export function addRow(r: Row): void {
  const line = [r.check, r.device, r.result, r.figure, r.notes].map(cell).join("\t");
  const file = process.env.DEVICE_CHECK_ROWS;
  if (file) appendFileSync(file, `${line}\n`);
  else console.log(`row: ${line.replaceAll("\t", " | ")}`);
}

/** A number with a fixed number of decimals, or "n/a" for NaN/undefined. */
export const fmt = (n: number | undefined, digits = 0) => (n === undefined || !Number.isFinite(n) ? "n/a" : n.toFixed(digits));

/** An error's first line, shortened for a table cell. */
export const firstLine = (e: unknown, max = 300) => {
  const text = e instanceof Error ? e.message : String(e);
  const line = text.split("\n").find((l) => l.trim()) ?? text;
  return line.length > max ? `${line.slice(0, max)}…` : line;
};
