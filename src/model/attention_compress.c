/* The compressor of a KV source layer (the reference's Compressor):
 *   ratio 1: latent = norm(bf16 wkv(x)), one per token;
 *   ratio r > 1: kv = wkv(x), score = wgate(x) in f32; each group of r
 *   consecutive tokens pools to sum_i kv_i * softmax_i(score) (per feature),
 *   rounded to BF16, then norm. A group that is not complete at the end of a
 *   step waits in the sequence's partial-group state (slot = pos % r). */
#include <stdlib.h>
#include <string.h>

#include "model/forward_internal.h"
#include "num/num.h"

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
        s->ops->linear(s->pool, &a->cmp_wkv, x, rows, lat, TIDE_LIN_BF16_OUT);
        s->ops->rmsnorm(s->pool, lat, rows, Dh, a->cmp_norm, c->rms_norm_eps, lat);
        for (int q = 0; q < s->n_seqs; q++) {
            first[q] = s->seqs[q].cache->pos;
            count[q] = s->seqs[q].n_tokens;
        }
        return;
    }
    float *kv = tide_xmalloc((size_t)(rows * Dh) * sizeof(float));
    float *sc = tide_xmalloc((size_t)(rows * Dh) * sizeof(float));
    s->ops->linear(s->pool, &a->cmp_wkv, x, rows, kv, 0);
    s->ops->linear(s->pool, &a->cmp_wgate, x, rows, sc, 0);
    for (int q = 0; q < s->n_seqs; q++) {
        tide_seq_cache *cache = s->seqs[q].cache;
        float *skv = cache->cmp_kv + (int64_t)slot * cache->max_ratio * Dh;
        float *ssc = cache->cmp_score + (int64_t)slot * cache->max_ratio * Dh;
        int64_t start = cache->pos, n = s->seqs[q].n_tokens, row0 = s->seq_row0[q];
        first[q] = start / r;
        count[q] = 0;
        for (int64_t i = 0; i < n; i++) {
            int64_t p = start + i, sl = p % r;
            memcpy(skv + sl * Dh, kv + (row0 + i) * Dh, (size_t)Dh * sizeof(float));
            memcpy(ssc + sl * Dh, sc + (row0 + i) * Dh, (size_t)Dh * sizeof(float));
            if ((p + 1) % r == 0) {
                s->ops->compress_pool(skv, ssc, r, Dh, lat + k * Dh);
                k++;
                count[q]++;
            }
        }
    }
    if (k > 0) s->ops->rmsnorm(s->pool, lat, k, Dh, a->cmp_norm, c->rms_norm_eps, lat);
    free(kv);
    free(sc);
}
