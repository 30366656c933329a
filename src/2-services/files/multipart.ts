// A streaming multipart/form-data reader (RFC 7578): parts are handed over chunk by chunk as they
// arrive, so a 50 MB upload is written to disk without ever being held whole in memory.

export interface PartInfo {
  name: string;
  filename: string | null;
  contentType: string | null;
}

/** Receives one part's bytes; `end` runs after the last chunk. */
export interface PartSink {
  write(chunk: Uint8Array): void | Promise<void>;
  end(): void | Promise<void>;
}

export class MultipartError extends Error {}

const CRLF = Buffer.from("\r\n");
const HEADER_END = Buffer.from("\r\n\r\n");
const MAX_HEADER_BYTES = 16 * 1024;

export function boundaryOf(contentType: string | null): string | null {
  if (!contentType || !/^multipart\/form-data\b/i.test(contentType)) return null;
  const m = /;\s*boundary=(?:"([^"]+)"|([^;\s]+))/i.exec(contentType);
  return m ? (m[1] ?? m[2]!) : null;
}

/**
 * Reads `body` part by part; `onPart` returns where the part's bytes go (null: skip them).
 * Throws MultipartError for a malformed or truncated body.
 */
export async function readMultipart(
  body: ReadableStream<Uint8Array>,
  boundary: string,
  onPart: (part: PartInfo) => PartSink | null | Promise<PartSink | null>,
): Promise<void> {
  const reader = body.getReader();
  let buf = Buffer.alloc(0);
  let done = false;
  const fill = async (): Promise<boolean> => {
    if (done) return false;
    const r = await reader.read();
    if (r.done) {
      done = true;
      return false;
    }
    buf = buf.length ? Buffer.concat([buf, r.value]) : Buffer.from(r.value);
    return true;
  };

  // The first delimiter has no CRLF in front of it; what precedes it is a preamble to skip.
  const first = Buffer.from(`--${boundary}`);
  for (;;) {
    const at = buf.indexOf(first);
    if (at >= 0) {
      buf = buf.subarray(at + first.length);
      break;
    }
    if (buf.length > first.length) buf = buf.subarray(buf.length - first.length);
    if (!(await fill())) throw new MultipartError("no multipart boundary found in the body");
  }

  const delimiter = Buffer.from(`\r\n--${boundary}`);
  for (;;) {
    // After a delimiter: "--" ends the body, CRLF starts a part.
    while (buf.length < 2) if (!(await fill())) throw new MultipartError("the multipart body is truncated");
    if (buf[0] === 0x2d && buf[1] === 0x2d) return;
    if (!buf.subarray(0, 2).equals(CRLF)) throw new MultipartError("malformed multipart delimiter");
    buf = buf.subarray(2);

    let headerEnd = buf.indexOf(HEADER_END);
    while (headerEnd < 0) {
      if (buf.length > MAX_HEADER_BYTES) throw new MultipartError("a multipart part's headers are too long");
      if (!(await fill())) throw new MultipartError("the multipart body is truncated");
      headerEnd = buf.indexOf(HEADER_END);
    }
    const info = parseHeaders(buf.subarray(0, headerEnd).toString("utf8"));
    buf = buf.subarray(headerEnd + HEADER_END.length);
    const sink = await onPart(info);

    for (;;) {
      const at = buf.indexOf(delimiter);
      if (at >= 0) {
        if (sink && at > 0) await sink.write(buf.subarray(0, at));
        buf = buf.subarray(at + delimiter.length);
        break;
      }
      // Keep a tail that could be the start of the delimiter; hand over the rest.
      const safe = buf.length - (delimiter.length - 1);
      if (safe > 0) {
        if (sink) await sink.write(buf.subarray(0, safe));
        buf = buf.subarray(safe);
      }
      if (!(await fill())) throw new MultipartError("the multipart body is truncated");
    }
    await sink?.end();
  }
}

function parseHeaders(text: string): PartInfo {
  let name: string | null = null;
  let filename: string | null = null;
  let contentType: string | null = null;
  for (const line of text.split("\r\n")) {
    const colon = line.indexOf(":");
    if (colon < 0) continue;
    const key = line.slice(0, colon).trim().toLowerCase();
    const value = line.slice(colon + 1).trim();
    if (key === "content-disposition") {
      name = param(value, "name");
      filename = param(value, "filename");
    } else if (key === "content-type") contentType = value;
  }
  if (name === null) throw new MultipartError("a multipart part has no name");
  return { name, filename, contentType };
}

/**
 * A parameter of Content-Disposition. Browsers and fetch encode `"`, CR and LF in quoted values
 * as %22, %0D and %0A (WHATWG multipart/form-data encoding); older clients backslash-escape.
 */
function param(header: string, key: string): string | null {
  const m = new RegExp(`;\\s*${key}="((?:[^"\\\\]|\\\\.)*)"`, "i").exec(header) ?? new RegExp(`;\\s*${key}=([^;\\s]+)`, "i").exec(header);
  if (!m) return null;
  return m[1]!
    .replace(/\\(.)/g, "$1")
    .replace(/%22/g, '"')
    .replace(/%0D/gi, "\r")
    .replace(/%0A/gi, "\n");
}
