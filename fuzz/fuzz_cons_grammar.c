/* Fuzz target for the constraint parsers (src/constrain/regex.c, gbnf.c):
 * the first byte picks the syntax (even: an ECMAScript regex, odd: a GBNF
 * grammar), the rest is its text. Never a crash or a leak; a refusal says
 * why; a compiled constraint matches the text itself and a few fixed
 * strings without crashing. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "constrain/constrain.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 1 << 14) return 0;
    tide_cons_kind kind = data[0] & 1 ? TIDE_CONS_GBNF : TIDE_CONS_REGEX;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    tide_cons_grammar *g = NULL;
    tide_status st = {0};
    if (tide_cons_compile(kind, text, len, &g, &st) != 0) {
        if (!st.msg[0]) abort();
        return 0;
    }
    static const char *const probes[] = {"", "a", "abc", "0123", "{\"a\":1}", "\xc3\xa9\xf0\x9f\x98\x80"};
    tide_cons_grammar_matches(g, text, len, &st);
    for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) tide_cons_grammar_matches(g, probes[i], strlen(probes[i]), &st);
    tide_cons_grammar_unref(g);
    return 0;
}
