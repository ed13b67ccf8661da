/* Measured ceilings (ceilings.h). */
#include "bench/ceilings.h"

#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "engine/rng.h"
#include "num/num.h"

#define REPS 5

typedef struct copy_job {
    uint8_t *dst;
    const uint8_t *src;
    int64_t n, per;
} copy_job;

static void copy_task(void *arg, int64_t task, int thread) {
    (void)thread;
    copy_job *j = arg;
    int64_t lo = task * j->per, hi = lo + j->per < j->n ? lo + j->per : j->n;
    if (hi > lo) memcpy(j->dst + lo, j->src + lo, (size_t)(hi - lo));
}

static int measure_copy(tide_pool *pool, int64_t n, double *bps, tide_status *st) {
    uint8_t *a = malloc((size_t)n), *b = malloc((size_t)n);
    if (!a || !b) {
        free(a);
        free(b);
        return tide_fail(st, TIDE_ERR_NOMEM, "ceilings: cannot allocate 2 x %lld bytes", (long long)n);
    }
    memset(a, 1, (size_t)n); /* touch every page before timing */
    memset(b, 2, (size_t)n);
    int nt = tide_pool_size(pool);
    copy_job j = {b, a, n, (n + nt - 1) / nt};
    double best = 0;
    for (int r = 0; r < REPS; r++) {
        double t0 = tide_now_seconds();
        tide_pool_for(pool, nt, copy_task, &j);
        double dt = tide_now_seconds() - t0;
        if (dt > 0 && 2.0 * (double)n / dt > best) best = 2.0 * (double)n / dt;
    }
    free(a);
    free(b);
    *bps = best;
    return 0;
}

static int measure_gemm(const tide_ops *ops, tide_pool *pool, int64_t out, int64_t in, int64_t rows, double *fps,
                        tide_status *st) {
    float *wf = malloc((size_t)(out * in) * sizeof(float));
    uint8_t *w = malloc((size_t)(out * in));
    uint8_t *sc = malloc((size_t)(((out + 31) / 32) * ((in + 31) / 32)));
    float *x = malloc((size_t)(rows * in) * sizeof(float));
    float *y = malloc((size_t)(rows * out) * sizeof(float));
    int rc = 0;
    if (!wf || !w || !sc || !x || !y) {
        rc = tide_fail(st, TIDE_ERR_NOMEM, "ceilings: cannot allocate a %lldx%lld GEMM", (long long)out, (long long)in);
        goto done;
    }
    for (int64_t i = 0; i < out * in; i++) wf[i] = (float)(tide_rng_uniform(7, (uint64_t)i, 0, 0) - 0.5);
    for (int64_t i = 0; i < rows * in; i++) x[i] = tide_round_bf16((float)(tide_rng_uniform(8, (uint64_t)i, 0, 0) - 0.5));
    tide_quant_fp8_weight(wf, (size_t)out, (size_t)in, w, sc);
    tide_weight wt = {TIDE_W_FP8, out, in, w, sc};
    ops->linear(ops, pool, &wt, x, rows, y, TIDE_LIN_BF16_OUT); /* warm-up */
    double best = 0, flops = 2.0 * (double)rows * (double)out * (double)in;
    for (int r = 0; r < REPS; r++) {
        double t0 = tide_now_seconds();
        ops->linear(ops, pool, &wt, x, rows, y, TIDE_LIN_BF16_OUT);
        double dt = tide_now_seconds() - t0;
        if (dt > 0 && flops / dt > best) best = flops / dt;
    }
    *fps = best;
done:
    free(wf);
    free(w);
    free(sc);
    free(x);
    free(y);
    return rc;
}

int tide_measure_ceilings(const tide_ops *ops, tide_pool *pool, int64_t copy_bytes, int64_t out, int64_t in,
                          int64_t rows, tide_ceilings *c, tide_status *st) {
    memset(c, 0, sizeof *c);
    if (!ops || copy_bytes < (1 << 20) || copy_bytes > ((int64_t)1 << 36) || out < 32 || in < 32 || out % 32 ||
        in % 32 || rows < 1 || out * in > ((int64_t)1 << 28) || rows * (out > in ? out : in) > ((int64_t)1 << 28))
        return tide_fail(st, TIDE_ERR_INVALID,
                         "ceilings: bad sizes (copy %lld bytes, GEMM %lldx%lld over %lld rows)", (long long)copy_bytes,
                         (long long)out, (long long)in, (long long)rows);
    c->copy_bytes = copy_bytes;
    c->gemm_out = out;
    c->gemm_in = in;
    c->gemm_rows = rows;
    if (measure_copy(pool, copy_bytes, &c->copy_bytes_per_s, st) != 0) return -1;
    return measure_gemm(ops, pool, out, in, rows, &c->gemm_flops_per_s, st);
}
