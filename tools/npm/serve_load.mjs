// Bounded load test for `tide serve` (tests/sh_serve_load.sh): N concurrent
// streaming completions requests on loopback (a 1-token prompt given as a
// token id, and 2 tokens generated, the fewest that leave a mid-stream: the
// tiny model runs at ~150 tokens/s on 2 cores, so the engine's tokens set
// the time, 2 per request; text prompts cost a BOS more and are covered by
// sh_serve_clients), D of them disconnecting after their first chunk, S
// slow readers (pausing 30 ms after every chunk).
// Every stream that completes must be well formed (each data line JSON, the
// role chunk first, one finish_reason, [DONE] last); afterwards /health must
// show nothing in flight and the KV pool back to its idle level (blocks in
// use = blocks held only by idle prefix-cache pages). Stops by itself: every
// request has a deadline. Usage: node serve_load.mjs BASE_URL N D S
import http from 'node:http';

const [base, nArg, dArg, sArg] = process.argv.slice(2);
const N = +nArg, D = +dArg, S = +sArg;
const url = new URL(base);
const agent = new http.Agent({ keepAlive: false, maxSockets: Infinity });
const DEADLINE_MS = 300000;

function post(i, mode) {
  return new Promise((resolve) => {
    const body = JSON.stringify({
      model: 'tiny', stream: true, max_tokens: 2, seed: i, prompt: [100 + (i % 1000)],
    });
    const req = http.request({
      host: url.hostname, port: url.port, path: '/v1/completions', method: 'POST', agent,
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
    });
    const timer = setTimeout(() => { req.destroy(); resolve({ i, mode, err: 'deadline' }); }, DEADLINE_MS);
    req.on('error', (e) => { clearTimeout(timer); resolve({ i, mode, err: mode === 'drop' ? null : String(e) }); });
    req.on('response', (res) => {
      let text = '';
      if (res.statusCode !== 200) {
        res.resume();
        res.on('end', () => { clearTimeout(timer); resolve({ i, mode, err: `status ${res.statusCode}` }); });
        return;
      }
      res.setEncoding('utf8');
      const onData = (d) => {
        text += d;
        if (mode === 'drop') { clearTimeout(timer); req.destroy(); resolve({ i, mode, err: null, dropped: true }); }
      };
      if (mode === 'slow') { // each chunk, then 30 ms without reading
        res.on('data', (d) => { onData(d); res.pause(); setTimeout(() => res.resume(), 30); });
      } else {
        res.on('data', onData);
      }
      res.on('end', () => { clearTimeout(timer); resolve({ i, mode, err: null, text }); });
      res.on('error', (e) => { clearTimeout(timer); resolve({ i, mode, err: mode === 'drop' ? null : String(e) }); });
    });
    req.end(body);
  });
}

// A completed stream: events separated by blank lines, each "data: JSON",
// the first delta carries the role, exactly one finish_reason, then [DONE].
function wellFormed(text) {
  const events = text.split('\n\n').filter((e) => e.length);
  if (!events.length || events[events.length - 1] !== 'data: [DONE]') return 'no [DONE] at the end';
  let finishes = 0;
  for (let k = 0; k < events.length - 1; k++) {
    if (!events[k].startsWith('data: ')) return `event ${k} is not a data line`;
    let o;
    try { o = JSON.parse(events[k].slice(6)); } catch { return `event ${k} is not JSON`; }
    if (o.object !== 'text_completion') return `event ${k}: object ${o.object}`;
    if (typeof o.choices[0].text !== 'string') return `event ${k}: no text`;
    for (const c of o.choices) if (c.finish_reason) finishes++;
  }
  return finishes === 1 ? null : `${finishes} finish reasons`;
}

async function health() {
  return new Promise((resolve) => {
    http.get(`${base}/health`, (res) => {
      let t = '';
      res.on('data', (d) => (t += d));
      res.on('end', () => { try { resolve(JSON.parse(t)); } catch { resolve(null); } });
    }).on('error', () => resolve(null));
  });
}

const t0 = Date.now();
const jobs = [];
for (let i = 0; i < N; i++) jobs.push(post(i, i < D ? 'drop' : i < D + S ? 'slow' : 'normal'));
const results = await Promise.all(jobs);
let bad = 0, complete = 0, dropped = 0;
for (const r of results) {
  if (r.err) { bad++; if (bad <= 10) console.log(`FAIL request ${r.i} (${r.mode}): ${r.err}`); continue; }
  if (r.dropped) { dropped++; continue; }
  const why = wellFormed(r.text);
  if (why) { bad++; if (bad <= 10) console.log(`FAIL request ${r.i} (${r.mode}): ${why}`); } else complete++;
}
console.log(`${N} requests in ${((Date.now() - t0) / 1000).toFixed(1)} s: ${complete} complete, ${dropped} dropped, ${bad} bad`);

// Back to idle: nothing in flight, nothing waiting or running, every KV
// block either free or held by an idle cached page.
let h = null;
for (let k = 0; k < 300; k++) {
  h = await health();
  if (h && h.in_flight === 0 && h.waiting === 0 && h.running === 0 && h.kv_blocks_used === h.kv_blocks_cached) break;
  await new Promise((r) => setTimeout(r, 100));
}
const idle = h && h.in_flight === 0 && h.waiting === 0 && h.running === 0 && h.kv_blocks_used === h.kv_blocks_cached;
console.log(`health after: ${JSON.stringify(h)}`);
if (!idle) console.log('FAIL: the server did not return to idle');
const ok = !bad && idle && complete === N - D;
console.log(`${ok ? 1 : 0} passed, ${ok ? 0 : 1} failed`);
process.exit(ok ? 0 : 1);
