/* Fuzz target for the mask engine (src/constrain/constrain.c): the input is
 * a regex, a NUL, then choices. A fixed vocabulary (every byte, pieces of
 * UTF-8 characters, multi-byte words, an end token) is masked at every
 * step; each choice byte picks a token: allowed ones must be accepted,
 * disallowed ones refused, and a choice byte >= 0xF0 rolls back some
 * tokens. The mask is checked against accepting each token by itself. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "constrain/constrain.h"

#define NV 300

static tide_cons_vocab *vocab(void) {
    static const char *const words[] = {"ab", "abc", "\xc3", "\xa9", "\xc3\xa9", "{\"", "\":", "12", "true", "  ",
                                        "\xe2\x82\xac", "\xf0\x9f", "\x98\x80", "xyz", "a-b", "[1,", "]}"};
    const uint8_t *b[NV];
    uint32_t len[NV];
    uint8_t skip[NV] = {0};
    static uint8_t bytes[256];
    for (int i = 0; i < NV; i++) {
        if (i < 256) {
            bytes[i] = (uint8_t)i;
            b[i] = bytes + i;
            len[i] = 1;
        } else {
            const char *w = words[i % (sizeof words / sizeof words[0])];
            b[i] = (const uint8_t *)w;
            len[i] = (uint32_t)strlen(w);
        }
    }
    skip[NV - 1] = 1; /* the end token */
    tide_cons_vocab *v = NULL;
    tide_status st = {0};
    if (tide_cons_vocab_new(b, len, skip, NV, &v, &st) != 0) abort();
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 4096) return 0;
    const uint8_t *nul = memchr(data, 0, size);
    size_t rlen = nul ? (size_t)(nul - data) : size;
    tide_cons_grammar *g = NULL;
    tide_status st = {0};
    if (tide_cons_compile(TIDE_CONS_REGEX, (const char *)data, rlen, &g, &st) != 0) return 0;
    tide_cons_vocab *v = vocab();
    tide_cons *c = NULL;
    if (tide_cons_new(g, v, &c, &st) != 0) abort();
    int32_t end = NV - 1;
    uint32_t allow[(NV + 31) / 32];
    for (size_t i = rlen + 1; i < size && c; i++) {
        if (data[i] >= 0xF0) {
            int64_t n = tide_cons_n_accepted(c);
            if (tide_cons_rollback(c, (int)(n ? (data[i] - 0xF0) % (n + 1) : 0), &st) != 0) abort();
            continue;
        }
        if (tide_cons_mask(c, allow, &end, 1, &st) != 0) break; /* nothing allowed: a dead end */
        if (tide_cons_done(c)) break;
        int32_t t = (int32_t)((data[i] * 7u + (unsigned)i) % NV);
        int allowed = (allow[t >> 5] >> (t & 31)) & 1;
        int rc = tide_cons_accept(c, t, &end, 1, &st);
        if ((rc == 0) != allowed) abort();
        if (rc == 0 && t == end) break;
    }
    tide_cons_free(c);
    tide_cons_vocab_free(v);
    tide_cons_grammar_unref(g);
    return 0;
}
