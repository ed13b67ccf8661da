/* The compressor of a KV source layer (the reference's Compressor):
 *   ratio 1: latent = norm(bf16 wkv(x)), one per token;
 *   ratio r > 1: kv = wkv(x), score = wgate(x) in f32; each group of r
 *   consecutive tokens pools to sum_i kv_i * softmax_i(score) (per feature),
 *   rounded to BF16, then norm. A group that is not complete at the end of a
 *   step waits in the sequence's partial-group state (slot = pos % r).
 * Groups ending at or below the sequence's frozen_tokens are already in
 * shared pool blocks (a prefix-cache restore): they are not produced. */
#include <stdlib.h>
#include <string.h>

#include "model/forward_internal.h"
#include "num/num.h"

/* Ratio 1: one latent per row, except the frozen rows, which are dropped
 * (they are a prefix of each sequence's rows, so the rest is moved down). */
static void compress_ratio1(tide_step *s, const tide_attn_weights *a, const float *x, float *lat,
                            int64_t *first, int64_t *count) {
    const tide_text_config *c = &s->m->cfg.text;
    int64_t Dh = c->head_dim, k = 0;
    s->ops->linear(s->ops, s->pool, &a->cmp_wkv, x, s->rows, lat, TIDE_LIN_BF16_OUT);
    s->ops->rmsnorm(s->ops, s->pool, lat, s->rows, Dh, a->cmp_norm, c->rms_norm_eps, lat);
    for (int q = 0; q < s->n_seqs; q++) {
        const tide_seq_cache *cache = s->seqs[q].cache;
        int64_t start = cache->pos, end = start + s->seqs[q].n_tokens;
        first[q] = start > cache->frozen_tokens ? start : cache->frozen_tokens;
        count[q] = end > first[q] ? end - first[q] : 0;
        if (count[q] > 0)
            memmove(lat + k * Dh, lat + (s->seq_row0[q] + first[q] - start) * Dh,
                    (size_t)(count[q] * Dh) * sizeof(float));
        k += count[q];
    }
}

/* Keeps what a checkpoint needs to undo this row's partial-group write. */
static void log_row(tide_seq_cache *cache, int slot, int64_t p, const float *kv, const float *sc, int64_t Dh) {
    float *lk = tide_seq_ckpt_log(cache, slot, p, 0);
    if (!lk) return;
    memcpy(lk, kv, (size_t)Dh * sizeof(float));
    memcpy(tide_seq_ckpt_log(cache, slot, p, 1), sc, (size_t)Dh * sizeof(float));
}

void tide_compress(tide_step *s, int layer, const float *x, float *lat, int64_t *first,
                   int64_t *count) {
    const tide_model *m = s->m;
    const tide_text_config *c = &m->cfg.text;
    const tide_attn_weights *a = &m->layers[layer].attn;
    int r = m->layers[layer].role->compress_ratio;
    int slot = m->kv_src_slot[layer];
    int64_t rows = s->rows, Dh = c->head_dim;
    int64_t k = 0;
    if (r == 1) {
        compress_ratio1(s, a, x, lat, first, count);
        return;
    }
    float *kv = tide_xmalloc((size_t)(rows * Dh) * sizeof(float));
    float *sc = tide_xmalloc((size_t)(rows * Dh) * sizeof(float));
    s->ops->linear(s->ops, s->pool, &a->cmp_wkv, x, rows, kv, 0);
    s->ops->linear(s->ops, s->pool, &a->cmp_wgate, x, rows, sc, 0);
    for (int q = 0; q < s->n_seqs; q++) {
        tide_seq_cache *cache = s->seqs[q].cache;
        float *skv = cache->cmp_kv + (int64_t)slot * cache->max_ratio * Dh;
        float *ssc = cache->cmp_score + (int64_t)slot * cache->max_ratio * Dh;
        int64_t start = cache->pos, n = s->seqs[q].n_tokens, row0 = s->seq_row0[q];
        int64_t frozen_groups = cache->frozen_tokens / r;
        first[q] = start / r > frozen_groups ? start / r : frozen_groups;
        count[q] = 0;
        for (int64_t i = 0; i < n; i++) {
            int64_t p = start + i, sl = p % r;
            const float *rk = kv + (row0 + i) * Dh, *rs = sc + (row0 + i) * Dh;
            memcpy(skv + sl * Dh, rk, (size_t)Dh * sizeof(float));
            memcpy(ssc + sl * Dh, rs, (size_t)Dh * sizeof(float));
            log_row(cache, slot, p, rk, rs, Dh);
            if ((p + 1) % r == 0 && p + 1 > cache->frozen_tokens) {
                s->ops->compress_pool(s->ops, skv, ssc, r, Dh, lat + k * Dh);
                k++;
                count[q]++;
            }
        }
    }
    if (k > 0) s->ops->rmsnorm(s->ops, s->pool, lat, k, Dh, a->cmp_norm, c->rms_norm_eps, lat);
    free(kv);
    free(sc);
}
