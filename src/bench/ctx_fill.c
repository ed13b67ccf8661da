/* Synthetic decode context (ctx_fill.h). Random numbers come from the
 * engine's counter-based Philox (engine/rng.h) on a stream of its own, so
 * the contents are a pure function of (seed, what is filled). */
#include "bench/ctx_fill.h"

#include <math.h>
#include <stdlib.h>

#include "bench/workload.h"
#include "engine/rng.h"
#include "num/num.h"

#define FILL_STREAM 0x66696c6cu /* "fill": apart from the sampler's streams */

typedef struct fill_rng {
    uint64_t seed, ctr;
} fill_rng;

static double normal(fill_rng *r) {
    uint64_t w[2];
    tide_rng_words(r->seed, r->ctr++, FILL_STREAM, 0, w);
    double u1 = tide_rng_u01(w[0]), u2 = tide_rng_u01(w[1]);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* BF16-exact normal values (what the projections and norms produce). */
static void normal_row(fill_rng *r, float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = tide_round_bf16((float)normal(r));
}

static int fill_tokens(const tide_model *m, tide_seq_cache *c, int64_t n, fill_rng *r, tide_status *st) {
    if (n == 0) return 0;
    int64_t V = m->cfg.text.vocab_size, img = m->cfg.image_token_id;
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    if (!ids) return tide_fail(st, TIDE_ERR_NOMEM, "context fill: out of memory for %lld tokens", (long long)n);
    for (int64_t i = 0; i < n; i++) ids[i] = tide_bench_token(r->seed, (uint64_t)i, V, img);
    int rc = tide_seq_cache_push_tokens(c, ids, n, st);
    free(ids);
    return rc;
}

/* The last min(n, window) ring entries of every layer, DSpark stages included. */
static void fill_rings(tide_seq_cache *c, int64_t n, fill_rng *r) {
    int64_t lo = n > c->window ? n - c->window : 0;
    float *v = malloc((size_t)c->head_dim * sizeof *v);
    if (!v) abort();
    for (int l = 0; l < c->n_layers; l++)
        for (int64_t p = lo; p < n; p++) {
            normal_row(r, v, c->head_dim);
            tide_seq_ring_put(c, l, p, v); /* FP8, packed */
        }
    free(v);
}

/* One KV source: its partial group, its latents and index keys. */
static int fill_source(tide_fwd_ctx *fx, tide_seq_cache *c, int k, int ratio, int64_t n, fill_rng *r,
                       tide_status *st) {
    tide_kv_pool *kv = tide_fwd_kv(fx);
    int64_t hd = c->head_dim;
    for (int64_t p = n - n % ratio; ratio > 1 && p < n; p++) {
        int64_t slot = (int64_t)k * c->max_ratio + p % ratio;
        for (int64_t i = 0; i < hd; i++) c->cmp_kv[slot * hd + i] = (float)normal(r);
        for (int64_t i = 0; i < hd; i++) c->cmp_score[slot * hd + i] = (float)normal(r);
    }
    int64_t nc = n / ratio;
    if (tide_kv_reserve(kv, &c->tables[k], nc, st) != 0) return tide_fail_ctx(st, "context fill of %lld tokens", (long long)n);
    float *v = malloc((size_t)(kv->latent_dim > kv->key_dim ? kv->latent_dim : kv->key_dim) * sizeof *v);
    if (!v) return tide_fail(st, TIDE_ERR_NOMEM, "context fill: out of memory");
    for (int64_t j = 0; j < nc; j++) { /* packed FP4 */
        normal_row(r, v, kv->latent_dim);
        tide_kv_put_latent(kv, &c->tables[k], j, v);
        normal_row(r, v, kv->key_dim);
        tide_kv_put_key(kv, &c->tables[k], j, v);
    }
    free(v);
    c->n_comp[k] = nc;
    return 0;
}

int tide_bench_fill_context(tide_fwd_ctx *fx, tide_seq_cache *c, int64_t n, uint64_t seed, tide_status *st) {
    const tide_model *m = tide_fwd_model(fx);
    if (c->pos != 0 || c->n_layers != m->n_layers || c->n_src != m->n_kv_src)
        return tide_fail(st, TIDE_ERR_INVALID, "context fill: the cache is not a fresh one of this model");
    if (n < 0 || n > (int64_t)INT32_MAX / 2)
        return tide_fail(st, TIDE_ERR_INVALID, "context fill: %lld tokens is out of range", (long long)n);
    fill_rng r = {seed, 0};
    if (fill_tokens(m, c, n, &r, st) != 0) return -1;
    fill_rings(c, n, &r);
    c->published = -1;
    for (int k = 0; k < m->n_kv_src; k++) {
        const tide_layer_role *role = &m->cfg.roles[m->kv_src_layer[k]];
        if (fill_source(fx, c, k, role->compress_ratio, n, &r, st) != 0) return -1;
        /* the last key-owning indexer to complete a group publishes its keys */
        if (role->is_index_source && role->indexer_owns_keys && n / role->compress_ratio > 0)
            c->published = role->layer;
    }
    c->pos = n;
    c->dspark_pos = n;
    return 0;
}
