/* Device versions of the CPU backend's scalar helpers (backend/cpu/
 * cpu_internal.h), written so that each rounds exactly as the CPU code does:
 * the numpy-algorithm exp, the sigmoid built on it, numpy's pairwise f32 sum
 * (sequential, for short arrays one thread owns), and the 4-lane double dot
 * product. Every step that decides a rounding is an explicit _rn intrinsic,
 * because nvcc would otherwise contract a*b+c into an FMA (the C17 build does
 * not). Private to src/backend/cuda (C++ only). */
#ifndef TIDE_BACKEND_CUDA_OPS_DEV_CUH
#define TIDE_BACKEND_CUDA_OPS_DEV_CUH

#include <math.h>
#include <stdint.h>

/* tide_cpu_expf: Cody-Waite reduction by ln 2, a rational minimax
 * approximation, scaling by 2^k (exact: ldexpf only moves the exponent). */
__device__ __forceinline__ float tide_dev_expf(float x) {
    if (x != x) return x;
    if (x >= 88.72283935546875f) return INFINITY;
    if (x <= -103.97208404541015625f) return 0.0f;
    float k = rintf(__fmul_rn(x, 0x1.715476p+0f));
    float y = __fmaf_rn(k, -6.93145752e-1f, x);
    y = __fmaf_rn(k, -1.42860677e-6f, y);
    float num = __fmaf_rn(0x1.0a7bbp-11f, y, 0x1.bae2b2p-8f);
    num = __fmaf_rn(num, y, 0x1.a2fb18p-5f);
    num = __fmaf_rn(num, y, 0x1.fa98bp-3f);
    num = __fmaf_rn(num, y, 0x1.7397aap-1f);
    num = __fmaf_rn(num, y, 1.0f);
    float den = __fmaf_rn(0x1.61d064p-6f, y, -0x1.18d0aep-2f);
    den = __fmaf_rn(den, y, 1.0f);
    return ldexpf(__fdiv_rn(num, den), (int)k);
}

__device__ __forceinline__ float tide_dev_sigmoid(float x) {
    return __fdiv_rn(1.0f, __fadd_rn(1.0f, tide_dev_expf(-x)));
}

/* tide_cpu_sum_np on one thread: below 8 sequential, up to 128 eight running
 * sums, above that split at n/2 rounded down to a multiple of 8. Recursion
 * depth is log2(n / 128); meant for the short arrays of one row's work. */
__device__ static float tide_dev_sum_np(const float *x, int64_t n) {
    if (n < 8) {
        float r = 0.0f;
        for (int64_t i = 0; i < n; i++) r = __fadd_rn(r, x[i]);
        return r;
    }
    if (n <= 128) {
        float r[8];
#pragma unroll
        for (int j = 0; j < 8; j++) r[j] = x[j];
        int64_t i = 8;
        for (; i < n - (n % 8); i += 8)
#pragma unroll
            for (int j = 0; j < 8; j++) r[j] = __fadd_rn(r[j], x[i + j]);
        float res = __fadd_rn(__fadd_rn(__fadd_rn(r[0], r[1]), __fadd_rn(r[2], r[3])),
                              __fadd_rn(__fadd_rn(r[4], r[5]), __fadd_rn(r[6], r[7])));
        for (; i < n; i++) res = __fadd_rn(res, x[i]);
        return res;
    }
    int64_t n2 = n / 2;
    n2 -= n2 % 8;
    return __fadd_rn(tide_dev_sum_np(x, n2), tide_dev_sum_np(x + n2, n - n2));
}

/* The same order over f32 values widened to double (n <= 128: one leaf),
 * as the CPU attention's chunk denominator (cpu_attn.c sum_np_f64). */
__device__ static double tide_dev_sum_np_f64(const float *x, int64_t n) {
    if (n < 8) {
        double r = 0.0;
        for (int64_t i = 0; i < n; i++) r = __dadd_rn(r, (double)x[i]);
        return r;
    }
    double r[8];
#pragma unroll
    for (int j = 0; j < 8; j++) r[j] = (double)x[j];
    int64_t i = 8;
    for (; i < n - (n % 8); i += 8)
#pragma unroll
        for (int j = 0; j < 8; j++) r[j] = __dadd_rn(r[j], (double)x[i + j]);
    double res = __dadd_rn(__dadd_rn(__dadd_rn(r[0], r[1]), __dadd_rn(r[2], r[3])),
                           __dadd_rn(__dadd_rn(r[4], r[5]), __dadd_rn(r[6], r[7])));
    for (; i < n; i++) res = __dadd_rn(res, (double)x[i]);
    return res;
}

/* One lane's share of tide_cpu_dot: lane l (0..3) sums a[i+l]*b[i+l] over the
 * whole groups of 4 in double (product, then sum: no FMA), lane 0 also the
 * tail. Combine the four lanes as (s0 + s1) + (s2 + s3) and round to f32:
 * the CPU's result bit for bit. */
__device__ __forceinline__ double tide_dev_dot_lane(const float *a, const float *b, int64_t n, int l) {
    double s = 0.0;
    int64_t whole = n - (n % 4), i = l;
    for (; i < whole; i += 4) s = __dadd_rn(s, __dmul_rn((double)a[i], (double)b[i]));
    if (l == 0)
        for (i = whole; i < n; i++) s = __dadd_rn(s, __dmul_rn((double)a[i], (double)b[i]));
    return s;
}

/* The 4-lane combination across lanes 4g..4g+3 of a warp (all 32 lanes must
 * call it); every lane of the group gets the f32 result. */
__device__ __forceinline__ float tide_dev_dot_combine4(double s) {
    int l = threadIdx.x & 3;
    double o1 = __shfl_xor_sync(0xffffffffu, s, 1);
    double pair = (l & 1) ? __dadd_rn(o1, s) : __dadd_rn(s, o1); /* s0+s1 or s2+s3 */
    double o2 = __shfl_xor_sync(0xffffffffu, pair, 2);
    double tot = (l & 2) ? __dadd_rn(o2, pair) : __dadd_rn(pair, o2);
    return __double2float_rn(tot);
}

/* A whole tide_cpu_dot on one thread (short vectors). */
__device__ __forceinline__ float tide_dev_dot_serial(const float *a, const float *b, int64_t n) {
    double s0 = tide_dev_dot_lane(a, b, n, 0), s1 = tide_dev_dot_lane(a, b, n, 1);
    double s2 = tide_dev_dot_lane(a, b, n, 2), s3 = tide_dev_dot_lane(a, b, n, 3);
    return __double2float_rn(__dadd_rn(__dadd_rn(s0, s1), __dadd_rn(s2, s3)));
}

#endif
