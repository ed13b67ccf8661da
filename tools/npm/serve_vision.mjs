// Images through the real OpenAI and Anthropic npm clients against a running
// `tide serve` on a checkpoint with a vision tower (tests/sh_serve_vision.sh
// starts it on `tide synth --shape tiny --vision` with --max-images 2
// --max-image-pixels 20000). Random PNGs per run (made here: zlib + CRC);
// the model is random, so the checks are on shapes, usage (the image's span
// counts as prompt tokens), greedy repeatability, and the error shapes of
// bad images. Usage: node serve_vision.mjs BASE_URL API_KEY SEED
import assert from 'node:assert/strict';
import zlib from 'node:zlib';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';

const [base, key, seedArg] = process.argv.slice(2);
const openai = new OpenAI({ baseURL: `${base}/v1`, apiKey: key, maxRetries: 0, timeout: 60000 });
const anthropic = new Anthropic({ baseURL: base, apiKey: key, maxRetries: 0, timeout: 60000 });
let passed = 0, failed = 0;
let seed = (Number(seedArg) || 1) >>> 0;
const rand = () => { seed = (seed * 1664525 + 1013904223) >>> 0; return seed >>> 24; };

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

const crcTable = Array.from({ length: 256 }, (_, n) => {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  return c >>> 0;
});
function crc32(buf) {
  let c = 0xffffffff;
  for (const b of buf) c = crcTable[(c ^ b) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}
function chunk(type, data) {
  const len = Buffer.alloc(4), crc = Buffer.alloc(4), td = Buffer.concat([Buffer.from(type), data]);
  len.writeUInt32BE(data.length);
  crc.writeUInt32BE(crc32(td));
  return Buffer.concat([len, td, crc]);
}
// An 8-bit RGB PNG of random pixels; header-only sizes for the hostile one.
function png(w, h, pixels = true) {
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(w, 0);
  ihdr.writeUInt32BE(h, 4);
  ihdr.set([8, 2, 0, 0, 0], 8);
  let raw = Buffer.alloc(pixels ? h * (3 * w + 1) : 16);
  for (let i = 0; i < raw.length; i++) raw[i] = i % (3 * w + 1) === 0 ? 0 : rand();
  return Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), chunk('IHDR', ihdr),
    chunk('IDAT', zlib.deflateSync(raw)), chunk('IEND', Buffer.alloc(0))]);
}
const img = png(40, 30), other = png(33, 47);
const dataUrl = (b) => `data:image/png;base64,${b.toString('base64')}`;
const chatWith = (...urls) => [{ role: 'user', content: [{ type: 'text', text: 'What is in the picture?' },
  ...urls.map((url) => ({ type: 'image_url', image_url: { url } }))] }];

await check('chat: an image_url data: URL gives a completion; the span counts as prompt tokens', async () => {
  const r = await openai.chat.completions.create({ model: 'tiny', messages: chatWith(dataUrl(img)), max_tokens: 5 });
  assert.equal(r.object, 'chat.completion');
  assert.equal(typeof r.choices[0].message.content, 'string');
  const t = await openai.chat.completions.create({ model: 'tiny', messages: chatWith(), max_tokens: 5 });
  // 40 x 30 on tiny's tower: 140 x 98 pixels, a 3 x 4 token grid, 17 positions for 1 placeholder
  assert.ok(r.usage.prompt_tokens >= t.usage.prompt_tokens + 10, `${r.usage.prompt_tokens} vs ${t.usage.prompt_tokens}`);
});

await check('chat: greedy with the same image twice gives the same text (prefix cache on)', async () => {
  const a = await openai.chat.completions.create({ model: 'tiny', messages: chatWith(dataUrl(img)), max_tokens: 6, temperature: 0 });
  const b = await openai.chat.completions.create({ model: 'tiny', messages: chatWith(dataUrl(img)), max_tokens: 6, temperature: 0 });
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
});

await check('chat: streaming with two images', async () => {
  const s = await openai.chat.completions.create({ model: 'tiny', messages: chatWith(dataUrl(img), dataUrl(other)),
    max_tokens: 4, stream: true });
  let n = 0;
  for await (const ev of s) if (ev.choices[0] && ev.choices[0].delta.content) n++;
  assert.ok(n >= 1);
});

await check('responses: input_image', async () => {
  const r = await openai.responses.create({ model: 'tiny', max_output_tokens: 4, input: [{ role: 'user', content: [
    { type: 'input_text', text: 'Describe.' }, { type: 'input_image', image_url: dataUrl(other), detail: 'auto' }] }] });
  assert.equal(r.object, 'response');
  assert.equal(typeof r.output_text, 'string');
});

await check('anthropic: a base64 image block', async () => {
  const m = await anthropic.messages.create({ model: 'tiny', max_tokens: 4, messages: [{ role: 'user', content: [
    { type: 'image', source: { type: 'base64', media_type: 'image/png', data: img.toString('base64') } },
    { type: 'text', text: 'What is this?' }] }] });
  assert.equal(m.type, 'message');
  assert.equal(m.content[0].type, 'text');
  assert.ok(m.usage.input_tokens > 17);
  // count_tokens counts the image's whole span, as the generation does
  const c = await anthropic.messages.countTokens({ model: 'tiny', messages: [{ role: 'user', content: [
    { type: 'image', source: { type: 'base64', media_type: 'image/png', data: img.toString('base64') } },
    { type: 'text', text: 'What is this?' }] }] });
  assert.equal(c.input_tokens, m.usage.input_tokens);
});

const bad400 = (re) => (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && re.test(e.message) &&
  e.error && e.error.type === 'invalid_request_error';
await check('errors: remote URL, truncated and hostile PNGs, too many, too large, not base64 (OpenAI shape)', async () => {
  const make = (...urls) => openai.chat.completions.create({ model: 'tiny', messages: chatWith(...urls), max_tokens: 2 });
  await assert.rejects(make('https://example.com/cat.png'), bad400(/no network access/));
  await assert.rejects(make(dataUrl(img.subarray(0, img.length - 30))), bad400(/image 0: .*PNG/));
  await assert.rejects(make(dataUrl(png(60000, 60000, false))), bad400(/image 0: /));
  await assert.rejects(make(dataUrl(img), dataUrl(img), dataUrl(img)), bad400(/at most 2/));
  await assert.rejects(make(dataUrl(png(200, 120))), bad400(/image 0: /));
  await assert.rejects(make('data:image/png;base64,@@@@'), bad400(/not valid base64/));
  await assert.rejects(make(dataUrl(Buffer.from('GIF89a but not really'))), bad400(/image 0: /));
});

await check('errors: a bad image in the Anthropic shape', async () => {
  await assert.rejects(
    anthropic.messages.create({ model: 'tiny', max_tokens: 4, messages: [{ role: 'user', content: [
      { type: 'image', source: { type: 'url', url: 'https://example.com/cat.png' } }] }] }),
    (e) => e instanceof Anthropic.BadRequestError && e.status === 400 && e.error.type === 'error' &&
      e.error.error.type === 'invalid_request_error' && /no network access/.test(e.error.error.message),
  );
  await assert.rejects(
    anthropic.messages.create({ model: 'tiny', max_tokens: 4, messages: [{ role: 'user', content: [
      { type: 'image', source: { type: 'base64', media_type: 'image/png', data: img.subarray(0, 40).toString('base64') } }] }] }),
    (e) => e instanceof Anthropic.BadRequestError && e.status === 400 && /image 0/.test(e.error.error.message),
  );
});

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
