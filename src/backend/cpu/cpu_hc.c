/* Hyper-connections on the CPU: the per-token mixing coefficients
 * (RMS-normalised projection of the flattened copies, then sigmoid gates and
 * a Sinkhorn-normalised combination matrix) and the collapse / expand steps.
 * Order of operations follows the reference's hc_mixes, hc_split_sinkhorn,
 * hc_pre and hc_post. */
#include <stdlib.h>

#include "backend/cpu/cpu_internal.h"

#define HC_MAX 16

typedef struct {
    const float *x;
    int hc;
    int64_t dim;
    const float *fn, *scale, *base;
    float norm_eps, hc_eps;
    int iters;
    float *pre, *post, *comb;
    float *scratch; /* per thread: hc * dim floats */
} mix_job;

static void sinkhorn(float *c, int h, int iters, float eps) {
    /* softmax along each row, plus eps */
    for (int k = 0; k < h; k++) {
        float *row = c + k * h, m = row[0], s = 0;
        for (int j = 1; j < h; j++) m = row[j] > m ? row[j] : m;
        for (int j = 0; j < h; j++) {
            row[j] = tide_cpu_expf(row[j] - m);
            s += row[j];
        }
        for (int j = 0; j < h; j++) row[j] = row[j] / s + eps;
    }
    for (int it = 0; it < iters; it++) {
        if (it > 0) /* the first pass only normalises columns */
            for (int k = 0; k < h; k++) {
                float s = 0;
                for (int j = 0; j < h; j++) s += c[k * h + j];
                for (int j = 0; j < h; j++) c[k * h + j] /= s + eps;
            }
        for (int j = 0; j < h; j++) {
            float s = 0;
            for (int k = 0; k < h; k++) s += c[k * h + j];
            for (int k = 0; k < h; k++) c[k * h + j] /= s + eps;
        }
    }
}

static void mix_task(void *arg, int64_t r, int thread) {
    const mix_job *j = arg;
    int h = j->hc, nm = (2 + h) * h;
    int64_t n = (int64_t)h * j->dim;
    const float *x = j->x + r * n;
    float rs = 1.0f / sqrtf(tide_cpu_mean_sq(x, n, j->scratch + (int64_t)thread * n) + j->norm_eps);
    float m[(2 + HC_MAX) * HC_MAX];
    for (int i = 0; i < nm; i++) m[i] = tide_cpu_dot(x, j->fn + i * n, n) * rs;
    float *pre = j->pre + r * h, *post = j->post + r * h, *comb = j->comb + r * h * h;
    for (int c = 0; c < h; c++) {
        pre[c] = tide_cpu_sigmoid(m[c] * j->scale[0] + j->base[c]) + j->hc_eps;
        post[c] = 2.0f * tide_cpu_sigmoid(m[h + c] * j->scale[1] + j->base[h + c]);
    }
    for (int i = 0; i < h * h; i++) comb[i] = m[2 * h + i] * j->scale[2] + j->base[2 * h + i];
    sinkhorn(comb, h, j->iters, j->hc_eps);
}

void tide_cpu_hc_mixes(const tide_ops *self, tide_pool *pool, const float *x, int64_t rows, int hc, int64_t dim,
                       const float *fn, const float *scale, const float *base, double norm_eps,
                       int iters, double hc_eps, float *pre, float *post, float *comb) {
    (void)self; /* the CPU ops have no state */
    if (hc < 1 || hc > HC_MAX) return; /* the config check bounds hc_mult */
    mix_job j = {x, hc, dim, fn, scale, base, (float)norm_eps, (float)hc_eps, iters, pre, post, comb, NULL};
    j.scratch = malloc((size_t)tide_pool_size(pool) * (size_t)(hc * dim) * sizeof(float));
    if (!j.scratch) abort();
    tide_pool_for(pool, rows, mix_task, &j);
    free(j.scratch);
}

void tide_cpu_hc_pre(const tide_ops *self, const float *x, int64_t rows, int hc, int64_t dim, const float *pre,
                     float *y) {
    (void)self; /* the CPU ops have no state */
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * hc * dim, *p = pre + r * hc;
        for (int64_t i = 0; i < dim; i++) {
            float s = 0;
            for (int c = 0; c < hc; c++) s += p[c] * xr[c * dim + i];
            y[r * dim + i] = tide_round_bf16(s);
        }
    }
}

void tide_cpu_hc_post(const tide_ops *self, const float *y, const float *res, int64_t rows, int hc, int64_t dim,
                      const float *post, const float *comb, float *out) {
    (void)self; /* the CPU ops have no state */
    for (int64_t r = 0; r < rows; r++) {
        const float *yr = y + r * dim, *rr = res + r * hc * dim;
        const float *p = post + r * hc, *cm = comb + r * hc * hc;
        float *o = out + r * hc * dim;
        for (int jc = 0; jc < hc; jc++)
            for (int64_t i = 0; i < dim; i++) {
                float s = 0;
                for (int k = 0; k < hc; k++) s += cm[k * hc + jc] * rr[k * dim + i];
                o[jc * dim + i] = tide_round_bf16(p[jc] * yr[i] + s);
            }
    }
}
