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
 * The host guard (tide_cuda_host_guard): the CUDA ops table's
 * device-resident buffers (the forward's activations) are PROT_NONE except
 * while the table has them open (for the length of an op), so host code
 * that touches a device buffer itself (the forward pass must not) dies with
 * SIGSEGV here, as it would on a GPU. Blocks are mmap'd for that.
 * TIDE_FAKE_NO_GUARD=1 turns it off.
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
#include <sys/mman.h>
#include <unistd.h>

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
static int guard_off = -1; /* TIDE_FAKE_NO_GUARD=1, read once */

static size_t page_round(size_t n) {
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    return (n + pg - 1) / pg * pg;
}

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

void tide_cuda_host_guard(const tide_cuda_span *spans, size_t n, int open) {
    if (guard_off < 0) {
        const char *e = getenv("TIDE_FAKE_NO_GUARD");
        guard_off = e && *e == '1';
    }
    if (guard_off) return;
    for (size_t i = 0; i < n; i++) {
        chk("guard", spans[i].p, spans[i].bytes);
        if (mprotect(spans[i].p, page_round(spans[i].bytes), open ? PROT_READ | PROT_WRITE : PROT_NONE) != 0) {
            perror("fake_cuda: mprotect");
            abort();
        }
    }
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
    char *m = mmap(NULL, page_round(bytes ? bytes : 1), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return tide_fail(st, TIDE_ERR_NOMEM, "fake_cuda: mmap %zu", bytes);
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
            munmap(p, page_round(blocks[i].n));
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

int tide_cuda_memcpy_any(void *dst, const void *src, size_t bytes, tide_status *st) {
    (void)st;
    memmove(dst, src, bytes);
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

int tide_cuda_gemm_exact(const uint8_t *xq, const uint8_t *xs, int64_t m, const uint8_t *w, const uint8_t *ws,
                         int64_t n, int64_t k, int fp4, uint16_t *y, tide_cuda_stream stream, tide_status *st) {
    (void)stream;
    return gemm(fp4 ? TIDE_W_FP4 : TIDE_W_FP8, xq, xs, m, w, ws, n, k, y, st);
}

int tide_cuda_sparse_attn_fast(const float *q, int64_t rows, int heads, int64_t dim, const float *kv, int64_t n_kv,
                               const int32_t *idx, int n_idx, const float *sink, float scale, float *out,
                               tide_cuda_stream stream, tide_status *st) {
    if (dim % 4 || dim > TIDE_CUDA_ATTN_FAST_MAX_DIM || ((uintptr_t)kv & 15))
        return tide_fail(st, TIDE_ERR_INVALID, "fake sparse_attn_fast: bad shape or alignment");
    return tide_cuda_sparse_attn(q, rows, heads, dim, kv, n_kv, idx, n_idx, sink, scale, out, stream, st);
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

size_t tide_cuda_hc_mixes_fast_workspace(int64_t rows, int hc, int64_t dim) {
    if (rows <= 0 || hc < 1 || dim < 1) return 0;
    return (size_t)((hc * dim + 255) / 256) * (size_t)rows * (size_t)((2 + hc) * hc + 1) * F4;
}

/* The fast mode's hc_mixes: here the CPU op too (the workspace extent is checked). */
int tide_cuda_hc_mixes_fast(const float *x, int64_t rows, int hc, int64_t dim, const float *fn, const float *scale,
                            const float *base, double norm_eps, int iters, double hc_eps, float *pre, float *post,
                            float *comb, void *ws, size_t ws_bytes, tide_cuda_stream stream, tide_status *st) {
    size_t need = tide_cuda_hc_mixes_fast_workspace(rows, hc, dim);
    if (ws_bytes < need) return tide_fail(st, TIDE_ERR_INVALID, "fake_cuda: hc_mixes_fast workspace too small");
    chk("hc_mixes_fast ws", ws, need);
    return tide_cuda_hc_mixes(x, rows, hc, dim, fn, scale, base, norm_eps, iters, hc_eps, pre, post, comb, stream, st);
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

/* The fast scores: here the CPU op per row, on that row's key group. */
int tide_cuda_index_scores_fast(const float *q, int64_t rows, int heads, int64_t d, const float *w, const float *keys,
                                int64_t n, int groups, int64_t group_stride, float *score, tide_cuda_stream stream,
                                tide_status *st) {
    (void)stream;
    if (groups < 1 || group_stride < 0) return tide_fail(st, TIDE_ERR_INVALID, "fake index_scores_fast: groups");
    chk("index q", q, (size_t)(rows * heads * d) * F4);
    chk("index w", w, (size_t)(rows * heads) * F4);
    int64_t ng = rows < groups ? rows : groups;
    chk("index keys", keys, (size_t)((ng - 1) * group_stride + n * d) * F4);
    chk("index score", score, (size_t)(rows * n) * F4);
    if (kernel("index_scores_fast", st)) return -1;
    for (int64_t r = 0; r < rows; r++)
        tide_cpu_ops()->index_scores(tide_cpu_ops(), q + r * heads * d, heads, d, w + r * heads,
                                     keys + (r % groups) * group_stride, n, score + r * n);
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

int tide_cuda_linear_f32_grouped(const void *w, int w_bf16, int64_t out, int64_t in, const float *x, int64_t rows,
                                 float *y, int flags, int64_t n_groups, int64_t w_stride, int64_t x_stride,
                                 int64_t y_stride, tide_cuda_stream stream, tide_status *st) {
    for (int64_t g = 0; g < n_groups; g++)
        if (tide_cuda_linear_f32((const char *)w + g * w_stride * (w_bf16 ? 2 : 4), w_bf16, out, in, x + g * x_stride,
                                 rows, y + g * y_stride, flags, stream, st) != 0)
            return -1;
    return 0;
}

/* ---- the device-resident step's glue and the remaining kernels
 * (backend/cuda/dev_step.c): same extent checks; graphs record nothing
 * (replay is a no-op: the step's kernels already ran while "captured"),
 * timers report 1 ms. ---- */

/* TIDE_FAKE_DEVICE_MEM=N: a device of N bytes, all free (default 4 GiB
 * free of 8), to test the refusal of a model that does not fit. */
int tide_cuda_mem_info(size_t *free_bytes, size_t *total_bytes, tide_status *st) {
    (void)st;
    const char *e = getenv("TIDE_FAKE_DEVICE_MEM");
    if (e && *e) {
        *free_bytes = *total_bytes = (size_t)strtoull(e, NULL, 10);
        return 0;
    }
    *free_bytes = (size_t)4 << 30;
    *total_bytes = (size_t)8 << 30;
    return 0;
}

static char fake_stream_token, fake_graph_token;
static int fake_capturing;

int tide_cuda_stream_create(tide_cuda_stream *s, tide_status *st) {
    (void)st;
    *s = (tide_cuda_stream)(void *)&fake_stream_token;
    return 0;
}
void tide_cuda_stream_destroy(tide_cuda_stream s) { (void)s; }
int tide_cuda_stream_sync(tide_cuda_stream s, tide_status *st) {
    (void)s;
    (void)st;
    return 0;
}
int tide_cuda_graph_begin(tide_cuda_stream s, tide_status *st) {
    (void)s;
    if (fake_capturing) return tide_fail(st, TIDE_ERR_INTERNAL, "fake_cuda: capture already in progress");
    fake_capturing = 1;
    return 0;
}
int tide_cuda_graph_end(tide_cuda_stream s, tide_cuda_graph *out, tide_status *st) {
    (void)s;
    if (!fake_capturing) return tide_fail(st, TIDE_ERR_INTERNAL, "fake_cuda: no capture in progress");
    fake_capturing = 0;
    *out = (tide_cuda_graph)(void *)&fake_graph_token;
    return 0;
}
int tide_cuda_graph_launch(tide_cuda_graph g, tide_cuda_stream s, tide_status *st) {
    (void)s;
    if (g != (tide_cuda_graph)(void *)&fake_graph_token) return tide_fail(st, TIDE_ERR_INVALID, "fake_cuda: bad graph");
    return kernel("graph", st);
}
void tide_cuda_graph_destroy(tide_cuda_graph g) { (void)g; }
int tide_cuda_timer_create(tide_cuda_timer *t, tide_status *st) {
    (void)st;
    t->start = t->stop = &fake_stream_token;
    return 0;
}
void tide_cuda_timer_destroy(tide_cuda_timer *t) { t->start = t->stop = NULL; }
int tide_cuda_timer_mark(tide_cuda_timer *t, int which, tide_cuda_stream s, tide_status *st) {
    (void)t;
    (void)which;
    (void)s;
    (void)st;
    return 0;
}
int tide_cuda_timer_ms(tide_cuda_timer *t, double *ms, tide_status *st) {
    (void)t;
    (void)st;
    *ms = 1.0;
    return 0;
}

static uint64_t fake_mix(uint64_t z) {
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

int tide_cuda_fill(void *p, size_t count, int kind, float scale, int32_t lo, int32_t hi, uint64_t seed,
                   tide_cuda_stream stream, tide_status *st) {
    (void)stream;
    static const size_t el[] = {4, 2, 1, 1, 1, 4};
    if (kind < 0 || kind > TIDE_CUDA_FILL_I32 || (kind >= TIDE_CUDA_FILL_CODE && hi < lo))
        return tide_fail(st, TIDE_ERR_INVALID, "fake fill: kind %d", kind);
    chk("fill", p, count * el[kind]);
    if (kernel("fill", st)) return -1;
    for (size_t i = 0; i < count; i++) {
        uint64_t r = fake_mix(seed ^ fake_mix(i));
        /* a uniform in (-1.73, 1.73): unit variance, enough for a checker */
        float u = ((float)(r >> 40) / 16777216.0f * 2.0f - 1.0f) * 1.7320508f * scale;
        switch (kind) {
        case TIDE_CUDA_FILL_F32: ((float *)p)[i] = u; break;
        case TIDE_CUDA_FILL_BF16: ((uint16_t *)p)[i] = tide_f32_to_bf16(u); break;
        case TIDE_CUDA_FILL_E4M3: ((uint8_t *)p)[i] = tide_f32_to_e4m3(u); break;
        case TIDE_CUDA_FILL_BYTES: ((uint8_t *)p)[i] = (uint8_t)(r >> 24); break;
        case TIDE_CUDA_FILL_CODE: ((uint8_t *)p)[i] = (uint8_t)(lo + (int32_t)((r >> 33) % (uint64_t)(hi - lo + 1))); break;
        default: ((int32_t *)p)[i] = lo + (int32_t)((r >> 33) % (uint64_t)(hi - lo + 1)); break;
        }
    }
    return 0;
}

int tide_cuda_bf16_to_f32(const uint16_t *x, int64_t n, float *y, tide_cuda_stream stream, tide_status *st) {
    (void)stream;
    chk("bf16_to_f32 x", x, (size_t)n * 2);
    chk("bf16_to_f32 y", y, (size_t)n * F4);
    if (kernel("bf16_to_f32", st)) return -1;
    for (int64_t i = 0; i < n; i++) y[i] = tide_bf16_to_f32(x[i]);
    return 0;
}

int tide_cuda_scatter_rows(const float *src, int64_t rows, int64_t dim, const int32_t *dst_row, float *dst,
                           tide_cuda_stream stream, tide_status *st) {
    (void)stream;
    chk("scatter src", src, (size_t)(rows * dim) * F4);
    chk("scatter rows", dst_row, (size_t)rows * 4);
    if (kernel("scatter_rows", st)) return -1;
    for (int64_t r = 0; r < rows; r++) {
        if (dst_row[r] < 0) continue;
        float *d = dst + (int64_t)dst_row[r] * dim;
        chk("scatter dst", d, (size_t)dim * F4);
        memcpy(d, src + r * dim, (size_t)dim * F4);
    }
    return 0;
}

int tide_cuda_transpose01(const float *x, int64_t a, int64_t b, int64_t c, float *y, tide_cuda_stream stream,
                          tide_status *st) {
    (void)stream;
    chk("transpose x", x, (size_t)(a * b * c) * F4);
    chk("transpose y", y, (size_t)(a * b * c) * F4);
    if (x == y) return tide_fail(st, TIDE_ERR_INVALID, "fake transpose01: aliased");
    if (kernel("transpose01", st)) return -1;
    for (int64_t i = 0; i < a; i++)
        for (int64_t j = 0; j < b; j++) memcpy(y + (j * a + i) * c, x + (i * b + j) * c, (size_t)c * F4);
    return 0;
}

int tide_cuda_attn_idx(int64_t rows, int win, int k, const int32_t *win_base, const int32_t *win_len,
                       const int32_t *lat_base, const int32_t *topk, int32_t *idx, tide_cuda_stream stream,
                       tide_status *st) {
    (void)stream;
    chk("attn_idx win_base", win_base, (size_t)rows * 4);
    chk("attn_idx win_len", win_len, (size_t)rows * 4);
    if (k > 0) {
        chk("attn_idx lat_base", lat_base, (size_t)rows * 4);
        chk("attn_idx topk", topk, (size_t)(rows * k) * 4);
    }
    chk("attn_idx idx", idx, (size_t)(rows * (win + k)) * 4);
    if (kernel("attn_idx", st)) return -1;
    for (int64_t r = 0; r < rows; r++)
        for (int j = 0; j < win + k; j++) {
            int32_t v;
            if (j < win) v = j < win_len[r] ? win_base[r] + j : -1;
            else v = topk[r * k + (j - win)] >= 0 ? lat_base[r] + topk[r * k + (j - win)] : -1;
            idx[r * (win + k) + j] = v;
        }
    return 0;
}

static int sim_fp4(const char *name, void (*sim)(float *, size_t, size_t), float *x, int64_t rows, int64_t n,
                   int64_t block, tide_status *st) {
    chk(name, x, (size_t)(rows * n) * F4);
    if (kernel(name, st)) return -1;
    for (int64_t r = 0; r < rows; r++) sim(x + r * n, (size_t)n, (size_t)block);
    return 0;
}

int tide_cuda_sim_fp4_e8m0(float *x, int64_t rows, int64_t n, int64_t block, tide_cuda_stream stream,
                           tide_status *st) {
    (void)stream;
    return sim_fp4("sim_fp4_e8m0", tide_sim_fp4_e8m0, x, rows, n, block, st);
}

int tide_cuda_sim_fp4_e4m3(float *x, int64_t rows, int64_t n, int64_t block, tide_cuda_stream stream,
                           tide_status *st) {
    (void)stream;
    return sim_fp4("sim_fp4_e4m3", tide_sim_fp4_e4m3, x, rows, n, block, st);
}

int tide_cuda_argmax(const float *logits, int64_t rows, int64_t vocab, int32_t *out, tide_cuda_stream stream,
                     tide_status *st) {
    (void)stream;
    chk("argmax logits", logits, (size_t)(rows * vocab) * F4);
    chk("argmax out", out, (size_t)rows * 4);
    if (kernel("argmax", st)) return -1;
    for (int64_t r = 0; r < rows; r++) {
        int32_t b = -1;
        for (int64_t v = 0; v < vocab; v++) {
            float x = logits[r * vocab + v];
            if (isnan(x) || x == -INFINITY) continue;
            if (b < 0 || x > logits[r * vocab + b]) b = (int32_t)v;
        }
        out[r] = b;
    }
    return 0;
}

int tide_cuda_copy(void *dst, const void *src, size_t bytes, tide_cuda_stream stream, tide_status *st) {
    (void)stream;
    if (bytes % 16) return tide_fail(st, TIDE_ERR_INVALID, "fake copy: %zu bytes", bytes);
    chk("copy dst", dst, bytes);
    chk("copy src", src, bytes);
    if (kernel("copy", st)) return -1;
    memmove(dst, src, bytes);
    return 0;
}

int tide_cuda_gemm_fp8_wgmma(const uint8_t *xq, const uint8_t *xs, int64_t m, const uint8_t *w, const uint8_t *ws,
                             int64_t n, int64_t k, uint16_t *y, tide_cuda_stream stream, tide_status *st) {
    (void)stream;
    return gemm(TIDE_W_FP8, xq, xs, m, w, ws, n, k, y, st);
}

/* The experts: moe.c's routed arithmetic on the CPU ops over the table's
 * (fake device) weights. */
struct tide_cuda_experts {
    tide_cuda_expert_weights *w;
    int n;
    int64_t dim, inter;
};

int tide_cuda_experts_create(const tide_cuda_expert_weights *experts, int n_experts, int64_t dim, int64_t inter,
                             tide_cuda_experts **out, tide_status *st) {
    *out = NULL;
    if (n_experts < 1 || n_experts > TIDE_CUDA_EXPERTS_MAX || dim % 32 || inter % 32 || dim < 32 || inter < 32)
        return tide_fail(st, TIDE_ERR_INVALID, "fake experts_create: bad shape");
    for (int e = 0; e < n_experts; e++) {
        const tide_cuda_expert_weights *x = &experts[e];
        chk("expert w1", x->w1, (size_t)(inter * dim / 2));
        chk("expert w1 scale", x->w1_scale, (size_t)(inter * dim / 32));
        chk("expert w3", x->w3, (size_t)(inter * dim / 2));
        chk("expert w3 scale", x->w3_scale, (size_t)(inter * dim / 32));
        chk("expert w2", x->w2, (size_t)(dim * inter / 2));
        chk("expert w2 scale", x->w2_scale, (size_t)(dim * inter / 32));
    }
    tide_cuda_experts *ex = calloc(1, sizeof *ex);
    if (ex) ex->w = malloc((size_t)n_experts * sizeof *ex->w);
    if (!ex || !ex->w) {
        if (ex) free(ex);
        return tide_fail(st, TIDE_ERR_NOMEM, "out of memory");
    }
    memcpy(ex->w, experts, (size_t)n_experts * sizeof *ex->w);
    ex->n = n_experts;
    ex->dim = dim;
    ex->inter = inter;
    *out = ex;
    return 0;
}

void tide_cuda_experts_destroy(tide_cuda_experts *ex) {
    if (!ex) return;
    free(ex->w);
    free(ex);
}

size_t tide_cuda_moe_experts_workspace(const tide_cuda_experts *ex, int64_t rows, int k) {
    if (!ex || rows < 0 || k < 1) return 0;
    return (size_t)(rows * k) * (size_t)(5 * ex->inter + 2 * ex->dim) + (size_t)(rows * ex->dim) + 256;
}

int tide_cuda_moe_experts(const tide_cuda_experts *ex, const float *x, int64_t rows, const int32_t *idx, const float *w,
                          int k, double swiglu_limit, const uint16_t *shared, float *y, void *workspace,
                          size_t workspace_bytes, tide_cuda_stream stream, tide_status *st) {
    (void)stream;
    int64_t D = ex->dim, I = ex->inter;
    chk("experts x", x, (size_t)(rows * D) * F4);
    chk("experts idx", idx, (size_t)(rows * k) * 4);
    chk("experts w", w, (size_t)(rows * k) * F4);
    chk("experts y", y, (size_t)(rows * D) * F4);
    if (shared) chk("experts shared", shared, (size_t)(rows * D) * 2);
    if (workspace_bytes < tide_cuda_moe_experts_workspace(ex, rows, k))
        return tide_fail(st, TIDE_ERR_INVALID, "fake moe_experts: workspace too small");
    chk("experts workspace", workspace, workspace_bytes);
    if (kernel("moe_experts", st)) return -1;
    const tide_ops *ops = tide_cpu_ops();
    float *acc = calloc((size_t)(rows * D), F4), *g = malloc((size_t)I * F4), *u = malloc((size_t)I * F4);
    float *ye = malloc((size_t)D * F4);
    if (!acc || !g || !u || !ye) abort();
    for (int64_t r = 0; r < rows; r++)
        for (int e = 0; e < ex->n; e++)
            for (int j = 0; j < k; j++) {
                if (idx[r * k + j] != e) continue;
                const tide_cuda_expert_weights *ew = &ex->w[e];
                tide_weight w1 = {TIDE_W_FP4, I, D, ew->w1, ew->w1_scale}, w3 = {TIDE_W_FP4, I, D, ew->w3, ew->w3_scale};
                tide_weight w2 = {TIDE_W_FP4, D, I, ew->w2, ew->w2_scale};
                ops->linear(ops, NULL, &w1, x + r * D, 1, g, TIDE_LIN_BF16_OUT);
                ops->linear(ops, NULL, &w3, x + r * D, 1, u, TIDE_LIN_BF16_OUT);
                ops->swiglu(ops, g, u, 1, I, swiglu_limit, &w[r * k + j], g);
                ops->linear(ops, NULL, &w2, g, 1, ye, TIDE_LIN_BF16_OUT);
                for (int64_t d = 0; d < D; d++) acc[r * D + d] += ye[d];
            }
    for (int64_t i = 0; i < rows * D; i++)
        y[i] = shared ? tide_round_bf16(acc[i] + tide_bf16_to_f32(shared[i])) : acc[i];
    free(acc);
    free(g);
    free(u);
    free(ye);
    return 0;
}

int tide_cuda_event_create(void **ev, tide_status *st) {
    (void)st;
    *ev = &fake_stream_token;
    return 0;
}
void tide_cuda_event_destroy(void *ev) { (void)ev; }
int tide_cuda_event_record(void *ev, tide_cuda_stream s, tide_status *st) {
    (void)ev;
    (void)s;
    (void)st;
    return 0;
}
int tide_cuda_event_ms(void *a, void *b, double *ms, tide_status *st) {
    (void)a;
    (void)b;
    (void)st;
    *ms = 0.5;
    return 0;
}

/* ---- the forward's data movement (fwd_glue.cu) ---- */

int tide_cuda_embed(const void *table, int bf16, int64_t dim, const int32_t *ids, int64_t rows, int hc, float *h,
                    tide_cuda_stream stream, tide_status *st) {
    (void)stream;
    chk("embed ids", ids, (size_t)rows * 4);
    chk("embed h", h, (size_t)(rows * hc * dim) * F4);
    if (kernel("embed", st)) return -1;
    tide_weight w = {bf16 ? TIDE_W_BF16 : TIDE_W_F32, 0, dim, table, NULL};
    for (int64_t r = 0; r < rows; r++) {
        chk("embed row", (const char *)table + (size_t)ids[r] * (size_t)dim * (bf16 ? 2 : 4), (size_t)dim * (bf16 ? 2 : 4));
        tide_weight_row(&w, ids[r], h + r * hc * dim);
        for (int c = 1; c < hc; c++) memcpy(h + (r * hc + c) * dim, h + r * hc * dim, (size_t)dim * F4);
    }
    return 0;
}

int tide_cuda_gather_rows(const void *src, size_t width, const int64_t *idx, int64_t n, void *dst,
                          tide_cuda_stream stream, tide_status *st) {
    (void)stream;
    chk("gather idx", idx, (size_t)n * 8);
    chk("gather dst", dst, (size_t)n * width);
    if (kernel("gather_rows", st)) return -1;
    for (int64_t i = 0; i < n; i++) {
        chk("gather src", (const char *)src + (size_t)idx[i] * width, width);
        memcpy((char *)dst + (size_t)i * width, (const char *)src + (size_t)idx[i] * width, width);
    }
    return 0;
}

int tide_cuda_scatter_add(const float *y, int64_t n, int64_t dim, const int64_t *idx, float *acc,
                          tide_cuda_stream stream, tide_status *st) {
    (void)stream;
    chk("scatter_add y", y, (size_t)(n * dim) * F4);
    chk("scatter_add idx", idx, (size_t)n * 8);
    if (kernel("scatter_add", st)) return -1;
    for (int64_t i = 0; i < n; i++) {
        chk("scatter_add acc", acc + idx[i] * dim, (size_t)dim * F4);
        for (int64_t d = 0; d < dim; d++) acc[idx[i] * dim + d] += y[i * dim + d];
    }
    return 0;
}

int tide_cuda_add_bf16(const float *a, const float *b, int64_t n, float *out, tide_cuda_stream stream,
                       tide_status *st) {
    (void)stream;
    chk("add_bf16 a", a, (size_t)n * F4);
    chk("add_bf16 b", b, (size_t)n * F4);
    chk("add_bf16 out", out, (size_t)n * F4);
    if (kernel("add_bf16", st)) return -1;
    for (int64_t i = 0; i < n; i++) out[i] = tide_round_bf16(a[i] + b[i]);
    return 0;
}

int tide_cuda_div_scalar(float *x, int64_t n, float s, tide_cuda_stream stream, tide_status *st) {
    (void)stream;
    chk("div_scalar", x, (size_t)n * F4);
    if (kernel("div_scalar", st)) return -1;
    for (int64_t i = 0; i < n; i++) x[i] /= s;
    return 0;
}

int tide_cuda_hc_mean(const float *h, int64_t rows, int hc, int64_t dim, float *out, tide_cuda_stream stream,
                      tide_status *st) {
    (void)stream;
    chk("hc_mean h", h, (size_t)(rows * hc * dim) * F4);
    chk("hc_mean out", out, (size_t)(rows * dim) * F4);
    if (kernel("hc_mean", st)) return -1;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t d = 0; d < dim; d++) {
            float sum = 0;
            for (int k = 0; k < hc; k++) sum += h[(r * hc + k) * dim + d];
            out[r * dim + d] = tide_round_bf16(sum / (float)hc);
        }
    return 0;
}
