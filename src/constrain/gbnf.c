#include "constrain/gbnf.h"

int tide_gbnf_parse(cg *g, const char *text, size_t len, tide_status *st) {
    (void)g, (void)text, (void)len;
    return tide_fail(st, TIDE_ERR_UNSUPPORTED, "grammar: GBNF is not supported yet");
}
