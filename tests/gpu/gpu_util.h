/* Helpers shared by the GPU test programs (tests/gpu/gpu_test_*.c): a seeded
 * generator, device setup, and result lines.
 *
 * These programs are not in ctest (CI has no GPU); scripts/gpu/check.sh runs
 * them on the GPU machine. Each prints one line per case,
 *     RESULT|<program>|<case>|PASS or FAIL|<measurements>
 * which check.sh collects into its summary table, and exits 0 when every
 * case passed, 1 when one failed, 2 on a setup error, 77 when there is no
 * GPU. TIDE_TEST_SEED replays a run; TIDE_GPU_SMALL=1 keeps to small shapes
 * (for compute-sanitizer). */
#ifndef TIDE_TESTS_GPU_GPU_UTIL_H
#define TIDE_TESTS_GPU_GPU_UTIL_H

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/cuda/cuda_kernels.h"
#include "base/threadpool.h"

typedef struct {
    uint64_t s;
} gu_rng;

static inline uint64_t gu_next(gu_rng *r) {
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static inline double gu_uniform(gu_rng *r) { return (double)(gu_next(r) >> 11) * 0x1p-53; }
static inline double gu_normal(gu_rng *r) {
    double u = gu_uniform(r), v = gu_uniform(r);
    return sqrt(-2.0 * log(u + 0x1p-60)) * cos(6.283185307179586 * v);
}

/* Per-program state: the name, the seed and the failure count. */
typedef struct {
    const char *prog;
    uint64_t seed;
    int failed, passed;
    int small;
} gu_ctx;

/* Seeds, checks for a GPU (exit 77 without one) and prints the device. */
static inline void gu_init(gu_ctx *c, const char *prog) {
    memset(c, 0, sizeof *c);
    c->prog = prog;
    const char *e = getenv("TIDE_TEST_SEED");
    c->seed = e && *e ? strtoull(e, NULL, 0) : ((uint64_t)time(NULL) << 20) ^ (uint64_t)getpid();
    e = getenv("TIDE_GPU_SMALL");
    c->small = e && *e && strcmp(e, "0") != 0;
    tide_status st = {0};
    int n = 0;
    if (tide_cuda_device_count(&n, &st) != 0) {
        fprintf(stderr, "%s: %s\n", prog, st.msg);
        exit(2);
    }
    if (n == 0) {
        printf("%s: SKIP (no CUDA device)\n", prog);
        exit(77);
    }
    char desc[256];
    if (tide_cuda_describe(desc, sizeof desc, &st) != 0) {
        fprintf(stderr, "%s: %s\n", prog, st.msg);
        exit(2);
    }
    printf("%s: seed %llu (TIDE_TEST_SEED to replay)%s\n%s: device %s\n", prog, (unsigned long long)c->seed,
           c->small ? ", small shapes" : "", prog, desc);
}

static inline void gu_result(gu_ctx *c, const char *name, int pass, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static inline void gu_result(gu_ctx *c, const char *name, int pass, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    printf("RESULT|%s|%s|%s|%s\n", c->prog, name, pass ? "PASS" : "FAIL", buf);
    fflush(stdout);
    if (pass) c->passed++;
    else c->failed++;
}

static inline int gu_finish(gu_ctx *c) {
    printf("%s: %d passed, %d failed (seed %llu)\n", c->prog, c->passed, c->failed, (unsigned long long)c->seed);
    return c->failed ? 1 : 0;
}

/* A worker pool for the CPU reference: the machine's cores, 1..16; exits 2
 * when it cannot be made. */
static inline tide_pool *gu_pool(void) {
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    tide_pool *pool = NULL;
    tide_status st = {0};
    if (tide_pool_create(ncpu > 16 ? 16 : ncpu < 1 ? 1 : (int)ncpu, &pool, &st) != 0) {
        fprintf(stderr, "%s\n", st.msg);
        exit(2);
    }
    return pool;
}

static inline void *gu_xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of memory (%zu bytes)\n", n);
        exit(2);
    }
    return p;
}

/* Device buffer helpers that stop on failure. */
static inline void *gu_dalloc(size_t bytes) {
    void *p = NULL;
    tide_status st = {0};
    if (tide_cuda_malloc(&p, bytes, &st) != 0) {
        fprintf(stderr, "%s\n", st.msg);
        exit(2);
    }
    return p;
}
static inline void gu_up(void *dev, const void *host, size_t bytes) {
    tide_status st = {0};
    if (tide_cuda_upload(dev, host, bytes, &st) != 0) {
        fprintf(stderr, "%s\n", st.msg);
        exit(2);
    }
}
static inline void gu_down(void *host, const void *dev, size_t bytes) {
    tide_status st = {0};
    if (tide_cuda_download(host, dev, bytes, &st) != 0) {
        fprintf(stderr, "%s\n", st.msg);
        exit(2);
    }
}
static inline void gu_poison(void *dev, int byte, size_t bytes) {
    tide_status st = {0};
    if (tide_cuda_memset(dev, byte, bytes, &st) != 0) {
        fprintf(stderr, "%s\n", st.msg);
        exit(2);
    }
}
/* Checks a kernel call's status and then synchronises, so that an error
 * raised while the kernel ran is pinned to it. */
static inline void gu_ran(int rc, const tide_status *st, const char *what) {
    tide_status s2 = {0};
    if (rc != 0) {
        fprintf(stderr, "%s: %s\n", what, st->msg);
        exit(2);
    }
    if (tide_cuda_sync(&s2) != 0) {
        fprintf(stderr, "%s: %s\n", what, s2.msg);
        exit(2);
    }
}

#endif
