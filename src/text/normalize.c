/* Engram key normalisation (see normalize.h for the rules and why each is
 * what it is). Two utf8proc passes for NFKC and NFD, then one pass over the
 * code points for marks, case and whitespace. */
#include "text/normalize.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#define SENTINEL 0xE000 /* the reference's private-use placeholder */

int tide_is_white_space(int cp) {
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

static int is_mark(utf8proc_int32_t cp) {
    utf8proc_category_t c = utf8proc_category(cp);
    return c == UTF8PROC_CATEGORY_MN || c == UTF8PROC_CATEGORY_MC || c == UTF8PROC_CATEGORY_ME;
}

static int is_collapsible(utf8proc_int32_t cp) {
    return cp == ' ' || cp == '\t' || cp == '\r' || cp == '\n';
}

/* utf8proc_map with an explicit length (no NULLTERM: U+0000 is data). */
static int map(const uint8_t *s, size_t len, utf8proc_option_t opt, uint8_t **out,
               size_t *out_len, const char *what, tide_status *st) {
    if (len > ((size_t)1 << 28)) /* far beyond any token; keeps the x8 buffers in range */
        return tide_fail(st, TIDE_ERR_INVALID, "engram normalise: string of %zu bytes is too long",
                         len);
    utf8proc_ssize_t n = utf8proc_map(s, (utf8proc_ssize_t)len, out, opt);
    if (n < 0)
        return tide_fail(st, TIDE_ERR_INVALID, "engram normalise (%s): %s", what,
                         utf8proc_errmsg(n));
    *out_len = (size_t)n;
    return 0;
}

/* Steps 3..8: from the NFD code points src[0..n) into dst (room for 2n:
 * lowercasing may expand); returns the count written. */
static size_t marks_case_space(const utf8proc_int32_t *src, size_t n, utf8proc_int32_t *dst) {
    size_t m = 0;
    int in_run = 0; /* inside a run of [ \t\r\n] already written as one space */
    for (size_t i = 0; i < n; i++) {
        utf8proc_int32_t c = src[i];
        if (is_mark(c)) continue; /* a dropped mark does not break a whitespace run */
        if (is_collapsible(c)) {
            if (!in_run) dst[m++] = ' ';
            in_run = 1;
            continue;
        }
        in_run = 0;
        if (c == 0x130) { /* the one unconditional full lowercase mapping (absent after NFD) */
            dst[m++] = 'i';
            dst[m++] = 0x307;
        } else {
            dst[m++] = utf8proc_tolower(c);
        }
    }
    if (m == 1 && dst[0] == ' ') return 1; /* the lone space survives the strip */
    size_t b = 0, e = m;
    while (b < e && tide_is_white_space(dst[b])) b++;
    while (e > b && tide_is_white_space(dst[e - 1])) e--;
    size_t k = 0;
    for (size_t i = b; i < e; i++) dst[k++] = dst[i] == SENTINEL ? ' ' : dst[i];
    return k;
}

int tide_engram_normalize(const char *s, size_t len, char **out, size_t *out_len, tide_status *st) {
    uint8_t *nfkc = NULL, *nfd = NULL;
    size_t nfkc_len = 0, nfd_len = 0;
    *out = NULL;
    *out_len = 0;
    if (map((const uint8_t *)s, len, UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT, &nfkc,
            &nfkc_len, "NFKC", st) != 0)
        return -1;
    int rc = map(nfkc, nfkc_len, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE, &nfd, &nfd_len, "NFD", st);
    free(nfkc);
    if (rc != 0) return -1;

    /* Decode NFD to code points (at most one per byte) into cps[0..n); the
     * processed ones go to cps[n..3n] (lowercasing may double them). */
    utf8proc_int32_t *cps = malloc((nfd_len * 3 + 2) * sizeof *cps);
    char *res = malloc(nfd_len * 8 + 8);
    if (!cps || !res) {
        free(cps);
        free(res);
        free(nfd);
        return tide_fail(st, TIDE_ERR_NOMEM, "engram normalise: out of memory");
    }
    size_t n = 0;
    for (size_t p = 0; p < nfd_len;) {
        utf8proc_int32_t c;
        utf8proc_ssize_t k = utf8proc_iterate(nfd + p, (utf8proc_ssize_t)(nfd_len - p), &c);
        if (k <= 0) { /* cannot happen: utf8proc produced it */
            free(cps);
            free(res);
            free(nfd);
            return tide_fail(st, TIDE_ERR_INTERNAL, "engram normalise: bad utf8proc output");
        }
        cps[n++] = c;
        p += (size_t)k;
    }
    free(nfd);
    utf8proc_int32_t *done = cps + n;
    size_t m = marks_case_space(cps, n, done);
    size_t o = 0;
    for (size_t i = 0; i < m; i++) o += (size_t)utf8proc_encode_char(done[i], (utf8proc_uint8_t *)res + o);
    res[o] = 0;
    free(cps);
    *out = res;
    *out_len = o;
    return 0;
}
