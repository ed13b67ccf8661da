/* Timings of the CUDA kernels at large shapes (no correctness check here:
 * the gpu_test_* programs do that). Device events around each launch, 3
 * warm-up launches, then the median of 20 timed ones, on random data (never
 * zeros) that is several times the L2 cache.
 *
 * Prints one line per kernel,
 *     BENCH|<kernel>|<shape>|<median ms>|<rate>
 * with TFLOP/s for the GEMM (2*M*N*K flops) and GB/s for the memory-bound
 * kernels (bytes read + bytes written, each once). Usage:
 *     gpu_bench_kernels [M N K]     (default 8192 8192 8192) */
#include <cuda_runtime_api.h>

#include "gpu_util.h"
#include "num/num.h"

#define WARMUP 3
#define TIMED 20

typedef int (*launch_fn)(void *arg, tide_status *st);

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Median time of one launch in milliseconds. */
static float time_ms(launch_fn fn, void *arg) {
    cudaEvent_t e0, e1;
    if (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess) {
        fprintf(stderr, "cudaEventCreate failed\n");
        exit(2);
    }
    tide_status st = {0};
    for (int i = 0; i < WARMUP; i++) gu_ran(fn(arg, &st), &st, "warm-up");
    float t[TIMED];
    for (int i = 0; i < TIMED; i++) {
        cudaEventRecord(e0, 0);
        if (fn(arg, &st) != 0) {
            fprintf(stderr, "%s\n", st.msg);
            exit(2);
        }
        cudaEventRecord(e1, 0);
        cudaEventSynchronize(e1);
        cudaEventElapsedTime(&t[i], e0, e1);
    }
    gu_ran(0, &st, "timed runs");
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    qsort(t, TIMED, sizeof *t, cmp_float);
    return (t[TIMED / 2 - 1] + t[TIMED / 2]) / 2;
}

typedef struct {
    const uint8_t *xq, *xs, *w, *ws;
    int64_t m, n, k;
    uint16_t *y;
    int fp4; /* 0: fp8, 1: fp4, 2: fp8 on wgmma (experimental) */
} gemm_arg;
static int gemm_launch(void *p, tide_status *st) {
    gemm_arg *a = p;
    if (a->fp4 == 2) return tide_cuda_gemm_fp8_wgmma(a->xq, a->xs, a->m, a->w, a->ws, a->n, a->k, a->y, NULL, st);
    if (a->fp4) return tide_cuda_gemm_fp4(a->xq, a->xs, a->m, a->w, a->ws, a->n, a->k, a->y, NULL, st);
    return tide_cuda_gemm_fp8(a->xq, a->xs, a->m, a->w, a->ws, a->n, a->k, a->y, NULL, st);
}

typedef struct {
    const float *x;
    int64_t rows, n;
    uint8_t *q, *s;
} quant_arg;
static int quant_launch(void *p, tide_status *st) {
    quant_arg *a = p;
    return tide_cuda_quant_fp8_act(a->x, a->rows, a->n, a->q, a->s, NULL, st);
}

typedef struct {
    const float *x, *w;
    int64_t rows, dim;
    uint16_t *y;
} norm_arg;
static int norm_launch(void *p, tide_status *st) {
    norm_arg *a = p;
    return tide_cuda_rmsnorm_bf16(a->x, a->rows, a->dim, a->w, 1e-6, a->y, NULL, st);
}

/* Random e4m3 codes with no NaN (0x7f / 0xff). */
static void fill_codes(gu_rng *rng, uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint8_t v = (uint8_t)gu_next(rng);
        p[i] = (v & 0x7f) == 0x7f ? (uint8_t)(v ^ 0x01) : v;
    }
}

static void fill_scales(gu_rng *rng, uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(115 + gu_next(rng) % 16);
}

int main(int argc, char **argv) {
    gu_ctx c;
    gu_init(&c, "gpu_bench_kernels");
    gu_rng rng = {c.seed};
    int64_t m = 8192, n = 8192, k = 8192;
    if (argc == 4) {
        m = atoll(argv[1]);
        n = atoll(argv[2]);
        k = atoll(argv[3]);
    }
    if (m < 1 || n < 1 || k < 32 || k % 32) {
        fprintf(stderr, "usage: %s [M N K] (K a multiple of 32)\n", argv[0]);
        return 2;
    }
    /* GEMMs: e4m3 weights, then e2m1 weights (the same buffers: random
     * bytes are valid packed e2m1, and the per-row fp4 scales fit in the
     * space of the fp8 ones) */
    {
        size_t nx = (size_t)(m * k), nw = (size_t)(n * k), nxs = (size_t)(m * (k / 32)), nws = (size_t)(n * (k / 32));
        uint8_t *h = gu_xmalloc(nx > nw ? nx : nw);
        gemm_arg a = {gu_dalloc(nx), gu_dalloc(nxs), gu_dalloc(nw), gu_dalloc(nws), m, n, k,
                      gu_dalloc((size_t)(m * n) * 2), 0};
        fill_codes(&rng, h, nx);
        gu_up((void *)a.xq, h, nx);
        fill_codes(&rng, h, nw);
        gu_up((void *)a.w, h, nw);
        fill_scales(&rng, h, nxs);
        gu_up((void *)a.xs, h, nxs);
        fill_scales(&rng, h, nws);
        gu_up((void *)a.ws, h, nws);
        for (a.fp4 = 0; a.fp4 < 3; a.fp4++) {
            static const char *names[3] = {"gemm_fp8", "gemm_fp4", "gemm_fp8_wgmma"};
            const char *name = names[a.fp4];
            double wbytes = a.fp4 == 1 ? (double)nw / 2 : (double)nw;
            a.m = m;
            float ms = time_ms(gemm_launch, &a);
            printf("BENCH|%s|%lldx%lldx%lld|%.3f ms|%.1f TFLOP/s\n", name, (long long)m, (long long)n, (long long)k, ms,
                   2.0 * (double)m * (double)n * (double)k / (ms * 1e-3) / 1e12);
            /* a decode-like shape: few rows, the weight read dominates */
            a.m = 16;
            ms = time_ms(gemm_launch, &a);
            printf("BENCH|%s|16x%lldx%lld|%.3f ms|%.1f TFLOP/s, weight read %.0f GB/s\n", name, (long long)n,
                   (long long)k, ms, 2.0 * 16 * (double)n * (double)k / (ms * 1e-3) / 1e12, wbytes / (ms * 1e-3) / 1e9);
        }
        tide_cuda_free((void *)a.xq);
        tide_cuda_free((void *)a.xs);
        tide_cuda_free((void *)a.w);
        tide_cuda_free((void *)a.ws);
        tide_cuda_free(a.y);
        free(h);
    }
    /* quantisation and RMSNorm: 8192 rows of 7168 (235 MB of f32 input) */
    {
        int64_t rows = 8192, dim = 7168;
        size_t nx = (size_t)(rows * dim);
        float *h = gu_xmalloc(nx * sizeof(float));
        for (size_t i = 0; i < nx; i++) h[i] = (float)((double)(gu_next(&rng) >> 11) * 0x1p-52 - 1.0);
        float *dx = gu_dalloc(nx * sizeof(float)), *dw = gu_dalloc((size_t)dim * sizeof(float));
        gu_up(dx, h, nx * sizeof(float));
        gu_up(dw, h, (size_t)dim * sizeof(float));
        quant_arg q = {dx, rows, dim, gu_dalloc(nx), gu_dalloc(nx / 32)};
        float ms = time_ms(quant_launch, &q);
        printf("BENCH|quant_fp8_act|%lldx%lld|%.3f ms|%.0f GB/s\n", (long long)rows, (long long)dim, ms,
               (double)(nx * 4 + nx + nx / 32) / (ms * 1e-3) / 1e9);
        norm_arg r = {dx, dw, rows, dim, gu_dalloc(nx * 2)};
        ms = time_ms(norm_launch, &r);
        printf("BENCH|rmsnorm_bf16|%lldx%lld|%.3f ms|%.0f GB/s\n", (long long)rows, (long long)dim, ms,
               (double)(nx * 4 + nx * 2) / (ms * 1e-3) / 1e9);
        tide_cuda_free(dx);
        tide_cuda_free(dw);
        tide_cuda_free(q.q);
        tide_cuda_free(q.s);
        tide_cuda_free(r.y);
        free(h);
    }
    return 0;
}
