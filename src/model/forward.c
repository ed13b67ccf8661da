/* The top level of the forward pass (the reference's Transformer.forward)
 * over a ragged batch: validate, reserve KV, hash engram n-grams, embed,
 * expand to hc copies, run every backbone block (engram first where the
 * layer has one, DSpark inputs recorded before the target blocks), collapse
 * with the last block's FFN pre coefficients, final norm, f32 head.
 * Also: the prefix-cache restore of a sequence (tide_fwd_seq_restore) and
 * the decoder variant (rows below cache->tail_lo leave the step after the
 * last KV source layer). */
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
    if (c->qk_rope_head_dim > TIDE_MAX_ROPE_DIM || c->qk_rope_head_dim % 2 || c->head_dim % 32 ||
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

/* Bytes of each activation buffer for a step of `rows` rows. */
static void buf_sizes(const tide_model *m, int64_t rows, size_t *sz) {
    const tide_text_config *c = &m->cfg.text;
    int64_t D = c->hidden_size, hc = c->hc_mult, E = 1, I = 1;
    for (int i = 0; i < m->n_layers; i++) {
        const tide_ffn_weights *f = &m->layers[i].ffn;
        if (f->n_experts > E) E = f->n_experts;
        for (int e = 0; e < f->n_experts; e++)
            if (f->w1[e].out > I) I = f->w1[e].out;
        if (f->sw1.out > I) I = f->sw1.out;
    }
    int64_t ekv = m->has_engram ? (int64_t)(m->engram_dims.hc_mult + 1) * m->engram_dims.dim : 1;
    int64_t per[FB_COUNT] = {
        [FB_H] = hc * D, [FB_PRE_MIX] = hc, [FB_PRE] = hc, [FB_POST] = hc, [FB_COMB] = hc * hc,
        [FB_X] = D, [FB_Y] = D, [FB_RES] = hc * D, [FB_GATE] = E, [FB_ACC] = D, [FB_XE] = D, [FB_YE] = D,
        [FB_WE] = 1, [FB_G] = I, [FB_U] = I, [FB_EKV] = ekv,
    };
    for (int i = 0; i < FB_COUNT; i++) sz[i] = (size_t)(rows * per[i]) * sizeof(float);
}

int tide_fwd_reserve(tide_fwd_ctx *fx, int64_t rows, tide_status *st) {
    if (rows <= fx->buf_rows) return 0;
    int64_t want = fx->buf_rows ? fx->buf_rows : 16;
    while (want < rows) want *= 2; /* geometric: a handful of growths over a run */
    size_t sz[FB_COUNT];
    buf_sizes(fx->m, want, sz);
    for (int i = 0; i < FB_COUNT; i++) {
        fx->ops->release(fx->ops, fx->buf[i]);
        fx->buf[i] = NULL;
    }
    fx->buf_rows = 0;
    for (int i = 0; i < FB_COUNT; i++) {
        fx->buf[i] = fx->ops->alloc(fx->ops, sz[i]);
        if (!fx->buf[i]) {
            for (int j = 0; j < i; j++) {
                fx->ops->release(fx->ops, fx->buf[j]);
                fx->buf[j] = NULL;
            }
            tide_status e = {0};
            if (fx->ops->error && fx->ops->error(fx->ops, &e) != 0) *st = e;
            else tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
            return tide_fail_ctx(st, "forward: activation buffers for %lld rows", (long long)want);
        }
    }
    free(fx->host_x);
    free(fx->host_y);
    size_t hb = (size_t)(want * fx->m->cfg.text.hidden_size) * sizeof(float);
    fx->host_x = malloc(hb);
    fx->host_y = malloc(hb);
    if (!fx->host_x || !fx->host_y) {
        free(fx->host_x);
        free(fx->host_y);
        fx->host_x = fx->host_y = NULL;
        for (int j = 0; j < FB_COUNT; j++) {
            fx->ops->release(fx->ops, fx->buf[j]);
            fx->buf[j] = NULL;
        }
        return tide_fail(st, TIDE_ERR_NOMEM, "forward: out of host memory for %lld rows", (long long)want);
    }
    fx->buf_rows = want;
    return 0;
}

void tide_fwd_ctx_free(tide_fwd_ctx *fx) {
    if (!fx) return;
    for (int i = 0; i < FB_COUNT; i++) fx->ops->release(fx->ops, fx->buf[i]);
    free(fx->host_x);
    free(fx->host_y);
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
    if (max_ratio > TIDE_MAX_COMPRESS_RATIO) /* refused earlier by tide_config_check */
        return tide_fail(st, TIDE_ERR_UNSUPPORTED, "text_config.compress_ratios: ratio %d > %d", max_ratio,
                         TIDE_MAX_COMPRESS_RATIO);
    if (tide_seq_cache_init(c, m->n_layers, (int)m->cfg.text.sliding_window, m->cfg.text.head_dim,
                            m->n_kv_src, max_ratio, st) != 0)
        return -1;
    for (int k = 0; k < m->n_kv_src; k++) {
        const tide_layer_role *r = &m->cfg.roles[m->kv_src_layer[k]];
        c->src[k] = (tide_seq_src){m->kv_src_layer[k], r->compress_ratio,
                                   r->is_index_source && r->indexer_owns_keys};
    }
    return 0;
}

int tide_fwd_last_kv_layer(const tide_fwd_ctx *fx) {
    return fx->m->n_kv_src > 0 ? fx->m->kv_src_layer[fx->m->n_kv_src - 1] : -1;
}

static int restore_check(const tide_fwd_ctx *fx, const tide_seq_cache *c, const int32_t *tokens,
                         int64_t frozen, int64_t start, tide_status *st) {
    const tide_model *m = fx->m;
    if (c->n_layers != m->n_layers || c->n_src != m->n_kv_src)
        return tide_fail(st, TIDE_ERR_INVALID, "restore: the sequence cache is for another model");
    if (c->pos != 0 || c->frozen_tokens != 0 || c->ckpt)
        return tide_fail(st, TIDE_ERR_INVALID, "restore: the sequence is not fresh (pos %lld)", (long long)c->pos);
    if (start < 0 || start > frozen || frozen > (int64_t)INT32_MAX / 2)
        return tide_fail(st, TIDE_ERR_INVALID, "restore: need 0 <= start (%lld) <= frozen (%lld)",
                         (long long)start, (long long)frozen);
    if (start > 0 && !tokens) return tide_fail(st, TIDE_ERR_INVALID, "restore: no tokens for the history");
    for (int i = 0; i < m->n_backbone; i++) {
        int r = m->cfg.roles[i].compress_ratio;
        if (r > 0 && frozen % r != 0)
            return tide_fail(st, TIDE_ERR_INVALID,
                             "restore: frozen length %lld is not a multiple of layer %d's compress ratio %d",
                             (long long)frozen, i, r);
    }
    for (int k = 0; k < m->n_kv_src; k++) {
        int64_t need = frozen / c->src[k].ratio, have = c->tables[k].n * fx->kv.block_len;
        if (have < need)
            return tide_fail(st, TIDE_ERR_INVALID,
                             "restore: KV source layer %d's table holds %lld compressed positions, the "
                             "frozen prefix needs %lld",
                             c->src[k].layer, (long long)have, (long long)need);
    }
    for (int64_t t = 0; t < start; t++)
        if (tokens[t] < 0 || tokens[t] >= m->cfg.text.vocab_size)
            return tide_fail(st, TIDE_ERR_INVALID, "restore: history token %lld: id %d is outside the vocabulary",
                             (long long)t, tokens[t]);
    return 0;
}

int tide_fwd_seq_restore(tide_fwd_ctx *fx, tide_seq_cache *c, const int32_t *tokens, int64_t frozen,
                         int64_t start, tide_status *st) {
    if (!fx || !c) return tide_fail(st, TIDE_ERR_INVALID, "restore: NULL context or sequence");
    if (restore_check(fx, c, tokens, frozen, start, st) != 0) return -1;
    if (start > 0 && tide_seq_cache_push_tokens(c, tokens, start, st) != 0) return tide_fail_ctx(st, "restore");
    c->pos = c->ring_lo = c->dspark_pos = start;
    c->frozen_tokens = frozen;
    /* as a one-chunk prefill of [0, start) leaves them: every source that
     * completed a group published, the last one in layer order last */
    c->published = -1;
    for (int k = 0; k < c->n_src; k++) {
        c->n_comp[k] = start / c->src[k].ratio;
        if (c->src[k].publishes && c->n_comp[k] > 0) c->published = c->src[k].layer;
    }
    return 0;
}

void tide_fwd_seq_free(tide_fwd_ctx *fx, tide_seq_cache *c) { tide_seq_cache_free(c, &fx->kv); }

int64_t tide_step_logit_rows(const tide_step_seq *seqs, int n_seqs) {
    int64_t n = 0;
    for (int i = 0; i < n_seqs; i++)
        n += seqs[i].logits == TIDE_LOGITS_ALL ? seqs[i].n_tokens : seqs[i].logits == TIDE_LOGITS_LAST;
    return n;
}

static int validate(const tide_fwd_ctx *fx, const tide_step_seq *seqs, int n_seqs, const tide_step_image *img,
                    tide_status *st) {
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
        const tide_seq_cache *c = s->cache;
        if (c->pos + s->n_tokens > (int64_t)INT32_MAX / 2)
            return tide_fail(st, TIDE_ERR_INVALID, "forward: sequence %d is too long", i);
        int64_t first_logit = s->logits == TIDE_LOGITS_ALL ? c->pos : c->pos + s->n_tokens - 1;
        if (s->logits != TIDE_LOGITS_NONE && first_logit < c->tail_lo)
            return tide_fail(st, TIDE_ERR_INVALID,
                             "forward: sequence %d asks for logits of position %lld, below its tail_lo %lld "
                             "(the decoder variant does not run those rows to the head)",
                             i, (long long)first_logit, (long long)c->tail_lo);
        if (c->ckpt && c->pos + s->n_tokens > c->ckpt->pos + c->ckpt->max_ahead)
            return tide_fail(st, TIDE_ERR_INVALID,
                             "forward: sequence %d would be fed to position %lld, past its checkpoint's "
                             "reach (%lld + %d)",
                             i, (long long)(c->pos + s->n_tokens), (long long)c->ckpt->pos, c->ckpt->max_ahead);
        if (c->ckpt && c->ckpt->decode_rows && s->n_tokens > tide_fwd_decode_rows_max(fx, c, s->n_tokens))
            return tide_fail(st, TIDE_ERR_INVALID,
                             "forward: sequence %d: %lld decode rows at position %lld would read index keys this "
                             "step has not made yet (at most %lld: tide_fwd_decode_rows_max)",
                             i, (long long)s->n_tokens, (long long)c->pos,
                             (long long)tide_fwd_decode_rows_max(fx, c, s->n_tokens));
        for (int64_t t = 0; t < s->n_tokens; t++) {
            int32_t id = s->tokens[t];
            if (id < 0 || id >= V)
                return tide_fail(st, TIDE_ERR_INVALID,
                                 "forward: sequence %d token %lld: id %d is outside the vocabulary (0..%lld)",
                                 i, (long long)t, id, (long long)(V - 1));
            const tide_step_image *im = img ? &img[i] : NULL;
            int span = im && im->types && im->types[t] >= 0;
            if (span && (id != m->cfg.image_token_id || !im->rows || m->cfg.vision.num_hidden_layers <= 0))
                return tide_fail(st, TIDE_ERR_INVALID,
                                 "forward: sequence %d token %lld is marked as an image-span position but %s", i,
                                 (long long)t,
                                 m->cfg.vision.num_hidden_layers <= 0 ? "the model has no vision tower"
                                 : !im->rows    ? "no embedding rows were given"
                                                : "its id is not the image token");
            if (!span && id == m->cfg.image_token_id && m->cfg.image_token_id >= 0)
                return tide_fail(st, TIDE_ERR_UNSUPPORTED,
                                 "forward: sequence %d token %lld is the image token %d outside an image span",
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
        /* image-span positions (history included) are dead to engram; they are
         * exactly the image token's positions (validate) */
        uint8_t *dead = NULL;
        int32_t img = (int32_t)s->m->cfg.image_token_id;
        for (int64_t k = 0; img >= 0 && k < nh + sq->n_tokens; k++)
            if (ids[k] == img) {
                if (!dead && !(dead = calloc((size_t)(nh + sq->n_tokens), 1))) abort();
                dead[k] = 1;
            }
        int rc = tide_engram_hash(t, ids, dead, nh, sq->n_tokens, out + s->seq_row0[q] * per, st);
        free(dead);
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
    /* the hashed tables are gathered on the host (they are read where the
     * checkpoint lies); the GEMM and the mix run on the backend */
    float *emb = tide_xmalloc((size_t)(s->rows * in) * sizeof(float));
    float *kv = s->fx->buf[FB_EKV];
    int rc = tide_engram_gather(&L->engram, d, rows_idx, stride, s->rows, emb, st);
    if (rc == 0) {
        tide_weight w = {TIDE_W_FP8, out, in, L->engram.wkv, L->engram.wkv_scale};
        s->ops->linear(s->ops, s->pool, &w, emb, s->rows, kv, TIDE_LIN_BF16_OUT);
        /* image-span rows get no engram contribution (the reference's gate
         * 0): their rows are kept aside (FB_RES, free here) and put back */
        int64_t width = (int64_t)d->hc_mult * d->dim, n_img = 0;
        size_t wb = (size_t)width * sizeof(float);
        int64_t *img_rows = NULL;
        for (int64_t r = 0; s->row_img && r < s->rows; r++) n_img += s->row_img[r];
        float *keep = s->fx->buf[FB_RES];
        if (n_img) {
            img_rows = tide_xmalloc((size_t)n_img * sizeof(int64_t));
            for (int64_t r = 0, j = 0; r < s->rows; r++)
                if (s->row_img[r]) img_rows[j++] = r;
            s->ops->gather_rows(s->ops, h, wb, img_rows, n_img, keep);
        }
        s->ops->engram_mix(s->ops, kv, L->engram_qk, s->rows, d->hc_mult, d->dim, d->eps, h);
        for (int64_t j = 0; j < n_img; j++) s->ops->copy(s->ops, h + img_rows[j] * width, keep + j * width, wb);
        free(img_rows);
    }
    free(emb);
    return rc;
}

static void embed(const tide_step *s, float *h) {
    int32_t *ids = tide_xmalloc((size_t)s->rows * sizeof(int32_t));
    for (int q = 0; q < s->n_seqs; q++)
        memcpy(ids + s->seq_row0[q], s->seqs[q].tokens, (size_t)s->seqs[q].n_tokens * sizeof(int32_t));
    int64_t D = s->m->cfg.text.hidden_size, hc = s->m->cfg.text.hc_mult;
    s->ops->embed(s->ops, &s->m->embed, ids, s->rows, (int)hc, h);
    free(ids);
    /* image-span rows: their embeddings (the tower's) replace the table's,
     * one row upload each, repeated over the hc copies */
    float *row = NULL;
    for (int q = 0; s->img && q < s->n_seqs; q++) {
        const tide_step_image *im = &s->img[q];
        for (int64_t i = 0; im->types && i < s->seqs[q].n_tokens; i++) {
            if (im->types[i] < 0) continue;
            if (!row) row = tide_xmalloc((size_t)(hc * D) * sizeof(float));
            for (int64_t c = 0; c < hc; c++) memcpy(row + c * D, im->rows + i * D, (size_t)D * sizeof(float));
            s->ops->upload(s->ops, h + (s->seq_row0[q] + i) * hc * D, row, (size_t)(hc * D) * sizeof(float));
        }
    }
    free(row);
}

static void free_step(tide_step *s) {
    free(s->seq_row0);
    free(s->row_seq);
    free(s->row_pos);
    free(s->seq_pos0);
    free(s->win_lo);
    free(s->dec);
    free(s->pub0);
    free(s->topk);
    free(s->topk_n);
    free(s->topk_valid);
    free(s->cand);
    free(s->row_img);
}

/* The step's row bookkeeping: every row of every sequence, in order. */
static void init_rows(tide_step *s, tide_step_seq *seqs, int n_seqs) {
    s->seq_row0 = tide_xmalloc((size_t)(n_seqs + 1) * sizeof(int64_t));
    s->seq_pos0 = tide_xmalloc((size_t)n_seqs * sizeof(int64_t));
    s->win_lo = tide_xmalloc((size_t)n_seqs * sizeof(int64_t));
    s->dec = tide_xmalloc((size_t)n_seqs);
    s->pub0 = tide_xmalloc((size_t)n_seqs * sizeof(int32_t));
    for (int q = 0; q < n_seqs; q++) {
        const tide_seq_cache *c = seqs[q].cache;
        s->dec[q] = c->ckpt && c->ckpt->decode_rows;
        s->pub0[q] = c->published;
        s->seq_row0[q] = s->rows;
        s->rows += seqs[q].n_tokens;
        s->seq_pos0[q] = seqs[q].cache->pos;
        s->win_lo[q] = seqs[q].cache->ring_lo;
    }
    s->seq_row0[n_seqs] = s->rows;
    s->row_seq = tide_xmalloc((size_t)s->rows * sizeof(int32_t));
    s->row_pos = tide_xmalloc((size_t)s->rows * sizeof(int64_t));
    for (int q = 0; q < n_seqs; q++)
        for (int64_t i = 0; i < seqs[q].n_tokens; i++) {
            s->row_seq[s->seq_row0[q] + i] = q;
            s->row_pos[s->seq_row0[q] + i] = seqs[q].cache->pos + i;
            if (s->img && s->img[q].types && s->img[q].types[i] >= 0) {
                if (!s->row_img && !(s->row_img = calloc((size_t)s->rows, 1))) abort();
                s->row_img[s->seq_row0[q] + i] = 1;
            }
        }
    int64_t itk = s->m->cfg.text.index_topk > 0 ? s->m->cfg.text.index_topk : 1;
    s->topk = tide_xmalloc((size_t)(s->rows * itk) * sizeof(int32_t));
    s->topk_n = calloc((size_t)s->rows, sizeof(int32_t));
    s->topk_valid = calloc((size_t)s->rows, sizeof(int32_t));
    if (!s->topk_n || !s->topk_valid) abort();
}

/* Keeps rows keep[0..n) (ascending) of a [rows][width]-byte array, in place. */
static void keep_rows(void *base, size_t width, const int64_t *keep, int64_t n) {
    if (!base) return;
    for (int64_t i = 0; i < n; i++)
        if (keep[i] != i) memmove((char *)base + (size_t)i * width, (char *)base + (size_t)keep[i] * width, width);
}

/* The same for an array in the backend's memory, through scratch (which
 * may not overlap it). */
static void keep_rows_dev(const tide_ops *ops, void *base, size_t width, const int64_t *keep, int64_t n,
                          void *scratch) {
    ops->gather_rows(ops, base, width, keep, n, scratch);
    ops->copy(ops, base, scratch, (size_t)n * width);
}

/* What the rows of the step carry from layer to layer. */
typedef struct {
    float *h, *pre_mix;
    int64_t *erows;  /* engram hash rows, NULL without engram */
    int64_t *row_of; /* [rows] the row's index in the full step (for dspark_in) */
} step_rows;

/* The decoder variant: from the first layer above the last KV source on,
 * rows below their sequence's tail_lo leave the step (those layers produce
 * no global KV, and no logits are asked of those rows), and those layers
 * have no window entries below tail_lo. */
static void enter_upper_layers(tide_step *s, step_rows *sr) {
    const tide_model *m = s->m;
    const tide_text_config *c = &m->cfg.text;
    int64_t *keep = tide_xmalloc((size_t)(s->rows ? s->rows : 1) * sizeof(int64_t));
    int64_t n = 0;
    for (int q = 0; q < s->n_seqs; q++) {
        const tide_seq_cache *cache = s->seqs[q].cache;
        int64_t lo = cache->tail_lo, first = -1;
        s->win_lo[q] = lo > cache->ring_lo ? lo : cache->ring_lo;
        for (int64_t r = s->seq_row0[q]; r < s->seq_row0[q + 1]; r++)
            if (s->row_pos[r] >= lo) {
                if (first < 0) first = s->row_pos[r];
                keep[n++] = r;
            }
        s->seq_pos0[q] = first >= 0 ? first : cache->pos + s->seqs[q].n_tokens;
    }
    int64_t removed = s->rows - n;
    if (removed > 0) {
        int64_t hc = c->hc_mult, D = c->hidden_size, itk = c->index_topk > 0 ? c->index_topk : 1;
        int64_t per_e = m->has_engram ? (int64_t)m->engram.n_layers * m->engram.n_cols : 0;
        keep_rows_dev(s->ops, sr->h, (size_t)(hc * D) * sizeof(float), keep, n, s->fx->buf[FB_RES]);
        keep_rows_dev(s->ops, sr->pre_mix, (size_t)hc * sizeof(float), keep, n, s->fx->buf[FB_PRE]);
        keep_rows(sr->erows, (size_t)per_e * sizeof(int64_t), keep, n);
        keep_rows(sr->row_of, sizeof(int64_t), keep, n);
        keep_rows(s->row_seq, sizeof(int32_t), keep, n);
        keep_rows(s->row_pos, sizeof(int64_t), keep, n);
        keep_rows(s->topk, (size_t)itk * sizeof(int32_t), keep, n);
        keep_rows(s->topk_n, sizeof(int32_t), keep, n);
        keep_rows(s->topk_valid, sizeof(int32_t), keep, n);
        keep_rows(s->row_img, 1, keep, n);
        if (s->has_cand) keep_rows(s->cand, (size_t)s->cand_w, keep, n);
        s->rows = n;
        for (int q = 0, r = 0; q < s->n_seqs; q++) {
            s->seq_row0[q] = r;
            while (r < n && s->row_seq[r] == q) r++;
        }
        s->seq_row0[s->n_seqs] = n;
    }
    free(keep);
}

/* The mean over hc copies of each row's block input, for DSpark. */
static void record_dspark(const tide_step *s, const step_rows *sr, int ti, float *dspark_in) {
    const tide_text_config *c = &s->m->cfg.text;
    int64_t D = c->hidden_size, hc = c->hc_mult, n_t = c->n_dspark_target_layer_ids;
    float *mean = tide_xmalloc((size_t)(s->rows * D) * sizeof(float));
    s->ops->hc_mean(s->ops, sr->h, s->rows, (int)hc, D, s->fx->buf[FB_Y]);
    s->ops->download(s->ops, mean, s->fx->buf[FB_Y], (size_t)(s->rows * D) * sizeof(float));
    for (int64_t r = 0; r < s->rows; r++)
        memcpy(dspark_in + (sr->row_of[r] * n_t + ti) * D, mean + r * D, (size_t)D * sizeof(float));
    free(mean);
}

/* Final collapse, norm and head for the rows asked for. */
static void head(const tide_step *s, const step_rows *sr, float *logits) {
    const tide_model *m = s->m;
    const tide_text_config *c = &m->cfg.text;
    int64_t D = c->hidden_size, hc = c->hc_mult, rows = s->rows;
    float *x = s->fx->buf[FB_X], *xl = s->fx->buf[FB_Y];
    s->ops->hc_pre(s->ops, sr->h, rows, (int)hc, D, sr->pre_mix, x);
    s->ops->rmsnorm(s->ops, s->pool, x, rows, D, m->norm, c->rms_norm_eps, x);
    int64_t nl = 0, *pick = tide_xmalloc((size_t)(rows ? rows : 1) * sizeof(int64_t));
    for (int q = 0; q < s->n_seqs; q++) {
        /* validation made sure the rows asked for ran every layer */
        int64_t r0 = s->seq_row0[q], n = s->seq_row0[q + 1] - r0;
        if (s->seqs[q].logits == TIDE_LOGITS_LAST) pick[nl++] = r0 + n - 1;
        else if (s->seqs[q].logits == TIDE_LOGITS_ALL)
            for (int64_t i = 0; i < n; i++) pick[nl++] = r0 + i;
    }
    s->ops->gather_rows(s->ops, x, (size_t)D * sizeof(float), pick, nl, xl);
    /* the logits land in the caller's host array (the backend copies them out) */
    s->ops->linear(s->ops, s->pool, &m->head, xl, nl, logits, 0);
    free(pick);
}

/* Everything that can fail, before any state changes: KV blocks, engram
 * hashes, the token history. */
static int prepare(tide_step *s, int64_t **erows, tide_status *st) {
    const tide_model *m = s->m;
    for (int q = 0; q < s->n_seqs; q++)
        for (int k = 0; k < m->n_kv_src; k++) {
            int r = m->cfg.roles[m->kv_src_layer[k]].compress_ratio;
            int64_t end = s->seqs[q].cache->pos + s->seqs[q].n_tokens;
            /* frozen positions are already in the table: nothing to add */
            if (tide_kv_reserve(&s->fx->kv, &s->seqs[q].cache->tables[k], end / r, st) != 0)
                return tide_fail_ctx(st, "forward");
        }
    if (m->has_engram) {
        *erows = tide_xmalloc((size_t)(s->rows * m->engram.n_layers * m->engram.n_cols) * sizeof(int64_t));
        if (engram_rows(s, *erows, st) != 0) return -1;
    }
    for (int q = 0; q < s->n_seqs; q++)
        if (tide_seq_cache_push_tokens(s->seqs[q].cache, s->seqs[q].tokens, s->seqs[q].n_tokens, st) != 0)
            return -1;
    return 0;
}

int tide_forward(tide_fwd_ctx *fx, tide_step_seq *seqs, int n_seqs, tide_step_out *out,
                 tide_status *st) {
    return tide_forward_images(fx, seqs, n_seqs, NULL, out, st);
}

int tide_forward_images(tide_fwd_ctx *fx, tide_step_seq *seqs, int n_seqs, const tide_step_image *img,
                        tide_step_out *out, tide_status *st) {
    const tide_model *m = fx->m;
    const tide_text_config *c = &m->cfg.text;
    if (validate(fx, seqs, n_seqs, img, st) != 0) return -1;
    tide_step s;
    memset(&s, 0, sizeof s);
    s.img = img;
    s.fx = fx;
    s.m = m;
    s.ops = fx->ops;
    s.pool = fx->pool;
    s.seqs = seqs;
    s.n_seqs = n_seqs;
    init_rows(&s, seqs, n_seqs);
    step_rows sr = {0};
    /* the buffers first: prepare() changes the sequences' state */
    if (tide_fwd_reserve(fx, s.rows, st) != 0) {
        free_step(&s);
        return -1;
    }
    if (prepare(&s, &sr.erows, st) != 0) {
        free(sr.erows);
        free_step(&s);
        return -1;
    }

    int64_t D = c->hidden_size, hc = c->hc_mult, rows = s.rows;
    sr.h = fx->buf[FB_H];
    sr.pre_mix = fx->buf[FB_PRE_MIX];
    sr.row_of = tide_xmalloc((size_t)rows * sizeof(int64_t));
    float *pm = calloc((size_t)(rows * hc), sizeof(float));
    if (!pm) abort();
    for (int64_t r = 0; r < rows; r++) {
        pm[r * hc] = 1.0f; /* one-hot on copy 0 */
        sr.row_of[r] = r;
    }
    fx->ops->upload(fx->ops, sr.pre_mix, pm, (size_t)(rows * hc) * sizeof(float));
    free(pm);
    embed(&s, sr.h);
    float *dspark_in = out ? out->dspark_in : NULL;
    for (int64_t r = 0; r < rows && dspark_in; r++)
        if (s.row_pos[r] < seqs[s.row_seq[r]].cache->tail_lo) {
            /* rows that will leave early keep zeros for the targets above */
            memset(dspark_in, 0, (size_t)(rows * c->n_dspark_target_layer_ids * D) * sizeof(float));
            break;
        }

    int upper0 = tide_fwd_last_kv_layer(fx) + 1;
    int rc = 0;
    for (int i = 0; i < m->n_backbone && rc == 0; i++) {
        const tide_layer *L = &m->layers[i];
        if (i == upper0) enter_upper_layers(&s, &sr);
        if (s.rows == 0) break; /* every row left: nothing above needs running */
        if (L->has_engram) {
            int64_t per = (int64_t)m->engram.n_layers * m->engram.n_cols;
            rc = engram_layer(&s, L, sr.erows + L->role->engram_index * m->engram.n_cols, per, sr.h, st);
            if (rc != 0) break; /* cannot happen for validated rows; reported anyway */
        }
        if (L->role->is_dspark_target && dspark_in) record_dspark(&s, &sr, L->role->dspark_target_index, dspark_in);
        tide_block(&s, i, sr.h, sr.pre_mix, NULL, NULL);
    }
    if (rc == 0 && out && out->logits && s.rows > 0) head(&s, &sr, out->logits);
    if (rc == 0)
        for (int q = 0; q < n_seqs; q++) {
            tide_seq_cache *sc = seqs[q].cache;
            sc->pos += seqs[q].n_tokens;
            for (int k = 0; k < m->n_kv_src; k++)
                sc->n_comp[k] = sc->pos / m->cfg.roles[m->kv_src_layer[k]].compress_ratio;
        }
    free(sr.erows);
    free(sr.row_of);
    free_step(&s);
    return rc;
}
