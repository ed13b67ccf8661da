/* The SwiGLU of one element on the device, rounding exactly as
 * tide_cpu_swiglu (backend/cpu/cpu_ops.c): with lim > 0 the up value is
 * clamped to [-lim, lim] and the gate clamped above at lim (comparisons, so
 * NaN passes through as on the CPU); v = g / (1 + exp(-g)) * u with the CPU
 * backend's numpy-algorithm exp; times the row weight when there is one;
 * rounded to BF16. Shared by elementwise.cu (the ops.h swiglu) and
 * experts.cu (fused into the grouped gate/up GEMM's epilogue). Private to
 * src/backend/cuda (C++ only). */
#ifndef TIDE_BACKEND_CUDA_SWIGLU_DEV_CUH
#define TIDE_BACKEND_CUDA_SWIGLU_DEV_CUH

#include "backend/cuda/num_dev.cuh"
#include "backend/cuda/ops_dev.cuh"

/* has_w: whether weight applies (the CPU's weight != NULL). */
__device__ __forceinline__ float tide_dev_swiglu(float g, float u, float lim, int has_w, float weight) {
    if (lim > 0.0f) {
        u = u < -lim ? -lim : (u > lim ? lim : u);
        g = g > lim ? lim : g;
    }
    float v = __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, tide_dev_expf(-g))), u);
    if (has_w) v = __fmul_rn(weight, v);
    return tide_dev_bf16_dec(tide_dev_bf16_enc(v));
}

#endif
