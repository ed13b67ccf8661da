/* The attention sub-layer (the reference's Attention.forward), for all rows
 * of a step at once:
 *
 *   qr = q_norm(wq_a x); q = wq_b qr, RoPE on each head's tail
 *   kv = kv_norm(wkv x), RoPE on the tail, FP8 simulation (the window KV)
 *   ratio > 0: the KV source compresses, the index source picks top-k,
 *              latents get RoPE at their group's first token + FP4 sim
 *   o = sparse_attn(q, window entries ++ compressed entries, sinks)
 *   inverse RoPE on o's tails; grouped wo_a (BF16, per group); wo_b
 *   the window ring takes this step's kv (slot = pos % window).
 *
 * The entry list of each query (its order matters numerically, see
 * tide_fwd_opts.ref_layout) points at: this step's kv rows, or values
 * decoded once per step from the packed caches (kv_pack.h): the sequence's
 * ring entries before the step, the pool's latents its rows picked. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/forward_internal.h"
#include "num/num.h"

void *tide_xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) abort();
    return p;
}

void tide_rope_tail(const tide_step *s, int layer, float *x, int64_t n_vec, int64_t width,
                    int64_t pos, int inverse) {
    const tide_text_config *c = &s->m->cfg.text;
    int rd = (int)c->qk_rope_head_dim;
    float cs[512];
    tide_rope_cs(s->m->layers[layer].rope_freq, rd / 2, pos, cs);
    s->ops->rope(s->ops, x + (width - rd), n_vec, width, rd / 2, cs, inverse);
}

/* Group-wise wo_a: o [rows][G][gin] -> oa [rows][G][R], each group with its
 * own [R][gin] slice of the weight. */
static void wo_a_grouped(tide_step *s, const tide_weight *w, const float *o, int64_t G, int64_t R,
                         float *oa) {
    int64_t gin = w->in, rows = s->rows;
    float *xin = tide_xmalloc((size_t)(rows * gin) * sizeof(float));
    float *yo = tide_xmalloc((size_t)(rows * R) * sizeof(float));
    size_t el = w->type == TIDE_W_F32 ? 4 : 2;
    for (int64_t g = 0; g < G; g++) {
        for (int64_t r = 0; r < rows; r++)
            memcpy(xin + r * gin, o + (r * G + g) * gin, (size_t)gin * sizeof(float));
        tide_weight wg = *w;
        wg.out = R;
        wg.data = (const uint8_t *)w->data + (size_t)(g * R * gin) * el;
        s->ops->linear(s->ops, s->pool, &wg, xin, rows, yo, TIDE_LIN_BF16_OUT);
        for (int64_t r = 0; r < rows; r++)
            memcpy(oa + (r * G + g) * R, yo + r * R, (size_t)R * sizeof(float));
    }
    free(xin);
    free(yo);
}

/* Values of the packed caches a step's entry lists point at, decoded once
 * per layer: per sequence, the ring entries of positions [lo, pos) (slot
 * order, window rows) and the latents its rows picked (map: position ->
 * row of lat, -1 when not picked). */
typedef struct {
    float *ring;     /* [n_seqs][window][head_dim] */
    float *lat;      /* [total picks][head_dim] */
    int64_t *lat0;   /* [n_seqs] first row of lat */
    int32_t **map;   /* [n_seqs] */
} attn_vals;

/* The window KV of position t for sequence q: this step's kv row, the
 * sequence's (decoded) ring, or NULL (an empty slot) where it does not
 * exist: before position 0, below the layer's lower bound (a restored
 * sequence's ring_lo, the decoder variant's tail_lo), or a row this step
 * skipped. */
static const float *window_kv(const tide_step *s, const attn_vals *av, int q, int64_t t, const float *kv) {
    const tide_seq_cache *c = s->seqs[q].cache;
    int64_t Dh = s->m->cfg.text.head_dim;
    if (t < 0 || t < s->win_lo[q]) return NULL;
    if (t >= c->pos) return kv + (s->seq_row0[q] + t - s->seq_pos0[q]) * Dh;
    return av->ring + ((int64_t)q * c->window + t % c->window) * Dh;
}

/* Decodes the ring entries of sequence q that window_kv can return. */
static void decode_ring(const tide_step *s, int layer, attn_vals *av, int q) {
    const tide_seq_cache *c = s->seqs[q].cache;
    int64_t Dh = c->head_dim, lo = c->pos - c->window + 1;
    if (lo < 0) lo = 0;
    if (lo < s->win_lo[q]) lo = s->win_lo[q];
    for (int64_t t = lo; t < c->pos; t++)
        tide_seq_ring_get(c, layer, t, av->ring + ((int64_t)q * c->window + t % c->window) * Dh);
}

/* Window entries of row r (position p) into ent; returns the count. */
static int window_entries(const tide_step *s, const attn_vals *av, int64_t r, const float *kv, const float **ent) {
    int64_t win = s->m->cfg.text.sliding_window;
    int q = s->row_seq[r];
    const tide_step_seq *sq = &s->seqs[q];
    int64_t start = sq->cache->pos, n = sq->n_tokens, p = s->row_pos[r];
    int cnt = 0;
    if (s->fx->opt.ref_layout && start == 0) {
        /* the reference's prefill: entries for the chunk's own rows only */
        int64_t L = n < win ? n : win, base = p - win + 1 > 0 ? p - win + 1 : 0;
        for (int64_t i = 0; i < L; i++) {
            int64_t t = base + i;
            ent[cnt++] = t > p ? NULL : window_kv(s, av, q, t, kv);
        }
        return cnt;
    }
    /* the reference's decode: the whole ring, oldest first */
    for (int64_t i = 0; i < win; i++) ent[cnt++] = window_kv(s, av, q, p - win + 1 + i, kv);
    return cnt;
}

/* How many of row r's top-k picks enter its entry list: the reference's
 * trailing -1 entries only with its layout (they depend on the chunk's end,
 * which the canonical layout must not). */
static int picks_of(const tide_step *s, int64_t r) {
    return s->fx->opt.ref_layout ? s->topk_n[r] : s->topk_valid[r];
}

/* Decodes, per sequence, each latent its rows picked, once: av->map[q][j]
 * is the row of latent j in the sequence's part of av->lat. */
static void decode_latents(const tide_step *s, int kv_slot, attn_vals *av) {
    const tide_text_config *c = &s->m->cfg.text;
    int64_t Dh = c->head_dim, itk = c->index_topk, total = 0;
    int64_t *hi = tide_xmalloc((size_t)s->n_seqs * sizeof(int64_t));
    memset(hi, 0, (size_t)s->n_seqs * sizeof(int64_t));
    for (int64_t r = 0; r < s->rows; r++)
        for (int i = 0; i < picks_of(s, r); i++) {
            int64_t j = s->topk[r * itk + i], q = s->row_seq[r];
            if (j + 1 > hi[q]) hi[q] = j + 1;
        }
    for (int q = 0; q < s->n_seqs; q++) {
        av->map[q] = tide_xmalloc((size_t)(hi[q] ? hi[q] : 1) * sizeof(int32_t));
        for (int64_t j = 0; j < hi[q]; j++) av->map[q][j] = -1;
    }
    /* rows of the picks, per sequence in first-pick order */
    int64_t *got = tide_xmalloc((size_t)s->n_seqs * sizeof(int64_t));
    memset(got, 0, (size_t)s->n_seqs * sizeof(int64_t));
    for (int64_t r = 0; r < s->rows; r++)
        for (int i = 0; i < picks_of(s, r); i++) {
            int32_t j = s->topk[r * itk + i], q = s->row_seq[r];
            if (j >= 0 && av->map[q][j] < 0) av->map[q][j] = (int32_t)got[q]++;
        }
    for (int q = 0; q < s->n_seqs; q++) {
        av->lat0[q] = total;
        total += got[q];
    }
    av->lat0[s->n_seqs] = total;
    av->lat = tide_xmalloc((size_t)(total * Dh) * sizeof(float));
    for (int q = 0; q < s->n_seqs; q++) {
        const tide_seq_cache *sc = s->seqs[q].cache;
        for (int64_t j = 0; j < hi[q]; j++)
            if (av->map[q][j] >= 0)
                tide_kv_get_latent(&s->fx->kv, &sc->tables[kv_slot], j, av->lat + (av->lat0[q] + av->map[q][j]) * Dh);
    }
    free(hi);
    free(got);
}

void tide_attn_project(tide_step *s, int layer, const float *x, float *qr, float *q, float *kv, uint8_t *kvp) {
    const tide_text_config *c = &s->m->cfg.text;
    const tide_attn_weights *a = &s->m->layers[layer].attn;
    const tide_ops *ops = s->ops;
    int64_t rows = s->rows, H = c->num_attention_heads, Dh = c->head_dim, QL = c->q_lora_rank;
    ops->linear(ops, s->pool, &a->wq_a, x, rows, qr, TIDE_LIN_BF16_OUT);
    ops->rmsnorm(ops, s->pool, qr, rows, QL, a->q_norm, c->rms_norm_eps, qr);
    ops->linear(ops, s->pool, &a->wq_b, qr, rows, q, TIDE_LIN_BF16_OUT);
    ops->linear(ops, s->pool, &a->wkv, x, rows, kv, TIDE_LIN_BF16_OUT);
    ops->rmsnorm(ops, s->pool, kv, rows, Dh, a->kv_norm, c->rms_norm_eps, kv);
    for (int64_t r = 0; r < rows; r++) {
        tide_rope_tail(s, layer, q + r * H * Dh, H, Dh, s->row_pos[r], 0);
        tide_rope_tail(s, layer, kv + r * Dh, 1, Dh, s->row_pos[r], 0);
        if (kvp) { /* the ring's packed entry, and the values it holds */
            uint8_t *e = kvp + (size_t)r * tide_kv_entry_bytes(TIDE_KV_WINDOW, Dh);
            tide_kv_pack(TIDE_KV_WINDOW, kv + r * Dh, Dh, e);
            tide_kv_unpack(TIDE_KV_WINDOW, e, Dh, kv + r * Dh);
        } else {
            tide_sim_fp8_act(kv + r * Dh, (size_t)Dh, 32);
        }
    }
}

void tide_attn_output(tide_step *s, int layer, const float *q, const tide_attn_row *ar, float *o, float *out) {
    const tide_text_config *c = &s->m->cfg.text;
    const tide_attn_weights *a = &s->m->layers[layer].attn;
    int64_t rows = s->rows, H = c->num_attention_heads, Dh = c->head_dim;
    int64_t G = c->o_groups, R = c->o_lora_rank;
    s->ops->sparse_attn(s->ops, s->pool, q, rows, (int)H, Dh, ar, a->sink, (float)(1.0 / sqrt((double)Dh)), o);
    for (int64_t r = 0; r < rows; r++) tide_rope_tail(s, layer, o + r * H * Dh, H, Dh, s->row_pos[r], 1);
    float *oa = tide_xmalloc((size_t)(rows * G * R) * sizeof(float));
    wo_a_grouped(s, &a->wo_a, o, G, R, oa);
    s->ops->linear(s->ops, s->pool, &a->wo_b, oa, rows, out, TIDE_LIN_BF16_OUT);
    free(oa);
}

void tide_attention(tide_step *s, int layer, const float *x, float *out) {
    const tide_model *m = s->m;
    const tide_text_config *c = &m->cfg.text;
    const tide_layer_role *role = m->layers[layer].role;
    int64_t rows = s->rows, H = c->num_attention_heads, Dh = c->head_dim, QL = c->q_lora_rank;
    int64_t win = c->sliding_window;
    int ratio = role->compress_ratio;

    float *qr = tide_xmalloc((size_t)(rows * QL) * sizeof(float));
    float *q = tide_xmalloc((size_t)(rows * H * Dh) * sizeof(float));
    float *kv = tide_xmalloc((size_t)(rows * Dh) * sizeof(float));
    size_t eb = tide_kv_entry_bytes(TIDE_KV_WINDOW, Dh);
    uint8_t *kvp = tide_xmalloc((size_t)rows * eb);
    tide_attn_project(s, layer, x, qr, q, kv, kvp);

    const tide_fwd_opts *dopt = &s->fx->opt;
    if (dopt->dump) {
        dopt->dump(dopt->dump_ctx, "q", layer, q, rows, H * Dh);
        dopt->dump(dopt->dump_ctx, "kv", layer, kv, rows, Dh);
    }
    int kv_slot = -1;
    if (ratio > 0) {
        kv_slot = m->kv_src_slot[role->kv_source];
        float *lat = NULL;
        int64_t *first = tide_xmalloc((size_t)s->n_seqs * sizeof(int64_t));
        int64_t *count = tide_xmalloc((size_t)s->n_seqs * sizeof(int64_t));
        memset(count, 0, (size_t)s->n_seqs * sizeof(int64_t));
        memset(first, 0, (size_t)s->n_seqs * sizeof(int64_t));
        if (role->is_kv_source) {
            lat = tide_xmalloc((size_t)(rows * Dh) * sizeof(float));
            tide_compress(s, layer, x, lat, first, count);
        }
        if (role->is_index_source) tide_indexer(s, layer, x, qr, lat, first, count);
        if (lat) {
            /* latents: RoPE at the group's first token, then FP4 (e4m3 scales, 16) */
            int64_t k = 0;
            for (int qi = 0; qi < s->n_seqs; qi++) {
                tide_seq_cache *sc = s->seqs[qi].cache;
                for (int64_t j = first[qi]; j < first[qi] + count[qi]; j++, k++) {
                    float *v = lat + k * Dh;
                    tide_rope_tail(s, layer, v, 1, Dh, j * ratio, 0);
                    tide_kv_put_latent(&s->fx->kv, &sc->tables[kv_slot], j, v); /* FP4 */
                }
            }
            free(lat);
        }
        free(first);
        free(count);
    }

    if (dopt->dump && ratio > 0) {
        int64_t w = c->index_topk;
        float *t = tide_xmalloc((size_t)(rows * w) * sizeof(float));
        for (int64_t r = 0; r < rows; r++)
            for (int64_t i = 0; i < w; i++) t[r * w + i] = i < s->topk_n[r] ? (float)s->topk[r * w + i] : -2.0f;
        dopt->dump(dopt->dump_ctx, "topk", layer, t, rows, w);
        free(t);
    }

    /* the packed caches' values the entry lists point at */
    attn_vals av;
    av.ring = tide_xmalloc((size_t)(s->n_seqs * c->sliding_window * Dh) * sizeof(float));
    for (int qi = 0; qi < s->n_seqs; qi++) decode_ring(s, layer, &av, qi);
    int64_t itk = ratio > 0 ? c->index_topk : 0, per = win + itk;
    av.lat = NULL;
    av.lat0 = tide_xmalloc((size_t)(s->n_seqs + 1) * sizeof(int64_t));
    av.map = tide_xmalloc((size_t)s->n_seqs * sizeof(int32_t *));
    memset(av.map, 0, (size_t)s->n_seqs * sizeof(int32_t *));
    if (ratio > 0) decode_latents(s, kv_slot, &av);

    /* entry lists */
    const float **ents = tide_xmalloc((size_t)(rows * per) * sizeof(float *));
    tide_attn_row *ar = tide_xmalloc((size_t)rows * sizeof *ar);
    for (int64_t r = 0; r < rows; r++) {
        const float **e = ents + r * per;
        int n = window_entries(s, &av, r, kv, e);
        if (ratio > 0) {
            int qi = s->row_seq[r];
            int cnt = picks_of(s, r);
            for (int i = 0; i < cnt; i++) {
                int32_t j = s->topk[r * itk + i];
                e[n++] = j < 0 ? NULL : av.lat + (av.lat0[qi] + av.map[qi][j]) * Dh;
            }
        }
        ar[r].kv = e;
        ar[r].n_idx = n;
    }
    float *o = tide_xmalloc((size_t)(rows * H * Dh) * sizeof(float));
    tide_attn_output(s, layer, q, ar, o, out);
    if (dopt->dump) dopt->dump(dopt->dump_ctx, "o", layer, o, rows, H * Dh);

    /* the ring takes this step's window KV (after every query has read it) */
    for (int64_t r = 0; r < rows; r++) {
        tide_seq_cache *sc = s->seqs[s->row_seq[r]].cache;
        memcpy(tide_seq_ring(sc, layer, s->row_pos[r]), kvp + (size_t)r * eb, eb);
    }
    free(kvp);
    free(av.ring);
    free(av.lat);
    free(av.lat0);
    for (int qi = 0; qi < s->n_seqs; qi++) free(av.map[qi]);
    free(av.map);
    free(qr);
    free(q);
    free(kv);
    free(ents);
    free(ar);
    free(o);
}
