/* The MoE sub-layer (the reference's Gate, Expert and MoE):
 *   scores = score_func(x W_g^T / gate_temp) in f32 (sqrt(softplus) in V4.1);
 *   experts = top-k of scores + bias (ties toward the lower expert id);
 *   weights = the raw scores of those experts, normalised (sum + 1e-20) when
 *   norm_topk_prob and k > 1, times routed_scaling_factor;
 *   y = sum over experts in ascending id order of w2(bf16(weight * swiglu))
 *       (f32 accumulation of BF16 expert outputs) + shared expert, to BF16. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dist/ep.h"
#include "model/forward_internal.h"
#include "num/num.h"

/* h = bf16(weight * swiglu(w1 x, w3 x)); y = w2 h (BF16). */
static void expert(tide_step *s, const tide_weight *w1, const tide_weight *w2, const tide_weight *w3,
                   const float *x, int64_t n, const float *wt, float *y) {
    const tide_text_config *c = &s->m->cfg.text;
    int64_t I = w1->out;
    float *g = tide_xmalloc((size_t)(n * I) * sizeof(float));
    float *u = tide_xmalloc((size_t)(n * I) * sizeof(float));
    s->ops->linear(s->ops, s->pool, w1, x, n, g, TIDE_LIN_BF16_OUT);
    s->ops->linear(s->ops, s->pool, w3, x, n, u, TIDE_LIN_BF16_OUT);
    s->ops->swiglu(s->ops, g, u, n, I, c->swiglu_limit, wt, g);
    s->ops->linear(s->ops, s->pool, w2, g, n, y, TIDE_LIN_BF16_OUT);
    free(g);
    free(u);
}

void tide_moe_expert(tide_step *s, const tide_ffn_weights *f, int e, const float *x, int64_t n, const float *wt,
                     float *y) {
    expert(s, &f->w1[e], &f->w2[e], &f->w3[e], x, n, wt, y);
}

void tide_moe(tide_step *s, const tide_ffn_weights *f, const float *x, float *out) {
    const tide_text_config *c = &s->m->cfg.text;
    int64_t rows = s->rows, D = c->hidden_size;
    int E = f->n_experts, k = f->top_k;
    float *logits = tide_xmalloc((size_t)(rows * E) * sizeof(float));
    s->ops->linear(s->ops, s->pool, &f->gate, x, rows, logits, 0);
    if (c->gate_temp != 1.0)
        for (int64_t i = 0; i < rows * E; i++) logits[i] /= (float)c->gate_temp;
    int32_t *idx = tide_xmalloc((size_t)(rows * k) * sizeof(int32_t));
    float *wt = tide_xmalloc((size_t)(rows * k) * sizeof(float));
    int func = !strcmp(c->scoring_func, "sigmoid") ? 1 : !strcmp(c->scoring_func, "softmax") ? 2 : 0;
    s->ops->moe_route(s->ops, logits, rows, E, k, func, f->bias, c->norm_topk_prob, (float)c->routed_scaling_factor,
                      idx, wt);

    float *acc = calloc((size_t)(rows * D), sizeof(float));
    float *xe = tide_xmalloc((size_t)(rows * D) * sizeof(float));
    float *ye = tide_xmalloc((size_t)(rows * D) * sizeof(float));
    float *we = tide_xmalloc((size_t)rows * sizeof(float));
    int64_t *who = tide_xmalloc((size_t)rows * sizeof(int64_t));
    if (!acc) abort();
    if (s->m->ep) /* expert parallel: the experts run on the ranks holding them */
        tide_ep_moe(s, f, x, idx, wt, acc);
    for (int e = 0; e < E && !s->m->ep; e++) {
        int64_t n = 0;
        for (int64_t r = 0; r < rows; r++)
            for (int i = 0; i < k; i++)
                if (idx[r * k + i] == e) {
                    memcpy(xe + n * D, x + r * D, (size_t)D * sizeof(float));
                    we[n] = wt[r * k + i];
                    who[n++] = r;
                }
        if (n == 0) continue;
        expert(s, &f->w1[e], &f->w2[e], &f->w3[e], xe, n, we, ye);
        for (int64_t i = 0; i < n; i++)
            for (int64_t d = 0; d < D; d++) acc[who[i] * D + d] += ye[i * D + d];
    }
    expert(s, &f->sw1, &f->sw2, &f->sw3, x, rows, NULL, ye);
    for (int64_t i = 0; i < rows * D; i++) out[i] = tide_round_bf16(acc[i] + ye[i]);
    free(logits);
    free(idx);
    free(wt);
    free(acc);
    free(xe);
    free(ye);
    free(we);
    free(who);
}
