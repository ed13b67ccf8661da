/* Builds the list of tensors a checkpoint holds for a config (see
 * manifest.h for the naming and dtype rules), and verifies a checkpoint
 * against it. The per-module functions below mirror the reference's module
 * constructors one to one, so a reader can hold them side by side. */
#include "model/manifest.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Builder state: the manifest being filled and the name prefix of the module. */
typedef struct mb {
    tide_manifest *m;
    const tide_config *cfg;
    tide_status *st;
    int layer;
    char prefix[48]; /* "layers.3." or "mtp.0." or "" */
    int failed;
} mb;

static tide_manifest_entry *push(mb *b, const char *suffix, tide_dtype dt, int ndim, int64_t d0, int64_t d1,
                                 tide_wkind kind, float mean, float std) {
    if (b->failed) return NULL;
    tide_manifest *m = b->m;
    if (m->n == m->cap) {
        size_t ncap = m->cap ? m->cap * 2 : 256;
        tide_manifest_entry *ne = realloc(m->e, ncap * sizeof *ne);
        if (!ne) {
            b->failed = 1;
            tide_fail(b->st, TIDE_ERR_NOMEM, "manifest: out of memory at %zu tensors", m->n);
            return NULL;
        }
        m->e = ne;
        m->cap = ncap;
    }
    tide_manifest_entry *e = &m->e[m->n];
    memset(e, 0, sizeof *e);
    if ((size_t)snprintf(e->name, sizeof e->name, "%s%s", b->prefix, suffix) >= sizeof e->name) {
        b->failed = 1;
        tide_fail(b->st, TIDE_ERR_INTERNAL, "manifest: tensor name %s%s too long", b->prefix, suffix);
        return NULL;
    }
    e->dtype = dt;
    e->ndim = ndim;
    e->shape[0] = d0;
    e->shape[1] = ndim > 1 ? d1 : 0;
    e->layer = b->layer;
    e->kind = kind;
    e->init_mean = mean;
    e->init_std = std;
    if (tide_dtype_nbytes(dt, ndim, e->shape, NULL, &e->nbytes, b->st) != 0) {
        b->failed = 1;
        tide_fail_ctx(b->st, "manifest: %s", e->name);
        return NULL;
    }
    m->n++;
    m->total_bytes += e->nbytes;
    m->bytes_by_dtype[dt] += e->nbytes;
    m->count_by_dtype[dt]++;
    return e;
}

static float fan_in_std(int64_t in) { return (float)(1.0 / sqrt((double)in)); }

/* Vectors and matrices used as stored. */
static void plain2(mb *b, const char *name, tide_dtype dt, int64_t out, int64_t in, float mean, float std) {
    push(b, name, dt, 2, out, in, TIDE_WK_PLAIN, mean, std);
}
static void plain1(mb *b, const char *name, tide_dtype dt, int64_t n, float mean, float std) {
    push(b, name, dt, 1, n, 0, TIDE_WK_PLAIN, mean, std);
}
/* RMSNorm weight: ~1, perturbed so a wrong binding shows. */
static void norm(mb *b, const char *name, int64_t n) { plain1(b, name, TIDE_DT_BF16, n, 1.0f, 0.05f); }
/* BF16 linear [out, in] ("name" without the .weight suffix). */
static void linear_bf16(mb *b, const char *name, int64_t out, int64_t in) {
    char w[TIDE_MANIFEST_NAME];
    snprintf(w, sizeof w, "%s.weight", name);
    plain2(b, w, TIDE_DT_BF16, out, in, 0.0f, fan_in_std(in));
}

static void linear_fp8(mb *b, const char *name, int64_t out, int64_t in) {
    char w[TIDE_MANIFEST_NAME], s[TIDE_MANIFEST_NAME];
    snprintf(w, sizeof w, "%s.weight", name);
    snprintf(s, sizeof s, "%s.scale", name);
    push(b, w, TIDE_DT_F8_E4M3, 2, out, in, TIDE_WK_FP8_WEIGHT, 0.0f, fan_in_std(in));
    push(b, s, TIDE_DT_F8_E8M0, 2, (out + 31) / 32, (in + 31) / 32, TIDE_WK_SCALE, 0, 0);
}

static void linear_fp4(mb *b, const char *name, int64_t out, int64_t in) {
    char w[TIDE_MANIFEST_NAME], s[TIDE_MANIFEST_NAME];
    snprintf(w, sizeof w, "%s.weight", name);
    snprintf(s, sizeof s, "%s.scale", name);
    push(b, w, TIDE_DT_F4, 2, out, in, TIDE_WK_FP4_WEIGHT, 0.0f, fan_in_std(in));
    push(b, s, TIDE_DT_F8_E8M0, 2, out, in / 32, TIDE_WK_SCALE, 0, 0);
}

/* Attention (reference Attention / DSparkAttention). */
static void attention(mb *b, const tide_layer_role *r) {
    const tide_text_config *x = &b->cfg->text;
    int64_t D = x->hidden_size, H = x->num_attention_heads, hd = x->head_dim;
    int64_t G = x->o_groups, OR = x->o_lora_rank, QR = x->q_lora_rank;
    plain1(b, "attn.attn_sink", TIDE_DT_F32, H, 0.0f, 0.1f);
    linear_fp8(b, "attn.wq_a", QR, D);
    norm(b, "attn.q_norm.weight", QR);
    linear_fp8(b, "attn.wq_b", H * hd, QR);
    linear_fp8(b, "attn.wkv", hd, D);
    norm(b, "attn.kv_norm.weight", hd);
    linear_bf16(b, "attn.wo_a", G * OR, H * hd / G);
    linear_fp8(b, "attn.wo_b", D, G * OR);
    if (r->is_kv_source) {
        linear_bf16(b, "attn.compressor.wkv", hd, D);
        if (r->compress_ratio > 1) linear_bf16(b, "attn.compressor.wgate", hd, D);
        norm(b, "attn.compressor.norm.weight", hd);
    }
    if (r->is_index_source) {
        int64_t IH = x->index_n_heads, ID = x->index_head_dim;
        linear_fp8(b, "attn.indexer.wq_b", IH * ID, QR);
        linear_bf16(b, "attn.indexer.weights_proj", IH, D);
        if (r->indexer_owns_keys) {
            linear_bf16(b, "attn.indexer.wk", ID, hd);
            norm(b, "attn.indexer.k_norm.weight", ID);
        }
    }
}

/* MoE (reference MoE / Gate / Expert). */
static void moe(mb *b, const tide_layer_role *r) {
    const tide_text_config *x = &b->cfg->text;
    int64_t D = x->hidden_size, I = x->moe_intermediate_size, E = r->n_routed_experts;
    plain2(b, "ffn.gate.weight", TIDE_DT_BF16, E, D, 0.0f, fan_in_std(D));
    plain1(b, "ffn.gate.bias", TIDE_DT_F32, E, 0.0f, 0.01f);
    if (b->cfg->vision.num_hidden_layers > 0) plain1(b, "ffn.gate.bias_vl", TIDE_DT_F32, E, 0.0f, 0.01f);
    char name[TIDE_MANIFEST_NAME];
    for (int64_t e = 0; e < E && !b->failed; e++) {
        snprintf(name, sizeof name, "ffn.experts.%lld.w1", (long long)e);
        linear_fp4(b, name, I, D);
        snprintf(name, sizeof name, "ffn.experts.%lld.w2", (long long)e);
        linear_fp4(b, name, D, I);
        snprintf(name, sizeof name, "ffn.experts.%lld.w3", (long long)e);
        linear_fp4(b, name, I, D);
    }
    linear_fp8(b, "ffn.shared_experts.w1", I, D);
    linear_fp8(b, "ffn.shared_experts.w2", D, I);
    linear_fp8(b, "ffn.shared_experts.w3", I, D);
}

/* Engram (reference Engram / ParallelEngramEmbedding). */
static void engram(mb *b, const tide_layer_role *r) {
    const tide_text_config *x = &b->cfg->text;
    int64_t D = x->hidden_size, hc = x->hc_mult, hd = x->engram_head_dim;
    int64_t rows = x->engram_num_embeddings[r->engram_index];
    int64_t cols = (x->engram_max_ngram_size - 1) * x->engram_n_heads;
    push(b, "engram.embed.weight", TIDE_DT_F8_E4M3, 2, rows, hd, TIDE_WK_ENGRAM_TABLE, 0.0f, 1.0f);
    push(b, "engram.embed.scale", TIDE_DT_F8_E8M0, 2, rows, hd / 32, TIDE_WK_SCALE, 0, 0);
    linear_fp8(b, "engram.wkv", D * (hc + 1), cols * hd);
    plain2(b, "engram.q_weight", TIDE_DT_BF16, hc, D, 1.0f, 0.05f);
    plain2(b, "engram.k_weight", TIDE_DT_BF16, hc, D, 1.0f, 0.05f);
}

/* Block (reference Block / DSparkBlock). Hyper-connection parameters are kept
 * small so pre/post/comb start near their neutral values. */
static void block(mb *b, const tide_layer_role *r) {
    const tide_text_config *x = &b->cfg->text;
    int64_t D = x->hidden_size, hc = x->hc_mult, mix = (2 + hc) * hc;
    if (r->has_engram) engram(b, r);
    attention(b, r);
    moe(b, r);
    norm(b, "attn_norm.weight", D);
    norm(b, "ffn_norm.weight", D);
    float fn_std = (float)(0.5 / sqrt((double)(hc * D)));
    plain2(b, "hc_attn_fn", TIDE_DT_F32, mix, hc * D, 0.0f, fn_std);
    plain2(b, "hc_ffn_fn", TIDE_DT_F32, mix, hc * D, 0.0f, fn_std);
    plain1(b, "hc_attn_base", TIDE_DT_F32, mix, 0.0f, 0.3f);
    plain1(b, "hc_ffn_base", TIDE_DT_F32, mix, 0.0f, 0.3f);
    plain1(b, "hc_attn_scale", TIDE_DT_F32, 3, 0.5f, 0.1f);
    plain1(b, "hc_ffn_scale", TIDE_DT_F32, 3, 0.5f, 0.1f);
    if (!r->is_dspark) return;
    int64_t V = x->vocab_size, R = x->dspark_markov_rank;
    if (r->dspark_stage == 0) {
        linear_fp8(b, "main_proj", D, D * x->n_dspark_target_layer_ids);
        norm(b, "main_norm.weight", D);
    }
    if (r->dspark_stage == x->num_nextn_predict_layers - 1) {
        norm(b, "norm.weight", D);
        plain2(b, "markov_head.embed.weight", TIDE_DT_BF16, V, R, 0.0f, 1.0f);
        plain2(b, "markov_head.head.weight", TIDE_DT_BF16, V, R, 0.0f, fan_in_std(R));
        plain2(b, "confidence_head.proj.weight", TIDE_DT_BF16, 1, D + R, 0.0f, fan_in_std(D + R));
    }
}

/* Vision tower and aligner (reference vision.py ViT / Aligner, and the
 * Transformer's image_start / image_end / image_newline), all BF16 as the
 * release stores them (docs/vision.md). Listed only with a tower. */
static void vision(mb *b) {
    const tide_vision_config *v = &b->cfg->vision;
    int64_t Dv = v->hidden_size, I = v->intermediate_size, p = v->patch_size, r = v->downsample_ratio;
    int64_t D = b->cfg->text.hidden_size;
    char name[TIDE_MANIFEST_NAME];
    b->layer = -1;
    snprintf(b->prefix, sizeof b->prefix, "vision.");
    linear_bf16(b, "patch_embed.proj", Dv, 3 * p * p);
    plain1(b, "patch_embed.proj.bias", TIDE_DT_BF16, Dv, 0.0f, 0.02f);
    for (int64_t l = 0; l < v->num_hidden_layers && !b->failed; l++) {
        snprintf(b->prefix, sizeof b->prefix, "vision.blocks.%lld.", (long long)l);
        norm(b, "norm1.weight", Dv);
        linear_bf16(b, "attn.wqkv", 3 * Dv, Dv);
        plain1(b, "attn.wqkv.bias", TIDE_DT_BF16, 3 * Dv, 0.0f, 0.02f);
        linear_bf16(b, "attn.wo", Dv, Dv);
        plain1(b, "attn.wo.bias", TIDE_DT_BF16, Dv, 0.0f, 0.02f);
        norm(b, "norm2.weight", Dv);
        linear_bf16(b, "mlp.w1", 2 * I, Dv);
        linear_bf16(b, "mlp.w2", Dv, I);
    }
    snprintf(b->prefix, sizeof b->prefix, "vision.");
    norm(b, "norm.weight", Dv);
    snprintf(b->prefix, sizeof b->prefix, "aligner.");
    linear_bf16(b, "w1", D, Dv * r * r);
    plain1(b, "w1.bias", TIDE_DT_BF16, D, 0.0f, 0.02f);
    linear_bf16(b, "w2", D, D);
    plain1(b, "w2.bias", TIDE_DT_BF16, D, 0.0f, 0.02f);
    b->prefix[0] = 0;
    for (int i = 0; i < 3; i++) {
        static const char *const delim[3] = {"image_start", "image_end", "image_newline"};
        snprintf(name, sizeof name, "%s", delim[i]);
        plain1(b, name, TIDE_DT_BF16, D, 0.0f, 1.0f);
    }
}

int tide_manifest_layer_name(const tide_config *cfg, int layer, const char *suffix, char *buf, size_t cap,
                             tide_status *st) {
    int L = (int)cfg->text.num_hidden_layers;
    int n = layer < L ? snprintf(buf, cap, "layers.%d.%s", layer, suffix)
                      : snprintf(buf, cap, "mtp.%d.%s", layer - L, suffix);
    if (n < 0 || (size_t)n >= cap) return tide_fail(st, TIDE_ERR_INVALID, "tensor name for layer %d too long", layer);
    return 0;
}

static int cmp_entry(const void *a, const void *b) {
    return strcmp((*(const tide_manifest_entry *const *)a)->name, (*(const tide_manifest_entry *const *)b)->name);
}

int tide_manifest_build(const tide_config *cfg, tide_manifest *m, tide_status *st) {
    memset(m, 0, sizeof *m);
    const tide_text_config *x = &cfg->text;
    mb b = {.m = m, .cfg = cfg, .st = st, .layer = -1};
    int64_t V = x->vocab_size, D = x->hidden_size;
    plain2(&b, "embed.weight", TIDE_DT_BF16, V, D, 0.0f, 1.0f);
    norm(&b, "norm.weight", D);
    plain2(&b, "head.weight", TIDE_DT_BF16, V, D, 0.0f, fan_in_std(D));
    int L = (int)x->num_hidden_layers;
    for (int i = 0; i < cfg->n_layers && !b.failed; i++) {
        if (i < L && i >= cfg->present_layers) continue;
        b.layer = i;
        if (i < L) snprintf(b.prefix, sizeof b.prefix, "layers.%d.", i);
        else snprintf(b.prefix, sizeof b.prefix, "mtp.%d.", i - L);
        block(&b, &cfg->roles[i]);
    }
    if (cfg->vision.num_hidden_layers > 0) vision(&b);
    if (!b.failed && !(m->by_name = malloc(sizeof *m->by_name * (m->n ? m->n : 1)))) {
        b.failed = 1;
        tide_fail(st, TIDE_ERR_NOMEM, "manifest: out of memory");
    }
    if (b.failed) {
        tide_manifest_free(m);
        return -1;
    }
    for (size_t i = 0; i < m->n; i++) m->by_name[i] = &m->e[i];
    qsort(m->by_name, m->n, sizeof *m->by_name, cmp_entry);
    return 0;
}

void tide_manifest_free(tide_manifest *m) {
    if (!m) return;
    free(m->e);
    free(m->by_name);
    memset(m, 0, sizeof *m);
}

const tide_manifest_entry *tide_manifest_find(const tide_manifest *m, const char *name) {
    size_t lo = 0, hi = m->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(m->by_name[mid]->name, name);
        if (c == 0) return m->by_name[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

static int same_shape(const tide_manifest_entry *e, const tide_tensor *t) {
    if (t->ndim != e->ndim) return 0;
    for (int d = 0; d < e->ndim; d++)
        if (t->shape[d] != e->shape[d]) return 0;
    return 1;
}

/* A text-model tensor the config does not call for (e.g. a layer list
 * edited by hand, or a tensor added to a shard and the index). */
static int check_unexpected(const tide_manifest *m, const tide_st *ck, tide_status *st) {
    const tide_tensor *first = NULL;
    size_t count = 0;
    for (size_t i = 0; i < tide_st_count(ck); i++) {
        const tide_tensor *t = tide_st_at(ck, i);
        if (tide_manifest_is_vision(t->name) || tide_manifest_find(m, t->name)) continue;
        if (!first) first = t;
        count++;
    }
    if (!first) return 0;
    return tide_fail(st, TIDE_ERR_FORMAT,
                     "tensor %s in %s is not part of the model this config describes (%zu such tensors): "
                     "config.json and the checkpoint disagree",
                     first->name, first->file, count);
}

int tide_manifest_verify(const tide_manifest *m, const tide_st *ck, size_t *n_missing, size_t *n_wrong,
                         size_t *n_extra, tide_status *st) {
    size_t missing = 0, wrong = 0, found = 0;
    char first[TIDE_STATUS_MSG] = "";
    tide_code first_code = TIDE_OK;
    for (size_t i = 0; i < m->n; i++) {
        const tide_manifest_entry *e = &m->e[i];
        const tide_tensor *t = tide_st_find(ck, e->name);
        char want[64], got[64];
        if (!t) {
            if (!missing && !wrong) {
                snprintf(first, sizeof first, "tensor %s is missing (expected %s %s)", e->name,
                         tide_dtype_name(e->dtype), tide_shape_str(e->ndim, e->shape, want, sizeof want));
                first_code = TIDE_ERR_MISSING;
            }
            missing++;
            continue;
        }
        found++;
        if (t->dtype != e->dtype || !same_shape(e, t)) {
            if (!missing && !wrong) {
                snprintf(first, sizeof first, "tensor %s in %s is %s %s; expected %s %s", e->name, t->file,
                         tide_dtype_name(t->dtype), tide_shape_str(t->ndim, t->shape, got, sizeof got),
                         tide_dtype_name(e->dtype), tide_shape_str(e->ndim, e->shape, want, sizeof want));
                first_code = TIDE_ERR_FORMAT;
            }
            wrong++;
        }
    }
    if (n_missing) *n_missing = missing;
    if (n_wrong) *n_wrong = wrong;
    if (n_extra) *n_extra = tide_st_count(ck) - found;
    if (missing || wrong)
        return tide_fail(st, first_code, "%s (%zu missing, %zu with the wrong dtype or shape)", first, missing,
                         wrong);
    return check_unexpected(m, ck, st);
}

int tide_manifest_is_vision(const char *name) {
    return !strncmp(name, "vision.", 7) || !strncmp(name, "aligner.", 8) || !strncmp(name, "image_", 6);
}
