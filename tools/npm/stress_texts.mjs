// Writes the tokenizer stress set as JSONL (one JSON string per line) on
// stdout: hand-picked hard cases plus deterministic pseudo-random strings
// drawn from character pools that trip tokenizers (CJK, emoji sequences,
// combining marks, right-to-left scripts, controls, odd whitespace, digits of
// many scripts, text that looks like special tokens). Code points stay within
// Unicode 13 so that every engine in the comparison classifies them alike.
//
//   node stress_texts.mjs [COUNT_RANDOM] > stress.jsonl

const cases = [
  // CJK and friends
  "中文分词测试，包含标点。还有“引号”和《书名》！",
  "日本語のテキストとカタカナ、ひらがな。ｶﾀｶﾅ半角",
  "한국어 텍스트와 숫자 123개",
  "混合English和中文mixed文本",
  "龥龦 一丁 ぀ぁゟ゠ァヿ",
  // emoji, modifiers, ZWJ sequences, flags, keycaps, variation selectors
  "👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🇯🇵🇺🇸 1️⃣ ❤️ ☺︎",
  "emoji🙂inside😀words👩🏾‍💻",
  "‍‌⁠﻿ zero-width joiner, non-joiner, word joiner, BOM",
  // combining marks
  "e\u0301 a\u0308\u0304 n\u0303o\u0302 ",
  "Z̴̡͓a̸l̶g̵o̷ t̶e̷x̸t̵",
  "\u0301\u0301 leading combining marks",
  "é vs e\u0301 (NFC vs NFD), Å vs A\u030A, ﬁ ligature, ㎏, ①",
  // right to left
  "مرحبا بالعالم 123",
  "שלום עולם, hello עולם",
  "\u200eleft\u200f right\u202b embed\u202c",
  // control characters and line ends
  "\u0000nul\u0001\u0002\u0003 ctrl \u007f del \u0085 nel",
  "tab\there\vvt\fff",
  "crlf\r\nline\rcr only\n\nnewlines\n\n\n",
  "\r\n\r\n",
  "\n",
  " \n ",
  "a\u2028b\u2029c",
  // whitespace runs
  " ".repeat(50) + "x",
  "x" + " ".repeat(33),
  "\t".repeat(20) + "tabs",
  "  \n  \n    \n\t\t\n",
  "\u00a0\u2003\u3000 odd spaces\u00a0\u00a0",
  "   leading and trailing   ",
  // digits
  "1234567890 12 123 1234 12345",
  "３４５ fullwidth ٣٤٥ arabic-indic ४५६ devanagari",
  "Ⅻ roman ½ fraction ² superscript ⑳ circled",
  "3.14159 -42 +7 1e10 0x1F 1,000,000",
  // text that looks like special tokens
  "<｜User｜>hello<｜Assistant｜>",
  "<｜User｜ not closed",
  "<｜begin▁of▁sentence｜><｜end▁of▁sentence｜>",
  "<think>reasoning</think>answer",
  "<｜DSML｜ calls><｜DSML｜ invoke name=\"f\">",
  "｜DSML｜ bare ｜ fullwidth bar",
  "<|im_start|>user\nhi<|im_end|>",
  "<|begin_of_text|><|eot_id|>",
  "<dsml:tag></dsml:tag>",
  "<｜▁pad▁｜> <|EOT|> <｜tool▁sep｜>",
  "<<think>> <</think> <thin k>",
  "<｜place▁holder▁no▁5｜><|place_holder_mm_span_0442|>",
  // apostrophes and case folding in (?i:...)
  "don't I'll we've THEY'RE it'S He'D 'll 'LL",
  "'ſ long s, 'K kelvin, 'ſt",
  "‘curly’ “quotes” ‚low‛",
  // code and markup
  "def f(x):\n    return x**2  # comment\n",
  "if (a != b && c <= d) { return -1; }",
  "https://example.com/path?q=1&r=two#frag",
  "{\"key\": [1, 2.5, null, true], \"k2\": \"v\"}",
  "<html><body class=\"x\">text</body></html>",
  "$$\\frac{a}{b} + \\sum_{i=0}^{n} x_i$$",
  // long words
  "a".repeat(2000),
  "ab".repeat(1000),
  "9".repeat(3000),
  "!".repeat(500),
  "Supercalifragilisticexpialidocious" + "x".repeat(300),
  // misc scripts
  "Ελληνικά κείμενα και Кириллица текст",
  "ภาษาไทย ไม่มีช่องว่าง",
  "हिन्दी पाठ",
  "ქართული Հայերեն አማርኛ",
  "",
];

// Character pools for random strings (all assigned in Unicode 13).
const pools = [
  "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
  "0123456789",
  " \t\n\r  ",
  "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
  "éèêëàâäôöûüçñßøåæœÀÉÎÕÜ",
  "αβγδεζηθλμπσςωΑΒΓΔΣΩ",
  "абвгдежзийклмнопрстуфхцчшщъыьэюяЖЩЯ",
  "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年",
  "あいうえおかきくけこアイウエオカキクケコー",
  "한국어텍스트",
  "😀😂🙂👍🏽🎉🚀❤️🇺🇸",
  "\u0301\u0308\u0303\u0327\u0338",
  "\u200d\u200c\u200b\ufeff\u00ad",
  "\u0000\u0001\u001b\u007f\u0085\u00a0\u2028\u3000",
  "٠١٢٣٤٥٦٧٨٩مرحباשלום",
  "、。「」『』（）！？：；～",
  "½²³①Ⅻ３４５",
  "<｜>▁",
];

// xorshift32: the same strings on every run and machine.
let seed = 0x1234567;
function rnd(n) {
  seed ^= seed << 13; seed >>>= 0;
  seed ^= seed >>> 17;
  seed ^= seed << 5; seed >>>= 0;
  return seed % n;
}

const count = Number(process.argv[2] ?? 400);
const out = cases.slice();
for (let i = 0; i < count; i++) {
  const len = 1 + rnd(60);
  let s = "";
  const favourite = [...pools[rnd(pools.length)]];
  for (let k = 0; k < len; k++) {
    const pool = rnd(3) ? favourite : [...pools[rnd(pools.length)]];
    s += pool[rnd(pool.length)];
  }
  out.push(s);
}
process.stdout.write(out.map((s) => JSON.stringify(s)).join("\n") + "\n");
