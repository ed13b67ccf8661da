// A client that leaves while its request is still queued must cancel it at
// once (tests/sh_serve_clients.sh runs this against a `tide serve
// --max-seqs 1`). Request A streams a long completion and holds the only
// slot; request B queues behind it; B's client aborts. /health must show B
// gone (in_flight back to 1, disconnects counted) while A is still
// streaming, not when A ends. Node built-ins only (fetch).
// Usage: node serve_cancel_queued.mjs BASE_URL API_KEY
import assert from 'node:assert/strict';

const [base, key] = process.argv.slice(2);
const headers = { 'content-type': 'application/json', authorization: `Bearer ${key}` };
const health = async () => (await fetch(`${base}/health`)).json();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function until(cond, ms, what) {
  const t0 = Date.now();
  for (;;) {
    const h = await health();
    if (cond(h)) return Date.now() - t0;
    if (Date.now() - t0 > ms) assert.fail(`${what}: not within ${ms} ms (health ${JSON.stringify(h)})`);
    await sleep(10);
  }
}
const metric = async (name) => {
  const m = (await (await fetch(`${base}/metrics`)).text()).match(new RegExp(`^${name} (\\d+)`, 'm'));
  return m ? Number(m[1]) : NaN;
};

const post = (body, signal) =>
  fetch(`${base}/v1/completions`, { method: 'POST', headers, body: JSON.stringify(body), signal });
const before = await metric('tide_disconnects_total');
const a = await post({ model: 'tiny', prompt: [5, 6, 7, 8], max_tokens: 2000, ignore_eos: true, temperature: 0, stream: true });
assert.equal(a.status, 200);
const ra = a.body.getReader();
await ra.read(); // A runs
const ctl = new AbortController();
const b = post({ model: 'tiny', prompt: [9, 10, 11], max_tokens: 4, temperature: 0 }, ctl.signal).catch((e) => e);
await until((h) => h.in_flight === 2 && h.waiting === 1, 10000, 'B queued');
ctl.abort();
assert.equal((await b).name, 'AbortError');
const ms = await until((h) => h.in_flight === 1 && h.waiting === 0, 3000, 'B cancelled while A runs');
assert.equal(await metric('tide_disconnects_total'), before + 1);
assert.equal((await health()).running, 1); // A still streams
const more = await ra.read();
assert.ok(!more.done, 'A is still streaming');
await ra.cancel();
await until((x) => x.in_flight === 0, 10000, 'A cancelled');
console.log(`ok   a queued request whose client left was cancelled in ${ms} ms, while the running one streamed on`);
