/* Hand-written matchers for the pre-tokenizer regexes that DeepSeek, Qwen3
 * and Llama-3 ship, recognised by their exact pattern text.
 *
 * Why: one onig_search call costs ~200 ns, and the split regexes need one
 * call per word, which caps encoding near 10 MB/s. These matchers compute
 * what Oniguruma computes for those patterns - same leftmost match, same
 * alternative order, same backtracking outcome - without the engine:
 *
 *   \p{N}{1,3}                    DeepSeek: digits in groups of three
 *   [一-龥぀-ゟ゠-ヿ]+              DeepSeek: runs of CJK / kana
 *   [ASCII punct][A-Za-z]+ | [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
 *     | ?[\p{P}\p{S}]+[\r\n]* | \s*[\r\n]+ | \s+(?!\S) | \s+          DeepSeek
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d) | [^\r\n\p{L}\p{N}]?\p{L}+ | \p{N}{1,3}
 *     | ?[^\s\p{L}\p{N}]+[\r\n]* | \s*[\r\n]+ | \s+(?!\S) | \s+       Llama-3
 *   the same with \p{N} instead of \p{N}{1,3}                          Qwen3
 *
 * Character classes come from Oniguruma's own Unicode tables (through its
 * encoding's ctype API), cached for the BMP in a 64 KB table, so the answer
 * cannot drift from the regex engine's. Any other pattern runs on Oniguruma.
 * tests/test_tokenizer.c checks every matcher against Oniguruma on corpus,
 * stress and random text. */
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer_internal.h"

enum { C_L = 1, C_M = 2, C_N = 4, C_P = 8, C_S = 16, C_SP = 32 };

static const struct {
    const char *pattern;
    tok_fast_kind kind;
} known[] = {
    {"\\p{N}{1,3}", TOK_FAST_DIGITS3},
    {"[\xe4\xb8\x80-\xe9\xbe\xa5\xe3\x81\x80-\xe3\x82\x9f\xe3\x82\xa0-\xe3\x83\xbf]+", TOK_FAST_CJK},
    {"[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
     "?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
     TOK_FAST_DEEPSEEK},
    {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
     "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     TOK_FAST_LLAMA3},
    {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
     "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     TOK_FAST_QWEN3},
};

tok_fast_kind tok_fast_lookup(const char *pat, size_t len) {
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strlen(known[i].pattern) == len && memcmp(known[i].pattern, pat, len) == 0) return known[i].kind;
    return TOK_FAST_NONE;
}

/* ---- classes from Oniguruma ---- */

typedef struct {
    OnigCtype l, m, n, p, s;
} ctypes;

static int prop(const char *name, OnigCtype *out) {
    OnigEncoding enc = ONIG_ENCODING_UTF8;
    int r = ONIGENC_PROPERTY_NAME_TO_CTYPE(enc, (OnigUChar *)name, (OnigUChar *)name + strlen(name));
    if (r < 0) return -1;
    *out = (OnigCtype)r;
    return 0;
}

static int get_ctypes(ctypes *c) {
    return prop("L", &c->l) || prop("M", &c->m) || prop("N", &c->n) || prop("P", &c->p) || prop("S", &c->s) ? -1 : 0;
}

static uint8_t classify(const ctypes *c, uint32_t cp) {
    OnigEncoding enc = ONIG_ENCODING_UTF8;
    uint8_t k = 0;
    if (ONIGENC_IS_CODE_CTYPE(enc, cp, c->l)) k |= C_L;
    if (ONIGENC_IS_CODE_CTYPE(enc, cp, c->m)) k |= C_M;
    if (ONIGENC_IS_CODE_CTYPE(enc, cp, c->n)) k |= C_N;
    if (ONIGENC_IS_CODE_CTYPE(enc, cp, c->p)) k |= C_P;
    if (ONIGENC_IS_CODE_CTYPE(enc, cp, c->s)) k |= C_S;
    if (ONIGENC_IS_CODE_CTYPE(enc, cp, ONIGENC_CTYPE_SPACE)) k |= C_SP;
    return k;
}

int tok_fast_init(tide_tokenizer *tok, tide_status *st) {
    if (tok->fast_cls) return 0;
    ctypes c;
    if (get_ctypes(&c) != 0) return tide_fail(st, TIDE_ERR_INTERNAL, "Oniguruma lacks a Unicode property");
    uint8_t *t = malloc(0x10000);
    if (!t) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory (character classes)");
    for (uint32_t cp = 0; cp < 0x10000; cp++) t[cp] = (cp >= 0xD800 && cp <= 0xDFFF) ? 0 : classify(&c, cp);
    tok->fast_cls = t;
    tok->fast_ctypes[0] = c.l;
    tok->fast_ctypes[1] = c.m;
    tok->fast_ctypes[2] = c.n;
    tok->fast_ctypes[3] = c.p;
    tok->fast_ctypes[4] = c.s;
    return 0;
}

/* ---- scanning helpers ---- */

typedef struct {
    const tide_tokenizer *tok;
    const uint8_t *s;
    size_t n;
} scan;

/* Class of the character at i; its length in *len and code point in *cp. */
static inline uint8_t cls_at(const scan *sc, size_t i, size_t *len, uint32_t *cp) {
    uint8_t b = sc->s[i];
    if (b < 0x80) {
        *len = 1;
        *cp = b;
        return sc->tok->fast_cls[b];
    }
    int l = tok_utf8_decode(sc->s + i, sc->n - i, cp);
    if (!l) { /* never happens on validated text; keep going safely */
        *len = 1;
        *cp = 0xFFFD;
        return 0;
    }
    *len = (size_t)l;
    if (*cp < 0x10000) return sc->tok->fast_cls[*cp];
    ctypes c = {sc->tok->fast_ctypes[0], sc->tok->fast_ctypes[1], sc->tok->fast_ctypes[2],
                sc->tok->fast_ctypes[3], sc->tok->fast_ctypes[4]};
    return classify(&c, *cp);
}

/* End of the run of characters whose class intersects `want` (and, if
 * `avoid` is set, does not intersect it), starting at i. */
static size_t run(const scan *sc, size_t i, uint8_t want, uint8_t avoid) {
    while (i < sc->n) {
        size_t l;
        uint32_t cp;
        uint8_t k = cls_at(sc, i, &l, &cp);
        if (want ? !(k & want) : (k & avoid) != 0) break;
        i += l;
    }
    return i;
}

static size_t run_crlf(const scan *sc, size_t i) {
    while (i < sc->n && (sc->s[i] == '\r' || sc->s[i] == '\n')) i++;
    return i;
}

/* Up to max characters of class N starting at i (i itself is N). */
static size_t digits(const scan *sc, size_t i, int max) {
    for (int k = 0; k < max && i < sc->n; k++) {
        size_t l;
        uint32_t cp;
        if (!(cls_at(sc, i, &l, &cp) & C_N)) break;
        i += l;
    }
    return i;
}

/* \s*[\r\n]+ | \s+(?!\S) | \s+  at i, where i is whitespace. */
static size_t whitespace_tail(const scan *sc, size_t i) {
    size_t j = i, last_nl_end = 0, last_start = i;
    bool have_nl = false;
    while (j < sc->n) {
        size_t l;
        uint32_t cp;
        if (!(cls_at(sc, j, &l, &cp) & C_SP)) break;
        if (cp == '\r' || cp == '\n') { have_nl = true; last_nl_end = j + 1; }
        last_start = j;
        j += l;
    }
    if (have_nl) return last_nl_end;           /* \s*[\r\n]+ backs off to the last newline */
    if (j == sc->n || last_start == i) return j; /* \s+(?!\S) at the end, or \s+ of one char */
    return last_start;                          /* \s+(?!\S): leave the last space to the word */
}

#define NO_MATCH ((size_t)-1)

static bool ascii_punct(uint8_t c) {
    return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) || (c >= 0x7B && c <= 0x7E);
}

static bool ascii_alpha(uint8_t c) { return (c | 0x20) >= 'a' && (c | 0x20) <= 'z'; }

static size_t match_deepseek(const scan *sc, size_t i) {
    size_t l0, l1;
    uint32_t cp0, cp1;
    uint8_t c0 = cls_at(sc, i, &l0, &cp0);
    size_t nx = i + l0;
    if (cp0 < 0x80 && ascii_punct((uint8_t)cp0) && nx < sc->n && ascii_alpha(sc->s[nx])) {
        while (nx < sc->n && ascii_alpha(sc->s[nx])) nx++;
        return nx;
    }
    uint8_t c1 = nx < sc->n ? cls_at(sc, nx, &l1, &cp1) : 0;
    if (cp0 != '\r' && cp0 != '\n' && !(c0 & (C_L | C_P | C_S)) && nx < sc->n && (c1 & (C_L | C_M)))
        return run(sc, nx, C_L | C_M, 0);
    if (c0 & (C_L | C_M)) return run(sc, i, C_L | C_M, 0);
    if (cp0 == ' ' && nx < sc->n && (c1 & (C_P | C_S))) return run_crlf(sc, run(sc, nx, C_P | C_S, 0));
    if (c0 & (C_P | C_S)) return run_crlf(sc, run(sc, i, C_P | C_S, 0));
    if (c0 & C_SP) return whitespace_tail(sc, i);
    return NO_MATCH;
}

/* (?i:'s|'t|'re|'ve|'m|'ll|'d): Oniguruma folds case with Unicode rules, so
 * 's' also matches U+017F LATIN SMALL LETTER LONG S. */
static size_t contraction(const scan *sc, size_t i) {
    const uint8_t *s = sc->s;
    size_t n = sc->n, k = i + 1;
    if (k >= n) return NO_MATCH;
    uint8_t a = s[k] | 0x20;
    if (s[k] == 0xC5 && k + 1 < n && s[k + 1] == 0xBF) return k + 2; /* ſ */
    if (s[k] >= 0x80) return NO_MATCH;
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return k + 1;
    if (k + 1 >= n) return NO_MATCH;
    uint8_t b = s[k + 1] | 0x20;
    if ((a == 'r' || a == 'v') && b == 'e' && s[k + 1] < 0x80) return k + 2;
    if (a == 'l' && b == 'l' && s[k + 1] < 0x80) return k + 2;
    return NO_MATCH;
}

static size_t match_llama(const scan *sc, size_t i, int max_digits) {
    size_t l0, l1;
    uint32_t cp0, cp1;
    if (sc->s[i] == '\'') {
        size_t e = contraction(sc, i);
        if (e != NO_MATCH) return e;
    }
    uint8_t c0 = cls_at(sc, i, &l0, &cp0);
    size_t nx = i + l0;
    uint8_t c1 = nx < sc->n ? cls_at(sc, nx, &l1, &cp1) : 0;
    if (cp0 != '\r' && cp0 != '\n' && !(c0 & (C_L | C_N)) && nx < sc->n && (c1 & C_L)) return run(sc, nx, C_L, 0);
    if (c0 & C_L) return run(sc, i, C_L, 0);
    if (c0 & C_N) return digits(sc, i, max_digits);
    const uint8_t other = C_SP | C_L | C_N; /* [^\s\p{L}\p{N}] */
    if (cp0 == ' ' && nx < sc->n && !(c1 & other)) return run_crlf(sc, run(sc, nx, 0, other));
    if (!(c0 & other)) return run_crlf(sc, run(sc, i, 0, other));
    return whitespace_tail(sc, i); /* c0 is whitespace here */
}

static bool cjk(uint32_t cp) {
    return (cp >= 0x4E00 && cp <= 0x9FA5) || (cp >= 0x3040 && cp <= 0x30FF);
}

static size_t match_at(const scan *sc, tok_fast_kind kind, size_t i) {
    size_t l;
    uint32_t cp;
    switch (kind) {
    case TOK_FAST_DIGITS3:
        return (cls_at(sc, i, &l, &cp) & C_N) ? digits(sc, i, 3) : NO_MATCH;
    case TOK_FAST_CJK: {
        size_t j = i;
        while (j < sc->n) {
            cls_at(sc, j, &l, &cp);
            if (!cjk(cp)) break;
            j += l;
        }
        return j > i ? j : NO_MATCH;
    }
    case TOK_FAST_DEEPSEEK: return match_deepseek(sc, i);
    case TOK_FAST_LLAMA3: return match_llama(sc, i, 3);
    case TOK_FAST_QWEN3: return match_llama(sc, i, 1);
    default: return NO_MATCH;
    }
}

bool tok_fast_search(const tide_tokenizer *tok, tok_fast_kind kind, const char *s, size_t n, size_t from,
                     size_t *ms, size_t *me) {
    scan sc = {tok, (const uint8_t *)s, n};
    for (size_t i = from; i < n;) {
        /* Skip bytes that cannot start a match without decoding them: ASCII
         * non-digits for \p{N}; anything but the lead bytes E3..E9 of the
         * CJK and kana blocks (continuation bytes are 80..BF, never these). */
        if (kind == TOK_FAST_DIGITS3) {
            while (i < n && sc.s[i] < 0x80 && (sc.s[i] < '0' || sc.s[i] > '9')) i++;
            if (i == n) break;
        } else if (kind == TOK_FAST_CJK) {
            while (i < n && (sc.s[i] < 0xE3 || sc.s[i] > 0xE9)) i++;
            if (i == n) break;
        }
        size_t e = match_at(&sc, kind, i);
        if (e != NO_MATCH) {
            *ms = i;
            *me = e;
            return true;
        }
        uint32_t cp;
        int l = tok_utf8_decode(sc.s + i, n - i, &cp);
        i += l ? (size_t)l : 1;
    }
    return false;
}
