/* One block with hyper-connections (the reference's Block.forward,
 * single-pass mHC): the coefficients a sub-layer computes from its own input
 * are used by the NEXT sub-layer.
 *
 *   res = h; (pre_a, post_a, comb_a) = hc_mixes(h, hc_attn_*)
 *   h = hc_post(attn(attn_norm(hc_pre(h, pre_mix))), res, post_a, comb_a)
 *   res = h; (pre_f, post_f, comb_f) = hc_mixes(h, hc_ffn_*)
 *   h = hc_post(moe(ffn_norm(hc_pre(h, pre_a))), res, post_f, comb_f)
 *   pre_mix = pre_f */
#include <stdlib.h>
#include <string.h>

#include "model/forward_internal.h"

void tide_block(tide_step *s, int layer, float *h, float *pre_mix, tide_attn_fn attn, void *arg) {
    const tide_text_config *c = &s->m->cfg.text;
    const tide_layer *L = &s->m->layers[layer];
    const tide_ops *ops = s->ops;
    int hc = (int)c->hc_mult;
    int64_t rows = s->rows, D = c->hidden_size;
    float *pre = tide_xmalloc((size_t)(rows * hc) * sizeof(float));
    float *post = tide_xmalloc((size_t)(rows * hc) * sizeof(float));
    float *comb = tide_xmalloc((size_t)(rows * hc * hc) * sizeof(float));
    float *x = tide_xmalloc((size_t)(rows * D) * sizeof(float));
    float *y = tide_xmalloc((size_t)(rows * D) * sizeof(float));
    float *res = tide_xmalloc((size_t)(rows * hc * D) * sizeof(float));

    const tide_fwd_opts *o = &s->fx->opt;
    if (o->dump) o->dump(o->dump_ctx, "h_in", layer, h, rows, hc * D);
    memcpy(res, h, (size_t)(rows * hc * D) * sizeof(float));
    ops->hc_mixes(ops, s->pool, h, rows, hc, D, L->hc_attn_fn, L->hc_attn_scale, L->hc_attn_base,
                  c->rms_norm_eps, (int)c->hc_sinkhorn_iters, c->hc_eps, pre, post, comb);
    ops->hc_pre(ops, h, rows, hc, D, pre_mix, x);
    ops->rmsnorm(ops, s->pool, x, rows, D, L->attn_norm, c->rms_norm_eps, x);
    if (attn) attn(s, layer, x, y, arg);
    else tide_attention(s, layer, x, y);
    if (o->dump) o->dump(o->dump_ctx, "attn_out", layer, y, rows, D);
    ops->hc_post(ops, y, res, rows, hc, D, post, comb, h);

    memcpy(pre_mix, pre, (size_t)(rows * hc) * sizeof(float)); /* attention's pre feeds the FFN */
    memcpy(res, h, (size_t)(rows * hc * D) * sizeof(float));
    ops->hc_mixes(ops, s->pool, h, rows, hc, D, L->hc_ffn_fn, L->hc_ffn_scale, L->hc_ffn_base,
                  c->rms_norm_eps, (int)c->hc_sinkhorn_iters, c->hc_eps, pre, post, comb);
    ops->hc_pre(ops, h, rows, hc, D, pre_mix, x);
    ops->rmsnorm(ops, s->pool, x, rows, D, L->ffn_norm, c->rms_norm_eps, x);
    tide_moe(s, &L->ffn, x, y);
    if (o->dump) o->dump(o->dump_ctx, "ffn_out", layer, y, rows, D);
    ops->hc_post(ops, y, res, rows, hc, D, post, comb, h);
    memcpy(pre_mix, pre, (size_t)(rows * hc) * sizeof(float));
    if (o->dump) o->dump(o->dump_ctx, "h_out", layer, h, rows, hc * D);

    free(pre);
    free(post);
    free(comb);
    free(x);
    free(y);
    free(res);
}
