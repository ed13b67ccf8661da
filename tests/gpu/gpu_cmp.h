/* Comparison of GPU outputs with the CPU reference for the op tests
 * (gpu_test_attn, _hc, _rope_fp4, _index, _moe): counts the outputs that
 * differ in any bit (two NaNs count as equal: the GPU's canonical NaN and
 * x86's propagated payload differ, the value does not) and those outside a
 * relative bound |gpu - cpu| <= rel * |cpu| (NaN against a number, or a
 * differing infinity, is always outside). */
#ifndef TIDE_TESTS_GPU_GPU_CMP_H
#define TIDE_TESTS_GPU_GPU_CMP_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    size_t n, differ, outside;
    double max_rel; /* largest |gpu - cpu| / |cpu| over finite pairs (cpu != 0) */
} gc_stats;

static inline gc_stats gc_compare(const float *got, const float *ref, size_t n, double rel) {
    gc_stats s = {n, 0, 0, 0.0};
    for (size_t i = 0; i < n; i++) {
        float g = got[i], r = ref[i];
        if (isnan(g) && isnan(r)) continue;
        if (memcmp(&g, &r, sizeof g) == 0) continue;
        s.differ++;
        if (isnan(g) || isnan(r) || isinf(g) || isinf(r)) {
            s.outside++;
            continue;
        }
        double d = fabs((double)g - (double)r), a = fabs((double)r);
        if (a > 0 && d / a > s.max_rel) s.max_rel = d / a;
        if (d > rel * a) s.outside++;
    }
    return s;
}

/* Fresh normal value rounded to BF16 (the reference's activations). */
#define GC_BF16_NORMAL(rng, sigma) tide_round_bf16((float)(gu_normal(rng) * (sigma)))

#endif
