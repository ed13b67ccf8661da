/* The device-resident composed step (dev_step.h): planning, synthetic
 * contents on the device, and the per-layer kernel sequence.
 *
 * Memory: three device allocations made once: the weights, the KV arena
 * (f32 rows of head_dim: every layer's window, then every KV source's
 * latents per pool) with the index keys beside it, and the workspace (step
 * buffers sized for the step's rows). A bump planner lays each out twice:
 * a counting pass, then the real one over the allocation, so sizes and
 * offsets cannot disagree. */
#include "backend/cuda/dev_step.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define DS_ALIGN 256
#define DS_MAX_FILLS 65536
#define DS_MAX_EVENTS 2048

typedef struct {
    void *p;
    size_t count;
    int kind;
    float scale;
    int32_t lo, hi;
} ds_fill;

/* Bump planner: base NULL counts, else hands out slices of base. */
typedef struct {
    char *base;
    size_t off;
    ds_fill *fills; /* NULL: fills not recorded */
    int n_fills;
    int overflow;
} ds_plan;

static void *take(ds_plan *p, size_t bytes) {
    size_t at = (p->off + DS_ALIGN - 1) / DS_ALIGN * DS_ALIGN;
    p->off = at + (bytes ? bytes : 1);
    return p->base ? p->base + at : NULL;
}

/* Where the next slice will start (aligned), without taking anything. */
static void *here(ds_plan *p) {
    p->off = (p->off + DS_ALIGN - 1) / DS_ALIGN * DS_ALIGN;
    return p->base ? p->base + p->off : NULL;
}

/* A slice that is filled with synthetic contents once allocated. */
static void *take_fill(ds_plan *p, size_t count, size_t el, int kind, float scale, int32_t lo, int32_t hi) {
    void *v = take(p, count * el);
    if (p->base && p->fills) {
        if (p->n_fills >= DS_MAX_FILLS) p->overflow = 1;
        else p->fills[p->n_fills++] = (ds_fill){v, count, kind, scale, lo, hi};
    }
    return v;
}

/* ---- weights ---- */

typedef struct {
    uint8_t *w, *s; /* e4m3 [n][k], e8m0 [ceil(n/32)][k/32] (FP8) or e2m1 [n][k/2], e8m0 [n][k/32] (FP4) */
    int64_t n, k;
} ds_qw;

typedef struct {
    float *hc_fn[2], *hc_scale[2], *hc_base[2];
    float *attn_norm, *ffn_norm, *q_norm, *kv_norm, *sink;
    ds_qw wq_a, wq_b, wkv, wo_b, sh_w1, sh_w3, sh_w2;
    uint16_t *wo_a; /* [G][OR][H*hd/G] bf16 */
    uint16_t *c_wkv, *c_wgate, *i_wproj, *i_wk, *gate;
    float *c_norm, *i_knorm, *gate_bias;
    ds_qw i_wq_b, e_wkv;
    float *e_w; /* engram mix weights [hc][D] */
    char *experts; /* start of take_experts' walk */
    tide_cuda_experts *ex;
} ds_layer;

/* An FP8 weight [n][k] (k a multiple of 32) scaled so that a row's dot
 * product with an O(1) activation stays O(1). */
static ds_qw take_fp8(ds_plan *p, int64_t n, int64_t k) {
    ds_qw q = {NULL, NULL, n, k};
    int code = 127 - (int)lround(log2(sqrt((double)k)));
    q.w = take_fill(p, (size_t)(n * k), 1, TIDE_CUDA_FILL_E4M3, 1.0f, 0, 0);
    q.s = take_fill(p, (size_t)(((n + 31) / 32) * (k / 32)), 1, TIDE_CUDA_FILL_CODE, 0, code, code);
    return q;
}

/* FP4 expert matrix [n][k]: packed e2m1 (uniform codes, RMS about 2.9) */
static void take_fp4(ds_plan *p, int64_t n, int64_t k, const uint8_t **w, const uint8_t **s) {
    int code = 127 - (int)lround(log2(2.9 * sqrt((double)k)));
    *w = take_fill(p, (size_t)(n * k / 2), 1, TIDE_CUDA_FILL_BYTES, 0, 0, 0);
    *s = take_fill(p, (size_t)(n * (k / 32)), 1, TIDE_CUDA_FILL_CODE, 0, code, code);
}

/* One layer's routed experts, in one walk: w1, w3 [I][D] and w2 [D][I] per
 * expert. Planning takes them; over the allocation the same walk gives the
 * expert table's pointers (ew may be NULL). */
static void take_experts(ds_plan *p, int n_experts, int64_t D, int64_t I, tide_cuda_expert_weights *ew) {
    for (int e = 0; e < n_experts; e++) {
        tide_cuda_expert_weights x;
        take_fp4(p, I, D, &x.w1, &x.w1_scale);
        take_fp4(p, I, D, &x.w3, &x.w3_scale);
        take_fp4(p, D, I, &x.w2, &x.w2_scale);
        if (ew) ew[e] = x;
    }
}

static uint16_t *take_bf16(ds_plan *p, int64_t n, int64_t k) {
    return take_fill(p, (size_t)(n * k), 2, TIDE_CUDA_FILL_BF16, (float)(1.0 / sqrt((double)k)), 0, 0);
}

static float *take_f32(ds_plan *p, int64_t n, float scale) {
    return take_fill(p, (size_t)n, 4, TIDE_CUDA_FILL_F32, scale, 0, 0);
}

/* ---- the step ---- */

struct tide_dstep {
    tide_config cfg;
    tide_dstep_opts o;
    tide_cuda_stream stream;
    tide_cuda_graph graph;
    int64_t rows, n_pools;
    int64_t D, H, hd, rd, QR, G, OR, IH, ID, I, hc, W, K, V, mix;
    int64_t ecols, ehd; /* engram: columns and head dim */
    int n_layers;
    ds_layer L[TIDE_MAX_LAYERS];
    float *head;   /* [V][D] f32 */
    float *norm;   /* final norm [D] */
    size_t weight_bytes, pool_bytes, work_bytes;
    char *wmem, *pmem, *work;
    /* KV arena: f32 rows of hd; window rows first, then latents */
    float *kv_arena;
    int64_t kv_rows;
    int64_t lat_row0[TIDE_MAX_LAYERS]; /* by KV source layer: first latent row of pool 0 */
    int64_t n_lat[TIDE_MAX_LAYERS];    /* by KV source layer: latents per pool */
    float *keys;                       /* index keys, f32 rows of ID */
    int64_t key_row0[TIDE_MAX_LAYERS]; /* by KV source layer owning keys */
    /* Decode with fewer pools than sequences: sequences share a pool, and a
     * compressor write into the shared pool would race with the other
     * sequences' reads of it in the same step (graph replay and the eager
     * step then differ). Their writes go to private sink rows that nobody
     * reads instead (first sink latent / key row; -1 when pools are not shared). */
    int64_t sink_lat0, sink_key0;
    /* per-row tables (device, int32) */
    int32_t *win_base[TIDE_MAX_LAYERS], *win_dst[TIDE_MAX_LAYERS], *win_len;
    int32_t *lat_base[TIDE_MAX_LAYERS]; /* by KV source layer */
    int32_t *lat_dst[TIDE_MAX_LAYERS];  /* compressor writes: [groups] rows of the arena */
    int32_t *key_dst[TIDE_MAX_LAYERS];
    int64_t groups[TIDE_MAX_LAYERS];    /* compressor groups per step, by KV source layer */
    /* step buffers */
    float *h0, *h, *h2, *pre, *post, *comb, *pre2, *post2, *comb2;
    float *xa, *xf, *qr, *q, *kv, *att, *og, *ot, *ocat, *ya, *yf, *glog, *rw, *g, *u, *hs;
    float *ckv, *cscore, *clat, *ckey, *iq, *iw, *score, *emb, *emb_src, *kve, *logits, *cs;
    uint8_t *xq, *xs;
    uint16_t *t16, *sh16;
    int32_t *ridx, *topk, *aidx, *amax;
    void *ex_ws;
    void *hc_ws; /* the fast hc_mixes' split-K partials */
    size_t hc_ws_bytes;
    size_t ex_ws_bytes;
    int64_t score_w; /* widest scored key count */
    int64_t launches;
    /* per-phase profile (tide_dstep_profile): events at phase starts */
    int prof_on, n_ev;
    void *ev[DS_MAX_EVENTS];
    int ev_phase[DS_MAX_EVENTS];
};

static int layer_kv_src(const tide_dstep *s, int i) { return s->cfg.roles[i].kv_source; }

/* Keys scored by a row at an index source: all the key source's visible
 * keys, or the candidate positions for layers that use candidates. */
static int64_t keys_scored(const tide_dstep *s, int i) {
    const tide_layer_role *r = &s->cfg.roles[i];
    int ks = r->index_key_source >= 0 ? r->index_key_source : r->kv_source;
    int64_t n = s->n_lat[ks];
    int64_t cap = s->cfg.text.candidate_topk_blocks * s->cfg.text.candidate_block_size;
    if (r->uses_candidates && cap > 0 && n > cap) n = cap;
    return n;
}

static void plan_weights(tide_dstep *s, ds_plan *p) {
    const tide_text_config *x = &s->cfg.text;
    int64_t D = s->D, hc = s->hc, mix = s->mix;
    for (int i = 0; i < s->n_layers; i++) {
        const tide_layer_role *r = &s->cfg.roles[i];
        ds_layer *L = &s->L[i];
        for (int k = 0; k < 2; k++) {
            L->hc_fn[k] = take_f32(p, mix * hc * D, (float)(1.0 / sqrt((double)(hc * D))));
            L->hc_scale[k] = take_f32(p, 3, 0.1f);
            L->hc_base[k] = take_f32(p, mix, 0.1f);
        }
        L->attn_norm = take_f32(p, D, 1.0f);
        L->ffn_norm = take_f32(p, D, 1.0f);
        L->q_norm = take_f32(p, s->QR, 1.0f);
        L->kv_norm = take_f32(p, s->hd, 1.0f);
        L->sink = take_f32(p, s->H, 1.0f);
        L->wq_a = take_fp8(p, s->QR, D);
        L->wq_b = take_fp8(p, s->H * s->hd, s->QR);
        L->wkv = take_fp8(p, s->hd, D);
        L->wo_a = take_bf16(p, s->G * s->OR, s->H * s->hd / s->G);
        L->wo_b = take_fp8(p, D, s->G * s->OR);
        L->gate = take_bf16(p, r->n_routed_experts, D);
        L->gate_bias = take_f32(p, r->n_routed_experts, 0.01f);
        L->sh_w1 = take_fp8(p, s->I, D);
        L->sh_w3 = take_fp8(p, s->I, D);
        L->sh_w2 = take_fp8(p, D, s->I);
        if (r->is_kv_source) {
            L->c_wkv = take_bf16(p, s->hd, D);
            if (r->compress_ratio > 1) L->c_wgate = take_bf16(p, s->hd, D);
            L->c_norm = take_f32(p, s->hd, 1.0f);
        }
        if (r->is_index_source) {
            L->i_wq_b = take_fp8(p, s->IH * s->ID, s->QR);
            L->i_wproj = take_bf16(p, s->IH, D);
            if (r->indexer_owns_keys) {
                L->i_wk = take_bf16(p, s->ID, s->hd);
                L->i_knorm = take_f32(p, s->ID, 1.0f);
            }
        }
        if (r->has_engram) {
            L->e_wkv = take_fp8(p, (hc + 1) * D, s->ecols * s->ehd);
            L->e_w = take_f32(p, hc * D, 1.0f);
        }
        L->experts = here(p); /* the experts' walk starts here (make_experts replays it) */
        take_experts(p, r->n_routed_experts, D, s->I, NULL);
    }
    s->head = take_f32(p, s->V * D, (float)(1.0 / sqrt((double)D)));
    s->norm = take_f32(p, D, 1.0f);
    (void)x;
}

/* Rows of one pool: latents of every KV source. */
static int64_t pool_rows(const tide_dstep *s) {
    int64_t n = 0;
    for (int i = 0; i < s->n_layers; i++)
        if (s->cfg.roles[i].is_kv_source) n += s->n_lat[i];
    return n;
}
static int64_t pool_key_rows(const tide_dstep *s) {
    int64_t n = 0;
    for (int i = 0; i < s->n_layers; i++)
        if (s->cfg.roles[i].is_kv_source && s->cfg.roles[i].indexer_owns_keys) n += s->n_lat[i];
    return n;
}
static int64_t window_rows(const tide_dstep *s) {
    return s->o.prefill ? (int64_t)s->n_layers * s->rows : (int64_t)s->n_layers * s->rows * s->W;
}

static void plan_pools(tide_dstep *s, ds_plan *p) {
    int64_t wr = window_rows(s), lr = pool_rows(s) * s->n_pools, kr = pool_key_rows(s) * s->n_pools;
    int64_t Rc = s->rows < 64 ? 64 : s->rows;
    int shared = !s->o.prefill && s->n_pools < s->rows;
    s->sink_lat0 = shared ? wr + lr : -1;
    s->sink_key0 = shared ? kr : -1;
    if (shared) {
        lr += Rc; /* one sink row per compressor group of the step */
        kr += Rc;
    }
    s->kv_rows = wr + lr;
    s->kv_arena = take_fill(p, (size_t)(s->kv_rows * s->hd), 4, TIDE_CUDA_FILL_F32, 1.0f, 0, 0);
    s->keys = take_fill(p, (size_t)((kr > 0 ? kr : 1) * s->ID), 4, TIDE_CUDA_FILL_F32, 1.0f, 0, 0);
    int64_t at = wr, kat = 0;
    for (int i = 0; i < s->n_layers; i++) {
        const tide_layer_role *r = &s->cfg.roles[i];
        if (!r->is_kv_source) continue;
        s->lat_row0[i] = at; /* pool q's latents at lat_row0 + q * pool_rows */
        at += s->n_lat[i];
        if (r->indexer_owns_keys) {
            s->key_row0[i] = kat;
            kat += s->n_lat[i];
        }
    }
}

static void plan_work(tide_dstep *s, ds_plan *p) {
    int64_t R = s->rows, Rc = R < 64 ? 64 : R, D = s->D, hc = s->hc;
    int64_t maxk = D, maxn = D;
    int64_t cand[] = {s->QR, s->H * s->hd, s->I, s->G * s->OR, s->ecols * s->ehd, (hc + 1) * D, s->IH * s->ID};
    for (size_t j = 0; j < sizeof cand / sizeof cand[0]; j++) {
        if (cand[j] > maxk) maxk = cand[j];
        if (cand[j] > maxn) maxn = cand[j];
    }
    s->h0 = take_fill(p, (size_t)(R * hc * D), 4, TIDE_CUDA_FILL_F32, 1.0f, 0, 0);
    s->h = take(p, (size_t)(R * hc * D) * 4);
    s->h2 = take(p, (size_t)(R * hc * D) * 4);
    s->pre = take(p, (size_t)(R * hc) * 4);
    s->post = take(p, (size_t)(R * hc) * 4);
    s->comb = take(p, (size_t)(R * hc * hc) * 4);
    s->pre2 = take(p, (size_t)(R * hc) * 4);
    s->post2 = take(p, (size_t)(R * hc) * 4);
    s->comb2 = take(p, (size_t)(R * hc * hc) * 4);
    s->hc_ws_bytes = tide_cuda_hc_mixes_fast_workspace(R, (int)hc, D);
    s->hc_ws = take(p, s->hc_ws_bytes);
    s->xa = take(p, (size_t)(R * D) * 4);
    s->xf = take(p, (size_t)(R * D) * 4);
    s->xq = take(p, (size_t)(R * maxk));
    s->xs = take(p, (size_t)(R * (maxk / 32 + 1)));
    s->t16 = take(p, (size_t)(R * maxn) * 2);
    s->qr = take(p, (size_t)(R * s->QR) * 4);
    s->q = take(p, (size_t)(R * s->H * s->hd) * 4);
    s->kv = take(p, (size_t)(R * s->hd) * 4);
    s->att = take(p, (size_t)(R * s->H * s->hd) * 4);
    s->og = take(p, (size_t)(R * s->H * s->hd) * 4);
    s->ot = take(p, (size_t)(R * s->G * s->OR) * 4);
    s->ocat = take(p, (size_t)(R * s->G * s->OR) * 4);
    s->ya = take(p, (size_t)(R * D) * 4);
    s->yf = take(p, (size_t)(R * D) * 4);
    int64_t E = 1, k = 1;
    for (int i = 0; i < s->n_layers; i++) {
        if (s->cfg.roles[i].n_routed_experts > E) E = s->cfg.roles[i].n_routed_experts;
        if (s->cfg.roles[i].num_experts_per_tok > k) k = s->cfg.roles[i].num_experts_per_tok;
    }
    s->glog = take(p, (size_t)(R * E) * 4);
    s->ridx = take(p, (size_t)(R * k) * 4);
    s->rw = take(p, (size_t)(R * k) * 4);
    s->g = take(p, (size_t)(R * s->I) * 4);
    s->u = take(p, (size_t)(R * s->I) * 4);
    s->hs = take(p, (size_t)(R * s->I) * 4);
    s->sh16 = take(p, (size_t)(R * D) * 2);
    s->ckv = take(p, (size_t)(Rc * s->hd) * 4);
    s->cscore = take(p, (size_t)(Rc * s->hd) * 4);
    s->clat = take(p, (size_t)(Rc * s->hd) * 4);
    s->ckey = take(p, (size_t)(Rc * s->ID) * 4);
    s->iq = take(p, (size_t)(R * s->IH * s->ID) * 4);
    s->iw = take(p, (size_t)(R * s->IH) * 4);
    s->score = take(p, (size_t)(R * (s->score_w > 0 ? s->score_w : 1)) * 4);
    s->topk = take(p, (size_t)(R * (s->K > 0 ? s->K : 1)) * 4);
    s->aidx = take(p, (size_t)(R * (s->W + s->K)) * 4);
    s->emb = take(p, (size_t)(R * s->ecols * s->ehd) * 4 + 16);
    s->emb_src = take_fill(p, (size_t)(R * s->ecols * s->ehd) + 4, 4, TIDE_CUDA_FILL_F32, 1.0f, 0, 0);
    s->kve = take(p, (size_t)(R * (hc + 1) * D) * 4);
    s->logits = take(p, (size_t)((s->o.prefill ? 1 : R) * s->V) * 4);
    s->amax = take(p, (size_t)R * 4);
    s->cs = take_fill(p, (size_t)(R * s->rd), 4, TIDE_CUDA_FILL_F32, 0.5f, 0, 0);
    s->ex_ws = take(p, s->ex_ws_bytes);
    s->win_len = take(p, (size_t)R * 4);
    for (int i = 0; i < s->n_layers; i++) {
        s->win_base[i] = take(p, (size_t)R * 4);
        s->win_dst[i] = take(p, (size_t)R * 4);
        if (s->cfg.roles[i].is_kv_source) {
            s->lat_base[i] = take(p, (size_t)R * 4);
            s->lat_dst[i] = take(p, (size_t)Rc * 4);
            s->key_dst[i] = take(p, (size_t)Rc * 4);
        }
    }
}

/* Host-computed per-row tables, uploaded once. */
static int upload_tables(tide_dstep *s, tide_status *st) {
    int64_t R = s->rows, Rc = R < 64 ? 64 : R, W = s->W, prows = pool_rows(s), pkeys = pool_key_rows(s);
    int32_t *t = malloc((size_t)Rc * sizeof(int32_t));
    if (!t) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
    int rc = 0;
    for (int64_t r = 0; r < R; r++) {
        int64_t pos = s->o.prefill ? r : s->o.context;
        t[r] = (int32_t)(pos + 1 < W ? pos + 1 : W);
    }
    rc |= tide_cuda_upload(s->win_len, t, (size_t)R * 4, st);
    for (int i = 0; i < s->n_layers && rc == 0; i++) {
        for (int64_t r = 0; r < R; r++) {
            if (s->o.prefill) {
                int64_t lo = r - W + 1 < 0 ? 0 : r - W + 1;
                t[r] = (int32_t)((int64_t)i * R + lo);
            } else {
                t[r] = (int32_t)(((int64_t)i * R + r) * W);
            }
        }
        rc |= tide_cuda_upload(s->win_base[i], t, (size_t)R * 4, st);
        for (int64_t r = 0; r < R; r++)
            t[r] = (int32_t)(s->o.prefill ? (int64_t)i * R + r : ((int64_t)i * R + r) * W + s->o.context % W);
        rc |= tide_cuda_upload(s->win_dst[i], t, (size_t)R * 4, st);
        const tide_layer_role *ro = &s->cfg.roles[i];
        if (!ro->is_kv_source) continue;
        for (int64_t r = 0; r < R; r++) {
            int64_t pool = s->o.prefill ? 0 : r % s->n_pools;
            t[r] = (int32_t)(s->lat_row0[i] + pool * prows);
        }
        rc |= tide_cuda_upload(s->lat_base[i], t, (size_t)R * 4, st);
        /* compressor writes: group g's latent goes to its pool's newest slot
         * (decode) or to latent g (prefill) */
        for (int64_t g = 0; g < Rc; g++) {
            int64_t pool = s->o.prefill ? 0 : g % s->n_pools;
            int64_t slot = s->o.prefill ? (g < s->n_lat[i] ? g : s->n_lat[i] - 1) : s->n_lat[i] - 1;
            t[g] = (int32_t)(s->sink_lat0 >= 0 ? s->sink_lat0 + g : s->lat_row0[i] + pool * prows + slot);
        }
        rc |= tide_cuda_upload(s->lat_dst[i], t, (size_t)Rc * 4, st);
        for (int64_t g = 0; g < Rc; g++) {
            int64_t pool = s->o.prefill ? 0 : g % s->n_pools;
            int64_t slot = s->o.prefill ? (g < s->n_lat[i] ? g : s->n_lat[i] - 1) : s->n_lat[i] - 1;
            int64_t kd = s->sink_key0 >= 0 ? s->sink_key0 + g : s->key_row0[i] + pool * pkeys + slot;
            t[g] = ro->indexer_owns_keys ? (int32_t)kd : -1;
        }
        rc |= tide_cuda_upload(s->key_dst[i], t, (size_t)Rc * 4, st);
    }
    free(t);
    return rc ? -1 : 0;
}

static int check_shape(const tide_dstep *s, tide_status *st) {
    const tide_text_config *x = &s->cfg.text;
    if (s->D % 32 || s->QR % 32 || s->hd % 32 || s->I % 32 || s->ID % 32 || (s->H * s->hd) % s->G ||
        (s->G * s->OR) % 32 || (s->ecols * s->ehd) % 32 || s->rd % 2 || s->rd > s->hd)
        return tide_fail(st, TIDE_ERR_UNSUPPORTED, "device step: dimensions must be multiples of 32");
    if (s->hd > TIDE_CUDA_ATTN_MAX_DIM || s->hc > TIDE_CUDA_HC_MAX || s->hc * s->D > TIDE_CUDA_HC_MAX_N)
        return tide_fail(st, TIDE_ERR_UNSUPPORTED, "device step: head_dim or hc x hidden too large for the kernels");
    for (int i = 0; i < s->n_layers; i++) {
        const tide_layer_role *r = &s->cfg.roles[i];
        if (r->compress_ratio > 64 || r->n_routed_experts < 1 || r->n_routed_experts > TIDE_CUDA_EXPERTS_MAX ||
            r->num_experts_per_tok < 1 || r->num_experts_per_tok > TIDE_CUDA_EXPERTS_MAX_K ||
            r->num_experts_per_tok > r->n_routed_experts)
            return tide_fail(st, TIDE_ERR_UNSUPPORTED, "device step: layer %d: ratio or expert counts out of range",
                             i);
    }
    if (s->rows > 65535 && s->cfg.text.index_topk > 0)
        return tide_fail(st, TIDE_ERR_UNSUPPORTED, "device step: %lld rows (the indexer takes up to 65535)",
                         (long long)s->rows);
    (void)x;
    return 0;
}

void tide_dstep_destroy(tide_dstep *s) {
    if (!s) return;
    tide_cuda_graph_destroy(s->graph);
    for (int j = 0; j < DS_MAX_EVENTS; j++) tide_cuda_event_destroy(s->ev[j]);
    for (int i = 0; i < s->n_layers; i++) tide_cuda_experts_destroy(s->L[i].ex);
    tide_cuda_free(s->wmem);
    tide_cuda_free(s->pmem);
    tide_cuda_free(s->work);
    tide_cuda_stream_destroy(s->stream);
    free(s);
}

static int run_fills(tide_dstep *s, ds_fill *f, int n, uint64_t seed, tide_status *st) {
    for (int j = 0; j < n; j++)
        if (tide_cuda_fill(f[j].p, f[j].count, f[j].kind, f[j].scale, f[j].lo, f[j].hi,
                           seed + 0x9e3779b97f4a7c15ULL * (uint64_t)(j + 1), s->stream, st) != 0)
            return -1;
    return 0;
}

/* Re-runs the fills of one planned region (its plan over the existing
 * allocation): the contents as tide_dstep_create left them. */
static int refill(tide_dstep *s, void (*plan)(tide_dstep *, ds_plan *), char *mem, size_t bytes, uint64_t seed,
                  tide_status *st) {
    ds_fill *fills = malloc(DS_MAX_FILLS * sizeof *fills);
    if (!fills) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
    ds_plan q = {mem, 0, fills, 0, 0};
    plan(s, &q);
    int rc = q.overflow || q.off != bytes
                 ? tide_fail(st, TIDE_ERR_INTERNAL, "device step: plan passes disagree (%zu vs %zu bytes)", q.off, bytes)
                 : run_fills(s, fills, q.n_fills, seed, st);
    free(fills);
    return rc;
}

static int alloc_filled(tide_dstep *s, void (*plan)(tide_dstep *, ds_plan *), char **mem, size_t *bytes,
                        uint64_t seed, tide_status *st) {
    ds_plan p = {0};
    plan(s, &p);
    *bytes = p.off;
    if (tide_cuda_malloc((void **)mem, p.off, st) != 0) return -1;
    ds_fill *fills = malloc(DS_MAX_FILLS * sizeof *fills);
    if (!fills) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
    ds_plan q = {*mem, 0, fills, 0, 0};
    plan(s, &q);
    int rc = q.overflow || q.off != p.off
                 ? tide_fail(st, TIDE_ERR_INTERNAL, "device step: plan passes disagree (%zu vs %zu bytes)", q.off, p.off)
                 : run_fills(s, fills, q.n_fills, seed, st);
    free(fills);
    return rc;
}

static size_t plan_size(tide_dstep *s, void (*plan)(tide_dstep *, ds_plan *)) {
    ds_plan p = {0};
    plan(s, &p);
    return p.off;
}

static int make_experts(tide_dstep *s, tide_status *st) {
    tide_cuda_expert_weights *ew = NULL;
    int rc = 0;
    for (int i = 0; i < s->n_layers && rc == 0; i++) {
        int E = s->cfg.roles[i].n_routed_experts;
        ew = realloc(ew, (size_t)E * sizeof *ew);
        if (!ew) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
        ds_plan p = {s->L[i].experts, 0, NULL, 0, 0};
        take_experts(&p, E, s->D, s->I, ew);
        rc = tide_cuda_experts_create(ew, E, s->D, s->I, &s->L[i].ex, st);
    }
    free(ew);
    return rc;
}

int tide_dstep_create(const tide_config *cfg, const tide_dstep_opts *o, tide_dstep **out, tide_status *st) {
    *out = NULL;
    if (!cfg || !o || cfg->text.num_hidden_layers < 1 || o->context < 1 || (!o->prefill && o->batch < 1))
        return tide_fail(st, TIDE_ERR_INVALID, "device step: need a config, context >= 1 and batch >= 1");
    tide_dstep *s = calloc(1, sizeof *s);
    if (!s) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
    s->cfg = *cfg;
    s->o = *o;
    const tide_text_config *x = &cfg->text;
    s->n_layers = (int)x->num_hidden_layers;
    s->rows = o->prefill ? o->context : o->batch;
    s->D = x->hidden_size;
    s->H = x->num_attention_heads;
    s->hd = x->head_dim;
    s->rd = x->qk_rope_head_dim;
    s->QR = x->q_lora_rank;
    s->G = x->o_groups;
    s->OR = x->o_lora_rank;
    s->IH = x->index_n_heads;
    s->ID = x->index_head_dim;
    s->I = x->moe_intermediate_size;
    s->hc = x->hc_mult;
    s->W = x->sliding_window;
    s->K = x->index_topk;
    s->V = x->vocab_size;
    s->mix = (2 + s->hc) * s->hc;
    s->ecols = (x->engram_max_ngram_size - 1) * x->engram_n_heads;
    s->ehd = x->engram_head_dim;
    if (s->ecols < 1 || s->ehd < 1) s->ecols = s->ehd = 32; /* no engram: a small unused buffer */
    if (check_shape(s, st) != 0) {
        free(s);
        return -1;
    }
    for (int i = 0; i < s->n_layers; i++)
        if (cfg->roles[i].is_kv_source) s->n_lat[i] = s->o.context / cfg->roles[i].compress_ratio;
    for (int i = 0; i < s->n_layers; i++) {
        if (cfg->roles[i].compress_ratio > 0 && s->n_lat[layer_kv_src(s, i)] < 1) {
            free(s);
            return tide_fail(st, TIDE_ERR_INVALID, "device step: context %lld is shorter than a compressed group",
                             (long long)o->context);
        }
        if (cfg->roles[i].is_index_source && keys_scored(s, i) > s->score_w) s->score_w = keys_scored(s, i);
        if (cfg->roles[i].is_kv_source) {
            int64_t gr = s->o.prefill ? s->rows / cfg->roles[i].compress_ratio
                                      : (s->rows >= cfg->roles[i].compress_ratio ? s->rows / cfg->roles[i].compress_ratio : 1);
            s->groups[i] = gr;
        }
    }
    if (tide_cuda_stream_create(&s->stream, st) != 0) {
        free(s);
        return -1;
    }
    int kmax = 1;
    for (int i = 0; i < s->n_layers; i++)
        if (cfg->roles[i].num_experts_per_tok > kmax) kmax = cfg->roles[i].num_experts_per_tok;
    /* The experts' workspace is known exactly only once an expert table
     * exists (tide_cuda_moe_experts_workspace, below); for the memory
     * budget, reserve twice cuda_kernels.h's estimate now. */
    s->ex_ws_bytes = (size_t)(s->rows * kmax) * (size_t)(5 * s->I + 2 * s->D) * 2 + (size_t)(s->rows * s->D) * 8 +
                     (1u << 20);

    size_t free_b = 0, total_b = 0;
    if (tide_cuda_mem_info(&free_b, &total_b, st) != 0) goto fail;
    size_t budget = o->mem_budget ? o->mem_budget : (size_t)((double)free_b * 0.9);
    s->weight_bytes = plan_size(s, plan_weights);
    s->n_pools = 1;
    s->work_bytes = plan_size(s, plan_work);
    size_t per_pool = (pool_rows(s) * s->hd + pool_key_rows(s) * s->ID) * 4;
    size_t fixed = s->weight_bytes + s->work_bytes + (size_t)window_rows(s) * (size_t)s->hd * 4 + (64u << 20);
    if (fixed + per_pool > budget) {
        tide_fail(st, TIDE_ERR_NOMEM,
                  "device step: weights %.1f GB + workspace %.1f GB + window %.1f GB + one KV pool %.2f GB exceed "
                  "the budget %.1f GB (%.1f GB free)",
                  s->weight_bytes / 1e9, s->work_bytes / 1e9, (double)window_rows(s) * s->hd * 4 / 1e9,
                  per_pool / 1e9, budget / 1e9, free_b / 1e9);
        goto fail;
    }
    if (o->prefill) s->n_pools = 1;
    else {
        int64_t fit = (int64_t)((budget - fixed) / (per_pool ? per_pool : 1));
        int64_t want = o->n_pools > 0 ? o->n_pools : o->batch;
        if (want > o->batch) want = o->batch;
        s->n_pools = want < fit ? want : fit;
        if (s->n_pools < 1) s->n_pools = 1;
    }
    if ((double)(window_rows(s) + pool_rows(s) * s->n_pools) > 2147483647.0) {
        tide_fail(st, TIDE_ERR_UNSUPPORTED, "device step: the KV arena exceeds 2^31 rows (int32 indices)");
        goto fail;
    }
    if (alloc_filled(s, plan_weights, &s->wmem, &s->weight_bytes, o->seed, st) != 0 ||
        alloc_filled(s, plan_pools, &s->pmem, &s->pool_bytes, o->seed ^ 0x5bd1e995ULL, st) != 0)
        goto fail;
    if (make_experts(s, st) != 0) goto fail;
    {
        size_t need = tide_cuda_moe_experts_workspace(s->L[0].ex, s->rows, kmax);
        if (need > s->ex_ws_bytes) s->ex_ws_bytes = need;
    }
    if (alloc_filled(s, plan_work, &s->work, &s->work_bytes, o->seed ^ 0x2545f4914f6cdd1dULL, st) != 0 ||
        upload_tables(s, st) != 0 || tide_cuda_stream_sync(s->stream, st) != 0)
        goto fail;
    *out = s;
    return 0;
fail:
    tide_dstep_destroy(s);
    return -1;
}

void tide_dstep_get_info(const tide_dstep *s, tide_dstep_info *out) {
    memset(out, 0, sizeof *out);
    out->weight_bytes = s->weight_bytes;
    out->pool_bytes = s->pool_bytes;
    out->work_bytes = s->work_bytes;
    out->n_pools = s->n_pools;
    out->rows = s->rows;
    out->launches = s->launches;
}

tide_cuda_stream tide_dstep_stream(const tide_dstep *s) { return s->stream; }

/* ---- the kernel sequence ---- */

static const char *const phase_names[TIDE_DSTEP_PHASES] = {
    "embed + engram", "hc mixes, norms", "q projection", "kv projection + window write", "compressor + keys",
    "indexer q + weights", "indexer scores + top-k", "sparse attention", "wo_a (grouped bf16)", "wo_b",
    "gate + routing", "shared expert", "routed experts", "head + argmax"};

const char *tide_dstep_phase_name(int phase) {
    return phase >= 0 && phase < TIDE_DSTEP_PHASES ? phase_names[phase] : "?";
}

/* The time from here to the next mark belongs to `phase` (profiling only). */
static int mark(tide_dstep *s, int phase, tide_status *st) {
    if (!s->prof_on || s->n_ev >= DS_MAX_EVENTS) return 0;
    if (!s->ev[s->n_ev] && tide_cuda_event_create(&s->ev[s->n_ev], st) != 0) return -1;
    if (tide_cuda_event_record(s->ev[s->n_ev], s->stream, st) != 0) return -1;
    s->ev_phase[s->n_ev++] = phase;
    return 0;
}
#define MARK(ph)                                                                                                      \
    do {                                                                                                             \
        if (mark(s, (ph), st) != 0) return -1;                                                                       \
    } while (0)

#define K_(call)                                                                                                     \
    do {                                                                                                             \
        if ((call) != 0) return -1;                                                                                  \
        s->launches++;                                                                                               \
    } while (0)

/* y16 [rows][w->n] bf16 = FP8-quantised x [rows][w->k] times w; then f32
 * into y (NULL: keep bf16 in t16 / y16). */
static int lin_q(tide_dstep *s, const ds_qw *w, int fp4, const float *x, int64_t rows, uint16_t *y16, float *y,
                 tide_status *st) {
    tide_cuda_stream cs = s->stream;
    K_(tide_cuda_quant_fp8_act(x, rows, w->k, s->xq, s->xs, cs, st));
    if (fp4) K_(tide_cuda_gemm_fp4(s->xq, s->xs, rows, w->w, w->s, w->n, w->k, y16, cs, st));
    else if (rows >= 256) K_(tide_cuda_gemm_fp8_wgmma(s->xq, s->xs, rows, w->w, w->s, w->n, w->k, y16, cs, st));
    else K_(tide_cuda_gemm_fp8(s->xq, s->xs, rows, w->w, w->s, w->n, w->k, y16, cs, st));
    if (y) K_(tide_cuda_bf16_to_f32(y16, rows * w->n, y, cs, st));
    return 0;
}

static int lin_f(tide_dstep *s, const void *w, int bf16, int64_t out, int64_t in, const float *x, int64_t rows,
                 float *y, tide_status *st) {
    K_(tide_cuda_linear_f32(w, bf16, out, in, x, rows, y, TIDE_CUDA_LIN_FAST | TIDE_CUDA_LIN_BF16_OUT, s->stream,
                            st));
    return 0;
}

static int rope_tail(tide_dstep *s, float *x, int64_t rows, int64_t n_vec, int64_t width, int inverse,
                     tide_status *st) {
    K_(tide_cuda_rope(x + (width - s->rd), rows, n_vec, n_vec * width, width, s->rd / 2, s->cs, inverse, s->stream,
                      st));
    return 0;
}

/* KV source: compressor over the step's groups, latents (and index keys)
 * written to the pools. */
static int compressor(tide_dstep *s, int i, tide_status *st) {
    const tide_layer_role *r = &s->cfg.roles[i];
    ds_layer *L = &s->L[i];
    tide_cuda_stream cs = s->stream;
    int64_t ratio = r->compress_ratio, ng = s->groups[i], nr = ng * ratio, hd = s->hd;
    if (ng < 1) return 0;
    int64_t rows_in = nr <= s->rows ? nr : s->rows; /* decode with B < ratio: the group's other rows are older */
    if (lin_f(s, L->c_wkv, 1, hd, s->D, s->xa, rows_in, s->ckv, st) != 0) return -1;
    if (ratio > 1) {
        if (lin_f(s, L->c_wgate, 1, hd, s->D, s->xa, rows_in, s->cscore, st) != 0) return -1;
        K_(tide_cuda_compress_pool(s->ckv, s->cscore, ng, (int)ratio, hd, s->clat, cs, st));
    } else {
        K_(tide_cuda_compress_pool(s->ckv, s->ckv, ng, 1, hd, s->clat, cs, st));
    }
    K_(tide_cuda_rmsnorm_f32(s->clat, ng, hd, L->c_norm, s->cfg.text.rms_norm_eps, s->clat, cs, st));
    if (r->indexer_owns_keys) {
        if (lin_f(s, L->i_wk, 1, s->ID, hd, s->clat, ng, s->ckey, st) != 0) return -1;
        K_(tide_cuda_rmsnorm_f32(s->ckey, ng, s->ID, L->i_knorm, s->cfg.text.rms_norm_eps, s->ckey, cs, st));
        if (rope_tail(s, s->ckey, ng, 1, s->ID, 0, st) != 0) return -1;
        K_(tide_cuda_sim_fp4_e8m0(s->ckey, ng, s->ID, 32, cs, st));
        K_(tide_cuda_scatter_rows(s->ckey, ng, s->ID, s->key_dst[i], s->keys, cs, st));
    }
    if (rope_tail(s, s->clat, ng, 1, hd, 0, st) != 0) return -1;
    K_(tide_cuda_sim_fp4_e4m3(s->clat, ng, hd, 16, cs, st));
    K_(tide_cuda_scatter_rows(s->clat, ng, hd, s->lat_dst[i], s->kv_arena, cs, st));
    return 0;
}

/* Index source: q, weights, scores over the key source's keys, top-k. */
static int indexer(tide_dstep *s, int i, tide_status *st) {
    const tide_layer_role *r = &s->cfg.roles[i];
    ds_layer *L = &s->L[i];
    tide_cuda_stream cs = s->stream;
    int64_t R = s->rows, n = keys_scored(s, i), IH = s->IH, ID = s->ID;
    int ks = r->index_key_source >= 0 ? r->index_key_source : r->kv_source;
    MARK(TIDE_DSTEP_PH_INDEX_Q);
    if (lin_q(s, &L->i_wq_b, 0, s->qr, R, s->t16, s->iq, st) != 0) return -1;
    if (rope_tail(s, s->iq, R, IH, ID, 0, st) != 0) return -1;
    K_(tide_cuda_sim_fp4_e8m0(s->iq, R, IH * ID, 32, cs, st));
    if (lin_f(s, L->i_wproj, 1, IH, s->D, s->xa, R, s->iw, st) != 0) return -1;
    int64_t pkeys = pool_key_rows(s);
    MARK(TIDE_DSTEP_PH_INDEX_SCORES);
    /* the fast (tensor-core) scores; decode: row b scores its own pool's keys (b % pools) */
    K_(tide_cuda_index_scores_fast(s->iq, R, (int)IH, ID, s->iw, s->keys + s->key_row0[ks] * ID, n,
                                   s->o.prefill ? 1 : (int)s->n_pools, s->o.prefill ? 0 : pkeys * ID, s->score, cs,
                                   st));
    int k = (int)(s->K < n ? s->K : n);
    K_(tide_cuda_topk_sorted(s->score, R, n, k, s->topk, cs, st));
    return 0;
}

static int k_used(const tide_dstep *s, int i) {
    const tide_layer_role *r = &s->cfg.roles[i];
    if (r->compress_ratio == 0) return 0;
    int src = r->index_source;
    int64_t n = keys_scored(s, src);
    return (int)(s->K < n ? s->K : n);
}

static int attention(tide_dstep *s, int i, tide_status *st) {
    const tide_layer_role *r = &s->cfg.roles[i];
    ds_layer *L = &s->L[i];
    tide_cuda_stream cs = s->stream;
    int64_t R = s->rows, hd = s->hd, H = s->H, D = s->D;
    double eps = s->cfg.text.rms_norm_eps;
    MARK(TIDE_DSTEP_PH_Q);
    if (lin_q(s, &L->wq_a, 0, s->xa, R, s->t16, s->qr, st) != 0) return -1;
    K_(tide_cuda_rmsnorm_f32(s->qr, R, s->QR, L->q_norm, eps, s->qr, cs, st));
    if (lin_q(s, &L->wq_b, 0, s->qr, R, s->t16, s->q, st) != 0) return -1;
    if (rope_tail(s, s->q, R, H, hd, 0, st) != 0) return -1;
    MARK(TIDE_DSTEP_PH_KV);
    if (lin_q(s, &L->wkv, 0, s->xa, R, s->t16, s->kv, st) != 0) return -1;
    K_(tide_cuda_rmsnorm_f32(s->kv, R, hd, L->kv_norm, eps, s->kv, cs, st));
    if (rope_tail(s, s->kv, R, 1, hd, 0, st) != 0) return -1;
    K_(tide_cuda_scatter_rows(s->kv, R, hd, s->win_dst[i], s->kv_arena, cs, st));
    MARK(TIDE_DSTEP_PH_COMPRESS);
    if (r->is_kv_source && compressor(s, i, st) != 0) return -1;
    if (r->is_index_source && indexer(s, i, st) != 0) return -1;
    MARK(TIDE_DSTEP_PH_ATTN);
    int k = k_used(s, i);
    int win = (int)s->W;
    if (k > 0) {
        int src = r->kv_source;
        K_(tide_cuda_attn_idx(R, win, k, s->win_base[i], s->win_len, s->lat_base[src], s->topk, s->aidx, cs, st));
    } else {
        K_(tide_cuda_attn_idx(R, win, 0, s->win_base[i], s->win_len, NULL, NULL, s->aidx, cs, st));
    }
    K_(tide_cuda_sparse_attn_fast(s->q, R, (int)H, hd, s->kv_arena, s->kv_rows, s->aidx, win + k, L->sink,
                             (float)(1.0 / sqrt((double)hd)), s->att, cs, st));
    if (rope_tail(s, s->att, R, H, hd, 1, st) != 0) return -1;
    /* grouped wo_a: [R][G][c] -> [G][R][c], one grouped BF16 linear, back to [R][G][OR] */
    int64_t G = s->G, c = H * hd / G, OR = s->OR;
    MARK(TIDE_DSTEP_PH_WO_A);
    K_(tide_cuda_transpose01(s->att, R, G, c, s->og, cs, st));
    K_(tide_cuda_linear_f32_grouped(L->wo_a, 1, OR, c, s->og, R, s->ot, TIDE_CUDA_LIN_FAST | TIDE_CUDA_LIN_BF16_OUT,
                                    G, OR * c, R * c, R * OR, cs, st));
    K_(tide_cuda_transpose01(s->ot, G, R, OR, s->ocat, cs, st));
    MARK(TIDE_DSTEP_PH_WO_B);
    if (lin_q(s, &L->wo_b, 0, s->ocat, R, s->t16, s->ya, st) != 0) return -1;
    (void)D;
    return 0;
}

static int ffn(tide_dstep *s, int i, tide_status *st) {
    const tide_layer_role *r = &s->cfg.roles[i];
    ds_layer *L = &s->L[i];
    tide_cuda_stream cs = s->stream;
    int64_t R = s->rows, D = s->D, E = r->n_routed_experts;
    int k = r->num_experts_per_tok;
    MARK(TIDE_DSTEP_PH_GATE);
    if (lin_f(s, L->gate, 1, E, D, s->xf, R, s->glog, st) != 0) return -1;
    K_(tide_cuda_moe_route(s->glog, R, (int)E, k, 0, L->gate_bias, 1, (float)s->cfg.text.routed_scaling_factor,
                           s->ridx, s->rw, cs, st));
    MARK(TIDE_DSTEP_PH_SHARED);
    if (lin_q(s, &L->sh_w1, 0, s->xf, R, s->t16, s->g, st) != 0) return -1;
    if (lin_q(s, &L->sh_w3, 0, s->xf, R, s->t16, s->u, st) != 0) return -1;
    K_(tide_cuda_swiglu(s->g, s->u, R, s->I, s->cfg.text.swiglu_limit, NULL, s->hs, cs, st));
    if (lin_q(s, &L->sh_w2, 0, s->hs, R, s->sh16, NULL, st) != 0) return -1;
    MARK(TIDE_DSTEP_PH_EXPERTS);
    K_(tide_cuda_moe_experts(L->ex, s->xf, R, s->ridx, s->rw, k, s->cfg.text.swiglu_limit, s->sh16, s->yf, s->ex_ws,
                             s->ex_ws_bytes, cs, st));
    return 0;
}

static int engram(tide_dstep *s, int i, tide_status *st) {
    ds_layer *L = &s->L[i];
    tide_cuda_stream cs = s->stream;
    int64_t R = s->rows, in = s->ecols * s->ehd;
    /* the gather: as many bytes as the rows' table entries (f32 here) */
    size_t bytes = (size_t)(R * in) * 4 / 16 * 16;
    K_(tide_cuda_copy(s->emb, s->emb_src, bytes, cs, st));
    if (lin_q(s, &L->e_wkv, 0, s->emb, R, s->t16, s->kve, st) != 0) return -1;
    K_(tide_cuda_engram_mix(s->kve, L->e_w, R, (int)s->hc, s->D, s->cfg.text.rms_norm_eps, s->h, cs, st));
    return 0;
}

int tide_dstep_enqueue(tide_dstep *s, tide_status *st) {
    tide_cuda_stream cs = s->stream;
    const tide_text_config *x = &s->cfg.text;
    int64_t R = s->rows, D = s->D;
    int hc = (int)s->hc;
    double eps = x->rms_norm_eps;
    s->launches = 0;
    s->n_ev = 0;
    /* the embedding rows (a copy of as many bytes) */
    MARK(TIDE_DSTEP_PH_EMBED);
    K_(tide_cuda_copy(s->h, s->h0, (size_t)(R * hc * D) * 4, cs, st));
    for (int i = 0; i < s->n_layers; i++) {
        ds_layer *L = &s->L[i];
        MARK(TIDE_DSTEP_PH_EMBED);
        if (s->cfg.roles[i].has_engram && engram(s, i, st) != 0) return -1;
        MARK(TIDE_DSTEP_PH_HC);
        K_(tide_cuda_hc_mixes_fast(s->h, R, hc, D, L->hc_fn[0], L->hc_scale[0], L->hc_base[0], eps,
                                   (int)x->hc_sinkhorn_iters, x->hc_eps, s->pre, s->post, s->comb, s->hc_ws,
                                   s->hc_ws_bytes, cs, st));
        K_(tide_cuda_hc_pre(s->h, R, hc, D, s->pre, s->xa, cs, st));
        K_(tide_cuda_rmsnorm_f32(s->xa, R, D, L->attn_norm, eps, s->xa, cs, st));
        if (attention(s, i, st) != 0) return -1;
        MARK(TIDE_DSTEP_PH_HC);
        K_(tide_cuda_hc_post(s->ya, s->h, R, hc, D, s->post, s->comb, s->h2, cs, st));
        K_(tide_cuda_hc_mixes_fast(s->h2, R, hc, D, L->hc_fn[1], L->hc_scale[1], L->hc_base[1], eps,
                                   (int)x->hc_sinkhorn_iters, x->hc_eps, s->pre2, s->post2, s->comb2, s->hc_ws,
                                   s->hc_ws_bytes, cs, st));
        K_(tide_cuda_hc_pre(s->h2, R, hc, D, s->pre2, s->xf, cs, st));
        K_(tide_cuda_rmsnorm_f32(s->xf, R, D, L->ffn_norm, eps, s->xf, cs, st));
        if (ffn(s, i, st) != 0) return -1;
        MARK(TIDE_DSTEP_PH_HC);
        K_(tide_cuda_hc_post(s->yf, s->h2, R, hc, D, s->post2, s->comb2, s->h, cs, st));
    }
    MARK(TIDE_DSTEP_PH_HEAD);
    /* head: collapse, norm, logits for every decode row / the prompt's last row */
    K_(tide_cuda_hc_pre(s->h, R, hc, D, s->pre2, s->xa, cs, st));
    K_(tide_cuda_rmsnorm_f32(s->xa, R, D, s->norm, eps, s->xa, cs, st));
    int64_t lr = s->o.prefill ? 1 : R;
    const float *hx = s->o.prefill ? s->xa + (R - 1) * D : s->xa;
    K_(tide_cuda_linear_f32(s->head, 0, s->V, D, hx, lr, s->logits, TIDE_CUDA_LIN_FAST, cs, st));
    K_(tide_cuda_argmax(s->logits, lr, s->V, s->amax, cs, st));
    MARK(TIDE_DSTEP_PH_HEAD); /* the end mark */
    return 0;
}

int tide_dstep_profile(tide_dstep *s, double ms[TIDE_DSTEP_PHASES], tide_status *st) {
    for (int p = 0; p < TIDE_DSTEP_PHASES; p++) ms[p] = 0;
    s->prof_on = 1;
    int rc = tide_dstep_enqueue(s, st);
    s->prof_on = 0;
    if (rc != 0) return -1;
    if (s->n_ev >= DS_MAX_EVENTS) return tide_fail(st, TIDE_ERR_INTERNAL, "device step: too many profile marks");
    for (int j = 0; j + 1 < s->n_ev; j++) {
        double t = 0;
        if (tide_cuda_event_ms(s->ev[j], s->ev[j + 1], &t, st) != 0) return -1;
        ms[s->ev_phase[j]] += t;
    }
    return 0;
}

int tide_dstep_reset(tide_dstep *s, tide_status *st) {
    if (tide_cuda_stream_sync(s->stream, st) != 0 ||
        refill(s, plan_pools, s->pmem, s->pool_bytes, s->o.seed ^ 0x5bd1e995ULL, st) != 0 ||
        refill(s, plan_work, s->work, s->work_bytes, s->o.seed ^ 0x2545f4914f6cdd1dULL, st) != 0 ||
        upload_tables(s, st) != 0)
        return -1;
    return 0;
}

int tide_dstep_logits(tide_dstep *s, float *host, int64_t n, tide_status *st) {
    int64_t lr = s->o.prefill ? 1 : s->rows;
    if (n != lr * s->V) return tide_fail(st, TIDE_ERR_INVALID, "device step: %lld logits asked, %lld held",
                                         (long long)n, (long long)(lr * s->V));
    if (tide_cuda_stream_sync(s->stream, st) != 0) return -1;
    return tide_cuda_download(host, s->logits, (size_t)n * sizeof(float), st);
}

int tide_dstep_capture(tide_dstep *s, tide_status *st) {
    tide_cuda_graph_destroy(s->graph);
    s->graph = NULL;
    if (tide_cuda_graph_begin(s->stream, st) != 0) return -1;
    tide_status est = {0};
    int rc = tide_dstep_enqueue(s, &est);
    tide_cuda_graph g = NULL;
    int rc2 = tide_cuda_graph_end(s->stream, &g, st);
    if (rc != 0) {
        tide_cuda_graph_destroy(g);
        *st = est;
        return -1;
    }
    if (rc2 != 0) return -1;
    s->graph = g;
    return 0;
}

int tide_dstep_replay(tide_dstep *s, tide_status *st) {
    if (!s->graph) return tide_fail(st, TIDE_ERR_INVALID, "device step: no captured graph");
    return tide_cuda_graph_launch(s->graph, s->stream, st);
}

int tide_dstep_check_output(tide_dstep *s, int64_t *finite, int64_t *total, int32_t *argmax0, tide_status *st) {
    int64_t lr = s->o.prefill ? 1 : s->rows, n = lr * s->V;
    *finite = *total = 0;
    *argmax0 = -1;
    float *h = malloc((size_t)n * sizeof(float));
    if (!h) return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
    int rc = tide_dstep_logits(s, h, n, st);
    if (rc == 0) rc = tide_cuda_download(argmax0, s->amax, sizeof(int32_t), st);
    if (rc == 0)
        for (int64_t j = 0; j < n; j++) *finite += isfinite(h[j]) != 0;
    *total = n;
    free(h);
    return rc;
}
