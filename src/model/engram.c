/* Engram tables, n-gram hashing and the layer's contribution (see
 * model/engram.h and docs/engram.md). Reference: inference/engram.py
 * (EngramLayout, compute_hash_multipliers, NgramHashState) and the Engram /
 * ParallelEngramEmbedding modules of inference/model.py. */
#include "model/engram.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "num/num.h"
#include "num/pcg64.h"

#define MAX_NGRAM 16 /* far above the released 4; bounds the per-position scratch */

/* ---- primes --------------------------------------------------------------- */

/* The bucket primes come from the config module (tide_config_engram_primes,
 * the one implementation of the reference's rule); here each layer's columns
 * get their row offsets, and the layer's table must hold them all. */
static int build_primes(const tide_config *cfg, tide_engram_tables *t, tide_status *st) {
    const int per_layer = t->n_cols;
    if (tide_config_engram_primes(cfg, t->primes, t->n_layers * per_layer, st) != 0)
        return -1; /* the message names the engram field */
    for (int k = 0; k < t->n_layers; k++) {
        int64_t off = 0;
        for (int c = 0; c < per_layer; c++) {
            t->offsets[k * per_layer + c] = off;
            off += t->primes[k * per_layer + c];
        }
        if (off > t->num_embeddings[k])
            return tide_fail(st, TIDE_ERR_INVALID,
                             "engram layer %d: its %d bucket primes need %lld rows, "
                             "engram_num_embeddings[%d] is %lld",
                             t->layer_ids[k], per_layer, (long long)off, k,
                             (long long)t->num_embeddings[k]);
    }
    return 0;
}

/* ---- multipliers ---------------------------------------------------------- */

/* numpy default_rng(10007 * layer).integers(0, bound, size=max_ngram,
 * dtype=int64) * 2 + 1, bound = max(1, (INT64_MAX // V) // 2) with V the
 * compressed vocabulary size: odd, and small enough that id * multiplier
 * cannot overflow int64. */
static void build_multipliers(tide_engram_tables *t) {
    int64_t bound = (INT64_MAX / t->tmap.n_compressed) / 2;
    if (bound < 1) bound = 1;
    for (int k = 0; k < t->n_layers; k++) {
        tide_pcg64 g;
        tide_pcg64_seed(&g, (uint64_t)10007 * (uint64_t)t->layer_ids[k]);
        int64_t *m = t->multipliers + (size_t)k * t->max_ngram;
        tide_pcg64_integers_i64(&g, 0, bound, (size_t)t->max_ngram, m);
        for (int j = 0; j < t->max_ngram; j++) m[j] = m[j] * 2 + 1;
    }
}

/* ---- tables --------------------------------------------------------------- */

static int check_config(const tide_config *cfg, tide_status *st) {
    const tide_text_config *c = &cfg->text;
    if (c->n_engram_layer_ids <= 0 || c->n_engram_layer_ids > TIDE_MAX_ENGRAM_LAYERS)
        return tide_fail(st, TIDE_ERR_INVALID, "engram: config has %d engram layers",
                         c->n_engram_layer_ids);
    if (c->n_engram_num_embeddings != c->n_engram_layer_ids)
        return tide_fail(st, TIDE_ERR_INVALID,
                         "engram: %d engram_layer_ids but %d engram_num_embeddings",
                         c->n_engram_layer_ids, c->n_engram_num_embeddings);
    if (c->engram_max_ngram_size < 2 || c->engram_max_ngram_size > MAX_NGRAM)
        return tide_fail(st, TIDE_ERR_UNSUPPORTED, "engram: engram_max_ngram_size %lld not in [2, %d]",
                         (long long)c->engram_max_ngram_size, MAX_NGRAM);
    if (c->engram_n_heads < 1 || c->engram_n_heads > 1024)
        return tide_fail(st, TIDE_ERR_INVALID, "engram: engram_n_heads %lld not in [1, 1024]",
                         (long long)c->engram_n_heads);
    if (c->engram_head_dim < 32 || c->engram_head_dim % 32 || c->engram_head_dim > 65536)
        return tide_fail(st, TIDE_ERR_INVALID,
                         "engram: engram_head_dim %lld is not a positive multiple of 32",
                         (long long)c->engram_head_dim);
    if (c->engram_vocab_size < 1 || c->engram_vocab_size > ((int64_t)1 << 40)) /* as the config check */
        return tide_fail(st, TIDE_ERR_INVALID, "engram: engram_vocab_size %lld out of range",
                         (long long)c->engram_vocab_size);
    for (int k = 0; k < c->n_engram_layer_ids; k++)
        if (c->engram_layer_ids[k] < 0)
            return tide_fail(st, TIDE_ERR_INVALID, "engram: layer id %d", c->engram_layer_ids[k]);
    return 0;
}

int tide_engram_tables_build(const tide_config *cfg, const tide_engram_token_map *tmap,
                             tide_engram_tables *t, tide_status *st) {
    memset(t, 0, sizeof *t);
    if (check_config(cfg, st) != 0) return -1;
    const tide_text_config *c = &cfg->text;
    if (!tmap || !tmap->map || tmap->n_tokens <= 0)
        return tide_fail(st, TIDE_ERR_INVALID, "engram: empty token map");
    if (tmap->n_compressed != c->engram_compressed_vocab_size)
        return tide_fail(st, TIDE_ERR_INVALID,
                         "engram: the tokenizer gives %lld compressed ids, the config's "
                         "engram_compressed_vocab_size is %lld (every hash multiplier derives "
                         "from it: wrong tokenizer?)",
                         (long long)tmap->n_compressed, (long long)c->engram_compressed_vocab_size);
    if (c->engram_pad_token_id < 0 || c->engram_pad_token_id >= tmap->n_tokens)
        return tide_fail(st, TIDE_ERR_INVALID, "engram: pad token %lld outside the tokenizer (%lld ids)",
                         (long long)c->engram_pad_token_id, (long long)tmap->n_tokens);
    t->n_layers = c->n_engram_layer_ids;
    t->max_ngram = (int)c->engram_max_ngram_size;
    t->n_heads = (int)c->engram_n_heads;
    t->n_cols = (t->max_ngram - 1) * t->n_heads;
    t->head_dim = (int)c->engram_head_dim;
    for (int k = 0; k < t->n_layers; k++) {
        t->layer_ids[k] = c->engram_layer_ids[k];
        t->num_embeddings[k] = c->engram_num_embeddings[k];
    }
    size_t nc = (size_t)t->n_layers * (size_t)t->n_cols;
    t->multipliers = malloc((size_t)t->n_layers * (size_t)t->max_ngram * sizeof(int64_t));
    t->primes = malloc(nc * sizeof(int64_t));
    t->offsets = malloc(nc * sizeof(int64_t));
    t->tmap.map = malloc((size_t)tmap->n_tokens * sizeof(int32_t));
    if (!t->multipliers || !t->primes || !t->offsets || !t->tmap.map) {
        tide_engram_tables_free(t);
        return tide_fail(st, TIDE_ERR_NOMEM, "engram: out of memory");
    }
    memcpy(t->tmap.map, tmap->map, (size_t)tmap->n_tokens * sizeof(int32_t));
    t->tmap.n_tokens = tmap->n_tokens;
    t->tmap.n_compressed = tmap->n_compressed;
    t->pad_id = t->tmap.map[c->engram_pad_token_id];
    if (build_primes(cfg, t, st) != 0) {
        tide_engram_tables_free(t);
        return -1;
    }
    build_multipliers(t);
    return 0;
}

void tide_engram_tables_free(tide_engram_tables *t) {
    if (!t) return;
    free(t->multipliers);
    free(t->primes);
    free(t->offsets);
    tide_engram_token_map_free(&t->tmap);
    memset(t, 0, sizeof *t);
}

/* ---- hashing -------------------------------------------------------------- */

int tide_engram_compress(const tide_engram_tables *t, const int32_t *tokens, const uint8_t *dead,
                         int64_t n, int32_t *out, tide_status *st) {
    for (int64_t i = 0; i < n; i++) {
        if (dead && dead[i]) {
            out[i] = TIDE_ENGRAM_DEAD;
            continue;
        }
        if (tokens[i] < 0 || tokens[i] >= t->tmap.n_tokens)
            return tide_fail(st, TIDE_ERR_INVALID,
                             "engram: token id %d at position %lld is outside the tokenizer "
                             "(%lld ids): it has no engram token-map entry",
                             tokens[i], (long long)i, (long long)t->tmap.n_tokens);
        out[i] = t->tmap.map[tokens[i]];
    }
    return 0;
}

void tide_engram_hash_compressed(const tide_engram_tables *t, const int32_t *cids, int64_t n_hist,
                                 int64_t n, int64_t *rows) {
    const int G = t->max_ngram, H = t->n_heads, C = t->n_cols;
    for (int64_t r = 0; r < n; r++) {
        const int64_t j = n_hist + r; /* index of this position in cids */
        /* The n-gram's ids, newest first; look-back stops at the start of
         * the sequence or at a dead position, and pad fills the rest. */
        uint64_t tok[MAX_NGRAM];
        int blocked = 0;
        for (int s = 0; s < G; s++) {
            blocked = blocked || j - s < 0 || cids[j - s] == TIDE_ENGRAM_DEAD;
            tok[s] = (uint64_t)(blocked ? t->pad_id : cids[j - s]);
        }
        for (int k = 0; k < t->n_layers; k++) {
            const int64_t *mul = t->multipliers + (size_t)k * G;
            const int64_t *pr = t->primes + (size_t)k * C, *off = t->offsets + (size_t)k * C;
            int64_t *out = rows + ((size_t)r * t->n_layers + k) * C;
            /* running XOR of id * multiplier: after step i it hashes the
             * (i+1)-gram, which takes the next n_heads columns */
            uint64_t h = tok[0] * (uint64_t)mul[0];
            for (int i = 1; i < G; i++) {
                h ^= tok[i] * (uint64_t)mul[i];
                for (int hd = 0; hd < H; hd++) {
                    int col = (i - 1) * H + hd;
                    out[col] = off[col] + (int64_t)(h % (uint64_t)pr[col]);
                }
            }
        }
    }
}

int tide_engram_hash(const tide_engram_tables *t, const int32_t *ids, const uint8_t *dead,
                     int64_t n_hist, int64_t n, int64_t *rows, tide_status *st) {
    if (n_hist < 0 || n < 0)
        return tide_fail(st, TIDE_ERR_INVALID, "engram hash: negative length");
    if (n == 0) return 0;
    /* Only the last max_ngram - 1 history tokens can reach the run. */
    int64_t keep = t->max_ngram - 1;
    int64_t skip = n_hist > keep ? n_hist - keep : 0;
    int64_t m = n_hist - skip + n;
    int32_t *cids = malloc((size_t)(m > 0 ? m : 1) * sizeof *cids);
    if (!cids) return tide_fail(st, TIDE_ERR_NOMEM, "engram hash: out of memory");
    if (tide_engram_compress(t, ids + skip, dead ? dead + skip : NULL, m, cids, st) != 0) {
        free(cids);
        return -1;
    }
    tide_engram_hash_compressed(t, cids, n_hist - skip, n, rows);
    free(cids);
    return 0;
}

/* ---- the layer's contribution -------------------------------------------- */

tide_engram_dims tide_engram_dims_of(const tide_config *cfg) {
    tide_engram_dims d;
    d.dim = (int)cfg->text.hidden_size;
    d.hc_mult = (int)cfg->text.hc_mult;
    d.n_cols = (int)((cfg->text.engram_max_ngram_size - 1) * cfg->text.engram_n_heads);
    d.head_dim = (int)cfg->text.engram_head_dim;
    d.eps = (float)cfg->text.rms_norm_eps;
    return d;
}

static int check_dims(const tide_engram_dims *d, tide_status *st) {
    if (d->dim <= 0 || d->hc_mult <= 0 || d->n_cols <= 0 || d->head_dim <= 0 || d->head_dim % 32)
        return tide_fail(st, TIDE_ERR_INVALID,
                         "engram: bad dims (dim %d, hc_mult %d, n_cols %d, head_dim %d)", d->dim,
                         d->hc_mult, d->n_cols, d->head_dim);
    return 0;
}

int tide_engram_gather(const tide_engram_weights *w, const tide_engram_dims *d,
                       const int64_t *rows, int64_t row_stride, int64_t n, float *emb,
                       tide_status *st) {
    if (check_dims(d, st) != 0) return -1;
    const int hd = d->head_dim, nb = hd / 32;
    const size_t K = (size_t)d->n_cols * (size_t)hd;
    for (int64_t i = 0; i < n; i++) {
        for (int c = 0; c < d->n_cols; c++) {
            int64_t row = rows[i * row_stride + c];
            if (row < 0 || row >= w->num_embeddings)
                return tide_fail(st, TIDE_ERR_INVALID,
                                 "engram gather: row %lld outside the table (%lld rows)",
                                 (long long)row, (long long)w->num_embeddings);
            const uint8_t *q = w->embed + (size_t)row * (size_t)hd;
            const uint8_t *s = w->embed_scale + (size_t)row * (size_t)nb;
            float *o = emb + (size_t)i * K + (size_t)c * (size_t)hd;
            for (int b = 0; b < nb; b++) {
                float sc = tide_e8m0_to_f32(s[b]);
                for (int j = 0; j < 32; j++)
                    o[b * 32 + j] = tide_round_bf16(tide_e4m3_to_f32(q[b * 32 + j]) * sc);
            }
        }
    }
    return 0;
}

/* The gate of one copy: sigmoid(signed_sqrt(dot(h, w * key) * rstd_h *
 * rstd_key / sqrt(dim))), each norm over dim for this (token, copy) alone.
 * The sums are accumulated in double (torch's f32 reductions are pairwise,
 * so neither order is "the" f32 one). */
static float copy_gate(const float *h, const float *wq, const float *wk, const float *key, int dim,
                       float eps) {
    double hh = 0, kk = 0, dot = 0;
    for (int j = 0; j < dim; j++) {
        float weight = wq[j] * wk[j]; /* the reference only ever uses the product */
        hh += (double)h[j] * h[j];
        kk += (double)key[j] * key[j];
        dot += (double)((h[j] * weight) * key[j]);
    }
    float rstd = (1.0f / sqrtf((float)(hh / dim) + eps)) * (1.0f / sqrtf((float)(kk / dim) + eps));
    float g = (float)dot * rstd * (float)(1.0 / sqrt((double)dim));
    float a = fabsf(g) < 1e-6f ? 1e-6f : fabsf(g);
    float ss = copysignf(sqrtf(a), g);
    return 1.0f / (1.0f + expf(-ss));
}

void tide_engram_mix(const tide_engram_weights *w, const tide_engram_dims *d, const float *kv,
                     const uint8_t *dead, int64_t n, float *x) {
    const int D = d->dim, HC = d->hc_mult;
    const size_t N = (size_t)(HC + 1) * (size_t)D;
    for (int64_t i = 0; i < n; i++) {
        if (dead && dead[i]) continue; /* the reference's gate 0: x unchanged */
        const float *kvi = kv + (size_t)i * N, *value = kvi + (size_t)HC * D;
        for (int c = 0; c < HC; c++) {
            float *h = x + ((size_t)i * HC + c) * (size_t)D;
            float gate = copy_gate(h, w->q_weight + (size_t)c * D, w->k_weight + (size_t)c * D,
                                   kvi + (size_t)c * D, D, d->eps);
            for (int j = 0; j < D; j++) h[j] = tide_round_bf16(h[j] + gate * value[j]);
        }
    }
}

/* wkv as the reference's fp8_gemm: each activation row quantised to e4m3
 * per 32 values (UE8M0 scales), then per 32-block of K an f32 partial dot of
 * the raw e4m3 values, scaled by the activation and weight block scales and
 * accumulated in f32; the result rounded to BF16. a: [n][K] the activation's
 * e4m3 values as floats, sa: [n][K/32] their scales. Each weight row is
 * decoded once and used for every position. One task = 32 output rows (one
 * weight scale row); every output is computed the same way whatever thread
 * runs it, so results do not depend on the pool size. */
typedef struct wkv_job {
    const tide_engram_weights *w;
    size_t K, N;
    const float *a, *sa;
    int64_t n;
    float *wrows; /* [threads][K] scratch */
    float *kv;
} wkv_job;

static void wkv_task(void *arg, int64_t task, int thread) {
    const wkv_job *j = arg;
    const size_t K = j->K, N = j->N, nb = K / 32, sk = (K + 31) / 32;
    float *wrow = j->wrows + (size_t)thread * K;
    float lut[256];
    for (int b = 0; b < 256; b++) lut[b] = tide_e4m3_to_f32((uint8_t)b);
    const uint8_t *ws = j->w->wkv_scale + (size_t)task * sk;
    for (size_t o = (size_t)task * 32; o < N && o < (size_t)task * 32 + 32; o++) {
        const uint8_t *wq = j->w->wkv + o * K;
        for (size_t k = 0; k < K; k++) wrow[k] = lut[wq[k]];
        for (int64_t i = 0; i < j->n; i++) {
            const float *ai = j->a + (size_t)i * K, *si = j->sa + (size_t)i * nb;
            float acc = 0;
            for (size_t b = 0; b < nb; b++) {
                float partial = 0;
                for (size_t k = b * 32; k < b * 32 + 32; k++) partial += ai[k] * wrow[k];
                acc += (partial * si[b]) * tide_e8m0_to_f32(ws[b]);
            }
            j->kv[(size_t)i * N + o] = tide_round_bf16(acc);
        }
    }
}

int tide_engram_forward(const tide_engram_weights *w, const tide_engram_dims *d,
                        const int64_t *rows, int64_t row_stride, const uint8_t *dead, int64_t n,
                        float *x, tide_status *st) {
    return tide_engram_forward_pool(NULL, w, d, rows, row_stride, dead, n, x, st);
}

/* Positions per pass: bounds the scratch (a pass of 64 released-shape
 * positions needs ~8 MB) while each decoded weight row still serves many. */
#define FORWARD_CHUNK 64

int tide_engram_forward_pool(tide_pool *pool, const tide_engram_weights *w,
                             const tide_engram_dims *d, const int64_t *rows, int64_t row_stride,
                             const uint8_t *dead, int64_t n, float *x, tide_status *st) {
    if (check_dims(d, st) != 0) return -1;
    if (n <= 0) return 0;
    /* every row is checked before x changes, so a failure leaves x intact */
    for (int64_t i = 0; i < n; i++)
        for (int c = 0; c < d->n_cols; c++) {
            int64_t row = rows[i * row_stride + c];
            if (row < 0 || row >= w->num_embeddings)
                return tide_fail(st, TIDE_ERR_INVALID,
                                 "engram forward: position %lld column %d: row %lld outside the "
                                 "table (%lld rows)",
                                 (long long)i, c, (long long)row, (long long)w->num_embeddings);
        }
    const size_t K = (size_t)d->n_cols * (size_t)d->head_dim, KB = K / 32;
    const size_t N = (size_t)(d->hc_mult + 1) * (size_t)d->dim;
    const size_t CH = (size_t)(n < FORWARD_CHUNK ? n : FORWARD_CHUNK);
    const int threads = tide_pool_size(pool);
    float *emb = malloc(CH * K * sizeof *emb);
    float *kv = malloc(CH * N * sizeof *kv);
    float *wrow = malloc((size_t)threads * K * sizeof *wrow);
    float *sa = malloc(CH * KB * sizeof *sa);
    uint8_t *qa = malloc(CH * K);
    uint8_t *sq = malloc(CH * KB);
    int rc = -1;
    if (!emb || !kv || !wrow || !sa || !qa || !sq) {
        tide_fail(st, TIDE_ERR_NOMEM, "engram forward: out of memory");
        goto done;
    }
    for (int64_t p0 = 0; p0 < n; p0 += (int64_t)CH) {
        int64_t m = n - p0 < (int64_t)CH ? n - p0 : (int64_t)CH;
        if (tide_engram_gather(w, d, rows + p0 * row_stride, row_stride, m, emb, st) != 0) goto done;
        /* quantise the activations; emb then holds their e4m3 values */
        for (int64_t i = 0; i < m; i++) {
            float *ei = emb + (size_t)i * K;
            uint8_t *qi = qa + (size_t)i * K, *si = sq + (size_t)i * KB;
            tide_quant_fp8_act(ei, K, 32, qi, si);
            for (size_t k = 0; k < K; k++) ei[k] = tide_e4m3_to_f32(qi[k]);
            for (size_t b = 0; b < KB; b++) sa[(size_t)i * KB + b] = tide_e8m0_to_f32(si[b]);
        }
        wkv_job job = {w, K, N, emb, sa, m, wrow, kv};
        tide_pool_for(pool, (int64_t)((N + 31) / 32), wkv_task, &job);
        tide_engram_mix(w, d, kv, dead ? dead + p0 : NULL, m,
                        x + (size_t)p0 * (size_t)d->hc_mult * (size_t)d->dim);
    }
    rc = 0;
done:
    free(emb);
    free(kv);
    free(wrow);
    free(sa);
    free(qa);
    free(sq);
    return rc;
}
