/* The indexer of an index source layer (the reference's Indexer and
 * select_candidate_blocks), per step:
 *   - if it owns its keys: each new latent (before RoPE) becomes an index key
 *     k = k_norm(wk latent), RoPE at the group's first token, FP4 (e8m0, 32),
 *     stored packed beside the latent in the KV pool (decoded per step to
 *     score); the layer then "publishes"
 *     its keys for the sequence;
 *   - q = wq_b(qr) per head, RoPE, FP4; w = bf16(weights_proj(x) * scale);
 *   - per query row: BF16 scores against the keys of the published (quirk)
 *     or own (intended) KV source for positions [0, end//ratio), -inf where
 *     j >= (pos+1)//ratio; the candidate source picks blocks, later index
 *     sources mask to them; top-k with ties toward the lower position,
 *     sorted by position, invisible picks dropped. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/forward_internal.h"
#include "num/num.h"

typedef struct {
    tide_step *s;
    int layer;
    const float *q; /* [rows][IH*ID] */
    const float *w; /* [rows][IH] */
    const float *const *keys; /* per row: [n_keys of its sequence][ID] */
    const int64_t *have;      /* per row: keys past this read as zeros (decode rows), or NULL */
    const float *zero;        /* [ID] zeros */
    float *scratch;  /* per thread: score + block scores */
    int64_t scratch_per;
    int32_t *iscratch;
    int64_t iscratch_per;
} idx_job;

void tide_candidate_mask(const tide_ops *ops, const float *score, int64_t n, int64_t cl, int64_t topk_blocks,
                         int64_t bs, uint8_t *mask, float *bscore, int32_t *bidx) {
    int64_t nb = (n + bs - 1) / bs;
    for (int64_t b = 0; b < nb; b++) {
        float mx = -INFINITY;
        for (int64_t j = b * bs; j < (b + 1) * bs && j < n; j++) mx = score[j] > mx ? score[j] : mx;
        bscore[b] = mx;
    }
    /* the block holding the newest visible position is pinned in */
    if (cl > 0) bscore[(cl - 1) / bs] = INFINITY;
    int64_t kb = topk_blocks < nb ? topk_blocks : nb;
    int got = ops->topk_sorted(ops, bscore, nb, (int)kb, bidx, NULL);
    memset(mask, 0, (size_t)n);
    for (int i = 0; i < got; i++) {
        int64_t b = bidx[i];
        if (!(bscore[b] > -INFINITY)) continue;
        for (int64_t j = b * bs; j < (b + 1) * bs && j < n; j++) mask[j] = 1;
    }
}

static void idx_task(void *arg, int64_t r, int thread) {
    idx_job *jb = arg;
    tide_step *s = jb->s;
    const tide_text_config *c = &s->m->cfg.text;
    const tide_layer_role *role = s->m->layers[jb->layer].role;
    int ratio = role->compress_ratio;
    int q = s->row_seq[r];
    int64_t IH = c->index_n_heads, ID = c->index_head_dim, itk = c->index_topk;
    int64_t end = s->seqs[q].cache->pos + s->seqs[q].n_tokens;
    int64_t n = end / ratio, cl = (s->row_pos[r] + 1) / ratio;
    s->topk_n[r] = 0;
    s->topk_valid[r] = 0;
    if (n == 0) return;
    float *score = jb->scratch + (int64_t)thread * jb->scratch_per;
    float *bscore = score + n;
    int32_t *iscr = jb->iscratch + (int64_t)thread * jb->iscratch_per;
    s->ops->index_scores(s->ops, jb->q + r * IH * ID, (int)IH, ID, jb->w + r * IH, jb->keys[r], n, score);
    if (jb->have && jb->have[r] < cl) { /* a one-token step's zero keys */
        float z;
        s->ops->index_scores(s->ops, jb->q + r * IH * ID, (int)IH, ID, jb->w + r * IH, jb->zero, 1, &z);
        for (int64_t j = jb->have[r]; j < cl; j++) score[j] = z;
    }
    for (int64_t j = cl; j < n; j++) score[j] = -INFINITY;
    if (role->is_candidate_source) {
        tide_candidate_mask(s->ops, score, n, cl, c->candidate_topk_blocks, c->candidate_block_size,
                            s->cand + r * s->cand_w, bscore, iscr);
    } else if (role->uses_candidates && s->has_cand && n <= s->cand_w) {
        const uint8_t *mask = s->cand + r * s->cand_w;
        for (int64_t j = 0; j < n; j++)
            if (!mask[j]) score[j] = -INFINITY;
    }
    int k = s->ops->topk_sorted(s->ops, score, n, (int)(itk < n ? itk : n), s->topk + r * itk, iscr);
    int valid = k;
    while (valid > 0 && s->topk[r * itk + valid - 1] >= cl) s->topk[r * itk + --valid] = -1;
    s->topk_n[r] = k;
    s->topk_valid[r] = valid;
}

/* k = k_norm(wk latent), RoPE at the group's first token, FP4; into the
 * pool beside the latents of the layer's KV source. */
static void publish_keys(tide_step *s, int layer, const float *lat, const int64_t *first, const int64_t *count) {
    const tide_model *m = s->m;
    const tide_text_config *c = &m->cfg.text;
    const tide_attn_weights *a = &m->layers[layer].attn;
    int ratio = m->layers[layer].role->compress_ratio, slot = m->kv_src_slot[layer];
    int64_t ID = c->index_head_dim, total = 0;
    for (int q = 0; q < s->n_seqs; q++) total += count[q];
    if (total == 0) return;
    float *k = tide_xmalloc((size_t)(total * ID) * sizeof(float));
    s->ops->linear(s->ops, s->pool, &a->idx_wk, lat, total, k, TIDE_LIN_BF16_OUT);
    s->ops->rmsnorm(s->ops, s->pool, k, total, ID, a->idx_k_norm, c->rms_norm_eps, k);
    int64_t kk = 0;
    for (int q = 0; q < s->n_seqs; q++) {
        tide_seq_cache *sc = s->seqs[q].cache;
        for (int64_t j = first[q]; j < first[q] + count[q]; j++, kk++) {
            float *v = k + kk * ID;
            tide_rope_tail(s, layer, v, 1, ID, j * ratio, 0);
            tide_kv_put_key(&s->fx->kv, &sc->tables[slot], j, v); /* FP4 */
        }
    }
    free(k);
}

/* The KV source whose index keys row position t of sequence q scores
 * against at `layer`: its own key source, or with the quirk the published
 * one (as the step has left it so far; decode rows: as the one-token step
 * at t would find it). */
static int key_source(const tide_step *s, int layer, int q, int64_t t) {
    const tide_seq_cache *sc = s->seqs[q].cache;
    int src = s->m->layers[layer].role->index_key_source;
    if (!s->fx->opt.index_key_quirk) return src;
    int pub = s->dec[q] ? tide_seq_published_at(sc, s->pub0[q], sc->pos, t, layer) : sc->published;
    return pub >= 0 ? pub : src;
}

int64_t tide_fwd_decode_rows_max(const tide_fwd_ctx *fx, const tide_seq_cache *c, int64_t n) {
    const tide_model *m = fx->m;
    if (!fx->opt.index_key_quirk) return n;
    int64_t start = c->pos;
    for (int64_t i = 1; i < n; i++) {
        int64_t t = start + i;
        for (int l = 0; l < m->n_backbone; l++) {
            const tide_layer_role *role = m->layers[l].role;
            if (!role->is_index_source) continue;
            int src = tide_seq_published_at(c, c->published, start, t, l);
            if (src <= l) continue; /* made in this step before layer l, or before it */
            /* keys the one-token step at t reads (< its groups, < visible)
             * beyond those made before this step */
            int64_t sr = m->layers[src].role->compress_ratio, need = (t + 1) / role->compress_ratio;
            if (t / sr < need) need = t / sr;
            if (need > start / sr) return i;
        }
    }
    return n;
}

void tide_indexer(tide_step *s, int layer, const float *x, const float *qr, const float *lat,
                  const int64_t *first, const int64_t *count) {
    const tide_model *m = s->m;
    const tide_text_config *c = &m->cfg.text;
    const tide_layer *L = &m->layers[layer];
    const tide_attn_weights *a = &L->attn;
    const tide_layer_role *role = L->role;
    const tide_ops *ops = s->ops;
    int ratio = role->compress_ratio;
    int64_t rows = s->rows, IH = c->index_n_heads, ID = c->index_head_dim;

    /* 1. keys for the new latents; the layer publishes for every sequence
     * in which one of its groups completed, frozen groups included (their
     * keys are already in shared blocks), as a full prefill would */
    if (role->indexer_owns_keys && lat) {
        publish_keys(s, layer, lat, first, count);
        for (int q = 0; q < s->n_seqs; q++) {
            tide_seq_cache *sc = s->seqs[q].cache;
            int64_t end = sc->pos + s->seqs[q].n_tokens;
            if (s->dec[q]) sc->published = tide_seq_published_after(sc, s->pub0[q], sc->pos, end); /* rows read pub0 */
            else if (end / ratio > sc->pos / ratio) sc->published = layer;
        }
    }

    /* 2. queries and head weights */
    float *q = tide_xmalloc((size_t)(rows * IH * ID) * sizeof(float));
    float *w = tide_xmalloc((size_t)(rows * IH) * sizeof(float));
    ops->linear(ops, s->pool, &a->idx_wq_b, qr, rows, q, TIDE_LIN_BF16_OUT);
    for (int64_t r = 0; r < rows; r++) {
        tide_rope_tail(s, layer, q + r * IH * ID, IH, ID, s->row_pos[r], 0);
        tide_sim_fp4_e8m0(q + r * IH * ID, (size_t)(IH * ID), 32);
    }
    ops->linear(ops, s->pool, &a->idx_wproj, x, rows, w, TIDE_LIN_BF16_OUT);
    float wscale = (float)(pow((double)ID, -0.5) * pow((double)IH, -0.5));
    for (int64_t i = 0; i < rows * IH; i++) w[i] = tide_round_bf16(w[i] * wscale);

    /* 3. gather each sequence's keys: [0, end // ratio) of the key source
     * (with the quirk: the published one); positions the source has not
     * made read as zeros. Decode rows: each row's own key source and count,
     * those of the one-token step at its position (see key_source). */
    const float **keys = tide_xmalloc((size_t)rows * sizeof(float *));
    int64_t *have = NULL;
    float **kbuf = tide_xmalloc((size_t)s->n_seqs * (size_t)(m->n_kv_src + 1) * sizeof(float *));
    int nbuf = 0;
    int64_t nmax = 0;
    for (int qi = 0; qi < s->n_seqs; qi++) {
        tide_seq_cache *sc = s->seqs[qi].cache;
        int64_t start = sc->pos, end = start + s->seqs[qi].n_tokens, n = end / ratio;
        nmax = n > nmax ? n : nmax;
        int srcs[TIDE_MAX_LAYERS], nsrc = 0; /* the sources gathered for this sequence */
        float *bufs[TIDE_MAX_LAYERS];
        for (int64_t r = s->seq_row0[qi]; r < s->seq_row0[qi + 1]; r++) {
            int64_t t = s->row_pos[r];
            int src = key_source(s, layer, qi, t);
            int i = 0;
            while (i < nsrc && srcs[i] != src) i++;
            if (i == nsrc) { /* gather it */
                int slot = src >= 0 ? m->kv_src_slot[src] : -1;
                /* positions the source has made by now: up to the step's end
                 * if it ran before this layer in the step */
                int64_t made = 0;
                if (slot >= 0) made = (src <= layer ? end : start) / m->layers[src].role->compress_ratio;
                float *kb = tide_xmalloc((size_t)((n ? n : 1) * ID) * sizeof(float));
                for (int64_t j = 0; j < n; j++) {
                    if (j < made) tide_kv_get_key(&s->fx->kv, &sc->tables[slot], j, kb + j * ID);
                    else memset(kb + j * ID, 0, (size_t)ID * sizeof(float)); /* never written: zeros */
                }
                srcs[nsrc] = src;
                bufs[nsrc++] = kbuf[nbuf++] = kb;
            }
            keys[r] = bufs[i];
            if (s->dec[qi] && src >= 0) {
                /* what the one-token step at t would have: its groups up to
                 * t + 1 if the source ran before this layer, t otherwise */
                if (!have) {
                    have = tide_xmalloc((size_t)rows * sizeof(int64_t));
                    for (int64_t k = 0; k < rows; k++) have[k] = INT64_MAX;
                }
                have[r] = (src <= layer ? t + 1 : t) / m->layers[src].role->compress_ratio;
            }
        }
    }

    /* 4. candidates buffer (candidate source) and per-row scoring */
    if (role->is_candidate_source) {
        free(s->cand);
        s->cand_w = nmax ? nmax : 1;
        s->cand = tide_xmalloc((size_t)(rows * s->cand_w));
        memset(s->cand, 0, (size_t)(rows * s->cand_w));
        s->has_cand = 1;
    }
    int nt = tide_pool_size(s->pool);
    float *zero = tide_xmalloc((size_t)ID * sizeof(float));
    memset(zero, 0, (size_t)ID * sizeof(float));
    idx_job jb = {s, layer, q, w, keys, have, zero, NULL, 2 * nmax + 2, NULL, nmax + 2};
    jb.scratch = tide_xmalloc((size_t)(nt * jb.scratch_per) * sizeof(float));
    jb.iscratch = tide_xmalloc((size_t)(nt * jb.iscratch_per) * sizeof(int32_t));
    tide_pool_for(s->pool, rows, idx_task, &jb);
    free(jb.scratch);
    free(jb.iscratch);
    for (int i = 0; i < nbuf; i++) free(kbuf[i]);
    free(kbuf);
    free(keys);
    free(have);
    free(zero);
    free(q);
    free(w);
}
