/* Fuzz target for the Lark-style EBNF front end (src/constrain/lark.c):
 * the input is a grammar. Never a crash or a leak; a refusal says why; a
 * compiled grammar matches its own text and a few fixed strings without
 * crashing, and a cursor over a small vocabulary masks and accepts a few
 * tokens. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "constrain/constrain.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 1 << 14) return 0;
    const char *text = (const char *)data;
    tide_cons_grammar *g = NULL;
    tide_status st = {0};
    if (tide_cons_compile(TIDE_CONS_LARK, text, size, &g, &st) != 0) {
        if (!st.msg[0]) abort();
        return 0;
    }
    static const char *const probes[] = {"", "a", "abc", "0123", " 1 + 2", "\"x\"", "\xc3\xa9\xf0\x9f\x98\x80"};
    tide_cons_grammar_matches(g, text, size, &st);
    for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) tide_cons_grammar_matches(g, probes[i], strlen(probes[i]), &st);
    /* a few masks over the probes as a vocabulary (the last one: the end) */
    enum { NV = sizeof probes / sizeof probes[0] };
    const uint8_t *vb[NV];
    uint32_t lens[NV];
    for (int i = 0; i < NV; i++) vb[i] = (const uint8_t *)probes[i], lens[i] = (uint32_t)strlen(probes[i]);
    tide_cons_vocab *v = NULL;
    tide_cons *c = NULL;
    if (tide_cons_vocab_new(vb, lens, NULL, NV, &v, &st) == 0 && tide_cons_new(g, v, &c, &st) == 0) {
        int32_t end = 0; /* "" is never text: the end token */
        uint32_t allow[1];
        for (int step = 0; step < 8 && tide_cons_mask(c, allow, &end, 1, &st) == 0; step++) {
            int32_t t = -1;
            for (int i = NV - 1; i >= 0 && t < 0; i--)
                if (allow[0] >> i & 1) t = i;
            if (t < 0 || tide_cons_accept(c, t, &end, 1, &st) != 0 || t == end) break;
        }
    }
    tide_cons_free(c);
    tide_cons_vocab_free(v);
    tide_cons_grammar_unref(g);
    return 0;
}
