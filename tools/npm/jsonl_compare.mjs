// Compares two JSONL files of strings line by line: `expected` (optionally
// NFC-normalized first, for tokenizers whose normalizer is NFC) against
// `actual`. Prints the first differences; exits 1 if any line differs.
//   node jsonl_compare.mjs EXPECTED ACTUAL [--nfc]
import { readFileSync } from "node:fs";
const [a, b, flag] = process.argv.slice(2);
const read = (p) => readFileSync(p, "utf8").split("\n").filter((l, i, all) => i < all.length - 1 || l !== "");
const ea = read(a), eb = read(b);
let bad = 0;
if (ea.length !== eb.length) {
  console.log(`line counts differ: ${ea.length} vs ${eb.length}`);
  bad++;
}
for (let i = 0; i < Math.min(ea.length, eb.length); i++) {
  let x = JSON.parse(ea[i]);
  const y = JSON.parse(eb[i]);
  if (flag === "--nfc") x = x.normalize("NFC");
  if (x !== y) {
    if (bad < 5) console.log(`line ${i + 1}: expected ${JSON.stringify(x).slice(0, 200)}\n        got ${JSON.stringify(y).slice(0, 200)}`);
    bad++;
  }
}
if (bad) console.log(`${bad} line(s) differ`);
process.exit(bad ? 1 : 0);
