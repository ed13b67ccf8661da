/* Fuzz target for the generation defaults (src/model/gen_config.h): the
 * EOS ids a checkpoint names in generation_config.json / config.json. The
 * input is the two files' texts separated by the first NUL byte (no NUL:
 * only generation_config.json; an empty part: that file is absent). Every
 * input either yields 0..TIDE_GEN_MAX_EOS ids inside the vocabulary with
 * their source named, or fails with a message naming the file; nothing may
 * crash or leak. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/gen_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *text = (const char *)data;
    const char *nul = memchr(text, 0, size);
    size_t gen_len = nul ? (size_t)(nul - text) : size;
    const char *cfg = nul ? nul + 1 : NULL;
    size_t cfg_len = nul ? size - gen_len - 1 : 0;
    const int64_t vocab = 1000;
    tide_gen_config g;
    tide_status st = {0};
    int rc = tide_gen_config_parse(gen_len ? text : NULL, gen_len, cfg_len ? cfg : NULL, cfg_len, vocab, &g, &st);
    if (rc == 0) {
        if (g.n_eos < 0 || g.n_eos > TIDE_GEN_MAX_EOS || (g.n_eos > 0) != (g.source != NULL)) abort();
        for (int i = 0; i < g.n_eos; i++)
            if (g.eos[i] < 0 || g.eos[i] >= vocab) abort();
    } else if (!strstr(st.msg, "config.json")) {
        abort();
    }
    return 0;
}
