/**
 * Reads an SSE response as a client does, calling `onEvent` with each event's JSON data and the
 * time the network chunk holding it arrived (several events may share one chunk).
 */
export async function readSseEvents(res: Response, onEvent: (data: any, arrivedAt: number) => void): Promise<void> {
  const decoder = new TextDecoder();
  let buf = "";
  for await (const part of res.body!) {
    const now = performance.now();
    buf += decoder.decode(part, { stream: true });
    let i;
    while ((i = buf.indexOf("\n\n")) >= 0) {
      const data = buf.slice(0, i).split("\n").find((l) => l.startsWith("data: {"));
      buf = buf.slice(i + 2);
      if (data) onEvent(JSON.parse(data.slice(6)), now);
    }
  }
}
