/* Fuzz target for the safetensors header parser and the index parser.
 * Each input is treated as a whole .safetensors file (and, when the parse
 * succeeds, every tensor's byte range is read, so an offset check that lets
 * a range escape the buffer shows up under ASan), then as the same file seen
 * through a buffer shorter than the file, and finally as the text of a
 * model.safetensors.index.json. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"
#include "io/st_index.h"

static void touch_tensors(const uint8_t *data, size_t size, const tide_st_header *h) {
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < h->ntensors; i++) {
        const tide_tensor *t = &h->tensors[i];
        if (t->offset > size || t->nbytes > size - t->offset) abort(); /* the parser promised */
        if (t->nbytes) sink ^= data[t->offset] ^ data[t->offset + t->nbytes - 1];
        if (i && strcmp(h->tensors[i - 1].name, t->name) >= 0) abort(); /* sorted, unique */
        char buf[256];
        tide_shape_str(t->ndim, t->shape, buf, sizeof buf);
    }
    (void)sink;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tide_status st = {0};
    tide_st_header *h = NULL;
    if (tide_st_parse_header(data, size, size, "fuzz.safetensors", &h, &st) == 0) {
        touch_tensors(data, size, h);
        tide_st_header_free(h);
    }
    /* The same bytes as the start of a file twice as long. */
    if (tide_st_parse_header(data, size, (uint64_t)size * 2, "fuzz.safetensors", &h, &st) == 0)
        tide_st_header_free(h);
    tide_st_index *ix = NULL;
    if (tide_st_parse_index((const char *)data, size, "fuzz.index.json", &ix, &st) == 0) {
        for (size_t i = 0; i < ix->n; i++) {
            if (ix->entries[i].shard >= ix->nfiles) abort();
            if (tide_st_index_find(ix, ix->entries[i].name) != &ix->entries[i]) abort();
        }
        tide_st_index_free(ix);
    }
    return 0;
}
