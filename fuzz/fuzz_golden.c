/* Fuzz target for the golden-file reader of tools/golden (tests/golden_file.h,
 * used by tests/test_golden_official.c): arbitrary bytes must never crash it
 * or leak; an accepted file has at least one case, a model line, and every
 * row of every case present with the counts its header gives. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "../tests/golden_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    FILE *f = fmemopen((void *)data, size, "r");
    if (!f) return 0;
    golden g;
    int rc = golden_read(f, "fuzz", NULL, &g);
    fclose(f);
    if (rc != 0) return 0;
    if (g.n < 1 || !g.model[0]) abort();
    for (int i = 0; i < g.n; i++) {
        const gcase *c = &g.c[i];
        if (c->n_prompt < 1 || c->n_greedy < 1 || c->n_cont < 0) abort();
        if (!c->prompt || !c->prefill || !c->prefill_m || !c->greedy || !c->greedy_m) abort();
        if (c->n_cont > 0 && (!c->cont || !c->cont_argmax || !c->cont_m)) abort();
        for (int k = 0; k < c->n_prompt; k++)
            if (c->prompt[k] < 0 || c->prefill[k] < 0) abort();
    }
    golden_free(&g);
    return 0;
}
