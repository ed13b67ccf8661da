/* Per-sequence decode state: see seq_cache.h. */
#include "cache/seq_cache.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int tide_seq_cache_init(tide_seq_cache *c, int n_layers, int window, int64_t head_dim, int n_src,
                        int max_ratio, tide_status *st) {
    memset(c, 0, sizeof *c);
    c->n_layers = n_layers;
    c->window = window;
    c->head_dim = head_dim;
    c->n_src = n_src;
    c->max_ratio = max_ratio < 1 ? 1 : max_ratio;
    c->published = -1;
    size_t ring = (size_t)n_layers * (size_t)window * (size_t)head_dim;
    size_t part = (size_t)(n_src ? n_src : 1) * (size_t)c->max_ratio * (size_t)head_dim;
    c->rings = calloc(ring ? ring : 1, sizeof(float));
    c->cmp_kv = calloc(part, sizeof(float));
    c->cmp_score = malloc(part * sizeof(float));
    c->tables = calloc((size_t)(n_src ? n_src : 1), sizeof *c->tables);
    c->n_comp = calloc((size_t)(n_src ? n_src : 1), sizeof *c->n_comp);
    if (!c->rings || !c->cmp_kv || !c->cmp_score || !c->tables || !c->n_comp) {
        free(c->rings);
        free(c->cmp_kv);
        free(c->cmp_score);
        free(c->tables);
        free(c->n_comp);
        memset(c, 0, sizeof *c);
        return tide_fail(st, TIDE_ERR_NOMEM, "sequence cache: out of memory");
    }
    /* an empty partial-group slot scores -inf, as the reference initialises it */
    for (size_t i = 0; i < part; i++) c->cmp_score[i] = -INFINITY;
    return 0;
}

void tide_seq_cache_free(tide_seq_cache *c, tide_kv_pool *pool) {
    if (!c) return;
    if (c->tables)
        for (int s = 0; s < c->n_src; s++) {
            if (pool) tide_kv_release(pool, &c->tables[s]);
            else free(c->tables[s].blocks);
        }
    free(c->tokens);
    free(c->rings);
    free(c->cmp_kv);
    free(c->cmp_score);
    free(c->tables);
    free(c->n_comp);
    memset(c, 0, sizeof *c);
}

int tide_seq_cache_push_tokens(tide_seq_cache *c, const int32_t *tokens, int64_t n, tide_status *st) {
    int64_t have = c->pos; /* history length == committed positions before this step */
    if (have + n > c->cap_tokens) {
        int64_t cap = c->cap_tokens ? c->cap_tokens : 64;
        while (cap < have + n) cap *= 2;
        int32_t *t = realloc(c->tokens, (size_t)cap * sizeof *t);
        if (!t) return tide_fail(st, TIDE_ERR_NOMEM, "token history: out of memory");
        c->tokens = t;
        c->cap_tokens = cap;
    }
    memcpy(c->tokens + have, tokens, (size_t)n * sizeof *tokens);
    return 0;
}
