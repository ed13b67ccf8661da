/* A host-only stand-in for libtide_cuda, for checking the HOST logic of the
 * CUDA ops table (src/backend/cuda/cuda_ops*.c) on a machine without a GPU:
 * every tide_cuda_* function that table and gpu_test_model use, with
 * "device" memory in malloc'd blocks and kernels that run the CPU ops.
 *
 * It is a checker, not an emulator of the GPU's numerics: since its kernels
 * ARE the CPU ops, gpu_test_model linked against it must see bit-identical
 * logits, which tests the ops table's uploads, sizes, the sparse attention
 * gather (dedup, row grouping, scatter), the rope span copy, the bf16
 * conversion. Each device pointer handed to a copy or a kernel is checked to
 * lie inside a live allocation with the extent the kernel will touch
 * (stderr + abort otherwise), and allocations left at exit are reported.
 * TIDE_FAKE_FAIL_AT=N makes the N-th kernel call fail (the sticky-error
 * path).
 *
 * Not built by CMake (its symbols clash with libtide_cuda's). Build and run,
 * from a CPU build dir B (e.g. with -DTIDE_SANITIZE=ON):
 *   cc -std=c17 -D_GNU_SOURCE -fsanitize=address,undefined -Isrc -Iinclude -Itests/gpu \
 *      tests/gpu/gpu_test_model.c tests/gpu/fake_cuda.c src/backend/cuda/cuda_ops*.c \
 *      B/libtide.a $(pkg-config --libs jansson libutf8proc oniguruma) -lpthread -lm
 *   TIDE_GPU_SMALL=1 ./a.out */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_kernels.h"
#include "backend/ops.h"
#include "num/num.h"

/* Fake device memory: a table of live blocks (tests only, one thread at a
 * time: a context's ops run under its mutex and gpu_test_model drives one
 * context at a time; these statics are test state). */
#define FAKE_MAX 65536
static struct {
    char *p;
    size_t n;
} blocks[FAKE_MAX];
static int n_blocks;
static long kernel_calls;

static void bad(const char *what, const void *p, size_t n) {
    fprintf(stderr, "fake_cuda: %s: %p (+%zu bytes) is not inside a live device allocation\n", what, p, n);
    abort();
}

/* p .. p+n must lie in one live block. */
static void chk(const char *what, const void *p, size_t n) {
    if (n == 0) return;
    const char *c = p;
    for (int i = 0; i < n_blocks; i++)
        if (c >= blocks[i].p && c + n <= blocks[i].p + blocks[i].n && c < blocks[i].p + blocks[i].n) return;
    bad(what, p, n);
}

static int kernel(const char *name, tide_status *st) {
    kernel_calls++;
    const char *e = getenv("TIDE_FAKE_FAIL_AT");
    if (e && *e && atol(e) == kernel_calls)
        return tide_fail(st, TIDE_ERR_INTERNAL, "fake_cuda: injected failure in %s (call %ld)", name, kernel_calls);
    return 0;
}

static void report_leaks(void) {
    if (n_blocks) fprintf(stderr, "fake_cuda: %d device allocations not freed at exit\n", n_blocks);
}

int tide_cuda_device_count(int *n, tide_status *st) {
    (void)st;
    static int registered;
    if (!registered) registered = !atexit(report_leaks);
    *n = 1;
    return 0;
}

int tide_cuda_describe(char *buf, size_t size, tide_status *st) {
    (void)st;
    snprintf(buf, size, "fake_cuda (host stand-in: kernels are the CPU ops)");
    return 0;
}

int tide_cuda_malloc(void **p, size_t bytes, tide_status *st) {
    *p = NULL;
    if (n_blocks == FAKE_MAX) return tide_fail(st, TIDE_ERR_NOMEM, "fake_cuda: too many blocks");
    char *m = malloc(bytes ? bytes : 1);
    if (!m) return tide_fail(st, TIDE_ERR_NOMEM, "fake_cuda: malloc %zu", bytes);
    memset(m, 0xa5, bytes); /* like uninitialised device memory: garbage, not zeros */
    blocks[n_blocks].p = m;
    blocks[n_blocks].n = bytes ? bytes : 1;
    n_blocks++;
    *p = m;
    return 0;
}

void tide_cuda_free(void *p) {
    if (!p) return;
    for (int i = 0; i < n_blocks; i++)
        if (blocks[i].p == p) {
            free(p);
            blocks[i] = blocks[--n_blocks];
            return;
        }
    bad("free", p, 0);
}

int tide_cuda_upload(void *dev, const void *host, size_t bytes, tide_status *st) {
    (void)st;
    chk("upload", dev, bytes);
    memcpy(dev, host, bytes);
    return 0;
}

int tide_cuda_download(void *host, const void *dev, size_t bytes, tide_status *st) {
    (void)st;
    chk("download", dev, bytes);
    memcpy(host, dev, bytes);
    return 0;
}

int tide_cuda_memset(void *dev, int byte, size_t bytes, tide_status *st) {
    (void)st;
    chk("memset", dev, bytes);
    memset(dev, byte, bytes);
    return 0;
}

int tide_cuda_sync(tide_status *st) {
    (void)st;
    return 0;
}

#define F4 sizeof(float)

int tide_cuda_rmsnorm_f32(const float *x, int64_t rows, int64_t dim, const float *w, double eps, float *y,
                          tide_cuda_stream stream, tide_status *st) {
    (void)stream;
    chk("rmsnorm x", x, (size_t)(rows * dim) * F4);
    chk("rmsnorm w", w, (size_t)dim * F4);
    chk("rmsnorm y", y, (size_t)(rows * dim) * F4);
    if (kernel("rmsnorm", st)) return -1;
    tide_cpu_ops()->rmsnorm(tide_cpu_ops(), NULL, x, rows, dim, w, eps, y);
    return 0;
}

int tide_cuda_quant_fp8_act(const float *x, int64_t rows, int64_t n, uint8_t *q, uint8_t *scale,
                            tide_cuda_stream stream, tide_status *st) {
    (void)stream;
    int64_t nb = (n + 31) / 32;
    chk("quant x", x, (size_t)(rows * n) * F4);
    chk("quant q", q, (size_t)(rows * n));
    chk("quant scale", scale, (size_t)(rows * nb));
    if (kernel("quant_fp8_act", st)) return -1;
    for (int64_t r = 0; r < rows; r++) tide_quant_fp8_act(x + r * n, (size_t)n, 32, q + r * n, scale + r * nb);
    return 0;
}

static int gemm(tide_wtype t, const uint8_t *xq, const uint8_t *xs, int64_t m, const uint8_t *w, const uint8_t *ws,
                int64_t n, int64_t k, uint16_t *y, tide_status *st) {
    if (m < 1 || n < 1 || k < 32 || k % 32) return tide_fail(st, TIDE_ERR_INVALID, "fake gemm: bad shape");
    int64_t nbk = k / 32;
    chk("gemm xq", xq, (size_t)(m * k));
    chk("gemm xs", xs, (size_t)(m * nbk));
    chk("gemm w", w, (size_t)(t == TIDE_W_FP8 ? n * k : n * k / 2));
    chk("gemm ws", ws, (size_t)(t == TIDE_W_FP8 ? (n + 31) / 32 * nbk : n * nbk));
    chk("gemm y", y, (size_t)(m * n) * 2);
    if (kernel("gemm", st)) return -1;
    /* dequantised activations: the CPU linear re-quantises them to the same
     * values (FP8 quantisation is idempotent), so this is the CPU result */
    float *xf = malloc((size_t)(m * k) * F4), *yf = malloc((size_t)(m * n) * F4);
    if (!xf || !yf) abort();
    for (int64_t r = 0; r < m; r++)
        for (int64_t i = 0; i < k; i++)
            xf[r * k + i] = tide_e4m3_to_f32(xq[r * k + i]) * tide_e8m0_to_f32(xs[r * nbk + i / 32]);
    tide_weight wt = {t, n, k, w, ws};
    tide_cpu_ops()->linear(tide_cpu_ops(), NULL, &wt, xf, m, yf, 0);
    tide_f32_to_bf16_row(yf, y, (size_t)(m * n));
    free(xf);
    free(yf);
    return 0;
}

int tide_cuda_gemm_fp8(const uint8_t *xq, const uint8_t *xs, int64_t m, const uint8_t *w, const uint8_t *ws,
                       int64_t n, int64_t k, uint16_t *y, tide_cuda_stream stream, tide_status *st) {
    (void)stream;
    return gemm(TIDE_W_FP8, xq, xs, m, w, ws, n, k, y, st);
}

int tide_cuda_gemm_fp4(const uint8_t *xq, const uint8_t *xs, int64_t m, const uint8_t *w, const uint8_t *ws,
                       int64_t n, int64_t k, uint16_t *y, tide_cuda_stream stream, tide_status *st) {
    (void)stream;
    return gemm(TIDE_W_FP4, xq, xs, m, w, ws, n, k, y, st);
}

int tide_cuda_sparse_attn(const float *q, int64_t rows, int heads, int64_t dim, const float *kv, int64_t n_kv,
                          const int32_t *idx, int n_idx, const float *sink, float scale, float *out,
                          tide_cuda_stream stream, tide_status *st) {
    (void)stream;
    if (rows < 0 || heads < 1 || dim < 1 || dim > TIDE_CUDA_ATTN_MAX_DIM || n_idx < 0 || n_kv < 0)
        return tide_fail(st, TIDE_ERR_INVALID, "fake sparse_attn: bad shape");
    chk("attn q", q, (size_t)(rows * heads * dim) * F4);
    chk("attn kv", kv, (size_t)(n_kv * dim) * F4);
    chk("attn idx", idx, (size_t)(rows * n_idx) * 4);
    chk("attn sink", sink, (size_t)heads * F4);
    chk("attn out", out, (size_t)(rows * heads * dim) * F4);
    if (kernel("sparse_attn", st)) return -1;
    tide_attn_row *rw = malloc((size_t)(rows ? rows : 1) * sizeof *rw);
    const float **ptr = malloc((size_t)(rows * n_idx + 1) * sizeof *ptr);
    if (!rw || !ptr) abort();
    for (int64_t r = 0; r < rows; r++) {
        for (int e = 0; e < n_idx; e++) {
            int32_t i = idx[r * n_idx + e];
            ptr[r * n_idx + e] = i >= 0 && i < n_kv ? kv + (int64_t)i * dim : NULL;
        }
        rw[r].kv = ptr + r * n_idx;
        rw[r].n_idx = n_idx;
    }
    tide_cpu_ops()->sparse_attn(tide_cpu_ops(), NULL, q, rows, heads, dim, rw, sink, scale, out);
    free(rw);
    free(ptr);
    return 0;
}

int tide_cuda_hc_mixes(const float *x, int64_t rows, int hc, int64_t dim, const float *fn, const float *scale,
                       const float *base, double norm_eps, int iters, double hc_eps, float *pre, float *post,
                       float *comb, tide_cuda_stream stream, tide_status *st) {
    (void)stream;
    int64_t nm = (2 + hc) * hc;
    chk("hc_mixes x", x, (size_t)(rows * hc * dim) * F4);
    chk("hc_mixes fn", fn, (size_t)(nm * hc * dim) * F4);
    chk("hc_mixes scale", scale, 3 * F4);
    chk("hc_mixes base", base, (size_t)nm * F4);
    chk("hc_mixes pre", pre, (size_t)(rows * hc) * F4);
    chk("hc_mixes post", post, (size_t)(rows * hc) * F4);
    chk("hc_mixes comb", comb, (size_t)(rows * hc * hc) * F4);
    if (kernel("hc_mixes", st)) return -1;
    tide_cpu_ops()->hc_mixes(tide_cpu_ops(), NULL, x, rows, hc, dim, fn, scale, base, norm_eps, iters, hc_eps, pre,
                             post, comb);
    return 0;
}

int tide_cuda_hc_pre(const float *x, int64_t rows, int hc, int64_t dim, const float *pre, float *y,
                     tide_cuda_stream stream, tide_status *st) {
    (void)stream;
    chk("hc_pre x", x, (size_t)(rows * hc * dim) * F4);
    chk("hc_pre pre", pre, (size_t)(rows * hc) * F4);
    chk("hc_pre y", y, (size_t)(rows * dim) * F4);
    if (kernel("hc_pre", st)) return -1;
    tide_cpu_ops()->hc_pre(tide_cpu_ops(), x, rows, hc, dim, pre, y);
    return 0;
}

int tide_cuda_hc_post(const float *y, const float *res, int64_t rows, int hc, int64_t dim, const float *post,
                      const float *comb, float *out, tide_cuda_stream stream, tide_status *st) {
    (void)stream;
    chk("hc_post y", y, (size_t)(rows * dim) * F4);
    chk("hc_post res", res, (size_t)(rows * hc * dim) * F4);
    chk("hc_post post", post, (size_t)(rows * hc) * F4);
    chk("hc_post comb", comb, (size_t)(rows * hc * hc) * F4);
    chk("hc_post out", out, (size_t)(rows * hc * dim) * F4);
    if (out == res) return tide_fail(st, TIDE_ERR_INVALID, "fake hc_post: out aliases res");
    if (kernel("hc_post", st)) return -1;
    tide_cpu_ops()->hc_post(tide_cpu_ops(), y, res, rows, hc, dim, post, comb, out);
    return 0;
}

int tide_cuda_rope(float *x, int64_t rows, int64_t n_vec, int64_t row_stride, int64_t vec_stride, int64_t n_freq,
                   const float *cs, int inverse, tide_cuda_stream stream, tide_status *st) {
    (void)stream;
    for (int64_t r = 0; r < rows; r++) {
        chk("rope x", x + r * row_stride, (size_t)((n_vec - 1) * vec_stride + 2 * n_freq) * F4);
        chk("rope cs", cs + r * 2 * n_freq, (size_t)(2 * n_freq) * F4);
    }
    if (kernel("rope", st)) return -1;
    for (int64_t r = 0; r < rows; r++)
        tide_cpu_ops()->rope(tide_cpu_ops(), x + r * row_stride, n_vec, vec_stride, n_freq, cs + r * 2 * n_freq,
                             inverse);
    return 0;
}

int tide_cuda_index_scores(const float *q, int64_t rows, int heads, int64_t d, const float *w, const float *keys,
                           int64_t n, float *score, tide_cuda_stream stream, tide_status *st) {
    (void)stream;
    chk("index q", q, (size_t)(rows * heads * d) * F4);
    chk("index w", w, (size_t)(rows * heads) * F4);
    chk("index keys", keys, (size_t)(n * d) * F4);
    chk("index score", score, (size_t)(rows * n) * F4);
    if (kernel("index_scores", st)) return -1;
    for (int64_t r = 0; r < rows; r++)
        tide_cpu_ops()->index_scores(tide_cpu_ops(), q + r * heads * d, heads, d, w + r * heads, keys, n,
                                     score + r * n);
    return 0;
}

int tide_cuda_topk_sorted(const float *score, int64_t rows, int64_t n, int k, int32_t *out, tide_cuda_stream stream,
                          tide_status *st) {
    (void)stream;
    if (k < 0 || k > n) return tide_fail(st, TIDE_ERR_INVALID, "fake topk: k %d n %lld", k, (long long)n);
    chk("topk score", score, (size_t)(rows * n) * F4);
    chk("topk out", out, (size_t)(rows * k) * 4);
    if (kernel("topk", st)) return -1;
    for (int64_t r = 0; r < rows; r++) tide_cpu_ops()->topk_sorted(tide_cpu_ops(), score + r * n, n, k, out + r * k,
                                                                   NULL);
    return 0;
}

int tide_cuda_moe_route(const float *logits, int64_t rows, int n_experts, int k, int func, const float *bias,
                        int norm, float route_scale, int32_t *idx, float *w, tide_cuda_stream stream,
                        tide_status *st) {
    (void)stream;
    if (k < 1 || k > 64 || k > n_experts || func < 0 || func > 2)
        return tide_fail(st, TIDE_ERR_INVALID, "fake moe_route: bad arguments");
    chk("moe logits", logits, (size_t)(rows * n_experts) * F4);
    if (bias) chk("moe bias", bias, (size_t)n_experts * F4);
    chk("moe idx", idx, (size_t)(rows * k) * 4);
    chk("moe w", w, (size_t)(rows * k) * F4);
    if (kernel("moe_route", st)) return -1;
    tide_cpu_ops()->moe_route(tide_cpu_ops(), logits, rows, n_experts, k, func, bias, norm, route_scale, idx, w);
    return 0;
}

int tide_cuda_swiglu(const float *g, const float *u, int64_t rows, int64_t n, double limit, const float *weight,
                     float *h, tide_cuda_stream stream, tide_status *st) {
    (void)stream;
    chk("swiglu g", g, (size_t)(rows * n) * F4);
    chk("swiglu u", u, (size_t)(rows * n) * F4);
    if (weight) chk("swiglu weight", weight, (size_t)rows * F4);
    chk("swiglu h", h, (size_t)(rows * n) * F4);
    if (kernel("swiglu", st)) return -1;
    tide_cpu_ops()->swiglu(tide_cpu_ops(), g, u, rows, n, limit, weight, h);
    return 0;
}

int tide_cuda_compress_pool(const float *kv, const float *score, int64_t groups, int r, int64_t dim, float *out,
                            tide_cuda_stream stream, tide_status *st) {
    (void)stream;
    if (r < 1 || r > 64) return tide_fail(st, TIDE_ERR_INVALID, "fake compress_pool: r %d", r);
    chk("pool kv", kv, (size_t)(groups * r * dim) * F4);
    chk("pool score", score, (size_t)(groups * r * dim) * F4);
    chk("pool out", out, (size_t)(groups * dim) * F4);
    if (kernel("compress_pool", st)) return -1;
    for (int64_t gi = 0; gi < groups; gi++)
        tide_cpu_ops()->compress_pool(tide_cpu_ops(), kv + gi * r * dim, score + gi * r * dim, r, dim, out + gi * dim);
    return 0;
}

int tide_cuda_engram_mix(const float *kv, const float *w, int64_t rows, int hc, int64_t dim, double eps, float *x,
                         tide_cuda_stream stream, tide_status *st) {
    (void)stream;
    chk("engram kv", kv, (size_t)(rows * (hc + 1) * dim) * F4);
    chk("engram w", w, (size_t)(hc * dim) * F4);
    chk("engram x", x, (size_t)(rows * hc * dim) * F4);
    if (kernel("engram_mix", st)) return -1;
    tide_cpu_ops()->engram_mix(tide_cpu_ops(), kv, w, rows, hc, dim, eps, x);
    return 0;
}

int tide_cuda_linear_f32(const void *w, int w_bf16, int64_t out, int64_t in, const float *x, int64_t rows, float *y,
                         int flags, tide_cuda_stream stream, tide_status *st) {
    (void)stream;
    chk("linear_f32 w", w, (size_t)(out * in) * (w_bf16 ? 2 : 4));
    chk("linear_f32 x", x, (size_t)(rows * in) * F4);
    chk("linear_f32 y", y, (size_t)(rows * out) * F4);
    if (kernel("linear_f32", st)) return -1;
    tide_weight wt = {w_bf16 ? TIDE_W_BF16 : TIDE_W_F32, out, in, w, NULL};
    tide_cpu_ops()->linear(tide_cpu_ops(), NULL, &wt, x, rows, y,
                           (flags & TIDE_CUDA_LIN_BF16_OUT) ? TIDE_LIN_BF16_OUT : 0);
    return 0;
}
