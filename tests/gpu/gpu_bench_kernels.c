/* Timings of the CUDA kernels at large shapes (no correctness check here:
 * the gpu_test_* programs do that). Device events around each launch, 3
 * warm-up launches, then the median of 20 timed ones, on random data (never
 * zeros) that is several times the L2 cache.
 *
 * Also: the copy ceiling (cudaMemcpy device to device and tide_cuda_copy,
 * 1 GiB each way; the roofline's bandwidth), the routed experts at the
 * released widths (GB/s of the weights of the experts hit, TFLOP/s), the
 * F32 head (129280 x 5120) and the elementwise ops.
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

/* Fills a device buffer by uploading one host chunk of benign random data
 * repeatedly (generating gigabytes on the host would dominate the run). */
static void fill_dev(gu_rng *rng, void *dev, size_t bytes, int kind /* 0 floats, 1 bytes, 2 e8m0 118..122 */) {
    size_t chunk = (size_t)16 << 20;
    if (bytes < chunk) chunk = (bytes + 3) & ~(size_t)3;
    uint8_t *h = gu_xmalloc(chunk);
    for (size_t i = 0; i + 4 <= chunk; i += 4) {
        uint64_t v = gu_next(rng);
        if (kind == 0) {
            float f = (float)((double)(v >> 11) * 0x1p-53 * 2.0 - 1.0);
            memcpy(h + i, &f, 4);
        } else if (kind == 1) {
            memcpy(h + i, &v, 4);
        } else {
            for (int j = 0; j < 4; j++) h[i + j] = (uint8_t)(118 + ((v >> (8 * j)) & 0xff) % 5);
        }
    }
    for (size_t at = 0; at < bytes; at += chunk) gu_up((uint8_t *)dev + at, h, bytes - at < chunk ? bytes - at : chunk);
    free(h);
}

typedef struct {
    void *dst;
    const void *src;
    size_t bytes;
    int kernel;
} copy_arg;
static int copy_launch(void *p, tide_status *st) {
    copy_arg *a = p;
    if (a->kernel) return tide_cuda_copy(a->dst, a->src, a->bytes, NULL, st);
    cudaError_t e = cudaMemcpyAsync(a->dst, a->src, a->bytes, cudaMemcpyDeviceToDevice, 0);
    if (e != cudaSuccess) return tide_fail(st, TIDE_ERR_INTERNAL, "cudaMemcpyAsync: %s", cudaGetErrorString(e));
    return 0;
}

typedef struct {
    const tide_cuda_experts *ex;
    const float *x;
    int64_t rows;
    const int32_t *idx;
    const float *w;
    int k;
    float *y;
    void *ws;
    size_t wsb;
} experts_arg;
static int experts_launch(void *p, tide_status *st) {
    experts_arg *a = p;
    return tide_cuda_moe_experts(a->ex, a->x, a->rows, a->idx, a->w, a->k, 10.0, NULL, a->y, a->ws, a->wsb, NULL, st);
}

typedef struct {
    const void *w;
    int64_t out, in, rows;
    const float *x;
    float *y;
    int flags;
} lin_arg;
static int lin_launch(void *p, tide_status *st) {
    lin_arg *a = p;
    return tide_cuda_linear_f32(a->w, 0, a->out, a->in, a->x, a->rows, a->y, a->flags, NULL, st);
}

typedef struct {
    int op; /* 0 swiglu, 1 compress_pool, 2 argmax, 3 engram_mix */
    const float *a, *b;
    float *o;
    int32_t *ids;
    int64_t rows, n;
} ew_arg;
static int ew_launch(void *p, tide_status *st) {
    ew_arg *a = p;
    switch (a->op) {
    case 0: return tide_cuda_swiglu(a->a, a->b, a->rows, a->n, 10.0, a->a, a->o, NULL, st);
    case 1: return tide_cuda_compress_pool(a->a, a->b, a->rows, 4, a->n, a->o, NULL, st);
    case 2: return tide_cuda_argmax(a->a, a->rows, a->n, a->ids, NULL, st);
    default: return tide_cuda_engram_mix(a->a, a->b, a->rows, 4, a->n, 1e-6, a->o, NULL, st);
    }
}

static void bench_copy(gu_rng *rng) {
    size_t bytes = (size_t)1 << 30;
    copy_arg a = {gu_dalloc(bytes), gu_dalloc(bytes), bytes, 0};
    fill_dev(rng, (void *)a.src, bytes, 1);
    for (a.kernel = 0; a.kernel < 2; a.kernel++) {
        float ms = time_ms(copy_launch, &a);
        double gbs = 2.0 * (double)bytes / (ms * 1e-3) / 1e9;
        printf("BENCH|%s|1 GiB|%.3f ms|%.0f GB/s (read + write), %.0f%% of 4.8 TB/s\n",
               a.kernel ? "copy kernel (16-byte)" : "cudaMemcpy D2D", ms, gbs, gbs / 48.0);
    }
    tide_cuda_free(a.dst);
    tide_cuda_free((void *)a.src);
}

/* The routed experts at the released widths: 48 local experts, top-6. */
static void bench_experts(gu_rng *rng) {
    const int E = 48, K = 6;
    const int64_t D = 5120, I = 2304;
    size_t b13 = (size_t)(I * D / 2), s13 = (size_t)(I * D / 32), b2 = (size_t)(D * I / 2), s2 = (size_t)(D * I / 32);
    size_t per_expert = 2 * (b13 + s13) + b2 + s2;
    tide_cuda_expert_weights *t = gu_xmalloc((size_t)E * sizeof *t);
    void **bufs = gu_xmalloc((size_t)E * sizeof *bufs);
    for (int e = 0; e < E; e++) {
        uint8_t *b = gu_dalloc(per_expert + 6 * 256);
        bufs[e] = b;
        size_t at = 0;
        const uint8_t *p[6];
        size_t sz[6] = {b13, s13, b13, s13, b2, s2};
        for (int j = 0; j < 6; j++) {
            p[j] = b + at;
            fill_dev(rng, b + at, sz[j], j % 2 ? 2 : 1);
            at += (sz[j] + 255) & ~(size_t)255;
        }
        tide_cuda_expert_weights w = {p[0], p[1], p[2], p[3], p[4], p[5]};
        t[e] = w;
    }
    tide_status st = {0};
    tide_cuda_experts *ex = NULL;
    if (tide_cuda_experts_create(t, E, D, I, &ex, &st) != 0) {
        fprintf(stderr, "%s\n", st.msg);
        exit(2);
    }
    static const int64_t rows_list[] = {1, 8, 64, 512, 4096};
    for (size_t ri = 0; ri < sizeof rows_list / sizeof *rows_list; ri++) {
        int64_t rows = rows_list[ri], P = rows * K;
        int32_t *idx = gu_xmalloc((size_t)P * 4);
        float *w = gu_xmalloc((size_t)P * 4);
        int hit[48] = {0}, n_hit = 0;
        for (int64_t r = 0; r < rows; r++)
            for (int j = 0; j < K; j++) {
                int e, dup;
                do { /* distinct experts per row */
                    e = (int)(gu_next(rng) % E);
                    dup = 0;
                    for (int q = 0; q < j; q++) dup |= idx[r * K + q] == e;
                } while (dup);
                idx[r * K + j] = e;
                w[r * K + j] = 0.5f;
                if (!hit[e]) hit[e] = 1, n_hit++;
            }
        experts_arg a = {ex, gu_dalloc((size_t)(rows * D) * 4), rows, gu_dalloc((size_t)P * 4), gu_dalloc((size_t)P * 4),
                         K, gu_dalloc((size_t)(rows * D) * 4), NULL, tide_cuda_moe_experts_workspace(ex, rows, K)};
        a.ws = gu_dalloc(a.wsb);
        fill_dev(rng, (void *)a.x, (size_t)(rows * D) * 4, 0);
        gu_up((void *)a.idx, idx, (size_t)P * 4);
        gu_up((void *)a.w, w, (size_t)P * 4);
        float ms = time_ms(experts_launch, &a);
        double gbs = (double)n_hit * (double)per_expert / (ms * 1e-3) / 1e9;
        printf("BENCH|moe_experts (48 experts, top-6)|rows %lld, D 5120, I 2304, %d experts hit|%.3f ms|%.0f GB/s of "
               "expert weights (%.0f%% of 4.8 TB/s), %.1f TFLOP/s\n",
               (long long)rows, n_hit, ms, gbs, gbs / 48.0,
               2.0 * 3.0 * (double)P * (double)D * (double)I / (ms * 1e-3) / 1e12);
        tide_cuda_free((void *)a.x), tide_cuda_free((void *)a.idx), tide_cuda_free((void *)a.w);
        tide_cuda_free(a.y), tide_cuda_free(a.ws);
        free(idx), free(w);
    }
    tide_cuda_experts_destroy(ex);
    for (int e = 0; e < E; e++) tide_cuda_free(bufs[e]);
    free(bufs), free(t);
}

/* The f32 output head, 129280 x 5120. */
static void bench_head(gu_rng *rng) {
    const int64_t out = 129280, in = 5120;
    size_t wb = (size_t)(out * in) * 4;
    lin_arg a = {gu_dalloc(wb), out, in, 1, gu_dalloc((size_t)(64 * in) * 4), gu_dalloc((size_t)(64 * out) * 4), 0};
    fill_dev(rng, (void *)a.w, wb, 0);
    fill_dev(rng, (void *)a.x, (size_t)(64 * in) * 4, 0);
    static const int64_t rows_list[] = {1, 4, 16, 64};
    for (int fast = 0; fast < 2; fast++)
        for (size_t ri = 0; ri < sizeof rows_list / sizeof *rows_list; ri++) {
            a.rows = rows_list[ri];
            a.flags = fast ? TIDE_CUDA_LIN_FAST : 0;
            float ms = time_ms(lin_launch, &a);
            double gbs = (double)wb / (ms * 1e-3) / 1e9;
            printf("BENCH|linear_f32 head%s|%lldx129280x5120|%.3f ms|%.0f GB/s weight read (%.0f%% of 4.8 TB/s), "
                   "%.2f TFLOP/s\n",
                   fast ? " (fast, f32 lanes)" : " (exact, double lanes)", (long long)a.rows, ms, gbs, gbs / 48.0,
                   2.0 * (double)a.rows * (double)out * (double)in / (ms * 1e-3) / 1e12);
        }
    tide_cuda_free((void *)a.w), tide_cuda_free((void *)a.x), tide_cuda_free(a.y);
}

static void bench_elementwise(gu_rng *rng) {
    size_t big = (size_t)8192 * 2304 * 4;
    float *a = gu_dalloc(big), *b = gu_dalloc(big), *o = gu_dalloc(big);
    int32_t *ids = gu_dalloc(64 * 4);
    fill_dev(rng, a, big, 0);
    fill_dev(rng, b, big, 0);
    ew_arg s = {0, a, b, o, ids, 8192, 2304};
    float ms = time_ms(ew_launch, &s);
    printf("BENCH|swiglu|8192x2304|%.3f ms|%.0f GB/s\n", ms, 3.0 * (double)big / (ms * 1e-3) / 1e9);
    ew_arg p = {1, a, b, o, ids, 8192, 512}; /* 8192 groups of 4 x 512 */
    ms = time_ms(ew_launch, &p);
    printf("BENCH|compress_pool|8192 groups x r 4 x 512|%.3f ms|%.0f GB/s\n", ms,
           (2.0 * 4 + 1) * 8192 * 512 * 4 / (ms * 1e-3) / 1e9);
    ew_arg m = {2, a, NULL, NULL, ids, 64, 129280};
    ms = time_ms(ew_launch, &m);
    printf("BENCH|argmax|64x129280|%.3f ms|%.0f GB/s\n", ms, 64.0 * 129280 * 4 / (ms * 1e-3) / 1e9);
    ew_arg g = {3, a, b, o, ids, 64, 5120}; /* kv [64][5][5120], w [4][5120], x [64][4][5120] */
    ms = time_ms(ew_launch, &g);
    printf("BENCH|engram_mix|64 rows x hc 4 x 5120|%.3f ms|%.0f GB/s\n", ms,
           (64.0 * 5 * 5120 + 4 * 5120 + 2.0 * 64 * 4 * 5120) * 4 / (ms * 1e-3) / 1e9);
    tide_cuda_free(a), tide_cuda_free(b), tide_cuda_free(o), tide_cuda_free(ids);
}

typedef struct {
    const float *x, *fn, *scale, *base;
    int64_t rows;
    float *pre, *post, *comb;
    void *ws;
    size_t wsb;
    int fast;
} hc_arg;
static int hc_launch(void *p, tide_status *st) {
    hc_arg *a = p;
    if (a->fast)
        return tide_cuda_hc_mixes_fast(a->x, a->rows, 4, 5120, a->fn, a->scale, a->base, 1e-6, 20, 1e-6, a->pre,
                                       a->post, a->comb, a->ws, a->wsb, NULL, st);
    return tide_cuda_hc_mixes(a->x, a->rows, 4, 5120, a->fn, a->scale, a->base, 1e-6, 20, 1e-6, a->pre, a->post,
                              a->comb, NULL, st);
}

typedef struct {
    const float *q, *w, *keys;
    int64_t rows, n;
    int groups;
    float *score;
    int fast;
} ix_arg;
static int ix_launch(void *p, tide_status *st) {
    ix_arg *a = p;
    if (a->fast)
        return tide_cuda_index_scores_fast(a->q, a->rows, 64, 128, a->w, a->keys, a->n, a->groups,
                                           a->groups > 1 ? a->n * 128 : 0, a->score, NULL, st);
    return tide_cuda_index_scores(a->q, a->rows, 64, 128, a->w, a->keys, a->n, a->score, NULL, st);
}

/* Indexer scores at the model's 64 heads x 128: decode (32 rows, each its
 * own 32768 keys) and prefill (1024 rows over 8192 shared keys), exact
 * (CUDA cores, double lanes; decode only) and fast (bf16 tensor cores). */
static void bench_index(gu_rng *rng) {
    const int64_t kmax = (int64_t)32 * 32768 * 128, qmax = (int64_t)1024 * 64 * 128;
    ix_arg a = {gu_dalloc((size_t)qmax * 4), gu_dalloc((size_t)1024 * 64 * 4), gu_dalloc((size_t)kmax * 4), 0, 0, 1,
                gu_dalloc((size_t)1024 * 32768 * 4), 0};
    fill_dev(rng, (void *)a.q, (size_t)qmax * 4, 0);
    fill_dev(rng, (void *)a.w, (size_t)1024 * 64 * 4, 0);
    fill_dev(rng, (void *)a.keys, (size_t)kmax * 4, 0);
    static const struct { int64_t rows, n; int groups, fast; const char *what; } cs[] = {
        {32, 32768, 32, 1, "decode, own keys"}, {32, 32768, 32, 0, "decode, own keys"},
        {1024, 8192, 1, 1, "prefill, shared keys"}};
    for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) {
        a.rows = cs[i].rows, a.n = cs[i].n, a.groups = cs[i].groups, a.fast = cs[i].fast;
        float ms = time_ms(ix_launch, &a);
        double fl = 2.0 * (double)a.rows * (double)a.n * 64 * 128;
        double kb = (double)(a.groups > 1 ? a.rows : 1) * (double)a.n * 128 * 4;
        printf("BENCH|index_scores %s|%lld rows x %lld keys x 64 heads x 128 (%s)|%.3f ms|%.1f TFLOP/s, keys %.0f GB/s\n",
               a.fast ? "fast (bf16 mma)" : "exact (double lanes)", (long long)a.rows, (long long)a.n, cs[i].what, ms,
               fl / (ms * 1e-3) / 1e12, kb / (ms * 1e-3) / 1e9);
    }
    void *d[] = {(void *)a.q, (void *)a.w, (void *)a.keys, a.score};
    for (size_t i = 0; i < sizeof d / sizeof *d; i++) tide_cuda_free(d[i]);
}

typedef struct {
    const float *q, *kv, *sink;
    const int32_t *idx;
    int64_t rows, n_kv;
    int n_idx;
    float *out;
    int fast;
} sa_arg;
static int sa_launch(void *p, tide_status *st) {
    sa_arg *a = p;
    if (a->fast)
        return tide_cuda_sparse_attn_fast(a->q, a->rows, 64, 512, a->kv, a->n_kv, a->idx, a->n_idx, a->sink, 0.044f,
                                          a->out, NULL, st);
    return tide_cuda_sparse_attn(a->q, a->rows, 64, 512, a->kv, a->n_kv, a->idx, a->n_idx, a->sink, 0.044f, a->out,
                                 NULL, st);
}

/* Sparse attention at the released widths (64 heads x 512, 640 entries a
 * row: window 128 + top-k 512) for 32 and 256 rows, each row its own
 * entries among 256 K kv rows: exact and fast. The rate counts the rows'
 * entries once (kv bytes a row reads) plus q and out. */
static void bench_attn(gu_rng *rng) {
    const int64_t rmax = 256, n_kv = 262144;
    const int n_idx = 640;
    sa_arg a = {gu_dalloc((size_t)(rmax * 64 * 512) * 4), gu_dalloc((size_t)(n_kv * 512) * 4), gu_dalloc(64 * 4),
                gu_dalloc((size_t)(rmax * n_idx) * 4), 0, n_kv, n_idx, gu_dalloc((size_t)(rmax * 64 * 512) * 4), 0};
    fill_dev(rng, (void *)a.q, (size_t)(rmax * 64 * 512) * 4, 0);
    fill_dev(rng, (void *)a.kv, (size_t)(n_kv * 512) * 4, 0);
    fill_dev(rng, (void *)a.sink, 64 * 4, 0);
    int32_t *h = gu_xmalloc((size_t)(rmax * n_idx) * 4);
    for (int64_t i = 0; i < rmax * n_idx; i++) h[i] = (int32_t)(gu_next(rng) % (uint64_t)n_kv);
    gu_up((void *)a.idx, h, (size_t)(rmax * n_idx) * 4);
    free(h);
    static const int64_t rows_list[] = {32, 256};
    for (int fast = 1; fast >= 0; fast--)
        for (int ri = 0; ri < 2; ri++) {
            a.rows = rows_list[ri];
            a.fast = fast;
            float ms = time_ms(sa_launch, &a);
            double bytes = (double)a.rows * (n_idx * 512.0 * 4 + 2 * 64 * 512 * 4.0);
            printf("BENCH|sparse_attn %s|%lld rows x 64 heads x 512, 640 entries|%.3f ms|%.0f GB/s (entries once)\n",
                   fast ? "fast (f32, 16 heads a block)" : "exact (double lanes)", (long long)a.rows, ms,
                   bytes / (ms * 1e-3) / 1e9);
        }
    void *d[] = {(void *)a.q, (void *)a.kv, (void *)a.sink, (void *)a.idx, a.out};
    for (size_t i = 0; i < sizeof d / sizeof *d; i++) tide_cuda_free(d[i]);
}

/* hc_mixes at the released widths (hc 4, dim 5120: a 24 x 20480 f32
 * projection, 1.97 MB of weight): exact (one block per row) and fast
 * (split-K), rows 1 / 32 / 256; the rate counts the weight once plus x. */
static void bench_hc(gu_rng *rng) {
    const int64_t rmax = 256, n = 4 * 5120, nm = 24;
    hc_arg a = {gu_dalloc((size_t)(rmax * n) * 4), gu_dalloc((size_t)(nm * n) * 4), gu_dalloc(3 * 4),
                gu_dalloc((size_t)nm * 4), 0, gu_dalloc((size_t)rmax * 4 * 4), gu_dalloc((size_t)rmax * 4 * 4),
                gu_dalloc((size_t)rmax * 16 * 4), NULL, 0, 0};
    fill_dev(rng, (void *)a.x, (size_t)(rmax * n) * 4, 0);
    fill_dev(rng, (void *)a.fn, (size_t)(nm * n) * 4, 0);
    fill_dev(rng, (void *)a.scale, 3 * 4, 0);
    fill_dev(rng, (void *)a.base, (size_t)nm * 4, 0);
    a.wsb = tide_cuda_hc_mixes_fast_workspace(rmax, 4, 5120);
    a.ws = gu_dalloc(a.wsb);
    static const int64_t rows_list[] = {1, 32, 256};
    for (int fast = 0; fast < 2; fast++)
        for (int ri = 0; ri < 3; ri++) {
            a.rows = rows_list[ri];
            a.fast = fast;
            float ms = time_ms(hc_launch, &a);
            double bytes = (double)(nm * n) * 4 + (double)(a.rows * n) * 4;
            printf("BENCH|hc_mixes %s|%lld rows x hc 4 x 5120|%.4f ms|%.0f GB/s (weight once + x)\n",
                   fast ? "fast (split-K)" : "exact (block per row)", (long long)a.rows, ms,
                   bytes / (ms * 1e-3) / 1e9);
        }
    void *d[] = {(void *)a.x, (void *)a.fn, (void *)a.scale, (void *)a.base, a.pre, a.post, a.comb, a.ws};
    for (size_t i = 0; i < sizeof d / sizeof *d; i++) tide_cuda_free(d[i]);
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
    bench_copy(&rng);
    bench_experts(&rng);
    bench_head(&rng);
    bench_elementwise(&rng);
    bench_hc(&rng);
    bench_index(&rng);
    bench_attn(&rng);
    return 0;
}
