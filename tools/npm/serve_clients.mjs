// The real OpenAI and Anthropic npm clients against a running `tide serve`
// (tests/sh_serve_clients.sh starts it on the tiny model). The model is
// random, so the checks are on shapes, on streamed == non-streamed output
// for the same seed (or greedy), on usage counts, finish reasons and error
// fields. Usage: node serve_clients.mjs BASE_URL API_KEY
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';

const [base, key] = process.argv.slice(2);
const openai = new OpenAI({ baseURL: `${base}/v1`, apiKey: key, maxRetries: 0, timeout: 60000 });
const anthropic = new Anthropic({ baseURL: base, apiKey: key, maxRetries: 0, timeout: 60000 });
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

const user = [{ role: 'user', content: 'Say hello.' }];
const weather = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Weather of a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
};

function usageOk(u, completion) {
  assert.ok(u.prompt_tokens > 0, 'prompt_tokens > 0');
  assert.equal(u.completion_tokens, completion);
  assert.equal(u.total_tokens, u.prompt_tokens + u.completion_tokens);
}

await check('models list names the served model', async () => {
  const list = await openai.models.list();
  assert.ok(list.data.length >= 1);
  assert.equal(list.data[0].object, 'model');
  assert.equal(typeof list.data[0].id, 'string');
});

await check('chat: non-streaming shape, usage, finish reason', async () => {
  const r = await openai.chat.completions.create({ model: 'tiny', messages: user, max_tokens: 6, seed: 7 });
  assert.equal(r.object, 'chat.completion');
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.choices.length, 1);
  const c = r.choices[0];
  assert.equal(c.message.role, 'assistant');
  assert.ok(['length', 'stop'].includes(c.finish_reason), c.finish_reason);
  if (c.finish_reason === 'length') usageOk(r.usage, 6);
  assert.equal(typeof c.message.content, 'string');
});

await check('chat: streamed == non-streamed (same seed), usage chunk', async () => {
  const body = { model: 'tiny', messages: user, max_tokens: 8, seed: 11, temperature: 1 };
  const whole = await openai.chat.completions.create(body);
  const stream = await openai.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
  let text = '', finish = null, usage = null, role = null, n = 0;
  for await (const ch of stream) {
    n++;
    assert.equal(ch.object, 'chat.completion.chunk');
    if (ch.usage) usage = ch.usage;
    for (const c of ch.choices) {
      if (c.delta.role) role = c.delta.role;
      if (c.delta.content) text += c.delta.content;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.ok(n >= 3, 'several chunks');
  assert.equal(role, 'assistant');
  assert.equal(text, whole.choices[0].message.content ?? '');
  assert.equal(finish, whole.choices[0].finish_reason);
  assert.deepEqual(usage.completion_tokens, whole.usage.completion_tokens);
  assert.deepEqual(usage.prompt_tokens, whole.usage.prompt_tokens);
});

await check('completions: streamed == non-streamed, usage', async () => {
  const body = { model: 'tiny', prompt: 'Once upon a time', max_tokens: 7, temperature: 0 };
  const whole = await openai.completions.create(body);
  assert.equal(whole.object, 'text_completion');
  assert.equal(whole.choices.length, 1);
  usageOk(whole.usage, whole.choices[0].finish_reason === 'length' ? 7 : whole.usage.completion_tokens);
  let text = '', finish = null;
  for await (const ch of await openai.completions.create({ ...body, stream: true })) {
    for (const c of ch.choices) {
      text += c.text;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(text, whole.choices[0].text);
  assert.equal(finish, whole.choices[0].finish_reason);
});

await check('completions: legacy logprobs (greedy: the chosen token is the best), streamed == non-streamed', async () => {
  const body = { model: 'tiny', prompt: 'Once upon a time', max_tokens: 5, temperature: 0, logprobs: 2, ignore_eos: true };
  const whole = await openai.completions.create(body);
  const lp = whole.choices[0].logprobs;
  assert.equal(lp.tokens.length, 5);
  assert.equal(lp.token_logprobs.length, 5);
  assert.equal(lp.text_offset[0], 0);
  for (let i = 0; i < 5; i++) {
    const alts = Object.values(lp.top_logprobs[i]);
    assert.ok(alts.length >= 1 && alts.length <= 2, `top_logprobs[${i}] has ${alts.length} entries`);
    assert.ok(lp.token_logprobs[i] <= 0);
    assert.ok(Math.abs(Math.max(...alts) - lp.token_logprobs[i]) < 1e-6, 'greedy picks the best token');
    if (i) assert.ok(lp.text_offset[i] > lp.text_offset[i - 1], 'text_offset grows');
  }
  const got = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
  for await (const ch of await openai.completions.create({ ...body, stream: true }))
    for (const c of ch.choices) if (c.logprobs) for (const k in got) got[k].push(...c.logprobs[k]);
  assert.deepEqual(got, lp);
  const plain = await openai.completions.create({ ...body, logprobs: undefined });
  assert.equal(plain.choices[0].logprobs, null);
});

await check('responses: output_text logprobs (include), streamed == non-streamed', async () => {
  const body = { model: 'tiny', input: 'Say hello.', max_output_tokens: 5, temperature: 0, top_logprobs: 2,
                 include: ['message.output_text.logprobs'] };
  const whole = await openai.responses.create(body);
  const msg = whole.output.find((o) => o.type === 'message');
  const lp = msg.content[0].logprobs;
  assert.ok(lp.length > 0 && lp.length <= 5, `${lp.length} entries`);
  for (const e of lp) {
    assert.equal(typeof e.token, 'string');
    assert.ok(Array.isArray(e.bytes) && e.bytes.length > 0);
    assert.equal(e.top_logprobs.length, 2);
    assert.ok(Math.abs(e.top_logprobs[0].logprob - e.logprob) < 1e-6, 'greedy picks the best token');
  }
  const streamed = [];
  let done = null;
  for await (const ev of await openai.responses.create({ ...body, stream: true })) {
    if (ev.type === 'response.output_text.delta') streamed.push(...ev.logprobs);
    if (ev.type === 'response.output_text.done') done = ev.logprobs;
  }
  assert.deepEqual(streamed, lp);
  assert.deepEqual(done, lp);
});

await check('responses: streamed == non-streamed, events in order', async () => {
  const body = { model: 'tiny', input: 'Say hello.', max_output_tokens: 6, temperature: 0 };
  const whole = await openai.responses.create(body);
  assert.equal(whole.object, 'response');
  assert.ok(['completed', 'incomplete'].includes(whole.status), whole.status);
  assert.ok(whole.usage.input_tokens > 0);
  assert.ok(whole.usage.output_tokens > 0 && whole.usage.output_tokens <= 6);
  const types = [];
  let text = '', final = null;
  for await (const ev of await openai.responses.create({ ...body, stream: true })) {
    types.push(ev.type);
    if (ev.type === 'response.output_text.delta') text += ev.delta;
    if (ev.type === 'response.completed' || ev.type === 'response.incomplete') final = ev.response;
  }
  assert.equal(types[0], 'response.created');
  assert.ok(final, 'a final event with the response');
  assert.equal(final.status, whole.status);
  assert.equal(text, whole.output_text);
  assert.equal(final.usage.output_tokens, whole.usage.output_tokens);
});

await check('messages: streamed == non-streamed, stop_reason, usage', async () => {
  const body = { model: 'tiny', max_tokens: 6, temperature: 0, messages: [{ role: 'user', content: 'Say hello.' }] };
  const whole = await anthropic.messages.create(body);
  assert.equal(whole.type, 'message');
  assert.equal(whole.role, 'assistant');
  assert.ok(['max_tokens', 'end_turn', 'stop_sequence'].includes(whole.stop_reason), whole.stop_reason);
  assert.ok(whole.usage.input_tokens > 0);
  const wholeText = whole.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
  const stream = anthropic.messages.stream(body);
  const events = [];
  stream.on('streamEvent', (e) => events.push(e.type));
  const fin = await stream.finalMessage();
  assert.equal(events[0], 'message_start');
  assert.equal(events[events.length - 1], 'message_stop');
  assert.equal(fin.content.filter((b) => b.type === 'text').map((b) => b.text).join(''), wholeText);
  assert.equal(fin.stop_reason, whole.stop_reason);
  assert.equal(fin.usage.output_tokens, whole.usage.output_tokens);
});

await check('messages: count_tokens grows with the conversation', async () => {
  const a = await anthropic.messages.countTokens({ model: 'tiny', messages: [{ role: 'user', content: 'hi' }] });
  const b = await anthropic.messages.countTokens({
    model: 'tiny',
    messages: [{ role: 'user', content: 'hi there, a much longer message than the first one' }],
  });
  assert.ok(a.input_tokens > 0);
  assert.ok(b.input_tokens > a.input_tokens);
});

await check('chat: tools and a tool-result round trip', async () => {
  const first = await openai.chat.completions.create({
    model: 'tiny', messages: [{ role: 'user', content: 'Weather in Paris?' }], tools: [weather], max_tokens: 4, seed: 1,
  });
  assert.equal(first.choices.length, 1);
  const call = { id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris"}' } };
  const second = await openai.chat.completions.create({
    model: 'tiny', tools: [weather], max_tokens: 4, seed: 1,
    messages: [
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: null, tool_calls: [call] },
      { role: 'tool', tool_call_id: 'call_1', content: '{"temp_c": 21}' },
    ],
  });
  assert.ok(second.usage.prompt_tokens > first.usage.prompt_tokens, 'the round trip is in the prompt');
  // Whatever the random model says, no DSML markup reaches the content.
  assert.ok(!(second.choices[0].message.content ?? '').includes('DSML'));
});

await check('messages: tool_use / tool_result round trip', async () => {
  const tools = [{ name: 'get_weather', description: 'Weather', input_schema: { type: 'object', properties: { city: { type: 'string' } } } }];
  const r = await anthropic.messages.create({
    model: 'tiny', max_tokens: 4, temperature: 0, tools,
    messages: [
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris' } }] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: '21 C' }] },
    ],
  });
  assert.equal(r.type, 'message');
  assert.ok(r.usage.input_tokens > 20);
});

await check('thinking on: reasoning_content (chat), thinking block (messages); off: none', async () => {
  const on = await openai.chat.completions.create({
    model: 'tiny', messages: user, max_tokens: 5, seed: 3, reasoning_effort: 'high',
  });
  const m = on.choices[0].message;
  assert.ok(typeof m.reasoning_content === 'string' && m.reasoning_content.length > 0, 'reasoning_content');
  const off = await openai.chat.completions.create({ model: 'tiny', messages: user, max_tokens: 5, seed: 3 });
  assert.ok(!off.choices[0].message.reasoning_content, 'no reasoning when off');
  const am = await anthropic.messages.create({
    model: 'tiny', max_tokens: 5, temperature: 0, thinking: { type: 'enabled', budget_tokens: 1024 },
    messages: [{ role: 'user', content: 'hi' }],
  });
  assert.equal(am.content[0].type, 'thinking');
  const stream = anthropic.messages.stream({
    model: 'tiny', max_tokens: 5, temperature: 0, thinking: { type: 'enabled', budget_tokens: 1024 },
    messages: [{ role: 'user', content: 'hi' }],
  });
  const fin = await stream.finalMessage();
  assert.equal(fin.content[0].type, 'thinking');
  assert.equal(fin.content[0].thinking, am.content[0].thinking);
});

await check('errors: 400 names the field (OpenAI shape)', async () => {
  await assert.rejects(
    openai.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 5 }] }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && /messages\[0\]\.content/.test(e.message) &&
      e.error && e.error.type === 'invalid_request_error',
  );
  await assert.rejects(
    openai.chat.completions.create({ model: 'tiny', messages: user, temperature: 9 }),
    (e) => e.status === 400 && /temperature/.test(e.message),
  );
});

await check('errors: 400 in the Anthropic shape', async () => {
  await assert.rejects(
    anthropic.messages.create({ model: 'tiny', max_tokens: 4, messages: [{ role: 'robot', content: 'x' }] }),
    (e) => e instanceof Anthropic.BadRequestError && e.status === 400 && e.error && e.error.type === 'error' &&
      e.error.error.type === 'invalid_request_error',
  );
});

await check('errors: 404 for an unknown route', async () => {
  const r = await fetch(`${base}/v1/nope`, { headers: { authorization: `Bearer ${key}` } });
  assert.equal(r.status, 404);
  const j = await r.json();
  assert.match(j.error.message, /no route/);
});

await check('auth: a wrong key is 401 in both clients; x-api-key works', async () => {
  const bad = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(bad.models.list(), (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
  const badA = new Anthropic({ baseURL: base, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(
    badA.messages.create({ model: 'tiny', max_tokens: 2, messages: [{ role: 'user', content: 'x' }] }),
    (e) => e instanceof Anthropic.AuthenticationError && e.status === 401 && e.error.error.type === 'authentication_error',
  );
  const r = await fetch(`${base}/v1/models`, { headers: { 'x-api-key': key } });
  assert.equal(r.status, 200);
  const none = await fetch(`${base}/v1/models`);
  assert.equal(none.status, 401);
});

await check('metrics: Prometheus text with the counters', async () => {
  const t = await (await fetch(`${base}/metrics`)).text();
  assert.match(t, /^tide_requests_total\{code="200"\} \d+$/m);
  assert.match(t, /^tide_requests_total\{code="401"\} \d+$/m);
  assert.match(t, /^tide_time_to_first_token_seconds_count [1-9]\d*$/m);
  assert.match(t, /^tide_generation_tokens_total [1-9]/m);
});

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
