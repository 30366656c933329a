import { expect, test } from "bun:test";
import { boundaryOf, MultipartError, readMultipart, type PartInfo } from "../../src/2-services/files/multipart";

async function collect(body: BodyInit, contentType: string, chunkSize?: number) {
  let stream = new Response(body).body!;
  if (chunkSize) {
    // Re-chunk into tiny pieces so delimiters straddle chunk boundaries.
    const all = new Uint8Array(await new Response(stream).arrayBuffer());
    stream = new ReadableStream({
      start(c) {
        for (let i = 0; i < all.length; i += chunkSize) c.enqueue(all.subarray(i, i + chunkSize));
        c.close();
      },
    });
  }
  const parts: (PartInfo & { data: string; chunks: number })[] = [];
  await readMultipart(stream, boundaryOf(contentType)!, (info) => {
    const part = { ...info, data: "", chunks: 0 };
    parts.push(part);
    const dec = new TextDecoder();
    return {
      write(c) {
        part.chunks++;
        part.data += dec.decode(c, { stream: true });
      },
      end() {
        part.data += dec.decode();
      },
    };
  });
  return parts;
}

function form() {
  const fd = new FormData();
  fd.append("purpose", "batch");
  fd.append("file", new Blob(['{"a":1}\n{"b":"é ✓"}\n'], { type: "application/jsonl" }), 'we"ird name.jsonl');
  return fd;
}

test("fields and files come through with their names, filenames and bytes", async () => {
  const req = new Request("http://x", { method: "POST", body: form() });
  const parts = await collect(req.body!, req.headers.get("content-type")!);
  expect(parts.map((p) => [p.name, p.filename, p.data])).toEqual([
    ["purpose", null, "batch"],
    ["file", 'we"ird name.jsonl', '{"a":1}\n{"b":"é ✓"}\n'],
  ]);
  expect(parts[1]!.contentType).toBe("application/jsonl");
});

test("delimiters split across network chunks are found; data arrives in many chunks", async () => {
  const req = new Request("http://x", { method: "POST", body: form() });
  const type = req.headers.get("content-type")!; // read before the body: Bun drops it afterwards
  const parts = await collect(await req.arrayBuffer(), type, 3);
  expect(parts[1]!.data).toBe('{"a":1}\n{"b":"é ✓"}\n');
  expect(parts[1]!.chunks).toBeGreaterThan(3);
});

test("a large part streams through without being gathered", async () => {
  const big = "x".repeat(3_000_000);
  const fd = new FormData();
  fd.append("file", new Blob([big]), "big.jsonl");
  const req = new Request("http://x", { method: "POST", body: fd });
  let bytes = 0;
  let largest = 0;
  await readMultipart(req.body!, boundaryOf(req.headers.get("content-type"))!, () => ({
    write(c) {
      bytes += c.length;
      largest = Math.max(largest, c.length);
    },
    end() {},
  }));
  expect(bytes).toBe(big.length);
  expect(largest).toBeLessThan(big.length);
});

test("a truncated body is an error, not a short file", async () => {
  const req = new Request("http://x", { method: "POST", body: form() });
  const type = req.headers.get("content-type")!;
  const whole = new Uint8Array(await req.arrayBuffer());
  const cut = whole.subarray(0, whole.length - 30);
  await expect(collect(cut, type)).rejects.toBeInstanceOf(MultipartError);
});

test("the boundary is read from the content type, quoted or not", () => {
  expect(boundaryOf('multipart/form-data; boundary="a b"')).toBe("a b");
  expect(boundaryOf("multipart/form-data; charset=utf-8; boundary=xyz")).toBe("xyz");
  expect(boundaryOf("application/json")).toBeNull();
});
