/* Fuzz target for tide_pyjson_load (text/pyjson.h), the reader that takes
 * JSON as Python's json.loads does (tool-call arguments). Beyond running
 * without a fault or a leak:
 *   - what it reads, written back (tide_pyjson_doc_dump), reads again and
 *     writes back the same (the Python form is a fixed point);
 *   - whatever jansson also reads, it reads to the same value: both dumps
 *     agree (jansson being stricter: no NaN, no big numbers).
 * A violation aborts. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/pyjson.h"

#define CHECK(c)                                                                  \
    do {                                                                          \
        if (!(c)) {                                                               \
            fprintf(stderr, "fuzz_pyjson: %s:%d: %s\n", __FILE__, __LINE__, #c); \
            abort();                                                              \
        }                                                                         \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *s = (const char *)data;
    tide_pyjson_doc doc;
    tide_status st = {0};
    if (tide_pyjson_load(s, size, &doc, &st) != 0) {
        CHECK(st.msg[0] != 0);
        return 0;
    }
    tide_sb once, twice;
    tide_sb_init(&once);
    tide_sb_init(&twice);
    CHECK(tide_pyjson_doc_dump(&once, &doc, doc.root, &st) == 0);
    tide_pyjson_doc again;
    CHECK(tide_pyjson_load(once.s, once.len, &again, &st) == 0);
    CHECK(tide_pyjson_doc_dump(&twice, &again, again.root, &st) == 0);
    CHECK(once.len == twice.len && memcmp(once.s, twice.s, once.len) == 0);
    tide_pyjson_doc_free(&again);
    json_t *j = json_loadb(s, size, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    if (j) {
        tide_sb theirs;
        tide_sb_init(&theirs);
        if (tide_pyjson_dump(&theirs, j, &st) == 0)
            CHECK(theirs.len == once.len && memcmp(theirs.s, once.s, once.len) == 0);
        tide_sb_free(&theirs);
        json_decref(j);
    }
    tide_sb_free(&once);
    tide_sb_free(&twice);
    tide_pyjson_doc_free(&doc);
    return 0;
}
