/* The roofline cost model of one step (roofline.h; formulas in
 * docs/perf.md). Everything is counted in doubles: flash-sized products
 * overflow nothing and the model is an estimate anyway. */
#include "bench/roofline.h"

#include <math.h>
#include <string.h>

tide_roof_kv tide_roof_kv_packed(void) {
    tide_roof_kv k = {1.0 + 1.0 / 32.0, 0.5 + 1.0 / 16.0, 0.5 + 1.0 / 32.0};
    return k;
}

tide_roof_kv tide_roof_kv_f32(void) {
    tide_roof_kv k = {4.0, 4.0, 4.0};
    return k;
}

double tide_roof_kv_token_bytes(const tide_config *cfg, const tide_roof_kv *kv) {
    const tide_text_config *x = &cfg->text;
    double hd = (double)x->head_dim, ID = (double)x->index_head_dim, b = 0.0;
    for (int i = 0; i < x->num_hidden_layers; i++) {
        const tide_layer_role *r = &cfg->roles[i];
        if (r->compress_ratio > 0 && r->is_kv_source) b += (hd * kv->latent + ID * kv->key) / r->compress_ratio;
    }
    return b;
}

double tide_roof_kv_ring_bytes(const tide_config *cfg, const tide_roof_kv *kv) {
    const tide_text_config *x = &cfg->text;
    return (double)x->num_hidden_layers * (double)x->sliding_window * (double)x->head_dim * kv->window;
}

double tide_roof_expected_experts(int64_t n_experts, int64_t k, int64_t n_tokens) {
    if (n_experts <= 0 || k <= 0 || n_tokens <= 0) return 0.0;
    if (k >= n_experts) return (double)n_experts;
    double miss = 1.0 - (double)k / (double)n_experts; /* one token misses a given expert */
    return (double)n_experts * (1.0 - pow(miss, (double)n_tokens));
}

double tide_roof_time(const tide_roof *r, double bytes_per_s, double flops_per_s, int *memory_bound) {
    double tb = bytes_per_s > 0 ? r->bytes / bytes_per_s : 0.0;
    double tf = flops_per_s > 0 ? r->flops / flops_per_s : 0.0;
    if (memory_bound) *memory_bound = tb >= tf;
    return tb >= tf ? tb : tf;
}

/* The weights of one backbone layer, apart from its routed experts. */
typedef struct layer_cost {
    double dense_bytes;   /* read whole once per step */
    double row_params;    /* weight elements one token row multiplies */
    double expert_bytes;  /* one routed expert (w1, w2, w3) */
    double expert_params;
} layer_cost;

static layer_cost layer_cost_of(const tide_config *cfg, const tide_layer_role *r) {
    const tide_text_config *x = &cfg->text;
    double D = (double)x->hidden_size, H = (double)x->num_attention_heads, hd = (double)x->head_dim;
    double QR = (double)x->q_lora_rank, G = (double)x->o_groups, OR = (double)x->o_lora_rank;
    double IH = (double)x->index_n_heads, ID = (double)x->index_head_dim;
    double I = (double)x->moe_intermediate_size, E = (double)r->n_routed_experts, hc = (double)x->hc_mult;
    /* attention projections, wo_a, the two hc_*_fn mixes, the gate, the shared expert */
    double fp8 = QR * D + H * hd * QR + hd * D + D * G * OR + 3.0 * I * D;
    double bf16 = (G * OR) * (H * hd / G) + E * D;
    double f32 = 2.0 * (2.0 + hc) * hc * (hc * D);
    double row = fp8 + bf16 + f32;
    if (r->is_kv_source) { /* compressor wkv (+ wgate at ratio > 1), per token */
        double p = hd * D * (r->compress_ratio > 1 ? 2.0 : 1.0);
        bf16 += p;
        row += p;
    }
    if (r->is_index_source) { /* indexer wq_b, weights_proj per token; wk per new latent */
        fp8 += IH * ID * QR;
        bf16 += IH * D;
        row += IH * ID * QR + IH * D;
        if (r->indexer_owns_keys) {
            bf16 += ID * hd;
            row += ID * hd / (double)r->compress_ratio;
        }
    }
    if (r->has_engram) { /* wkv of the gathered rows (q_weight / k_weight not counted) */
        double cols = (double)((x->engram_max_ngram_size - 1) * x->engram_n_heads);
        double p = (hc + 1.0) * D * cols * (double)x->engram_head_dim;
        fp8 += p;
        row += p;
    }
    layer_cost c = {fp8 * TIDE_ROOF_FP8 + bf16 * TIDE_ROOF_BF16 + f32 * TIDE_ROOF_F32, row,
                    3.0 * I * D * TIDE_ROOF_FP4, 3.0 * I * D};
    return c;
}

/* Bytes of the rows one token gathers: its embedding row and, per engram
 * layer, its hashed table rows (FP8 + an E8M0 per 32 values). */
static double gather_bytes_per_row(const tide_config *cfg) {
    const tide_text_config *x = &cfg->text;
    double b = (double)x->hidden_size * TIDE_ROOF_BF16;
    double cols = (double)((x->engram_max_ngram_size - 1) * x->engram_n_heads);
    b += (double)x->n_engram_layer_ids * cols * (double)x->engram_head_dim * (1.0 + 1.0 / 32.0);
    return b;
}

/* Index keys scored by a query at position p of an index source of ratio r:
 * the visible compressed positions, only the candidate blocks' positions for
 * an indexer that masks to them. */
static double keys_scored(const tide_config *cfg, const tide_layer_role *r, int64_t p) {
    int64_t n = (p + 1) / r->compress_ratio;
    int64_t cap = cfg->text.candidate_topk_blocks * cfg->text.candidate_block_size;
    if (r->uses_candidates && n > cap) n = cap;
    return (double)n;
}

/* Attention entries of a query at position p: the window (its own row
 * included) and, on compressed layers, the top-k latents it can see. */
static double attn_entries(const tide_config *cfg, const tide_layer_role *r, int64_t p) {
    int64_t w = cfg->text.sliding_window, n = p + 1 < w ? p + 1 : w;
    if (r->compress_ratio > 0) {
        int64_t vis = (p + 1) / r->compress_ratio, k = cfg->text.index_topk;
        n += vis < k ? vis : k;
    }
    return (double)n;
}

static int check_args(const tide_config *cfg, int64_t a, int64_t lo, const char *what, tide_status *st) {
    if (!cfg || cfg->n_layers < 1) return tide_fail(st, TIDE_ERR_INVALID, "roofline: no checked config");
    if (a < lo || a > ((int64_t)1 << 40))
        return tide_fail(st, TIDE_ERR_INVALID, "roofline: %s %lld is out of range (%lld..2^40)", what, (long long)a,
                         (long long)lo);
    return 0;
}

static void finish(tide_roof *o) {
    o->bytes = o->w_dense + o->w_experts + o->w_head + o->w_gather + o->kv_window + o->kv_latent + o->kv_index +
               o->kv_write;
    o->flops = o->f_gemm + o->f_attn + o->f_index;
}

/* What decode and prefill share: the weights and GEMM FLOPs of n_rows rows,
 * of which logit_rows get logits. */
static void weights_part(const tide_config *cfg, int64_t n_rows, int64_t logit_rows, tide_roof *o) {
    const tide_text_config *x = &cfg->text;
    double V = (double)x->vocab_size, D = (double)x->hidden_size;
    for (int i = 0; i < x->num_hidden_layers; i++) {
        const tide_layer_role *r = &cfg->roles[i];
        layer_cost lc = layer_cost_of(cfg, r);
        double touched = tide_roof_expected_experts(r->n_routed_experts, r->num_experts_per_tok, n_rows);
        o->w_dense += lc.dense_bytes;
        o->w_experts += touched * lc.expert_bytes;
        o->f_gemm += 2.0 * (double)n_rows * (lc.row_params + (double)r->num_experts_per_tok * lc.expert_params);
        o->experts_touched = touched;
        o->n_experts = r->n_routed_experts;
    }
    o->w_head = V * D * TIDE_ROOF_BF16;
    o->f_gemm += 2.0 * (double)logit_rows * V * D;
    o->w_gather = (double)n_rows * gather_bytes_per_row(cfg);
    o->rows = n_rows;
    o->logit_rows = logit_rows;
}

int tide_roof_decode(const tide_config *cfg, const tide_roof_kv *kv, int64_t batch, int64_t context,
                     tide_roof *out, tide_status *st) {
    memset(out, 0, sizeof *out);
    if (check_args(cfg, batch, 1, "batch", st) || check_args(cfg, context, 0, "context", st)) return -1;
    const tide_text_config *x = &cfg->text;
    double B = (double)batch, hd = (double)x->head_dim, ID = (double)x->index_head_dim;
    double H = (double)x->num_attention_heads, IH = (double)x->index_n_heads;
    int64_t W = x->sliding_window, p = context; /* the new token's position */
    weights_part(cfg, batch, batch, out);
    for (int i = 0; i < x->num_hidden_layers; i++) {
        const tide_layer_role *r = &cfg->roles[i];
        int ratio = r->compress_ratio;
        /* the ring's cached entries the query sees (its own row is in the step) */
        out->kv_window += B * (double)(context < W - 1 ? context : W - 1) * hd * kv->window;
        out->kv_write += B * hd * kv->window;
        double ent = attn_entries(cfg, r, p);
        out->f_attn += B * 4.0 * H * hd * ent;
        if (ratio == 0) continue;
        int64_t vis = (p + 1) / ratio;
        out->kv_latent += B * (double)(vis < x->index_topk ? vis : x->index_topk) * hd * kv->latent;
        if (r->is_index_source) {
            double n = keys_scored(cfg, r, p);
            out->kv_index += B * n * ID * kv->key;
            out->f_index += B * 2.0 * IH * ID * n;
        }
        if (r->is_kv_source) /* a 1/ratio share of a new latent (and its key) */
            out->kv_write += B * (hd * kv->latent + (r->indexer_owns_keys ? ID * kv->key : 0.0)) / ratio;
    }
    finish(out);
    return 0;
}

int tide_roof_prefill(const tide_config *cfg, const tide_roof_kv *kv, int64_t len, tide_roof *out,
                      tide_status *st) {
    memset(out, 0, sizeof *out);
    if (check_args(cfg, len, 1, "prompt length", st)) return -1;
    const tide_text_config *x = &cfg->text;
    double hd = (double)x->head_dim, ID = (double)x->index_head_dim;
    double H = (double)x->num_attention_heads, IH = (double)x->index_n_heads;
    int64_t W = x->sliding_window;
    weights_part(cfg, len, 1, out);
    for (int i = 0; i < x->num_hidden_layers; i++) {
        const tide_layer_role *r = &cfg->roles[i];
        int ratio = r->compress_ratio;
        /* the ring keeps the last W rows */
        out->kv_write += (double)(len < W ? len : W) * hd * kv->window;
        double ent = 0, scored = 0;
        for (int64_t t = 0; t < len; t++) {
            ent += attn_entries(cfg, r, t);
            if (ratio > 0 && r->is_index_source) scored += keys_scored(cfg, r, t);
        }
        out->f_attn += 4.0 * H * hd * ent;
        if (ratio == 0) continue;
        double n_comp = (double)(len / ratio);
        /* each compressed layer reads its source's latents once; an indexer its keys */
        out->kv_latent += n_comp * hd * kv->latent;
        if (r->is_index_source) {
            out->kv_index += n_comp * ID * kv->key;
            out->f_index += 2.0 * IH * ID * scored;
        }
        if (r->is_kv_source)
            out->kv_write += n_comp * (hd * kv->latent + (r->indexer_owns_keys ? ID * kv->key : 0.0));
    }
    finish(out);
    return 0;
}
