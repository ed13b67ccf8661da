/* Per-sequence decode state and its checkpoints: see seq_cache.h. */
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
    c->ring_bytes = tide_kv_entry_bytes(TIDE_KV_WINDOW, head_dim);
    c->n_src = n_src;
    c->max_ratio = max_ratio < 1 ? 1 : max_ratio;
    c->published = -1;
    size_t ring = (size_t)n_layers * (size_t)window * c->ring_bytes;
    size_t ns = (size_t)(n_src ? n_src : 1);
    size_t part = ns * (size_t)c->max_ratio * (size_t)head_dim;
    c->rings = calloc(ring ? ring : 1, 1);
    c->cmp_kv = calloc(part, sizeof(float));
    c->cmp_score = malloc(part * sizeof(float));
    c->tables = calloc(ns, sizeof *c->tables);
    c->n_comp = calloc(ns, sizeof *c->n_comp);
    c->src = calloc(ns, sizeof *c->src);
    if (!c->rings || !c->cmp_kv || !c->cmp_score || !c->tables || !c->n_comp || !c->src) {
        free(c->rings);
        free(c->cmp_kv);
        free(c->cmp_score);
        free(c->tables);
        free(c->n_comp);
        free(c->src);
        memset(c, 0, sizeof *c);
        return tide_fail(st, TIDE_ERR_NOMEM, "sequence cache: out of memory");
    }
    for (size_t k = 0; k < ns; k++) c->src[k] = (tide_seq_src){-1, 1, 0};
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
    free(c->src);
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

/* ---- checkpoints ---- */

int tide_seq_checkpoint(tide_seq_cache *c, tide_seq_ckpt *ck, int max_ahead, tide_status *st) {
    if (!c || !ck) return tide_fail(st, TIDE_ERR_INVALID, "checkpoint: NULL sequence or checkpoint");
    if (max_ahead < 1 || max_ahead > c->window)
        return tide_fail(st, TIDE_ERR_INVALID,
                         "checkpoint: max_ahead %d must be in 1..window (%d): a longer draft would "
                         "overwrite ring slots of accepted positions",
                         max_ahead, c->window);
    int64_t Dh = c->head_dim;
    size_t eb = c->ring_bytes; /* the ring's packed entries, in floats' room */
    size_t ring = ((size_t)c->n_layers * (size_t)max_ahead * eb + sizeof(float) - 1) / sizeof(float);
    size_t part = (size_t)c->n_src * (size_t)c->max_ratio * (size_t)Dh;
    size_t log = (size_t)c->n_src * (size_t)max_ahead * (size_t)Dh;
    size_t need = ring + 2 * part + 2 * log;
    if (need > ck->cap || !ck->buf) {
        float *b = malloc((need ? need : 1) * sizeof(float));
        if (!b) {
            if (c->ckpt == ck) c->ckpt = NULL;
            return tide_fail(st, TIDE_ERR_NOMEM, "checkpoint: out of memory");
        }
        free(ck->buf);
        ck->buf = b;
        ck->cap = need;
    }
    ck->ring = (uint8_t *)ck->buf;
    ck->part_kv = ck->buf + ring;
    ck->part_score = ck->part_kv + part;
    ck->log_kv = ck->part_score + part;
    ck->log_score = ck->log_kv + log;
    ck->pos = c->pos;
    ck->dspark_pos = c->dspark_pos;
    ck->tail_lo = c->tail_lo;
    ck->published = c->published;
    ck->max_ahead = max_ahead;
    ck->decode_rows = 0;
    for (int l = 0; l < c->n_layers; l++)
        for (int i = 0; i < max_ahead; i++)
            memcpy(ck->ring + ((size_t)l * max_ahead + i) * eb, tide_seq_ring(c, l, c->pos + i), eb);
    memcpy(ck->part_kv, c->cmp_kv, part * sizeof(float));
    memcpy(ck->part_score, c->cmp_score, part * sizeof(float));
    c->ckpt = ck;
    return 0;
}

float *tide_seq_ckpt_log(const tide_seq_cache *c, int slot, int64_t p, int score) {
    const tide_seq_ckpt *ck = c->ckpt;
    if (!ck || p < ck->pos || p >= ck->pos + ck->max_ahead) return NULL;
    float *base = score ? ck->log_score : ck->log_kv;
    return base + ((size_t)slot * ck->max_ahead + (size_t)(p - ck->pos)) * c->head_dim;
}

/* Partial group of a ratio-r source as a straight run to `end` leaves it:
 * slot sl holds the newest position p < end with p % r == sl, which is in
 * the log when the draft fed it and in the snapshot otherwise. */
static void restore_group(tide_seq_cache *c, const tide_seq_ckpt *ck, int k, int64_t end) {
    int64_t Dh = c->head_dim, r = c->src[k].ratio;
    size_t off = (size_t)k * c->max_ratio * Dh, n = (size_t)c->max_ratio * Dh;
    memcpy(c->cmp_kv + off, ck->part_kv + off, n * sizeof(float));
    memcpy(c->cmp_score + off, ck->part_score + off, n * sizeof(float));
    if (r <= 1) return;
    for (int64_t sl = 0; sl < r; sl++) {
        if (end - 1 < sl) continue;
        int64_t p = sl + (end - 1 - sl) / r * r;
        if (p < ck->pos) continue;
        memcpy(c->cmp_kv + off + sl * Dh, tide_seq_ckpt_log(c, k, p, 0), (size_t)Dh * sizeof(float));
        memcpy(c->cmp_score + off + sl * Dh, tide_seq_ckpt_log(c, k, p, 1), (size_t)Dh * sizeof(float));
    }
}

int tide_seq_rollback(tide_seq_cache *c, tide_seq_ckpt *ck, int64_t keep, tide_status *st) {
    if (!c || !ck) return tide_fail(st, TIDE_ERR_INVALID, "rollback: NULL sequence or checkpoint");
    if (c->ckpt != ck)
        return tide_fail(st, TIDE_ERR_INVALID, "rollback: the checkpoint is not active on this sequence");
    int64_t fed = c->pos - ck->pos;
    if (keep < 0 || keep > fed)
        return tide_fail(st, TIDE_ERR_INVALID, "rollback: keep %lld outside 0..%lld (tokens fed since the checkpoint)",
                         (long long)keep, (long long)fed);
    int64_t end = ck->pos + keep;
    /* ring slots of rejected positions (max_ahead <= window: no accepted
     * position's slot was overwritten) */
    for (int l = 0; l < c->n_layers; l++)
        for (int64_t i = keep; i < ck->max_ahead; i++)
            memcpy(tide_seq_ring(c, l, ck->pos + i), ck->ring + ((size_t)l * ck->max_ahead + (size_t)i) * c->ring_bytes,
                   c->ring_bytes);
    /* partial groups, compressed counts, published keys as one chunk of
     * `keep` tokens leaves them (sources in layer order publish in order),
     * or as one-token steps do (decode rows) */
    int published = ck->published;
    for (int k = 0; k < c->n_src; k++) {
        int64_t r = c->src[k].ratio;
        restore_group(c, ck, k, end);
        c->n_comp[k] = end / r;
        if (c->src[k].publishes && end / r > ck->pos / r) published = c->src[k].layer;
    }
    c->published = ck->decode_rows ? tide_seq_published_after(c, ck->published, ck->pos, end) : published;
    c->pos = end; /* the history's length is pos */
    c->dspark_pos = c->dspark_pos < end ? c->dspark_pos : end;
    c->tail_lo = ck->tail_lo;
    c->ckpt = NULL;
    return 0;
}

/* the highest publishing source at or below max_layer whose group completes
 * at position t, or -1 */
static int publisher_at(const tide_seq_cache *c, int64_t t, int max_layer) {
    for (int k = c->n_src - 1; k >= 0; k--)
        if (c->src[k].publishes && c->src[k].layer <= max_layer && (t + 1) % c->src[k].ratio == 0)
            return c->src[k].layer;
    return -1;
}

int tide_seq_published_after(const tide_seq_cache *c, int published, int64_t from, int64_t end) {
    for (int64_t t = end - 1; t >= from; t--) {
        int l = publisher_at(c, t, INT32_MAX);
        if (l >= 0) return l;
    }
    return published;
}

int tide_seq_published_at(const tide_seq_cache *c, int published, int64_t from, int64_t t, int layer) {
    int l = publisher_at(c, t, layer);
    return l >= 0 ? l : tide_seq_published_after(c, published, from, t);
}

void tide_seq_ckpt_free(tide_seq_ckpt *ck) {
    if (!ck) return;
    free(ck->buf);
    memset(ck, 0, sizeof *ck);
}
