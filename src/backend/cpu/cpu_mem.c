/* The CPU backend's memory and data-movement ops (ops.h): its memory is the
 * host's, so alloc is malloc and the copies are memcpy. The arithmetic ones
 * (scatter_add, add_bf16, div_scalar, hc_mean) keep the exact order of the
 * loops the forward pass used to run itself, so moving them behind the
 * table changed no bit. */
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_internal.h"
#include "num/num.h"

void tide_weight_row(const tide_weight *w, int64_t row, float *dst) {
    const uint8_t *d = w->data;
    if (w->type == TIDE_W_F32) {
        memcpy(dst, d + (size_t)(row * w->in) * 4, (size_t)w->in * 4);
        return;
    }
    for (int64_t i = 0; i < w->in; i++) {
        uint16_t b;
        memcpy(&b, d + (size_t)(row * w->in + i) * 2, 2);
        dst[i] = tide_bf16_to_f32(b);
    }
}

void *tide_cpu_alloc(const tide_ops *self, size_t bytes) {
    (void)self;
    return malloc(bytes ? bytes : 1);
}

void tide_cpu_release(const tide_ops *self, void *p) {
    (void)self;
    free(p);
}

void tide_cpu_copy(const tide_ops *self, void *dst, const void *src, size_t bytes) {
    (void)self;
    if (bytes) memcpy(dst, src, bytes);
}

void tide_cpu_zero(const tide_ops *self, void *p, size_t bytes) {
    (void)self;
    if (bytes) memset(p, 0, bytes);
}

void tide_cpu_embed(const tide_ops *self, const tide_weight *table, const int32_t *ids, int64_t rows, int hc,
                    float *h) {
    (void)self;
    int64_t D = table->in;
    for (int64_t r = 0; r < rows; r++) {
        float *dst = h + r * hc * D;
        tide_weight_row(table, ids[r], dst);
        for (int64_t c = 1; c < hc; c++) memcpy(dst + c * D, dst, (size_t)D * sizeof(float));
    }
}

void tide_cpu_gather_rows(const tide_ops *self, const void *src, size_t width, const int64_t *idx, int64_t n,
                          void *dst) {
    (void)self;
    for (int64_t i = 0; i < n; i++)
        memcpy((char *)dst + (size_t)i * width, (const char *)src + (size_t)idx[i] * width, width);
}

void tide_cpu_scatter_add(const tide_ops *self, const float *y, int64_t n, int64_t dim, const int64_t *idx,
                          float *acc) {
    (void)self;
    for (int64_t i = 0; i < n; i++)
        for (int64_t d = 0; d < dim; d++) acc[idx[i] * dim + d] += y[i * dim + d];
}

void tide_cpu_add_bf16(const tide_ops *self, const float *a, const float *b, int64_t n, float *out) {
    (void)self;
    for (int64_t i = 0; i < n; i++) out[i] = tide_round_bf16(a[i] + b[i]);
}

void tide_cpu_div_scalar(const tide_ops *self, float *x, int64_t n, float s) {
    (void)self;
    for (int64_t i = 0; i < n; i++) x[i] /= s;
}

void tide_cpu_hc_mean(const tide_ops *self, const float *h, int64_t rows, int hc, int64_t dim, float *out) {
    (void)self;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t d = 0; d < dim; d++) {
            float sum = 0;
            for (int64_t k = 0; k < hc; k++) sum += h[(r * hc + k) * dim + d];
            out[r * dim + d] = tide_round_bf16(sum / (float)hc);
        }
}
