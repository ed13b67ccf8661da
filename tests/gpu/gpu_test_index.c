/* GPU indexer scoring (tide_cuda_index_scores) and top-k
 * (tide_cuda_topk_sorted) against the CPU backend's index_scores and
 * topk_sorted on fresh random data.
 *
 * Error bounds:
 *   index_scores: designed bit-identical (the CPU's 4-lane double dot per
 *     head, BF16 roundings, sequential f32 head sum); the test requires every
 *     score within one BF16 step of the CPU's and at most 0.1% differing,
 *     and reports the bit-identical count.
 *   index_scores_fast (kernel mode fast; tensor cores): within the bound
 *     derived in scores_case, rows in one or two key groups.
 *   topk_sorted: exact: the same positions in the same (ascending) order,
 *     run on the CPU's scores, so that a tie rule mismatch cannot hide
 *     behind a score difference. Cases with heavy ties (scores drawn from a
 *     few values, -inf for masked positions, +0/-0), k = 1, k = n.
 * Inputs: q and keys FP4-simulated (e8m0, blocks of 32) as the model's, head
 * weights BF16-exact, 64 heads of 128 dims (the model's indexer). */
#include <math.h>
#include <string.h>

#include "backend/ops.h"
#include "gpu_cmp.h"
#include "gpu_util.h"
#include "num/num.h"

static void scores_case(gu_ctx *c, gu_rng *rng, int64_t rows, int heads, int64_t d, int64_t n) {
    size_t nq = (size_t)(rows * heads * d), nk = (size_t)(n * d), ns = (size_t)(rows * n);
    float *q = gu_xmalloc(nq * 4), *w = gu_xmalloc((size_t)(rows * heads) * 4), *k = gu_xmalloc(nk * 4);
    float *ref = gu_xmalloc(ns * 4), *got = gu_xmalloc(ns * 4);
    for (size_t i = 0; i < nq; i++) q[i] = GC_BF16_NORMAL(rng, 1.0);
    for (size_t i = 0; i < nk; i++) k[i] = GC_BF16_NORMAL(rng, 1.0);
    tide_sim_fp4_e8m0(q, nq, 32);
    tide_sim_fp4_e8m0(k, nk, 32);
    for (int64_t i = 0; i < rows * heads; i++) w[i] = GC_BF16_NORMAL(rng, 0.1);
    for (int64_t r = 0; r < rows; r++)
        tide_cpu_ops()->index_scores(tide_cpu_ops(), q + r * heads * d, heads, d, w + r * heads, k, n, ref + r * n);
    float *dq = gu_dalloc(nq * 4), *dw = gu_dalloc((size_t)(rows * heads) * 4), *dk = gu_dalloc(nk * 4);
    float *ds = gu_dalloc(ns * 4);
    gu_up(dq, q, nq * 4);
    gu_up(dw, w, (size_t)(rows * heads) * 4);
    gu_up(dk, k, nk * 4);
    gu_poison(ds, 0xff, ns * 4);
    tide_status st = {0};
    gu_ran(tide_cuda_index_scores(dq, rows, heads, d, dw, dk, n, ds, NULL, &st), &st, "index_scores");
    gu_down(got, ds, ns * 4);
    gc_stats g = gc_compare(got, ref, ns, 0x1p-8);
    char name[96];
    snprintf(name, sizeof name, "scores rows %lld heads %d d %lld n %lld", (long long)rows, heads, (long long)d,
             (long long)n);
    gu_result(c, name, g.outside == 0 && g.differ * 1000 <= g.n,
              "bit-identical %zu of %zu; outside 1 bf16 step %zu; max rel %.3g", g.n - g.differ, g.n, g.outside,
              g.max_rel);

    /* the fast (tensor-core) scores: rows in `groups` key groups (row r reads
     * group r % groups; the extra groups are fresh FP4 keys), against the
     * CPU per row, within the bound derived below */
    for (int groups = 1; groups <= 2; groups++) {
        size_t nkg = nk * (size_t)groups;
        float *kg = gu_xmalloc(nkg * 4), *fref = gu_xmalloc(ns * 4);
        memcpy(kg, k, nk * 4);
        for (size_t i = nk; i < nkg; i++) kg[i] = GC_BF16_NORMAL(rng, 1.0);
        if (groups > 1) tide_sim_fp4_e8m0(kg + nk, nkg - nk, 32);
        for (int64_t r = 0; r < rows; r++)
            tide_cpu_ops()->index_scores(tide_cpu_ops(), q + r * heads * d, heads, d, w + r * heads,
                                         kg + (size_t)(r % groups) * nk, n, fref + r * n);
        float *dkg = gu_dalloc(nkg * 4);
        gu_up(dkg, kg, nkg * 4);
        gu_poison(ds, 0xff, ns * 4);
        gu_ran(tide_cuda_index_scores_fast(dq, rows, heads, d, dw, dkg, n, groups, (int64_t)nk, ds, NULL, &st), &st,
               "index_scores_fast");
        gu_down(got, ds, ns * 4);
        /* Bound per score. dot_h moves by at most dd_h = 2 d 2^-24 sum|q k|
         * (f32 accumulation, truncating or not); bf16(dot) by dd_h plus one
         * bf16 step (<= 2^-7 |dot|); relu is 1-Lipschitz; bf16(v w) adds a
         * step of the term; the f32 head sums differ by the moved terms plus
         * each side's rounding (<= heads 2^-24 T each); the final bf16 a step:
         *   B = (1 + 2^-6) sum_h (|w_h| (dd_h + 2^-7 |dot_h|) + 2^-7 |t_h|)
         *       + (2 heads 2^-24 + 2^-7) T + 2^-6 |score|,  T = sum_h |t_h|. */
        size_t over = 0, same = 0;
        double worst = 0;
        for (int64_t r = 0; r < rows; r++)
            for (int64_t j = 0; j < n; j++) {
                const float *kj = kg + (size_t)(r % groups) * nk + j * d;
                double acc = 0, T = 0;
                for (int h = 0; h < heads; h++) {
                    const float *qh = q + (r * heads + h) * d;
                    double dot = 0, mag = 0;
                    for (int64_t i = 0; i < d; i++) {
                        dot += (double)qh[i] * kj[i];
                        mag += fabs((double)qh[i] * kj[i]);
                    }
                    double wh = fabs((double)w[r * heads + h]), t = (dot > 0 ? dot : 0) * wh;
                    acc += wh * (2.0 * (double)d * 0x1p-24 * mag + 0x1p-7 * fabs(dot)) + 0x1p-7 * t;
                    T += t;
                }
                double ref1 = fref[r * n + j], e = fabs((double)got[r * n + j] - ref1);
                double b = (1 + 0x1p-6) * acc + (2.0 * heads * 0x1p-24 + 0x1p-7) * T + 0x1p-6 * fabs(ref1) + 0x1p-120;
                over += !(e <= b);
                same += got[r * n + j] == fref[r * n + j] || (got[r * n + j] != got[r * n + j] && ref1 != ref1);
                if (e / b > worst) worst = e / b;
            }
        snprintf(name, sizeof name, "scores fast rows %lld heads %d d %lld n %lld groups %d", (long long)rows, heads,
                 (long long)d, (long long)n, groups);
        gu_result(c, name, over == 0, "%zu outside the bound; worst error/bound %.3g; bit-identical %zu of %zu", over,
                  worst, same, ns);
        tide_cuda_free(dkg);
        free(kg);
        free(fref);
    }
    tide_cuda_free(dq);
    tide_cuda_free(dw);
    tide_cuda_free(dk);
    tide_cuda_free(ds);
    free(q);
    free(w);
    free(k);
    free(ref);
    free(got);
}

/* ties: 0 = continuous scores, 1 = a few BF16 values, 2 = also -inf, +0, -0 */
static void topk_case(gu_ctx *c, gu_rng *rng, int64_t rows, int64_t n, int k, int ties) {
    size_t ns = (size_t)(rows * n);
    float *s = gu_xmalloc(ns * 4);
    int32_t *ref = gu_xmalloc((size_t)(rows * k + 1) * 4), *got = gu_xmalloc((size_t)(rows * k + 1) * 4);
    int32_t *scratch = gu_xmalloc((size_t)n * 4 + 4);
    for (size_t i = 0; i < ns; i++) {
        float v = (float)gu_normal(rng);
        if (ties) v = tide_round_bf16((float)((int)(gu_uniform(rng) * 7) - 3) * 0.5f);
        if (ties == 2) {
            double u = gu_uniform(rng);
            if (u < 0.2) v = -INFINITY;
            else if (u < 0.3) v = 0.0f;
            else if (u < 0.4) v = -0.0f;
        }
        s[i] = v;
    }
    for (int64_t r = 0; r < rows; r++) tide_cpu_ops()->topk_sorted(tide_cpu_ops(), s + r * n, n, k, ref + r * k,
                                                                   scratch);
    float *ds = gu_dalloc(ns * 4);
    int32_t *dout = gu_dalloc((size_t)(rows * k + 1) * 4);
    gu_up(ds, s, ns * 4);
    gu_poison(dout, 0xff, (size_t)(rows * k + 1) * 4);
    tide_status st = {0};
    gu_ran(tide_cuda_topk_sorted(ds, rows, n, k, dout, NULL, &st), &st, "topk_sorted");
    gu_down(got, dout, (size_t)(rows * k) * 4);
    size_t bad = 0;
    for (int64_t i = 0; i < rows * k; i++) bad += got[i] != ref[i];
    char name[96];
    snprintf(name, sizeof name, "topk rows %lld n %lld k %d ties %d", (long long)rows, (long long)n, k, ties);
    gu_result(c, name, bad == 0, "exact required; %zu of %lld positions differ", bad, (long long)(rows * k));
    tide_cuda_free(ds);
    tide_cuda_free(dout);
    free(s);
    free(ref);
    free(got);
    free(scratch);
}

int main(void) {
    gu_ctx c;
    gu_init(&c, "gpu_test_index");
    gu_rng rng = {c.seed};
    if (c.small) {
        scores_case(&c, &rng, 2, 64, 128, 300);
        topk_case(&c, &rng, 2, 1000, 64, 2);
        topk_case(&c, &rng, 2, 700, 700, 1);
    } else {
        scores_case(&c, &rng, 1, 64, 128, 8192);
        scores_case(&c, &rng, 4, 64, 128, 2000);
        scores_case(&c, &rng, 3, 70, 130, 333); /* heads > 64: two rounds; d % 4 != 0 */
        topk_case(&c, &rng, 1, 65536, 512, 0);
        topk_case(&c, &rng, 4, 20000, 2048, 1);
        topk_case(&c, &rng, 3, 5000, 512, 2);
        topk_case(&c, &rng, 5, 1000, 1, 2);
        topk_case(&c, &rng, 2, 777, 777, 2); /* k = n */
        topk_case(&c, &rng, 2, 513, 100, 0);
    }
    tide_status st = {0};
    int rc1 = tide_cuda_topk_sorted(NULL, 1, 10, 11, NULL, NULL, &st);
    int rc2 = tide_cuda_index_scores(NULL, 1, 0, 128, NULL, NULL, 10, NULL, NULL, &st);
    gu_result(&c, "bad arguments", rc1 == -1 && rc2 == -1 && st.code == TIDE_ERR_INVALID,
              "k > n and heads 0 refused; last message: %s", st.msg);
    return gu_finish(&c);
}
