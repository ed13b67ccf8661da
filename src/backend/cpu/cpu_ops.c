/* The CPU backend's ops table, and the small elementwise kernels. */
#include <stdlib.h>

#include "backend/cpu/cpu_internal.h"

void tide_cpu_swiglu(const tide_ops *self, const float *g, const float *u, int64_t rows, int64_t n, double limit,
                     const float *weight, float *h) {
    (void)self; /* the CPU ops have no state */
    float lim = (float)limit;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t i = 0; i < n; i++) {
            float gv = g[r * n + i], uv = u[r * n + i];
            if (lim > 0) {
                uv = uv < -lim ? -lim : (uv > lim ? lim : uv);
                gv = gv > lim ? lim : gv;
            }
            float v = gv / (1.0f + tide_cpu_expf(-gv)) * uv;
            if (weight) v = weight[r] * v;
            h[r * n + i] = tide_round_bf16(v);
        }
}

/* Reductions in f32 in numpy's pairwise order, as the oracle (the engram
 * module's own tide_engram_mix sums in double; see docs/model.md). */
void tide_cpu_engram_mix(const tide_ops *self, const float *kv, const float *w, int64_t rows, int hc, int64_t dim,
                         double eps, float *x) {
    (void)self; /* the CPU ops have no state */
    float *t = malloc((size_t)dim * sizeof(float));
    if (!t) abort();
    float e = (float)eps, scale = (float)pow((double)dim, -0.5);
    for (int64_t r = 0; r < rows; r++) {
        const float *kr = kv + r * (hc + 1) * dim, *value = kr + hc * dim;
        for (int c = 0; c < hc; c++) {
            float *h = x + (r * hc + c) * dim;
            const float *key = kr + c * dim, *wc = w + c * dim;
            float rh = 1.0f / sqrtf(tide_cpu_mean_sq(h, dim, t) + e);
            float rk = 1.0f / sqrtf(tide_cpu_mean_sq(key, dim, t) + e);
            float rstd = rh * rk;
            for (int64_t i = 0; i < dim; i++) t[i] = (h[i] * wc[i]) * key[i];
            float dot = tide_cpu_sum_np(t, dim) * rstd * scale;
            float mag = sqrtf(fabsf(dot) > 1e-6f ? fabsf(dot) : 1e-6f);
            float gate = tide_cpu_sigmoid(copysignf(mag, dot));
            for (int64_t i = 0; i < dim; i++) h[i] = tide_round_bf16(h[i] + gate * value[i]);
        }
    }
    free(t);
}

void tide_cpu_moe_route(const tide_ops *self, const float *logits, int64_t rows, int n_experts, int k, int func,
                        const float *bias, int norm, float route_scale, int32_t *idx, float *w) {
    (void)self; /* the CPU ops have no state */
    float *sc = malloc((size_t)n_experts * 2 * sizeof(float));
    if (!sc) abort();
    float *sel = sc + n_experts;
    for (int64_t r = 0; r < rows; r++) {
        const float *l = logits + r * n_experts;
        if (func == 2) {
            float m = l[0];
            for (int e = 1; e < n_experts; e++) m = l[e] > m ? l[e] : m;
            for (int e = 0; e < n_experts; e++) sc[e] = tide_cpu_expf(l[e] - m);
            float sum = tide_cpu_sum_np(sc, n_experts);
            for (int e = 0; e < n_experts; e++) sc[e] /= sum;
        } else if (func == 1) {
            for (int e = 0; e < n_experts; e++) sc[e] = tide_cpu_sigmoid(l[e]);
        } else {
            /* torch softplus (threshold 20), then sqrt in f32. Below the
             * threshold tide's rule: log1p(exp(x)) in double, rounded once
             * to f32 (the oracle's numerics.softplus calls the same libm
             * exp/log1p; f32 log1p differs between libraries). */
            for (int e = 0; e < n_experts; e++)
                sc[e] = sqrtf(l[e] > 20.0f ? l[e] : (float)log1p(exp((double)l[e])));
        }
        for (int e = 0; e < n_experts; e++) sel[e] = bias ? sc[e] + bias[e] : sc[e];
        int32_t *ix = idx + r * k;
        float *wr = w + r * k;
        for (int i = 0; i < k; i++) { /* k is small: repeated selection */
            int best = -1;
            for (int e = 0; e < n_experts; e++) {
                int taken = 0;
                for (int t = 0; t < i; t++) taken |= ix[t] == e;
                if (!taken && (best < 0 || sel[e] > sel[best])) best = e;
            }
            ix[i] = best;
            wr[i] = sc[best];
        }
        if (norm && k > 1) {
            float sum = tide_cpu_sum_np(wr, k);
            for (int i = 0; i < k; i++) wr[i] /= sum + 1e-20f;
        }
        for (int i = 0; i < k; i++) wr[i] *= route_scale;
    }
    free(sc);
}

void tide_cpu_compress_pool(const tide_ops *self, const float *kv, const float *score, int r, int64_t dim, float *out) {
    (void)self; /* the CPU ops have no state */
    for (int64_t d = 0; d < dim; d++) {
        float m = score[d];
        for (int i = 1; i < r; i++) m = score[i * dim + d] > m ? score[i * dim + d] : m;
        float e[64], sum = 0;
        for (int i = 0; i < r && i < 64; i++) {
            e[i] = tide_cpu_expf(score[i * dim + d] - m);
            sum += e[i];
        }
        float acc = 0;
        for (int i = 0; i < r && i < 64; i++) acc += kv[i * dim + d] * (e[i] / sum);
        out[d] = tide_round_bf16(acc);
    }
}

static const tide_ops cpu_ops = {
    .name = "cpu",
    .linear = tide_cpu_linear,
    .rmsnorm = tide_cpu_rmsnorm,
    .rope = tide_cpu_rope,
    .hc_mixes = tide_cpu_hc_mixes,
    .hc_pre = tide_cpu_hc_pre,
    .hc_post = tide_cpu_hc_post,
    .sparse_attn = tide_cpu_sparse_attn,
    .index_scores = tide_cpu_index_scores,
    .topk_sorted = tide_cpu_topk_sorted,
    .swiglu = tide_cpu_swiglu,
    .engram_mix = tide_cpu_engram_mix,
    .moe_route = tide_cpu_moe_route,
    .compress_pool = tide_cpu_compress_pool,
    .alloc = tide_cpu_alloc,
    .release = tide_cpu_release,
    .upload = tide_cpu_copy,
    .download = tide_cpu_copy,
    .copy = tide_cpu_copy,
    .zero = tide_cpu_zero,
    .embed = tide_cpu_embed,
    .gather_rows = tide_cpu_gather_rows,
    .scatter_add = tide_cpu_scatter_add,
    .add_bf16 = tide_cpu_add_bf16,
    .div_scalar = tide_cpu_div_scalar,
    .hc_mean = tide_cpu_hc_mean,
};

const tide_ops *tide_cpu_ops(void) { return &cpu_ops; }
