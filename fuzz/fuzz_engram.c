/* Fuzz target for the engram text paths: the key normalisation of arbitrary
 * bytes, the token map of a vocabulary made of the input's lines, the same
 * input read as a tokenizer.json, and the hashing of the input bytes as
 * token ids (out-of-range ids must be refused, never read). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/engram.h"
#include "text/normalize.h"

static void vocab_of_lines(const uint8_t *data, size_t size) {
    const char *toks[256];
    size_t lens[256];
    int64_t n = 0;
    size_t start = 0;
    for (size_t i = 0; i <= size && n < 256; i++) {
        if (i == size || data[i] == '\n') {
            toks[n] = (i - start == 1 && data[start] == '-') ? NULL : (const char *)data + start;
            lens[n++] = i - start;
            start = i + 1;
        }
    }
    tide_status st = {0};
    tide_engram_token_map m;
    if (tide_engram_token_map_build(toks, lens, n, &m, &st) != 0) return;
    if (m.n_compressed < 1 || m.n_compressed > n) abort();
    for (int64_t i = 0; i < n; i++)
        if (m.map[i] < 0 || m.map[i] >= m.n_compressed) abort();

    /* hash the input bytes as token ids over a small layout */
    tide_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.text.n_engram_layer_ids = cfg.text.n_engram_num_embeddings = 1;
    cfg.text.engram_layer_ids[0] = 5;
    cfg.text.engram_num_embeddings[0] = 1000;
    cfg.text.engram_max_ngram_size = 3;
    cfg.text.engram_n_heads = 2;
    cfg.text.engram_head_dim = 32;
    cfg.text.engram_vocab_size = 100;
    cfg.text.engram_compressed_vocab_size = m.n_compressed;
    cfg.text.engram_pad_token_id = 0;
    tide_engram_tables t;
    if (tide_engram_tables_build(&cfg, &m, &t, &st) == 0) {
        size_t k = size < 64 ? size : 64;
        int32_t ids[64];
        uint8_t dead[64];
        int64_t rows[64 * 4];
        for (size_t i = 0; i < k; i++) {
            ids[i] = (int32_t)(int8_t)data[i];
            dead[i] = (data[i] & 0x30) == 0x30;
        }
        int64_t hist = k ? data[0] % 3 : 0;
        if ((size_t)hist > k) hist = (int64_t)k;
        if (tide_engram_hash(&t, ids, dead, hist, (int64_t)k - hist, rows, &st) == 0)
            for (int64_t i = 0; i < ((int64_t)k - hist) * 4; i++)
                if (rows[i] < 0 || rows[i] >= 1000) abort();
        tide_engram_tables_free(&t);
    }
    tide_engram_token_map_free(&m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tide_status st = {0};
    char *out;
    size_t n;
    if (tide_engram_normalize((const char *)data, size, &out, &n, &st) == 0) {
        if (strlen(out) > n) abort(); /* NUL-terminated, length honest */
        free(out);
    }
    vocab_of_lines(data, size);
    tide_engram_token_map m;
    if (tide_engram_token_map_from_tokenizer_text((const char *)data, size, "fuzz", &m, &st) == 0)
        tide_engram_token_map_free(&m);
    return 0;
}
