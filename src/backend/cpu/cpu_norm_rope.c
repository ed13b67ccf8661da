/* RMSNorm and rotary embedding on the CPU, with the reference's rounding
 * points: both compute in f32 and store BF16. */
#include <stdlib.h>

#include "backend/cpu/cpu_internal.h"

typedef struct {
    const float *x;
    int64_t dim;
    const float *w;
    float eps;
    float *y;
    float *scratch; /* per thread: dim floats */
} norm_job;

static void norm_task(void *arg, int64_t r, int thread) {
    const norm_job *j = arg;
    const float *x = j->x + r * j->dim;
    float *y = j->y + r * j->dim;
    float var = tide_cpu_mean_sq(x, j->dim, j->scratch + (int64_t)thread * j->dim);
    float rs = 1.0f / sqrtf(var + j->eps);
    for (int64_t i = 0; i < j->dim; i++) y[i] = tide_round_bf16(j->w[i] * (x[i] * rs));
}

void tide_cpu_rmsnorm(const tide_ops *self, tide_pool *pool, const float *x, int64_t rows, int64_t dim, const float *w,
                      double eps, float *y) {
    (void)self; /* the CPU ops have no state */
    if (rows <= 0) return;
    if (rows * dim < 65536) pool = NULL; /* not worth waking the workers */
    norm_job j = {x, dim, w, (float)eps, y, NULL};
    j.scratch = malloc((size_t)tide_pool_size(pool) * (size_t)dim * sizeof(float));
    if (!j.scratch) abort();
    tide_pool_for(pool, rows, norm_task, &j);
    free(j.scratch);
}

void tide_cpu_rope(const tide_ops *self, float *x, int64_t n_vec, int64_t stride, int64_t n_freq, const float *cs,
                   int inverse) {
    (void)self; /* the CPU ops have no state */
    for (int64_t v = 0; v < n_vec; v++) {
        float *p = x + v * stride;
        for (int64_t f = 0; f < n_freq; f++) {
            float c = cs[2 * f], s = inverse ? -cs[2 * f + 1] : cs[2 * f + 1];
            float a = p[2 * f], b = p[2 * f + 1];
            float ac = a * c, bs = b * s, as = a * s, bc = b * c;
            p[2 * f] = tide_round_bf16(ac - bs);
            p[2 * f + 1] = tide_round_bf16(as + bc);
        }
    }
}
