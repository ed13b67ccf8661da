/* The engram key normalisation: how the reference turns a decoded token into
 * the string that decides its compressed id (inference/engram.py,
 * build_compressed_token_map, a HF `tokenizers` normalizer sequence):
 *
 *   1. NFKC
 *   2. NFD
 *   3. strip marks: drop every code point of general category M (Mn, Mc, Me),
 *      as tokenizers' StripAccents does (not only Mn, unlike BERT's Python)
 *   4. lowercase, code point by code point (Rust char::to_lowercase: full
 *      mapping, no final-sigma context)
 *   5. every run of [ \t\r\n] becomes one space
 *   6. a string that is now exactly " " stays " " (the reference swaps it for
 *      U+E000 around step 7 so Strip cannot empty it)
 *   7. strip White_Space code points (Rust char::is_whitespace) at both ends
 *   8. every U+E000 becomes a space (the sentinel's undo step; it also hits a
 *      U+E000 that was in the token itself)
 *
 * Unicode data comes from utf8proc (Unicode 15.0 in utf8proc 2.8). */
#ifndef TIDE_TEXT_NORMALIZE_H
#define TIDE_TEXT_NORMALIZE_H

#include <stddef.h>

#include "base/status.h"

/* Normalises the UTF-8 string s[0..len) (NUL bytes allowed: U+0000 is a code
 * point like any other). On success *out is a malloc'd NUL-terminated string
 * (caller frees) of *out_len bytes, possibly empty. Fails on invalid UTF-8. */
int tide_engram_normalize(const char *s, size_t len, char **out, size_t *out_len, tide_status *st);

/* Rust's char::is_whitespace (the Unicode White_Space property). */
int tide_is_white_space(int cp);

#endif
