/* UTF-8 helpers for the tokenizer: strict decoding (no surrogates, no
 * overlongs), the lossy repair rule used when decoded bytes are not valid
 * UTF-8, and the few Unicode character predicates the HF pipeline uses
 * outside regexes (whitespace for lstrip/rstrip, numeric for Digits, word
 * characters for single_word). */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "text/tokenizer_internal.h"

int tok_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp) {
    if (n == 0) return 0;
    uint8_t c = s[0];
    if (c < 0x80) { *cp = c; return 1; }
    int len;
    uint32_t v, min;
    if (c >= 0xC2 && c <= 0xDF) { len = 2; v = c & 0x1F; min = 0x80; }
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; v = c & 0x0F; min = 0x800; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; v = c & 0x07; min = 0x10000; }
    else return 0;
    if ((size_t)len > n) return 0;
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return len;
}

int tok_utf8_encode(uint32_t cp, char *out) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t tide_utf8_valid_prefix(const char *s, size_t len) {
    const uint8_t *p = (const uint8_t *)s;
    size_t i = 0;
    while (i < len) {
        if (p[i] < 0x80) { i++; continue; }
        uint32_t cp;
        int l = tok_utf8_decode(p + i, len - i, &cp);
        if (!l) break;
        i += (size_t)l;
    }
    return i;
}

/* Length of the maximal subpart of an ill-formed sequence at s: the longest
 * prefix that could still begin a valid character (at least 1 byte). */
static size_t maximal_subpart(const uint8_t *s, size_t n) {
    uint8_t c = s[0];
    int need;
    uint8_t lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c >= 0xE0 && c <= 0xEF) { need = 2; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
    else if (c >= 0xF0 && c <= 0xF4) { need = 3; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
    else return 1;
    size_t i = 1;
    for (int k = 0; k < need && i < n; k++, i++) {
        uint8_t b = s[i];
        if (k == 0 ? (b < lo || b > hi) : ((b & 0xC0) != 0x80)) break;
    }
    return i;
}

size_t tok_utf8_incomplete_tail(const uint8_t *s, size_t n) {
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        uint8_t c = s[n - k];
        size_t need = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        if (need == 0) {
            if ((c & 0xC0) == 0x80) continue; /* a continuation byte: look further back */
            return 0;
        }
        return k < need && maximal_subpart(s + n - k, k) == k ? k : 0;
    }
    return 0;
}

int tide_utf8_lossy(const char *src, size_t len, char **out, size_t *out_len, tide_status *st) {
    /* Worst case: every byte becomes U+FFFD (3 bytes). */
    if (len > (SIZE_MAX - 1) / 3) return tide_fail(st, TIDE_ERR_NOMEM, "utf8_lossy: input too long");
    char *o = malloc(len * 3 + 1);
    if (!o) return tide_fail(st, TIDE_ERR_NOMEM, "utf8_lossy: out of memory (%zu bytes)", len * 3 + 1);
    const uint8_t *p = (const uint8_t *)src;
    size_t i = 0, k = 0;
    while (i < len) {
        uint32_t cp;
        int l = p[i] < 0x80 ? 1 : tok_utf8_decode(p + i, len - i, &cp);
        if (l) {
            memcpy(o + k, p + i, (size_t)l);
            k += (size_t)l;
            i += (size_t)l;
        } else {
            memcpy(o + k, "\xEF\xBF\xBD", 3);
            k += 3;
            i += maximal_subpart(p + i, len - i);
        }
    }
    o[k] = 0;
    *out = o;
    *out_len = k;
    return 0;
}

bool tok_is_whitespace(uint32_t cp) {
    if (cp >= 0x09 && cp <= 0x0D) return true;
    switch (cp) {
    case 0x20: case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029:
    case 0x202F: case 0x205F: case 0x3000:
        return true;
    default:
        return cp >= 0x2000 && cp <= 0x200A;
    }
}

bool tok_is_numeric(uint32_t cp) {
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}

bool tok_is_word(uint32_t cp) {
    if (cp == '_') return true;
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO: case UTF8PROC_CATEGORY_PC:
        return true;
    default:
        return false;
    }
}
