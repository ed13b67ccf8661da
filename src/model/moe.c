/* The MoE sub-layer (the reference's Gate, Expert and MoE):
 *   scores = score_func(x W_g^T / gate_temp) in f32 (sqrt(softplus) in V4.1);
 *   experts = top-k of scores + bias (ties toward the lower expert id);
 *   weights = the raw scores of those experts, normalised (sum + 1e-20) when
 *   norm_topk_prob and k > 1, times routed_scaling_factor;
 *   y = sum over experts in ascending id order of w2(bf16(weight * swiglu))
 *       (f32 accumulation of BF16 expert outputs) + shared expert, to BF16.
 * x and out are in the backend's memory, and so is every intermediate (the
 * forward's buffers); the routing (expert ids and weights, rows * top_k
 * values) comes back to the host, which groups the rows by expert. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dist/ep.h"
#include "model/forward_internal.h"
#include "num/num.h"

/* h = bf16(weight * swiglu(w1 x, w3 x)); y = w2 h (BF16). g, u: [n][inter] scratch. */
static void expert(tide_step *s, const tide_weight *w1, const tide_weight *w2, const tide_weight *w3,
                   const float *x, int64_t n, const float *wt, float *y, float *g, float *u) {
    const tide_text_config *c = &s->m->cfg.text;
    int64_t I = w1->out;
    s->ops->linear(s->ops, s->pool, w1, x, n, g, TIDE_LIN_BF16_OUT);
    s->ops->linear(s->ops, s->pool, w3, x, n, u, TIDE_LIN_BF16_OUT);
    s->ops->swiglu(s->ops, g, u, n, I, c->swiglu_limit, wt, g);
    s->ops->linear(s->ops, s->pool, w2, g, n, y, TIDE_LIN_BF16_OUT);
}

void tide_moe_expert(tide_step *s, const tide_ffn_weights *f, int e, const float *x, int64_t n, const float *wt,
                     float *y, float *g, float *u) {
    expert(s, &f->w1[e], &f->w2[e], &f->w3[e], x, n, wt, y, g, u);
}

void tide_moe(tide_step *s, const tide_ffn_weights *f, const float *x, float *out) {
    const tide_text_config *c = &s->m->cfg.text;
    const tide_ops *ops = s->ops;
    int64_t rows = s->rows, D = c->hidden_size;
    int E = f->n_experts, k = f->top_k;
    void *const *b = s->fx->buf;
    float *logits = b[FB_GATE], *acc = b[FB_ACC], *xe = b[FB_XE], *ye = b[FB_YE], *we_b = b[FB_WE];
    ops->linear(ops, s->pool, &f->gate, x, rows, logits, 0);
    if (c->gate_temp != 1.0) ops->div_scalar(ops, logits, rows * E, (float)c->gate_temp);
    int32_t *idx = tide_xmalloc((size_t)(rows * k) * sizeof(int32_t));
    float *wt = tide_xmalloc((size_t)(rows * k) * sizeof(float));
    int func = !strcmp(c->scoring_func, "sigmoid") ? 1 : !strcmp(c->scoring_func, "softmax") ? 2 : 0;
    ops->moe_route(ops, logits, rows, E, k, func, f->bias, c->norm_topk_prob, (float)c->routed_scaling_factor,
                      idx, wt);
    if (s->row_img && f->bias_vl) {
        /* image-span rows select with bias_vl (routing is row-independent, so
         * routing every row again and keeping the image rows' is exact) */
        int32_t *iv = tide_xmalloc((size_t)(rows * k) * sizeof(int32_t));
        float *wv = tide_xmalloc((size_t)(rows * k) * sizeof(float));
        ops->moe_route(ops, logits, rows, E, k, func, f->bias_vl, c->norm_topk_prob,
                          (float)c->routed_scaling_factor, iv, wv);
        for (int64_t r = 0; r < rows; r++)
            if (s->row_img[r]) {
                memcpy(idx + r * k, iv + r * k, (size_t)k * sizeof(int32_t));
                memcpy(wt + r * k, wv + r * k, (size_t)k * sizeof(float));
            }
        free(iv);
        free(wv);
    }

    ops->zero(ops, acc, (size_t)(rows * D) * sizeof(float));
    float *we = tide_xmalloc((size_t)rows * sizeof(float));
    int64_t *who = tide_xmalloc((size_t)rows * sizeof(int64_t));
    if (s->m->ep) /* expert parallel: the experts run on the ranks holding them (dist/ep.h) */
        tide_ep_moe(s, f, x, idx, wt, acc);
    for (int e = 0; e < E && !s->m->ep; e++) {
        int64_t n = 0;
        for (int64_t r = 0; r < rows; r++)
            for (int i = 0; i < k; i++)
                if (idx[r * k + i] == e) {
                    we[n] = wt[r * k + i];
                    who[n++] = r;
                }
        if (n == 0) continue;
        ops->gather_rows(ops, x, (size_t)D * sizeof(float), who, n, xe);
        ops->upload(ops, we_b, we, (size_t)n * sizeof(float));
        expert(s, &f->w1[e], &f->w2[e], &f->w3[e], xe, n, we_b, ye, b[FB_G], b[FB_U]);
        ops->scatter_add(ops, ye, n, D, who, acc);
    }
    expert(s, &f->sw1, &f->sw2, &f->sw3, x, rows, NULL, ye, b[FB_G], b[FB_U]);
    ops->add_bf16(ops, acc, ye, rows * D, out);
    free(idx);
    free(wt);
    free(we);
    free(who);
}
