// Requests no HTTP client library sends, written on a socket.

/** A raw HTTP/1.0 request with no Host header (a bare health check): its status line. */
export async function statusWithoutHost(url: string, path: string): Promise<string> {
  const { hostname, port } = new URL(url);
  let got = "";
  const done = Promise.withResolvers<void>();
  const socket = await Bun.connect({
    hostname,
    port: Number(port),
    socket: {
      data(_, d) {
        got += new TextDecoder().decode(d);
      },
      close: () => done.resolve(),
      error: () => done.resolve(),
    },
  });
  socket.write(`GET ${path} HTTP/1.0\r\n\r\n`);
  await Promise.race([done.promise, Bun.sleep(3000)]);
  socket.end();
  return got.split("\r\n")[0] ?? "";
}
