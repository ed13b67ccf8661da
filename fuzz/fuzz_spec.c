/* Fuzz target for the --spec value (engine/spec.h): arbitrary bytes never
 * crash the parser; an accepted value is a valid mode whose name parses
 * back to the same mode and K; a refused one says so with a message. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/spec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    int mode = -1, k = -1;
    tide_status st = {0};
    if (tide_spec_parse(text, &mode, &k, &st) == 0) {
        if (mode != TIDE_SPEC_OFF && mode != TIDE_SPEC_FIXED && mode != TIDE_SPEC_DSPARK) abort();
        if (mode == TIDE_SPEC_FIXED ? k < 1 || k > TIDE_SPEC_MAX_BLOCK : k != 0) abort();
        char name[24];
        int m2 = -1, k2 = -1;
        if (tide_spec_parse(tide_spec_name(mode, k, name, sizeof name), &m2, &k2, &st) != 0 || m2 != mode || k2 != k)
            abort();
    } else if (!st.msg[0]) {
        abort();
    }
    free(text);
    return 0;
}
