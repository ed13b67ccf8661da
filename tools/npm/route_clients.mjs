// The real OpenAI and Anthropic npm clients through `tide route` (a pool of
// prefill and decode `tide serve` replicas), each answer compared with a
// single `tide serve`'s for the same request (greedy or seeded; prompts
// shorter than a page, so no replica reuses cached KV: the answers must be
// equal). Then a decode replica is killed mid-run with SIGKILL: every
// request whose first chunk had not arrived when it died must complete,
// with the single server's text; those already streaming end complete or
// with a clear error. tests/sh_route.sh starts the processes.
// Usage: node route_clients.mjs ROUTER_URL SINGLE_URL API_KEY PID_TO_KILL
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';

const [routerUrl, singleUrl, key, killPid] = process.argv.slice(2);
const mk = (base) => ({
  openai: new OpenAI({ baseURL: `${base}/v1`, apiKey: key, maxRetries: 0, timeout: 600000 }),
  anthropic: new Anthropic({ baseURL: base, apiKey: key, maxRetries: 0, timeout: 600000 }),
});
const R = mk(routerUrl), S = mk(singleUrl);
let passed = 0, failed = 0;

async function check(name, fn) {
  try {
    await fn();
    passed++;
    console.log(`ok   ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}: ${e && e.stack ? e.stack : e}`);
  }
}

const chatText = (r) => r.choices[0].message.content ?? '';
async function chatStream(c, body) {
  let text = '', finish = null, usage = null;
  for await (const ch of await c.openai.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } })) {
    if (ch.usage) usage = ch.usage;
    for (const x of ch.choices) {
      if (x.delta.content) text += x.delta.content;
      if (x.finish_reason) finish = x.finish_reason;
    }
  }
  return { text, finish, usage };
}

await check('chat (greedy): router == single server, streamed and not', async () => {
  const body = { model: 'tiny', messages: [{ role: 'user', content: 'Say hello.' }], max_tokens: 8, temperature: 0 };
  const [a, b] = [await R.openai.chat.completions.create(body), await S.openai.chat.completions.create(body)];
  assert.equal(chatText(a), chatText(b));
  assert.deepEqual([a.usage.prompt_tokens, a.usage.completion_tokens], [b.usage.prompt_tokens, b.usage.completion_tokens]);
  assert.equal(a.choices[0].finish_reason, b.choices[0].finish_reason);
  const [sa, sb] = [await chatStream(R, body), await chatStream(S, body)];
  assert.equal(sa.text, sb.text);
  assert.equal(sa.text, chatText(b));
  assert.equal(sa.finish, sb.finish);
  assert.equal(sa.usage.completion_tokens, sb.usage.completion_tokens);
});

await check('chat (seeded, temperature 1) with a tool: router == single server', async () => {
  const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather of a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
  const body = { model: 'tiny', messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Weather in Paris?' }],
    tools, max_tokens: 10, temperature: 1, seed: 5 };
  const [a, b] = [await R.openai.chat.completions.create(body), await S.openai.chat.completions.create(body)];
  assert.deepEqual(a.choices[0].message, b.choices[0].message);
});

await check('completions: router == single server, streamed and not', async () => {
  const body = { model: 'tiny', prompt: 'Once upon a time', max_tokens: 7, temperature: 0 };
  const [a, b] = [await R.openai.completions.create(body), await S.openai.completions.create(body)];
  assert.equal(a.choices[0].text, b.choices[0].text);
  let text = '';
  for await (const ch of await R.openai.completions.create({ ...body, stream: true })) for (const c of ch.choices) text += c.text;
  assert.equal(text, b.choices[0].text);
});

await check('responses: router == single server, streamed and not', async () => {
  const body = { model: 'tiny', input: 'Say hello.', max_output_tokens: 6, temperature: 0 };
  const [a, b] = [await R.openai.responses.create(body), await S.openai.responses.create(body)];
  assert.equal(a.output_text, b.output_text);
  assert.equal(a.usage.output_tokens, b.usage.output_tokens);
  let text = '', final = null;
  for await (const ev of await R.openai.responses.create({ ...body, stream: true })) {
    if (ev.type === 'response.output_text.delta') text += ev.delta;
    if (ev.type === 'response.completed' || ev.type === 'response.incomplete') final = ev.response;
  }
  assert.ok(final);
  assert.equal(text, b.output_text);
});

const msgText = (m) => m.content.filter((x) => x.type === 'text').map((x) => x.text).join('');
await check('messages: router == single server, streamed and not; count_tokens', async () => {
  const body = { model: 'tiny', max_tokens: 6, temperature: 0, system: 'Be brief.', messages: [{ role: 'user', content: 'Say hello.' }] };
  const [a, b] = [await R.anthropic.messages.create(body), await S.anthropic.messages.create(body)];
  assert.equal(msgText(a), msgText(b));
  assert.equal(a.stop_reason, b.stop_reason);
  assert.deepEqual(a.usage.output_tokens, b.usage.output_tokens);
  const stream = R.anthropic.messages.stream(body);
  const events = [];
  stream.on('streamEvent', (e) => events.push(e.type));
  const fin = await stream.finalMessage();
  assert.equal(events[0], 'message_start');
  assert.equal(events[events.length - 1], 'message_stop');
  assert.equal(msgText(fin), msgText(b));
  const ct = await R.anthropic.messages.countTokens({ model: 'tiny', messages: body.messages, system: body.system });
  assert.equal(ct.input_tokens, a.usage.input_tokens);
});

await check('errors pass through in each API\'s shape: 400, 401, 404', async () => {
  await assert.rejects(R.openai.chat.completions.create({ model: 'tiny', messages: [], max_tokens: 2 }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400);
  await assert.rejects(R.anthropic.messages.create({ model: 'tiny', max_tokens: 2, messages: [{ role: 'robot', content: 'x' }] }),
    (e) => e instanceof Anthropic.BadRequestError && e.error.error.type === 'invalid_request_error');
  const bad = new OpenAI({ baseURL: `${routerUrl}/v1`, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(bad.models.list(), (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
  const r = await fetch(`${routerUrl}/v1/nope`, { headers: { authorization: `Bearer ${key}` } });
  assert.equal(r.status, 404);
  assert.match((await r.json()).error.message, /no route/);
});

await check('a decode replica killed mid-run: no request that had not started streaming is lost', async () => {
  const N = 10, prompts = Array.from({ length: N }, (_, i) => `Count to ${i + 3}, slowly.`);
  const body = (i) => ({ model: 'tiny', messages: [{ role: 'user', content: prompts[i] }], max_tokens: 16, temperature: 0 });
  const t0 = Date.now();
  let tKill = null;
  const res = Array.from({ length: N }, () => ({ first: null, text: '', ok: false, err: null, tokens: 0 }));
  const run = async (i) => {
    try {
      const opts = { ...body(i), stream: true, stream_options: { include_usage: true } };
      for await (const ch of await R.openai.chat.completions.create(opts)) {
        if (ch.usage) res[i].tokens = ch.usage.completion_tokens;
        if (res[i].first === null) res[i].first = Date.now();
        if (tKill === null && res[i].first !== null) {
          tKill = Date.now(); // the first stream's first chunk: kill now, with requests on both sides of it
          process.kill(Number(killPid), 'SIGKILL');
        }
        for (const x of ch.choices) if (x.delta.content) res[i].text += x.delta.content;
      }
      res[i].ok = true;
    } catch (e) {
      res[i].err = String(e && e.message ? e.message : e);
    }
  };
  const runs = [];
  for (let i = 0; i < N; i++) {
    runs.push(run(i));
    await new Promise((r) => setTimeout(r, 25));
  }
  await Promise.all(runs);
  assert.ok(tKill !== null, 'the replica was killed');
  let late = 0, broken = 0;
  for (let i = 0; i < N; i++) {
    const r = res[i];
    const before = r.first !== null && r.first <= tKill + 20; // streaming when it died (20 ms of slack)
    if (!before) {
      late++;
      assert.ok(r.ok, `request ${i} (not streaming at the kill) failed: ${r.err}`);
      assert.equal(r.tokens, 16, `request ${i}: ${r.tokens} tokens, not the 16 asked`);
    } else if (!r.ok) {
      broken++;
      assert.match(r.err, /route|replica|stream/i, `request ${i}: a clear error, got: ${r.err}`);
    } else {
      assert.equal(r.tokens, 16, `request ${i}: ${r.tokens} tokens, not the 16 asked`);
    }
  }
  assert.ok(late >= 3, `${late} requests started after the kill (want several)`);
  console.log(`     kill at +${tKill - t0} ms: ${late} requests not yet streaming (all complete), ${broken} streams broken`);
});

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
