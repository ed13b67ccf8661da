// Structured outputs, end to end (tests/sh_structured.sh): makes Chat
// Completions request lines from the corpus (tests/data/structured/
// corpus.jsonl: JSON Schemas through response_format json_schema, regexes
// through guided_regex, grammars through guided_grammar), then checks
// `tide run`'s results with independent validators: ajv (draft 2020-12,
// ajv-formats) for schemas, JavaScript's RegExp for regexes and for the
// grammars (each corpus grammar carries an equivalent regex, "check"). Every result
// must be "stop" with a valid output, or "length" (cut at max_tokens).
// With TOOLS > 0, that many more requests force a tool call (tool_choice
// naming a function whose parameters are one of the corpus's object
// schemas): each must end "tool_calls" with arguments ajv accepts. With
// AUTO > 0, that many more leave tool_choice "auto" with one strict tool
// (a corpus object schema) and one that is not: each ends "stop" with text
// holding no DSML marker, or "tool_calls" where every call of the strict
// tool has arguments ajv accepts; in serve mode these go in turn through
// Chat Completions, Responses and Messages.
// The same requests can go through `tide serve` (serve mode: Chat
// Completions over HTTP, 4 at a time; results written in tide run's shape;
// plus one request with an unsupported keyword, which must get a 400
// naming it).
//   node structured_check.mjs make CORPUS N MAX_TOKENS [TOOLS [AUTO]] > requests.jsonl
//   node structured_check.mjs serve CORPUS URL requests.jsonl > results.jsonl
//   node structured_check.mjs check CORPUS requests.jsonl results.jsonl
import fs from "node:fs";
import Ajv2020 from "ajv/dist/2020.js";
import addFormats from "ajv-formats";

const [mode, corpusPath, a, b] = process.argv.slice(2);
const corpus = fs.readFileSync(corpusPath, "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l));
const lines = (p) => fs.readFileSync(p, "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l));

if (mode === "make") {
  const n = Number(a), maxTokens = Number(b);
  // alternate between the kinds, each kind's items in turn
  const byKind = {};
  corpus.forEach((c, k) => (byKind[c.kind] ||= []).push(k));
  const order = Object.keys(byKind).sort();
  for (let i = 0; i < n; i++) {
    const list = byKind[order[i % order.length]];
    const c = corpus[list[Math.floor(i / order.length) % list.length]];
    const req = { id: i, item: corpus.indexOf(c), messages: [{ role: "user", content: `Answer ${i}` }], max_tokens: maxTokens,
                  temperature: 1, seed: 1000 + i };
    if (c.kind === "json_schema") req.response_format = { type: "json_schema", json_schema: { name: "out", schema: c.text, strict: true } };
    else if (c.kind === "regex") req.guided_regex = c.text;
    else req.guided_grammar = c.text;
    process.stdout.write(JSON.stringify(req) + "\n");
  }
  const objects = corpus.map((c, k) => k).filter((k) => corpus[k].kind === "json_schema" && corpus[k].text.type === "object");
  for (let t = 0; t < Number(process.argv[6] || 0); t++) {
    const k = objects[(t * 7) % objects.length];
    const name = `tool_${t}`;
    const req = { id: n + t, item: k, tool: name, messages: [{ role: "user", content: `Call ${t}` }], max_tokens: maxTokens * 4,
                  temperature: 1, seed: 5000 + t,
                  tools: [{ type: "function", function: { name, strict: true, parameters: corpus[k].text } },
                          { type: "function", function: { name: "other", parameters: { type: "object", properties: {} } } }],
                  tool_choice: { type: "function", function: { name } } };
    process.stdout.write(JSON.stringify(req) + "\n");
  }
  const nTools = Number(process.argv[6] || 0);
  for (let t = 0; t < Number(process.argv[7] || 0); t++) {
    const k = objects[(t * 5 + 3) % objects.length];
    const name = `strict_${t}`;
    const req = { id: n + nTools + t, item: k, auto: name, api: ["chat", "responses", "messages"][t % 3],
                  messages: [{ role: "user", content: `Maybe call ${t}` }], max_tokens: maxTokens * 4, temperature: 1, seed: 7000 + t,
                  tools: [{ type: "function", function: { name, strict: true, parameters: corpus[k].text } },
                          { type: "function", function: { name: "other", parameters: { type: "object", properties: { q: { type: "string" } } } } }] };
    process.stdout.write(JSON.stringify(req) + "\n");
  }
} else if (mode === "serve") {
  const url = a.replace(/\/$/, "") + "/v1/chat/completions";
  const reqs = lines(b);
  const post = (body, u = url) => fetch(u, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  const base = a.replace(/\/$/, "");
  // a strict-tools request through Responses or Messages, its result in tide run's shape
  const other = async (q) => {
    const { id, item, auto, api, messages, max_tokens, temperature, tools } = q;
    if (api === "responses") {
      const res = await post({ model: "tide", input: messages[0].content, max_output_tokens: max_tokens, temperature,
                               tools: tools.map((t) => ({ type: "function", ...t.function })) }, base + "/v1/responses");
      const j = await res.json();
      if (!res.ok) return { id, finish_reason: "error", error: JSON.stringify(j), text: "" };
      const calls = j.output.filter((o) => o.type === "function_call").map((o) => ({ name: o.name, arguments: o.arguments }));
      const text = j.output.filter((o) => o.type === "message").flatMap((o) => o.content.map((c) => c.text || "")).join("");
      const cut = j.status === "incomplete";
      return { id, text, tool_calls: calls, finish_reason: calls.length ? "tool_calls" : cut ? "length" : "stop" };
    }
    const res = await post({ model: "tide", max_tokens, temperature, messages,
                             tools: tools.map((t) => ({ name: t.function.name, strict: t.function.strict,
                                                        input_schema: t.function.parameters })) }, base + "/v1/messages");
    const j = await res.json();
    if (!res.ok) return { id, finish_reason: "error", error: JSON.stringify(j), text: "" };
    const calls = j.content.filter((c) => c.type === "tool_use").map((c) => ({ name: c.name, arguments: JSON.stringify(c.input) }));
    const text = j.content.filter((c) => c.type === "text").map((c) => c.text).join("");
    return { id, text, tool_calls: calls,
             finish_reason: j.stop_reason === "tool_use" ? "tool_calls" : j.stop_reason === "max_tokens" ? "length" : "stop" };
  };
  const out = [];
  let next = 0;
  const worker = async () => {
    while (next < reqs.length) {
      const q = reqs[next++];
      if (q.api && q.api !== "chat") { out.push(await other(q)); continue; }
      const { id, item, tool, auto, api, ...body } = q;
      const res = await post({ model: "tide", ...body });
      const j = await res.json();
      if (!res.ok) { out.push({ id, finish_reason: "error", error: JSON.stringify(j), text: "" }); continue; }
      const ch = j.choices[0];
      out.push({ id, text: ch.message.content || "", finish_reason: ch.finish_reason,
                 tool_calls: (ch.message.tool_calls || []).map((t) => ({ name: t.function.name, arguments: t.function.arguments })) });
    }
  };
  await Promise.all(Array.from({ length: Number(process.env.STRUCTURED_CONCURRENCY || 4) }, worker));
  for (const r of out) process.stdout.write(JSON.stringify(r) + "\n");
  const bad = await post({ model: "tide", messages: [{ role: "user", content: "x" }],
                           response_format: { type: "json_schema", json_schema: { name: "a", schema: { type: "object", properties: { a: { not: {} } } } } } });
  const bj = await bad.json();
  if (bad.status !== 400 || !/properties\/a: keyword "not" is not supported/.test(bj.error && bj.error.message)) {
    console.error(`unsupported keyword: HTTP ${bad.status} ${JSON.stringify(bj)}`);
    process.exit(1);
  }
} else if (mode === "check") {
  const reqs = new Map(lines(a).map((r) => [r.id, r]));
  const ajv = new Ajv2020({ strict: false, allErrors: true });
  addFormats(ajv);
  let stop = 0, length = 0, bad = 0;
  const kinds = {};
  for (const r of lines(b)) {
    const q = reqs.get(r.id);
    const c = corpus[q.item];
    const kind = q.auto ? "auto_tools" : q.tool ? "tool_call" : c.kind;
    kinds[kind] = (kinds[kind] || 0) + 1;
    let counted = false, failed = false; // a result is counted once: stop (valid), length, or invalid
    const fail = (why) => { if (!failed) { bad++; if (counted) stop--; failed = true; } console.log(`INVALID id ${r.id} (${c.kind} ${JSON.stringify(c.text).slice(0, 120)}): ${why}: ${JSON.stringify(r.text)}`); };
    if (r.finish_reason === "length") { length++; continue; }
    if (q.auto) { // tool_choice auto with a strict tool: text, or calls
      if (r.finish_reason === "stop") {
        stop++, counted = true;
        if (r.text.includes("<\uff5cDSML\uff5c")) fail("a DSML marker in the text");
        continue;
      }
      if (r.finish_reason !== "tool_calls") { fail(`finish_reason ${r.finish_reason} ${r.error || ""}`); continue; }
      stop++, counted = true;
      const validate = ajv.compile(c.text);
      for (const call of r.tool_calls) {
        if (call.name !== q.auto) continue; // the non-strict tool: any arguments
        let v;
        try { v = JSON.parse(call.arguments); } catch (e) { fail("arguments not JSON"); continue; }
        if (!validate(v)) fail(`arguments: ${ajv.errorsText(validate.errors)}: ${call.arguments}`);
      }
      continue;
    }
    if (q.tool) { // a forced tool call
      if (r.finish_reason !== "tool_calls") { fail(`finish_reason ${r.finish_reason}, not tool_calls`); continue; }
      stop++, counted = true;
      const validate = ajv.compile(c.text);
      for (const call of r.tool_calls) {
        if (call.name !== q.tool) { fail(`called ${call.name}`); continue; }
        let v;
        try { v = JSON.parse(call.arguments); } catch (e) { fail("arguments not JSON"); continue; }
        if (!validate(v)) fail(`arguments: ${ajv.errorsText(validate.errors)}: ${call.arguments}`);
      }
      continue;
    }
    if (r.finish_reason !== "stop") { fail(`finish_reason ${r.finish_reason} ${r.error || ""}`); continue; }
    stop++, counted = true;
    if (c.kind === "json_schema") {
      let v;
      try { v = JSON.parse(r.text); } catch (e) { fail("not JSON"); continue; }
      const validate = ajv.compile(q.response_format.json_schema.schema);
      if (!validate(v)) fail(ajv.errorsText(validate.errors));
    } else if (c.kind === "regex") {
      if (!new RegExp(`^(?:${c.text})$`, "u").test(r.text)) fail("no full match");
    } else if (c.check) { // a grammar with an equivalent regex
      if (!new RegExp(`^(?:${c.check})$`, "u").test(r.text)) fail("no full match of the equivalent regex");
    } else fail("a grammar without a check regex in the corpus");
  }
  console.log(`structured e2e: ${stop + length + bad} results (${JSON.stringify(kinds)}): ${stop} stop and valid, ` +
              `${length} cut at max_tokens (finish_reason length), ${bad} invalid`);
  const expected = reqs.size;
  if (stop + length + bad !== expected) { console.log(`expected ${expected} results`); process.exit(1); }
  process.exit(bad ? 1 : 0);
}
