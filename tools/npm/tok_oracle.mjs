// Tokenizer oracle: Hugging Face's tokenizers.js run on a local tokenizer.json,
// with the same line protocol as `tide tokenize` / `tide detokenize`, so a
// shell test can diff the two outputs line by line.
//
//   node tok_oracle.mjs encode TOKENIZER_JSON [--jsonl]  < text  > ids
//   node tok_oracle.mjs decode TOKENIZER_JSON [--jsonl]  < ids   > text
//
// encode: one input line -> one line of space-separated ids (no BOS/EOS:
// add_special_tokens is off, as in tide). With --jsonl every input line is a
// JSON string, so texts may hold newlines and control characters.
// decode: one line of ids -> the text (a JSON string with --jsonl).
import { readFileSync } from "node:fs";
import { Tokenizer } from "@huggingface/tokenizers";

const [mode, path, ...flags] = process.argv.slice(2);
if (!["encode", "decode"].includes(mode) || !path) {
  process.stderr.write("usage: tok_oracle.mjs encode|decode TOKENIZER_JSON [--jsonl]\n");
  process.exit(2);
}
const jsonl = flags.includes("--jsonl");
const tok = new Tokenizer(JSON.parse(readFileSync(path, "utf8")), {
  clean_up_tokenization_spaces: false,
});

let input = readFileSync(0, "utf8");
if (input.endsWith("\n")) input = input.slice(0, -1);
const lines = input.length ? input.split("\n") : [];
const out = [];
for (const line of lines) {
  if (mode === "encode") {
    const text = jsonl ? JSON.parse(line) : line;
    out.push(tok.encode(text, { add_special_tokens: false }).ids.join(" "));
  } else {
    const ids = line.trim() ? line.trim().split(/\s+/).map(Number) : [];
    const text = ids.length ? tok.decode(ids, { clean_up_tokenization_spaces: false }) : "";
    out.push(jsonl ? JSON.stringify(text) : text);
  }
}
process.stdout.write(out.length ? out.join("\n") + "\n" : "");
