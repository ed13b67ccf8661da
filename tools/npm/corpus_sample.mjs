// Deterministic sample of the text corpus (shared/data/build_corpus.sh) as
// JSONL: from each *.txt file in DIR (sorted), the first LINES lines and
// LINES lines spread evenly over the rest, grouped 1-3 lines per text so
// that newlines are tokenized too.
//   node corpus_sample.mjs DIR [LINES] > sample.jsonl
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
const [dir, n = "300"] = process.argv.slice(2);
const per = Number(n);
const out = [];
for (const f of readdirSync(dir).filter((x) => x.endsWith(".txt")).sort()) {
  const lines = readFileSync(join(dir, f), "utf8").split("\n");
  const picked = lines.slice(0, per);
  const step = Math.max(1, Math.floor((lines.length - per) / per));
  for (let i = per; i < lines.length && picked.length < 2 * per; i += step) picked.push(lines[i]);
  for (let i = 0; i < picked.length; ) {
    const k = 1 + (i % 3);
    out.push(picked.slice(i, i + k).join("\n"));
    i += k;
  }
}
process.stdout.write(out.map((s) => JSON.stringify(s)).join("\n") + "\n");
