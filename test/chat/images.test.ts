import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import net from "node:net";
import { crc32, deflateSync } from "node:zlib";
import sharp from "sharp";
import { ApiError } from "../../src/1-api/http/errors";
import { decodeImages, type ImageFetchDeps, type ImageInputOptions } from "../../src/3-engines/image-input";
import type { ChatJob, ImageInput } from "../../src/3-engines/chat-job";
import { classifyAddress } from "../../src/lib/net/address";

// Fetching and decoding a chat request's images: formats, limits, and the URL rules (no SSRF).

const defaults: ImageInputOptions = { allow_private_urls: false, allow_http_urls: false, fetch_timeout_s: 2, max_bytes: 1 << 20, max_side: 2048 };

const png = (w = 8, h = 6, color = "#ff0000") => sharp({ create: { width: w, height: h, channels: 3, background: color } }).png().toBuffer();
const dataUrl = (mime: string, bytes: Uint8Array) => `data:${mime};base64,${Buffer.from(bytes).toString("base64")}`;

function job(urls: string[]): ChatJob {
  const images: ImageInput[] = urls.map((url, i) => ({ url, param: `messages[0].content[${i}]`, at: 0 }));
  return { model: "m", turns: [{ role: "user", text: "what is it", images }], tools: [], toolChoice: "auto", parallelToolCalls: true, format: null, thinking: null, maxTokens: null, stop: [], sampling: {}, stream: false, includeUsage: false };
}

async function decoded(urls: string[], o: Partial<ImageInputOptions> = {}, deps: ImageFetchDeps = {}) {
  const j = job(urls);
  await decodeImages(j, { ...defaults, ...o }, deps);
  return (j.turns[0] as { images: ImageInput[] }).images.map((i) => i.decoded!);
}

/** A PNG of side² black pixels, 1 bit each: 30000² deflates to ~110 KB. Written by hand because
 * sharp takes 15 s or more to encode one this large. */
function pngBomb(side: number): Buffer {
  const chunk = (type: string, data: Uint8Array) => {
    const body = Buffer.concat([Buffer.from(type, "latin1"), data]);
    const out = Buffer.alloc(body.length + 8);
    out.writeUInt32BE(data.length, 0);
    body.copy(out, 4);
    out.writeUInt32BE(crc32(body), body.length + 4);
    return out;
  };
  const header = Buffer.alloc(13);
  header.writeUInt32BE(side, 0);
  header.writeUInt32BE(side, 4);
  header[8] = 1; // bit depth; colour type 0 (greyscale), no interlace
  const rows = new Uint8Array((1 + Math.ceil(side / 8)) * side); // filter byte 0 and zero pixels
  const signature = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
  return Buffer.concat([signature, chunk("IHDR", header), chunk("IDAT", deflateSync(rows, { level: 9 })), chunk("IEND", new Uint8Array(0))]);
}

async function refusal(urls: string[], o: Partial<ImageInputOptions> = {}, deps: ImageFetchDeps = {}): Promise<ApiError> {
  try {
    await decoded(urls, o, deps);
  } catch (e) {
    if (e instanceof ApiError) return e;
    throw e;
  }
  throw new Error("expected a refusal");
}

describe("formats", () => {
  test("PNG, JPEG, WebP and GIF (first frame) decode to RGB with a content hash", async () => {
    const base = sharp({ create: { width: 10, height: 4, channels: 4, background: { r: 0, g: 128, b: 255, alpha: 1 } } });
    const [p, j, w, g] = await Promise.all([base.clone().png().toBuffer(), base.clone().jpeg().toBuffer(), base.clone().webp().toBuffer(), base.clone().gif().toBuffer()]);
    const out = await decoded([dataUrl("image/png", p), dataUrl("image/jpeg", j)]);
    const out2 = await decoded([dataUrl("image/webp", w), dataUrl("image/gif", g)]);
    for (const d of [...out, ...out2]) {
      expect([d.width, d.height, d.rgb.length]).toEqual([10, 4, 10 * 4 * 3]);
      expect(d.hash).toMatch(/^[0-9a-f]{64}$/);
    }
    expect(out[0]!.rgb[2]).toBe(255); // blue channel of the first pixel
  });

  test("the same pixels give the same hash, other pixels another", async () => {
    const [a, b, c] = await decoded([dataUrl("image/png", await png()), dataUrl("image/png", await png())]).then(async (x) => [...x, ...(await decoded([dataUrl("image/png", await png(8, 6, "#00ff00"))]))]);
    expect(a!.hash).toBe(b!.hash);
    expect(c!.hash).not.toBe(a!.hash);
  });

  test("large images are scaled down to max_side", async () => {
    const [d] = await decoded([dataUrl("image/png", await png(400, 100))], { max_side: 64 });
    expect([d!.width, d!.height]).toEqual([64, 16]);
  });

  test("text disguised as a PNG is refused naming the part", async () => {
    const e = await refusal([dataUrl("image/png", Buffer.from("just some text, not an image"))]);
    expect([e.code, e.status]).toEqual(["invalid_image", 400]);
    expect(e.message).toContain("messages[0].content[0]");
    expect(e.message).toContain("not an image");
  });

  test("another image format (TIFF) is refused naming the accepted ones", async () => {
    const tiff = await sharp({ create: { width: 4, height: 4, channels: 3, background: "#000" } }).tiff().toBuffer();
    const e = await refusal([dataUrl("image/tiff", tiff)]);
    expect(e.message).toContain("PNG, JPEG, WebP and GIF");
  });

  test("a data URL that is not base64, or holds nothing, is refused", async () => {
    expect((await refusal(["data:image/png,rawbytes"])).message).toContain("must be base64");
    expect((await refusal(["data:image/png;base64,"])).message).toContain("no data");
    expect((await refusal(["data:image/png;base64,@@@@"])).message).toContain("not valid base64");
  });

  test("an image over max_bytes is refused", async () => {
    const e = await refusal([dataUrl("image/png", new Uint8Array(4096))], { max_bytes: 1024 });
    expect(e.message).toContain("larger than 1024 bytes");
  });

  test("a decompression bomb (30000×30000 in a small PNG) is refused as too large, naming the pixel limit", async () => {
    const bomb = pngBomb(30000);
    expect(bomb.length).toBeLessThan(200_000);
    const meta = await sharp(bomb, { limitInputPixels: false }).metadata();
    expect([meta.format, meta.width, meta.height]).toEqual(["png", 30000, 30000]);
    const e = await refusal([dataUrl("image/png", bomb)]);
    expect([e.code, e.status, e.param]).toEqual(["invalid_image", 400, "messages[0].content[0]"]);
    expect(e.message).toBe("messages[0].content[0]: is too large: 30000×30000 is 900,000,000 pixels, over the limit of 100,000,000 pixels (10000×10000)");
  });

  test("three images are one too many: 400 naming the limit", async () => {
    const u = dataUrl("image/png", await png());
    const e = await refusal([u, u, u]);
    expect([e.code, e.status, e.param]).toEqual(["too_many_images", 400, "messages[0].content[2]"]);
    expect(e.message).toContain("at most 2 images");
  });
});

describe("URLs", () => {
  let server: ReturnType<typeof Bun.serve>;
  let image: Buffer;
  beforeAll(async () => {
    image = await png(5, 5, "#123456");
    server = Bun.serve({
      port: 0,
      hostname: "127.0.0.1",
      async fetch(req) {
        const path = new URL(req.url).pathname;
        if (path === "/img.png") return new Response(new Uint8Array(image), { headers: { "content-type": "image/png" } });
        if (path === "/slow.png") return Bun.sleep(5000).then(() => new Response(new Uint8Array(image)));
        if (path === "/big.png") return new Response(new Uint8Array(4 << 20));
        if (path === "/redirect") return new Response(null, { status: 302, headers: { location: "file:///etc/passwd" } });
        if (path === "/loop") return new Response(null, { status: 302, headers: { location: "/loop" } });
        if (path === "/missing.png") return new Response("no", { status: 404 });
        return new Response("?", { status: 400 });
      },
    });
  });
  afterAll(() => server.stop(true));
  const local = (p: string) => `http://127.0.0.1:${server.port}${p}`;

  test("https to a loopback address is refused by default", async () => {
    const e = await refusal([`https://127.0.0.1:${server.port}/img.png`]);
    expect([e.code, e.status]).toEqual(["invalid_image_url", 400]);
    expect(e.message).toContain("internal address (127.0.0.1: loopback)");
  });

  test("http URLs are refused unless allowed", async () => {
    expect((await refusal([local("/img.png")], { allow_private_urls: true })).message).toContain("must be https://");
  });

  test("a local server's image is fetched when the admin allows it", async () => {
    const [d] = await decoded([local("/img.png")], { allow_private_urls: true, allow_http_urls: true });
    expect([d!.width, d!.height]).toEqual([5, 5]);
  });

  test("fetch failures, timeouts and oversize bodies are 400 naming the part", async () => {
    const o = { allow_private_urls: true, allow_http_urls: true };
    expect((await refusal([local("/missing.png")], o)).message).toContain("answered 404");
    expect((await refusal([local("/slow.png")], { ...o, fetch_timeout_s: 0.3 })).message).toContain("timed out");
    expect((await refusal([local("/big.png")], { ...o, max_bytes: 1 << 20 })).message).toContain("larger than");
  });

  test("every redirect is checked again, and redirect loops end", async () => {
    const o = { allow_private_urls: true, allow_http_urls: true };
    expect((await refusal([local("/redirect")], o)).message).toContain("(got file://)");
    expect((await refusal([local("/loop")], o)).message).toContain("redirected more than 3 times");
  });
});

describe("SSRF", () => {
  // `inside` (127.0.0.1) stands for a service of the server's own network; `outside` (127.0.0.2,
  // the same port) plays a public web server: the judge is told this one address is public
  const OUTSIDE = "127.0.0.2";
  const judge: ImageFetchDeps["classify"] = (a) => (a === OUTSIDE ? { internal: false, address: a } : classifyAddress(a));
  const http = { allow_http_urls: true };
  let inside: ReturnType<typeof Bun.serve>;
  let outside: ReturnType<typeof Bun.serve>;
  let tcp: net.Server;
  let insideHits = 0;
  let tcpConnections = 0;
  let insideImage: Buffer;
  let outsideImage: Buffer;
  const tcpPort = () => (tcp.address() as net.AddressInfo).port;

  beforeAll(async () => {
    [insideImage, outsideImage] = await Promise.all([png(5, 5), png(7, 3)]);
    for (let i = 0; ; i++) {
      inside = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: () => (insideHits++, new Response(new Uint8Array(insideImage))) });
      try {
        outside = Bun.serve({
          port: inside.port,
          hostname: OUTSIDE,
          fetch(req) {
            const to = new URL(req.url).searchParams.get("to");
            return to ? new Response(null, { status: 302, headers: { location: to } }) : new Response(new Uint8Array(outsideImage));
          },
        });
        break;
      } catch (e) {
        inside.stop(true);
        if (i === 5) throw e;
      }
    }
    tcp = net.createServer((s) => (tcpConnections++, s.destroy()));
    await new Promise<void>((r) => tcp.listen(0, "127.0.0.1", r));
  });
  afterAll(() => {
    inside.stop(true);
    outside.stop(true);
    tcp.close();
  });

  test("IPv4-mapped and other spellings of loopback are refused, and the server sees no request", async () => {
    for (const host of ["[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "[0:0:0:0:0:ffff:127.0.0.1]", "[::127.0.0.1]", "2130706433", "0177.0.0.1", "127.1"]) {
      const e = await refusal([`http://${host}:${inside.port}/img.png`], http);
      expect([host, e.code, e.status]).toEqual([host, "invalid_image_url", 400]);
      expect(e.message).toContain("loopback); the server fetches only public addresses");
    }
    expect(insideHits).toBe(0);
  });

  test("mapped cloud metadata ([::ffff:169.254.169.254]) is refused as link-local", async () => {
    const e = await refusal(["http://[::ffff:169.254.169.254]/latest/meta-data/"], http);
    expect(e.message).toContain("internal address (::ffff:a9fe:a9fe, which leads to 169.254.169.254: link-local)");
  });

  test("with the default https-only rule, no TLS connection is attempted to a mapped loopback address", async () => {
    const listening = await refusal([`https://[::ffff:127.0.0.1]:${tcpPort()}/img.png`]);
    expect(listening.code).toBe("invalid_image_url");
    expect(tcpConnections).toBe(0);
    // and a closed port answers the same: no port scan through the error text
    const closed = await refusal([`https://[::ffff:127.0.0.1]:1/img.png`]);
    expect(closed.message).toBe(listening.message);
  });

  test("a redirect from a public server to a mapped loopback address is refused", async () => {
    const to = `http://[::ffff:127.0.0.1]:${inside.port}/img.png`;
    const e = await refusal([`http://${OUTSIDE}:${outside.port}/?to=${encodeURIComponent(to)}`], http, { classify: judge });
    expect(e.message).toContain("internal address (::ffff:7f00:1, which leads to 127.0.0.1: loopback)");
    expect(insideHits).toBe(0);
  });

  test("a name that resolves to a public address, then to loopback, is fetched from the first answer only", async () => {
    const answers = [[OUTSIDE], ["127.0.0.1"]];
    let asked = 0;
    const [d] = await decoded([`http://rebind.test:${inside.port}/img.png`], http, { classify: judge, resolve: async () => answers[asked++]! });
    expect([d!.width, d!.height, asked, insideHits]).toEqual([7, 3, 1, 0]);
  });
});
