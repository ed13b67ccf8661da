/* One block with hyper-connections (the reference's Block.forward,
 * single-pass mHC): the coefficients a sub-layer computes from its own input
 * are used by the NEXT sub-layer.
 *
 *   res = h; (pre_a, post_a, comb_a) = hc_mixes(h, hc_attn_*)
 *   h = hc_post(attn(attn_norm(hc_pre(h, pre_mix))), res, post_a, comb_a)
 *   res = h; (pre_f, post_f, comb_f) = hc_mixes(h, hc_ffn_*)
 *   h = hc_post(moe(ffn_norm(hc_pre(h, pre_a))), res, post_f, comb_f)
 *   pre_mix = pre_f
 *
 * Every array here is in the backend's memory (the forward's buffers) and
 * only ops touch it; the attention sub-layer gets host copies (see
 * forward_internal.h). */
#include <stdlib.h>
#include <string.h>

#include "model/forward_internal.h"

/* The dump hook reads host arrays: a host copy of a backend buffer. */
static void dump(const tide_step *s, const char *name, int layer, const float *p, int64_t rows, int64_t w) {
    const tide_fwd_opts *o = &s->fx->opt;
    if (!o->dump) return;
    float *h = tide_xmalloc((size_t)(rows * w) * sizeof(float));
    s->ops->download(s->ops, h, p, (size_t)(rows * w) * sizeof(float));
    o->dump(o->dump_ctx, name, layer, h, rows, w);
    free(h);
}

/* The attention sub-layer on host arrays: x (backend) -> out (backend). */
static void attention_on_host(tide_step *s, int layer, const float *x, float *out, tide_attn_fn attn, void *arg) {
    const tide_ops *ops = s->ops;
    int64_t n = s->rows * s->m->cfg.text.hidden_size;
    float *xh = s->fx->host_x, *yh = s->fx->host_y; /* sized with the buffers */
    ops->download(ops, xh, x, (size_t)n * sizeof(float));
    if (attn) attn(s, layer, xh, yh, arg);
    else tide_attention(s, layer, xh, yh);
    ops->upload(ops, out, yh, (size_t)n * sizeof(float));
}

void tide_block(tide_step *s, int layer, float *h, float *pre_mix, tide_attn_fn attn, void *arg) {
    const tide_text_config *c = &s->m->cfg.text;
    const tide_layer *L = &s->m->layers[layer];
    const tide_ops *ops = s->ops;
    int hc = (int)c->hc_mult;
    int64_t rows = s->rows, D = c->hidden_size;
    void *const *b = s->fx->buf;
    float *pre = b[FB_PRE], *post = b[FB_POST], *comb = b[FB_COMB], *x = b[FB_X], *y = b[FB_Y], *res = b[FB_RES];
    size_t hb = (size_t)(rows * hc * D) * sizeof(float), pb = (size_t)(rows * hc) * sizeof(float);

    dump(s, "h_in", layer, h, rows, hc * D);
    ops->copy(ops, res, h, hb);
    ops->hc_mixes(ops, s->pool, h, rows, hc, D, L->hc_attn_fn, L->hc_attn_scale, L->hc_attn_base,
                  c->rms_norm_eps, (int)c->hc_sinkhorn_iters, c->hc_eps, pre, post, comb);
    ops->hc_pre(ops, h, rows, hc, D, pre_mix, x);
    ops->rmsnorm(ops, s->pool, x, rows, D, L->attn_norm, c->rms_norm_eps, x);
    attention_on_host(s, layer, x, y, attn, arg);
    dump(s, "attn_out", layer, y, rows, D);
    ops->hc_post(ops, y, res, rows, hc, D, post, comb, h);

    ops->copy(ops, pre_mix, pre, pb); /* attention's pre feeds the FFN */
    ops->copy(ops, res, h, hb);
    ops->hc_mixes(ops, s->pool, h, rows, hc, D, L->hc_ffn_fn, L->hc_ffn_scale, L->hc_ffn_base,
                  c->rms_norm_eps, (int)c->hc_sinkhorn_iters, c->hc_eps, pre, post, comb);
    ops->hc_pre(ops, h, rows, hc, D, pre_mix, x);
    ops->rmsnorm(ops, s->pool, x, rows, D, L->ffn_norm, c->rms_norm_eps, x);
    tide_moe(s, &L->ffn, x, y);
    dump(s, "ffn_out", layer, y, rows, D);
    ops->hc_post(ops, y, res, rows, hc, D, post, comb, h);
    ops->copy(ops, pre_mix, pre, pb);
    dump(s, "h_out", layer, h, rows, hc * D);
}
