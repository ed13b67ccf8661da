/* Random vocabularies for the constraint tests (test_constrain.c,
 * test_engine_constrain.c): every single byte is a token (as in byte-level
 * BPE), the rest are 1 to 4 pieces of JSON punctuation, words, numbers and
 * pieces of UTF-8 characters (tokens that split a character included). */
#ifndef TIDE_TESTS_CONS_TESTUTIL_H
#define TIDE_TESTS_CONS_TESTUTIL_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

typedef struct vocab { int n; uint8_t **b; uint32_t *len; uint8_t *skip; } vocab;

/* n tokens; the ids in skip_ids[0..n_skip) are marked special (not text). */
static inline vocab make_vocab(tu_rng *r, int n, const int32_t *skip_ids, int n_skip) {
    static const char *const atoms[] = {"{", "}", "[", "]", "\"", ":", ",", "a", "b", "x", "-", "0", "1", "9", ".",
                                        "e", "true", "null", "false", "\\", "n", " ", "\xc3\xa9", "\xc3", "\xa9",
                                        "\xe2\x82", "\xac", "\xf0\x9f\x98\x80", "\"a\"", "\":", "\"b\":", "\"name\":",
                                        "\"age\":", "12", "x-", "ab", "cd"};
    vocab v = {n, calloc((size_t)n, sizeof(uint8_t *)), calloc((size_t)n, sizeof(uint32_t)), calloc((size_t)n, 1)};
    for (int i = 0; i < n; i++) {
        char buf[64] = {0};
        size_t len = 0;
        if (i < 256) {
            buf[0] = (char)i;
            len = 1;
        } else {
            int parts = 1 + (int)(tu_next(r) % 4);
            for (int k = 0; k < parts; k++) {
                const char *a = atoms[tu_next(r) % (sizeof atoms / sizeof atoms[0])];
                if (len + strlen(a) < sizeof buf) {
                    memcpy(buf + len, a, strlen(a));
                    len += strlen(a);
                }
            }
        }
        v.b[i] = malloc(len ? len : 1);
        memcpy(v.b[i], buf, len);
        v.len[i] = (uint32_t)len;
    }
    for (int k = 0; k < n_skip; k++)
        if (skip_ids[k] >= 0 && skip_ids[k] < n) v.skip[skip_ids[k]] = 1;
    return v;
}

static inline void free_vocab(vocab *v) {
    for (int i = 0; i < v->n; i++) free(v->b[i]);
    free(v->b), free(v->len), free(v->skip);
}

#endif
