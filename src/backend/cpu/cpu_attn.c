/* Sparse attention with per-head sinks on the CPU (the reference's
 * sparse_attn): one task per (row, head); each walks its row's entry list in
 * chunks of 64 with an online softmax, rounding the un-normalised
 * probabilities to BF16 before they weight the values. A chunk's
 * probabilities are summed in double (numpy's pairwise order) and rounded
 * once to f32, as the reference (tools/ref/model.py sparse_attn) does: an f32
 * pairwise sum's rounding depends on where the empty entries (zeros) sit,
 * which made prefill and decode of the same tokens differ on rare inputs. */
#include <stdlib.h>

#include "backend/cpu/cpu_internal.h"

#define CHUNK 64

/* numpy's pairwise sum (see tide_cpu_sum_np) of f32 values widened to
 * double, as np.sum(x, dtype=np.float64); exact for the zeros of empty
 * entries wherever they sit. n <= CHUNK here, so no split above 128. */
static double sum_np_f64(const float *x, int n) {
    if (n < 8) {
        double r = 0;
        for (int i = 0; i < n; i++) r += x[i];
        return r;
    }
    double r[8];
    for (int k = 0; k < 8; k++) r[k] = x[k];
    int i = 8;
    for (; i < n - (n % 8); i += 8)
        for (int k = 0; k < 8; k++) r[k] += x[i + k];
    double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; i++) res += x[i];
    return res;
}

/* q.k as torch's CPU matmul computes it for the reference: float32
 * multiply-adds in order over the dimension, the running sum rounded to f32
 * at every step. The exact f32 product plus the f32 sum, in double, rounds
 * like a fused multiply-add except in ~2^-29 of the cases (double
 * rounding), and the numpy oracle does the same (tools/ref/model.py
 * sparse_attn). The official graph's per-layer dumps on tide-mini
 * (docs/tide-mini-fidelity.md) match this on every score; the correctly
 * rounded dot product (tide_cpu_dot) flipped a bf16 rounding of the
 * attention output there, which the FP8 quantisation downstream amplified. */
static float dot_seq(const float *a, const float *b, int64_t n) {
    float s = 0;
    for (int64_t i = 0; i < n; i++) s = (float)((double)a[i] * b[i] + (double)s);
    return s;
}

typedef struct {
    const float *q;
    int heads;
    int64_t dim;
    const tide_attn_row *idx;
    const float *sink;
    float scale;
    float *out;
    float *acc;    /* per thread: 2 * dim floats */
    double *pvacc; /* per thread: dim doubles */
} attn_job;

static void attn_task(void *arg, int64_t task, int thread) {
    const attn_job *j = arg;
    int64_t r = task / j->heads, D = j->dim;
    int h = (int)(task % j->heads);
    const float *q = j->q + (r * j->heads + h) * D;
    const tide_attn_row *row = &j->idx[r];
    float *num = j->acc + (int64_t)thread * 2 * D;
    double *pv = j->pvacc + (int64_t)thread * D;
    for (int64_t d = 0; d < D; d++) num[d] = 0;
    float maximum = -1e30f, den = 0;
    float sc[CHUNK], pr[CHUNK];
    for (int b = 0; b < row->n_idx; b += CHUNK) {
        int n = row->n_idx - b < CHUNK ? row->n_idx - b : CHUNK;
        float cmax = -INFINITY;
        for (int i = 0; i < n; i++) {
            const float *v = row->kv[b + i];
            sc[i] = v ? dot_seq(q, v, D) * j->scale : -INFINITY;
            if (sc[i] > cmax) cmax = sc[i];
        }
        float next = maximum > cmax ? maximum : cmax;
        float corr = tide_cpu_expf(maximum - next);
        for (int i = 0; i < n; i++) pr[i] = row->kv[b + i] ? tide_cpu_expf(sc[i] - next) : 0.0f;
        den = den * corr + (float)sum_np_f64(pr, n);
        /* this chunk's probability-weighted values: BF16 probabilities, one
         * rounding of the chunk's sum (the reference's chunk matmul) */
        for (int64_t d = 0; d < D; d++) pv[d] = 0;
        for (int i = 0; i < n; i++) {
            if (!row->kv[b + i]) continue;
            double pb = tide_round_bf16(pr[i]);
            const float *v = row->kv[b + i];
            for (int64_t d = 0; d < D; d++) pv[d] += pb * v[d];
        }
        for (int64_t d = 0; d < D; d++) num[d] = num[d] * corr + (float)pv[d];
        maximum = next;
    }
    den += tide_cpu_expf(j->sink[h] - maximum);
    float *o = j->out + (r * j->heads + h) * D;
    for (int64_t d = 0; d < D; d++) o[d] = tide_round_bf16(num[d] / den);
}

void tide_cpu_sparse_attn(const tide_ops *self, tide_pool *pool, const float *q, int64_t rows, int heads, int64_t dim,
                          const tide_attn_row *idx, const float *sink, float scale, float *out) {
    (void)self; /* the CPU ops have no state */
    attn_job j = {q, heads, dim, idx, sink, scale, out, NULL, NULL};
    j.acc = malloc((size_t)tide_pool_size(pool) * (size_t)dim * 2 * sizeof(float));
    j.pvacc = malloc((size_t)tide_pool_size(pool) * (size_t)dim * sizeof(double));
    if (!j.acc || !j.pvacc) abort();
    tide_pool_for(pool, rows * heads, attn_task, &j);
    free(j.acc);
    free(j.pvacc);
}
