/* The top level of the forward pass (the reference's Transformer.forward)
 * over a ragged batch: validate, reserve KV, hash engram n-grams, embed,
 * expand to hc copies, run every backbone block (engram first where the
 * layer has one, DSpark inputs recorded before the target blocks), collapse
 * with the last block's FFN pre coefficients, final norm, f32 head. */
#include "model/forward.h"

#include <stdlib.h>
#include <string.h>

#include "model/forward_internal.h"
#include "num/num.h"

tide_fwd_opts tide_fwd_default_opts(void) {
    tide_fwd_opts o = {.ref_layout = 1, .index_key_quirk = 1, .kv_block = 64, .kv_max_blocks = 1 << 20};
    return o;
}

int tide_fwd_ctx_create(const tide_model *m, const tide_ops *ops, int n_threads,
                        const tide_fwd_opts *opts, tide_fwd_ctx **out, tide_status *st) {
    *out = NULL;
    tide_fwd_ctx *fx = calloc(1, sizeof *fx);
    if (!fx) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
    fx->m = m;
    fx->ops = ops ? ops : tide_cpu_ops();
    fx->opt = opts ? *opts : tide_fwd_default_opts();
    const tide_text_config *c = &m->cfg.text;
    if (c->qk_rope_head_dim > 512 || c->qk_rope_head_dim % 2 || c->head_dim % 32 ||
        c->index_head_dim % 32 || c->hidden_size % 32) {
        free(fx);
        return tide_fail(st, TIDE_ERR_UNSUPPORTED, "forward: head/rope/hidden sizes must be multiples of 32");
    }
    for (int i = 0; i < m->n_layers; i++) {
        const tide_layer_role *r = m->layers[i].role;
        if (m->layers[i].ffn.n_experts > 4096 || m->layers[i].ffn.top_k > m->layers[i].ffn.n_experts) {
            free(fx);
            return tide_fail(st, TIDE_ERR_UNSUPPORTED, "forward: layer %d: expert counts out of range", i);
        }
        /* a compressed layer needs a KV source at or below it (the config
         * check guarantees it; the forward pass indexes by it) */
        if (r->compress_ratio > 0 && (r->is_dspark || r->kv_source < 0 || r->kv_source >= TIDE_MAX_LAYERS ||
                                      m->kv_src_slot[r->kv_source] < 0 || r->index_source < 0)) {
            free(fx);
            return tide_fail(st, TIDE_ERR_UNSUPPORTED, "forward: layer %d has ratio %d but no KV/index source",
                             i, r->compress_ratio);
        }
    }
    if (tide_kv_pool_init(&fx->kv, fx->opt.kv_block, c->head_dim, c->index_head_dim,
                          fx->opt.kv_max_blocks, st) != 0 ||
        tide_pool_create(n_threads < 1 ? 1 : n_threads, &fx->pool, st) != 0) {
        free(fx);
        return -1;
    }
    *out = fx;
    return 0;
}

void tide_fwd_ctx_free(tide_fwd_ctx *fx) {
    if (!fx) return;
    tide_pool_destroy(fx->pool);
    tide_kv_pool_free(&fx->kv);
    free(fx);
}

const tide_model *tide_fwd_model(const tide_fwd_ctx *fx) { return fx->m; }
tide_pool *tide_fwd_pool(tide_fwd_ctx *fx) { return fx->pool; }
tide_kv_pool *tide_fwd_kv(tide_fwd_ctx *fx) { return &fx->kv; }

int tide_fwd_seq_init(tide_fwd_ctx *fx, tide_seq_cache *c, tide_status *st) {
    const tide_model *m = fx->m;
    int max_ratio = 1;
    for (int i = 0; i < m->n_backbone; i++)
        if (m->cfg.roles[i].compress_ratio > max_ratio) max_ratio = m->cfg.roles[i].compress_ratio;
    if (max_ratio > 64) return tide_fail(st, TIDE_ERR_UNSUPPORTED, "compress ratio %d > 64", max_ratio);
    return tide_seq_cache_init(c, m->n_layers, (int)m->cfg.text.sliding_window, m->cfg.text.head_dim,
                               m->n_kv_src, max_ratio, st);
}

void tide_fwd_seq_free(tide_fwd_ctx *fx, tide_seq_cache *c) { tide_seq_cache_free(c, &fx->kv); }

int64_t tide_step_logit_rows(const tide_step_seq *seqs, int n_seqs) {
    int64_t n = 0;
    for (int i = 0; i < n_seqs; i++)
        n += seqs[i].logits == TIDE_LOGITS_ALL ? seqs[i].n_tokens : seqs[i].logits == TIDE_LOGITS_LAST;
    return n;
}

static int validate(const tide_fwd_ctx *fx, const tide_step_seq *seqs, int n_seqs, tide_status *st) {
    const tide_model *m = fx->m;
    int64_t V = m->cfg.text.vocab_size;
    if (n_seqs < 1) return tide_fail(st, TIDE_ERR_INVALID, "forward: empty step");
    for (int i = 0; i < n_seqs; i++) {
        const tide_step_seq *s = &seqs[i];
        if (!s->cache || !s->tokens || s->n_tokens < 1)
            return tide_fail(st, TIDE_ERR_INVALID, "forward: sequence %d has no tokens or no cache", i);
        if (s->cache->n_layers != m->n_layers || s->cache->n_src != m->n_kv_src)
            return tide_fail(st, TIDE_ERR_INVALID, "forward: sequence %d's cache is for another model", i);
        for (int j = 0; j < i; j++)
            if (seqs[j].cache == s->cache)
                return tide_fail(st, TIDE_ERR_INVALID, "forward: sequence %d appears twice in one step", i);
        if (s->cache->pos + s->n_tokens > (int64_t)INT32_MAX / 2)
            return tide_fail(st, TIDE_ERR_INVALID, "forward: sequence %d is too long", i);
        for (int64_t t = 0; t < s->n_tokens; t++) {
            int32_t id = s->tokens[t];
            if (id < 0 || id >= V)
                return tide_fail(st, TIDE_ERR_INVALID,
                                 "forward: sequence %d token %lld: id %d is outside the vocabulary (0..%lld)",
                                 i, (long long)t, id, (long long)(V - 1));
            if (id == m->cfg.image_token_id && m->cfg.image_token_id >= 0)
                return tide_fail(st, TIDE_ERR_UNSUPPORTED,
                                 "forward: sequence %d token %lld is the image token %d: vision is not supported yet",
                                 i, (long long)t, id);
        }
    }
    return 0;
}

/* Engram hash rows of every row of the step: [rows][n_eng][n_cols]. */
static int engram_rows(const tide_step *s, int64_t *out, tide_status *st) {
    const tide_engram_tables *t = &s->m->engram;
    int64_t per = (int64_t)t->n_layers * t->n_cols;
    for (int q = 0; q < s->n_seqs; q++) {
        const tide_step_seq *sq = &s->seqs[q];
        const tide_seq_cache *c = sq->cache;
        int64_t nh = c->pos < t->max_ngram - 1 ? c->pos : t->max_ngram - 1;
        int32_t *ids = tide_xmalloc((size_t)(nh + sq->n_tokens) * sizeof(int32_t));
        if (nh > 0) memcpy(ids, c->tokens + c->pos - nh, (size_t)nh * sizeof(int32_t));
        memcpy(ids + nh, sq->tokens, (size_t)sq->n_tokens * sizeof(int32_t));
        int rc = tide_engram_hash(t, ids, NULL, nh, sq->n_tokens, out + s->seq_row0[q] * per, st);
        free(ids);
        if (rc != 0) return tide_fail_ctx(st, "forward: sequence %d", q);
    }
    return 0;
}

/* One engram layer's contribution, with the wkv GEMM on our backend (the
 * engram module's gather and mix around it): x += gate * value. */
static int engram_layer(const tide_step *s, const tide_layer *L, const int64_t *rows_idx, int64_t stride,
                        float *h, tide_status *st) {
    const tide_engram_dims *d = &s->m->engram_dims;
    int64_t in = (int64_t)d->n_cols * d->head_dim, out = (int64_t)(d->hc_mult + 1) * d->dim;
    const tide_fwd_opts *o = &s->fx->opt;
    if (o->dump) {
        float *f = tide_xmalloc((size_t)(s->rows * d->n_cols) * sizeof(float));
        for (int64_t r = 0; r < s->rows; r++)
            for (int c = 0; c < d->n_cols; c++) f[r * d->n_cols + c] = (float)rows_idx[r * stride + c];
        o->dump(o->dump_ctx, "engram_rows", L->role->layer, f, s->rows, d->n_cols);
        free(f);
    }
    float *emb = tide_xmalloc((size_t)(s->rows * in) * sizeof(float));
    float *kv = tide_xmalloc((size_t)(s->rows * out) * sizeof(float));
    int rc = tide_engram_gather(&L->engram, d, rows_idx, stride, s->rows, emb, st);
    if (rc == 0) {
        tide_weight w = {TIDE_W_FP8, out, in, L->engram.wkv, L->engram.wkv_scale};
        s->ops->linear(s->pool, &w, emb, s->rows, kv, TIDE_LIN_BF16_OUT);
        s->ops->engram_mix(kv, L->engram_qk, s->rows, d->hc_mult, d->dim, d->eps, h);
    }
    free(emb);
    free(kv);
    return rc;
}

void tide_weight_row(const tide_weight *w, int64_t row, float *dst) {
    const uint8_t *d = w->data;
    if (w->type == TIDE_W_F32) {
        memcpy(dst, d + (size_t)(row * w->in) * 4, (size_t)w->in * 4);
        return;
    }
    for (int64_t i = 0; i < w->in; i++) {
        uint16_t b;
        memcpy(&b, d + (size_t)(row * w->in + i) * 2, 2);
        dst[i] = tide_bf16_to_f32(b);
    }
}

static void embed(const tide_step *s, float *h) {
    const tide_model *m = s->m;
    int64_t D = m->cfg.text.hidden_size, hc = m->cfg.text.hc_mult;
    for (int q = 0; q < s->n_seqs; q++)
        for (int64_t i = 0; i < s->seqs[q].n_tokens; i++) {
            int64_t r = s->seq_row0[q] + i, id = s->seqs[q].tokens[i];
            float *dst = h + r * hc * D;
            tide_weight_row(&m->embed, id, dst);
            for (int64_t c = 1; c < hc; c++) memcpy(dst + c * D, dst, (size_t)D * sizeof(float));
        }
}

static void free_step(tide_step *s) {
    free(s->seq_row0);
    free(s->row_seq);
    free(s->row_pos);
    free(s->topk);
    free(s->topk_n);
    free(s->topk_valid);
    free(s->cand);
}

int tide_forward(tide_fwd_ctx *fx, tide_step_seq *seqs, int n_seqs, tide_step_out *out,
                 tide_status *st) {
    const tide_model *m = fx->m;
    const tide_text_config *c = &m->cfg.text;
    if (validate(fx, seqs, n_seqs, st) != 0) return -1;
    tide_step s;
    memset(&s, 0, sizeof s);
    s.fx = fx;
    s.m = m;
    s.ops = fx->ops;
    s.pool = fx->pool;
    s.seqs = seqs;
    s.n_seqs = n_seqs;
    s.seq_row0 = tide_xmalloc((size_t)(n_seqs + 1) * sizeof(int64_t));
    for (int q = 0; q < n_seqs; q++) {
        s.seq_row0[q] = s.rows;
        s.rows += seqs[q].n_tokens;
    }
    s.seq_row0[n_seqs] = s.rows;
    s.row_seq = tide_xmalloc((size_t)s.rows * sizeof(int32_t));
    s.row_pos = tide_xmalloc((size_t)s.rows * sizeof(int64_t));
    for (int q = 0; q < n_seqs; q++)
        for (int64_t i = 0; i < seqs[q].n_tokens; i++) {
            s.row_seq[s.seq_row0[q] + i] = q;
            s.row_pos[s.seq_row0[q] + i] = seqs[q].cache->pos + i;
        }
    int64_t itk = c->index_topk > 0 ? c->index_topk : 1;
    s.topk = tide_xmalloc((size_t)(s.rows * itk) * sizeof(int32_t));
    s.topk_n = calloc((size_t)s.rows, sizeof(int32_t));
    s.topk_valid = calloc((size_t)s.rows, sizeof(int32_t));
    if (!s.topk_n || !s.topk_valid) abort();

    /* everything that can fail happens before any state changes */
    for (int q = 0; q < n_seqs; q++)
        for (int k = 0; k < m->n_kv_src; k++) {
            int r = m->cfg.roles[m->kv_src_layer[k]].compress_ratio;
            int64_t end = seqs[q].cache->pos + seqs[q].n_tokens;
            if (tide_kv_reserve(&fx->kv, &seqs[q].cache->tables[k], end / r, st) != 0) {
                free_step(&s);
                return tide_fail_ctx(st, "forward");
            }
        }
    int64_t *erows = NULL;
    if (m->has_engram) {
        erows = tide_xmalloc((size_t)(s.rows * m->engram.n_layers * m->engram.n_cols) * sizeof(int64_t));
        if (engram_rows(&s, erows, st) != 0) {
            free(erows);
            free_step(&s);
            return -1;
        }
    }
    for (int q = 0; q < n_seqs; q++)
        if (tide_seq_cache_push_tokens(seqs[q].cache, seqs[q].tokens, seqs[q].n_tokens, st) != 0) {
            free(erows);
            free_step(&s);
            return -1;
        }

    int64_t D = c->hidden_size, hc = c->hc_mult, rows = s.rows;
    float *h = tide_xmalloc((size_t)(rows * hc * D) * sizeof(float));
    float *pre_mix = calloc((size_t)(rows * hc), sizeof(float));
    if (!pre_mix) abort();
    for (int64_t r = 0; r < rows; r++) pre_mix[r * hc] = 1.0f; /* one-hot on copy 0 */
    embed(&s, h);

    int n_t = c->n_dspark_target_layer_ids;
    int rc = 0;
    for (int i = 0; i < m->n_backbone; i++) {
        const tide_layer *L = &m->layers[i];
        if (L->has_engram) {
            int64_t per = (int64_t)m->engram.n_layers * m->engram.n_cols;
            rc = engram_layer(&s, L, erows + L->role->engram_index * m->engram.n_cols, per, h, st);
            if (rc != 0) break; /* cannot happen for validated rows; reported anyway */
        }
        if (L->role->is_dspark_target && out && out->dspark_in) {
            int ti = L->role->dspark_target_index;
            for (int64_t r = 0; r < rows; r++)
                for (int64_t d = 0; d < D; d++) {
                    float sum = 0;
                    for (int64_t k = 0; k < hc; k++) sum += h[(r * hc + k) * D + d];
                    out->dspark_in[(r * n_t + ti) * D + d] = tide_round_bf16(sum / (float)hc);
                }
        }
        tide_block(&s, i, h, pre_mix, NULL, NULL);
    }
    if (rc == 0 && out && out->logits) {
        float *x = tide_xmalloc((size_t)(rows * D) * sizeof(float));
        s.ops->hc_pre(h, rows, (int)hc, D, pre_mix, x);
        s.ops->rmsnorm(s.pool, x, rows, D, m->norm, c->rms_norm_eps, x);
        int64_t nl = 0;
        for (int q = 0; q < n_seqs; q++) {
            int64_t r0 = s.seq_row0[q], n = seqs[q].n_tokens;
            if (seqs[q].logits == TIDE_LOGITS_LAST) {
                memmove(x + nl * D, x + (r0 + n - 1) * D, (size_t)D * sizeof(float));
                nl++;
            } else if (seqs[q].logits == TIDE_LOGITS_ALL) {
                memmove(x + nl * D, x + r0 * D, (size_t)(n * D) * sizeof(float));
                nl += n;
            }
        }
        s.ops->linear(s.pool, &m->head, x, nl, out->logits, 0);
        free(x);
    }
    if (rc == 0)
        for (int q = 0; q < n_seqs; q++) {
            tide_seq_cache *sc = seqs[q].cache;
            sc->pos += seqs[q].n_tokens;
            for (int k = 0; k < m->n_kv_src; k++)
                sc->n_comp[k] = sc->pos / m->cfg.roles[m->kv_src_layer[k]].compress_ratio;
        }
    free(h);
    free(pre_mix);
    free(erows);
    free_step(&s);
    return rc;
}
