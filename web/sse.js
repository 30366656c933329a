// Server-sent events reader for fetch() bodies: calls onData(parsedJson) per "data:" line,
// stops at "data: [DONE]". Non-JSON data lines and other fields (event:, id:, comments) are skipped.
export async function readSSE(body, onData) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  const line = (raw) => {
    const l = raw.endsWith('\r') ? raw.slice(0, -1) : raw;
    if (!l.startsWith('data:')) return false;
    const payload = l.slice(5).replace(/^ /, '');
    if (payload.trim() === '[DONE]') return true;
    let obj;
    try { obj = JSON.parse(payload); } catch { return false; }
    onData(obj);
    return false;
  };
  try {
    for (;;) {
      const { value, done } = await reader.read();
      buf += decoder.decode(value, { stream: !done });
      let i;
      while ((i = buf.indexOf('\n')) >= 0) {
        const raw = buf.slice(0, i);
        buf = buf.slice(i + 1);
        if (line(raw)) { await reader.cancel().catch(() => {}); return; }
      }
      if (done) { if (buf) line(buf); return; }
    }
  } catch (err) {
    reader.cancel().catch(() => {});
    throw err;
  }
}
