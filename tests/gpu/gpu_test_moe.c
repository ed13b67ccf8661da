/* GPU MoE routing (tide_cuda_moe_route) against the CPU backend's moe_route
 * on fresh random logits.
 *
 * Error bounds:
 *   func 1 (sigmoid), func 2 (softmax): the same f32 roundings: expert ids
 *     and weights bit-identical required.
 *   func 0 (sqrt softplus, the model's): the softplus is log1p(exp(x)) in
 *     double rounded to f32, and CUDA's double exp/log1p and glibc's may
 *     differ in the last bits of a double, which very rarely moves the f32
 *     rounding; so weights must be within 2^-20 relative (a few ulps after
 *     the sqrt, normalisation and scale), and expert ids equal except where
 *     the CPU's own selection values of the two experts are within 2^-20
 *     relative of each other (a near-tie that an ulp can flip: reported,
 *     not failed).
 * Inputs: logits ~ N(0, 2) with some above the softplus threshold 20, bias
 * ~ N(0, 0.1) or none, 256 experts top-6 (the model's) and other shapes. */
#include "backend/ops.h"
#include "gpu_cmp.h"
#include "gpu_util.h"
#include "num/num.h"

static void run_case(gu_ctx *c, gu_rng *rng, int64_t rows, int ne, int k, int func, int with_bias, int norm) {
    size_t nl = (size_t)(rows * ne), no = (size_t)(rows * k);
    float *l = gu_xmalloc(nl * 4), *bias = gu_xmalloc((size_t)ne * 4);
    float *rw = gu_xmalloc(no * 4), *gw = gu_xmalloc(no * 4);
    int32_t *ri = gu_xmalloc(no * 4), *gi = gu_xmalloc(no * 4);
    for (size_t i = 0; i < nl; i++) l[i] = (float)(gu_normal(rng) * 2.0 + (gu_uniform(rng) < 0.01 ? 22.0 : 0.0));
    for (int e = 0; e < ne; e++) bias[e] = (float)(gu_normal(rng) * 0.1);
    const float route_scale = 1.5f;
    tide_cpu_ops()->moe_route(tide_cpu_ops(), l, rows, ne, k, func, with_bias ? bias : NULL, norm, route_scale, ri, rw);
    float *dl = gu_dalloc(nl * 4), *db = gu_dalloc((size_t)ne * 4), *dw = gu_dalloc(no * 4);
    int32_t *di = gu_dalloc(no * 4);
    gu_up(dl, l, nl * 4);
    gu_up(db, bias, (size_t)ne * 4);
    gu_poison(dw, 0xff, no * 4);
    gu_poison(di, 0xff, no * 4);
    tide_status st = {0};
    gu_ran(tide_cuda_moe_route(dl, rows, ne, k, func, with_bias ? db : NULL, norm, route_scale, di, dw, NULL, &st),
           &st, "moe_route");
    gu_down(gw, dw, no * 4);
    gu_down(gi, di, no * 4);
    /* ids */
    size_t id_bad = 0, near_ties = 0, rows_cmp = 0;
    gc_stats g = {0, 0, 0, 0.0};
    for (int64_t r = 0; r < rows; r++) {
        int same = 1;
        for (int i = 0; i < k; i++) same &= gi[r * k + i] == ri[r * k + i];
        if (!same) {
            /* a near-tie? the CPU's selection values of the first differing pair */
            int i = 0;
            while (gi[r * k + i] == ri[r * k + i]) i++;
            int a = ri[r * k + i], b = gi[r * k + i];
            if (func == 0 && b >= 0 && b < ne) {
                const float *lr = l + r * ne;
                float ba = with_bias ? bias[a] : 0.0f, bb = with_bias ? bias[b] : 0.0f;
                float sa = sqrtf(lr[a] > 20.0f ? lr[a] : (float)log1p(exp((double)lr[a]))) + ba;
                float sb = sqrtf(lr[b] > 20.0f ? lr[b] : (float)log1p(exp((double)lr[b]))) + bb;
                if (fabs((double)sa - (double)sb) <= 0x1p-20 * fabs((double)sa)) {
                    near_ties++;
                    continue;
                }
            }
            id_bad++;
            continue;
        }
        gc_stats gr = gc_compare(gw + r * k, rw + r * k, (size_t)k, func == 0 ? 0x1p-20 : 0.0);
        g.n += gr.n;
        g.differ += gr.differ;
        g.outside += gr.outside;
        if (gr.max_rel > g.max_rel) g.max_rel = gr.max_rel;
        rows_cmp++;
    }
    char name[96];
    snprintf(name, sizeof name, "func %d rows %lld experts %d k %d%s%s", func, (long long)rows, ne, k,
             with_bias ? " bias" : "", norm ? " norm" : "");
    gu_result(c, name, id_bad == 0 && g.outside == 0 && (func == 0 || g.differ == 0),
              "ids differ in %zu rows (+%zu near-ties); weights bit-identical %zu of %zu, max rel %.3g (bound %s)",
              id_bad, near_ties, g.n - g.differ, g.n, g.max_rel, func == 0 ? "2^-20" : "exact");
    (void)rows_cmp;
    tide_cuda_free(dl);
    tide_cuda_free(db);
    tide_cuda_free(dw);
    tide_cuda_free(di);
    free(l);
    free(bias);
    free(rw);
    free(gw);
    free(ri);
    free(gi);
}

int main(void) {
    gu_ctx c;
    gu_init(&c, "gpu_test_moe");
    gu_rng rng = {c.seed};
    int64_t rows = c.small ? 4 : 512;
    run_case(&c, &rng, rows, 256, 6, 0, 1, 1); /* the model's gate */
    run_case(&c, &rng, rows, 256, 6, 0, 0, 1);
    run_case(&c, &rng, rows, 64, 8, 1, 1, 1);
    run_case(&c, &rng, rows, 100, 4, 2, 0, 0);
    run_case(&c, &rng, rows, 256, 1, 0, 1, 1); /* k = 1: no normalisation */
    run_case(&c, &rng, 3, 5, 5, 2, 1, 1);      /* k = n_experts */
    tide_status st = {0};
    int rc1 = tide_cuda_moe_route(NULL, 1, 8, 9, 0, NULL, 1, 1.0f, NULL, NULL, NULL, &st);
    int rc2 = tide_cuda_moe_route(NULL, 1, 8, 2, 3, NULL, 1, 1.0f, NULL, NULL, NULL, &st);
    gu_result(&c, "bad arguments", rc1 == -1 && rc2 == -1 && st.code == TIDE_ERR_INVALID,
              "k > n_experts and func 3 refused; last message: %s", st.msg);
    return gu_finish(&c);
}
