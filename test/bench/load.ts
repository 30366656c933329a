// A small HTTP load client: `concurrency` connections send GET <url> back to back for `seconds`.
// Prints one JSON line: requests/second and latency percentiles in milliseconds.
const [url, key, concurrencyArg, secondsArg] = process.argv.slice(2);
const concurrency = Number(concurrencyArg);
const seconds = Number(secondsArg);
const headers: Record<string, string> = key && key !== "none" ? { authorization: `Bearer ${key}` } : {};

async function worker(until: number, lat: number[]) {
  while (performance.now() < until) {
    const t0 = performance.now();
    const res = await fetch(url!, { headers });
    await res.arrayBuffer();
    if (res.status !== 200) throw new Error(`status ${res.status}`);
    lat.push(performance.now() - t0);
  }
}

async function phase(sec: number) {
  const lat: number[] = [];
  const start = performance.now();
  const until = start + sec * 1000;
  await Promise.all(Array.from({ length: concurrency }, () => worker(until, lat)));
  return { lat, elapsed: (performance.now() - start) / 1000 };
}

await phase(Math.min(1, seconds / 3)); // warm-up
const { lat, elapsed } = await phase(seconds);
lat.sort((a, b) => a - b);
const pct = (p: number) => lat[Math.min(lat.length - 1, Math.floor((p / 100) * lat.length))]!;
console.log(JSON.stringify({ requests: lat.length, rps: lat.length / elapsed, p50: pct(50), p99: pct(99) }));

export {};
